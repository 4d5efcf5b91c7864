"""The provisioner's version is shown with its commit: ``0.1.0 (commit abc1234)``, from the
build (OBLETH_BUILD_COMMIT, set by the Dockerfile) or from git in a checkout; nothing breaks when
neither is there. Real git runs on this worktree; "git missing" is an empty PATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import obleth
from obleth.core.models import ProvisionerStatus
from provisioner import status

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh_cache() -> Any:
    from obleth import build

    build.build_commit.cache_clear()
    yield
    build.build_commit.cache_clear()


def test_the_build_commit_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from obleth.build import build_commit, version_label

    monkeypatch.setenv("OBLETH_BUILD_COMMIT", "abc1234def5678")
    assert build_commit() == "abc1234"
    assert version_label() == f"{obleth.__version__} (commit abc1234)"


@pytest.mark.parametrize("junk", ["", "  ", "not-hex!", "abc\n1234", "a" * 100, "unknown"])
def test_a_bad_build_commit_is_ignored(monkeypatch: pytest.MonkeyPatch, junk: str) -> None:
    from obleth.build import build_commit

    monkeypatch.setenv("OBLETH_BUILD_COMMIT", junk)
    monkeypatch.setenv("PATH", "")  # and no git to fall back on
    assert build_commit() == ""


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed here")
def test_the_commit_from_git_in_a_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    from obleth.build import build_commit, version_label

    monkeypatch.delenv("OBLETH_BUILD_COMMIT", raising=False)
    head = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert head and build_commit() == head
    assert version_label().endswith(f"(commit {head})")


def test_no_git_no_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from obleth.build import build_commit, version_label

    monkeypatch.delenv("OBLETH_BUILD_COMMIT", raising=False)
    monkeypatch.setenv("PATH", "")
    assert build_commit() == ""
    assert version_label() == obleth.__version__


@pytest.mark.django_db
def test_the_heartbeat_records_the_version_with_its_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OBLETH_BUILD_COMMIT", "0123abcd")
    status.heartbeat()
    assert ProvisionerStatus.objects.get(pk=1).version == f"{obleth.__version__} (commit 0123abc)"
    status.record_pass("ok", "", 5)
    assert status.describe_status()["version"].endswith("(commit 0123abc)")


def test_the_dockerfile_sets_the_build_commit() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "ARG OBLETH_BUILD_COMMIT" in text and "OBLETH_BUILD_COMMIT=" in text
