"""Slurm value conversions: every form of reference section 3.4 and the rejections."""

from __future__ import annotations

import pytest

from provisioner.slurm.convert import expand_nodelist, parse_memory_mb, parse_time_limit


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("120", 120),  # M
        ("30:00", 30),  # M:S
        ("4:00:00", 240),  # H:M:S
        ("0-04:00:00", 240),  # D-H:M:S
        ("1-00", 1440),  # D-H
        ("2-12:30", 3630),  # D-H:M
        ("1-2:03:04", 1564),  # seconds round up
        ("0:30", 1),  # 30 s -> 1 min
        ("1:01", 2),  # 61 s -> 2 min
        ("59:59:59", 3600),
        (" 45 ", 45),
        (90, 90),
    ],
)
def test_time_limit_forms(text: str | int, minutes: int) -> None:
    assert parse_time_limit(text) == minutes


@pytest.mark.parametrize("text", ["UNLIMITED", "unlimited", "infinite", "INFINITE"])
def test_time_limit_unlimited_is_none(text: str) -> None:
    assert parse_time_limit(text) is None


@pytest.mark.parametrize(
    "text", ["4h", "1-", "1:2:3:4", "-5", "0", "0:00", "", "   ", "1.5", "a:b", "1--2", "-1-2"]
)
def test_time_limit_rejections_name_the_field_and_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="time_limit") as caught:
        parse_time_limit(text)
    assert "D-H:M:S" in str(caught.value) or "days-hours" in str(caught.value)
    assert "UNLIMITED" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("560G", 573440),
        ("2T", 2097152),
        ("2TB", 2097152),
        ("64gb", 65536),
        ("1536", 1536),
        ("1536M", 1536),
        ("1536MB", 1536),
        ("2048K", 2),
        ("1536K", 2),  # 1.5 MB rounds to the nearest: 2
        ("100K", 1),  # non-zero never becomes 0 (0 would mean the whole node)
        ("0", 0),
        ("0G", 0),
        (" 8G ", 8192),
        (4096, 4096),
    ],
)
def test_memory_forms(text: str | int, mb: int) -> None:
    assert parse_memory_mb(text) == mb


@pytest.mark.parametrize("text", ["-1", "1.5G", "abc", "", "G", "4 G", "4X", "4GiB", "B"])
def test_memory_rejections_name_the_field(text: str) -> None:
    with pytest.raises(ValueError, match=r"^mem ") as caught:
        parse_memory_mb(text)
    assert "K, M, G or T" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[01-04,07]", ("gpu01", "gpu02", "gpu03", "gpu04", "gpu07")),
        ("", ()),
        ("   ", ()),
        (None, ()),
        ("(null)", ()),
        ("localhost", ("localhost",)),
        ("a,b,,a", ("a", "b")),
        ("n[1-2],m3", ("n1", "n2", "m3")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
    ],
)
def test_expand_nodelist(text: str | None, hosts: tuple[str, ...]) -> None:
    assert expand_nodelist(text) == hosts


def test_expand_nodelist_rejects_malformed_lists() -> None:
    with pytest.raises(ValueError, match="nodes"):
        expand_nodelist("gpu[01-")
