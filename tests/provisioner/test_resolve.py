"""Node address resolution.

The DNS answers are given by a scripted ``lookup`` function (a flaky or failing corporate
resolver cannot be made to happen here), and the clock and sleep are injected so the cache age
and the retry pauses are checked without waiting. The real system resolver is used for
``localhost`` only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from provisioner.resolve import NodeResolver, get_resolver, is_ip_literal, system_lookup


class ScriptedDNS:
    """Answers from a script: a list of addresses, or an OSError to raise, per call."""

    def __init__(self, *answers: Sequence[str] | OSError) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, host: str) -> Sequence[str]:
        with self.lock:
            self.calls.append(host)
            answer = self.answers.pop(0) if self.answers else OSError("no more answers")
        if isinstance(answer, OSError):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def make(dns: ScriptedDNS, clock: Clock, **kwargs: object) -> NodeResolver:
    return NodeResolver(lookup=dns, clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]


def test_override_wins_and_dns_is_not_asked() -> None:
    dns, clock = ScriptedDNS(["10.9.9.9"]), Clock()
    resolver = make(dns, clock, overrides={" gpu7 ": " 10.0.0.24 "})
    assert resolver.resolve("gpu7") == "10.0.0.24"
    assert resolver.resolve(" gpu7 ") == "10.0.0.24"
    assert dns.calls == []
    assert resolver.overrides == {"gpu7": "10.0.0.24"}


def test_ip_literals_are_their_own_address() -> None:
    dns, clock = ScriptedDNS(), Clock()
    resolver = make(dns, clock)
    assert resolver.resolve("10.1.2.3") == "10.1.2.3"
    assert resolver.resolve("::1") == "::1"
    assert resolver.resolve("[fd00::5]") == "fd00::5"
    assert resolver.resolve("") is None
    assert resolver.resolve("   ") is None
    assert dns.calls == []
    assert is_ip_literal("[::1]") and is_ip_literal("127.0.0.1") and not is_ip_literal("gpu1")


def test_dns_prefers_ipv4_and_caches() -> None:
    dns, clock = ScriptedDNS(["fd00::7", "10.0.0.7", "10.0.0.8"], ["10.0.0.99"]), Clock()
    resolver = make(dns, clock, ttl=300)
    assert resolver.resolve("gpu7") == "10.0.0.7"
    clock.now += 299
    assert resolver.resolve("GPU7") == "10.0.0.7"  # fresh cache, names are case-insensitive
    assert dns.calls == ["gpu7"]
    clock.now += 2  # the cache entry is now older than the ttl: ask again
    assert resolver.resolve("gpu7") == "10.0.0.99"
    assert dns.calls == ["gpu7", "gpu7"]


def test_only_ipv6_answers_are_used_when_there_is_no_ipv4() -> None:
    dns, clock = ScriptedDNS(["garbage", "fd00::7"]), Clock()
    assert make(dns, clock).resolve("gpu7") == "fd00::7"


def test_retries_then_succeeds() -> None:
    dns = ScriptedDNS(OSError("temporary failure"), [], ["10.0.0.3"])
    clock = Clock()
    resolver = make(dns, clock)
    assert resolver.resolve("gpu3") == "10.0.0.3"
    assert dns.calls == ["gpu3"] * 3
    assert clock.sleeps == [0.15, 0.15]


def test_failure_falls_back_to_the_last_known_address_then_to_none() -> None:
    dns = ScriptedDNS(["10.0.0.4"], OSError("a"), OSError("b"), OSError("c"))
    clock = Clock()
    resolver = make(dns, clock, ttl=300, attempts=3)
    assert resolver.resolve("gpu4") == "10.0.0.4"
    clock.now += 10_000  # stale
    assert resolver.resolve("gpu4") == "10.0.0.4"  # DNS failed 3 times: last known address
    assert len(dns.calls) == 4
    assert resolver.resolve("never-seen") is None
    assert resolver.address_for("never-seen") == "never-seen"
    assert resolver.address_for(" gpu4 ") == "10.0.0.4"


def test_attempts_setting_is_respected() -> None:
    dns, clock = ScriptedDNS(), Clock()
    resolver = make(dns, clock, attempts=5, retry_delay=0.5)
    assert resolver.resolve("gpu9") is None
    assert len(dns.calls) == 5
    assert clock.sleeps == [0.5] * 4


def test_rewrite_url() -> None:
    dns = ScriptedDNS(["10.0.0.7"], ["fd00::8"])
    clock = Clock()
    resolver = make(dns, clock, overrides={"gpu1": "10.0.0.1", "GPU2": "10.0.0.2"})
    assert resolver.rewrite_url("http://gpu1:8001/v1") == "http://10.0.0.1:8001/v1"
    assert resolver.rewrite_url("http://GPU2:8001/v1?x=1") == "http://10.0.0.2:8001/v1?x=1"
    assert resolver.rewrite_url("http://gpu7/v1") == "http://10.0.0.7/v1"
    assert resolver.rewrite_url("http://u:p@gpu8:9000/v1") == "http://u:p@[fd00::8]:9000/v1"
    # unchanged: already an IP, unresolvable, no host, unparsable
    assert resolver.rewrite_url("http://10.0.0.9:8000/v1") == "http://10.0.0.9:8000/v1"
    assert resolver.rewrite_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert resolver.rewrite_url("http://nowhere:8000/v1") == "http://nowhere:8000/v1"
    assert resolver.rewrite_url("not a url") == "not a url"
    assert resolver.rewrite_url("http://[bad:8000/v1") == "http://[bad:8000/v1"
    assert resolver.rewrite_url("http://gpu1:99999/v1") == "http://gpu1:99999/v1"


def test_set_overrides_replaces_the_map() -> None:
    dns, clock = ScriptedDNS(), Clock()
    resolver = make(dns, clock, overrides={"a": "10.0.0.1"})
    resolver.set_overrides({"b": "10.0.0.2", "": "10.0.0.3", "c": " "})
    assert resolver.overrides == {"b": "10.0.0.2"}
    assert resolver.resolve("a") is None
    assert resolver.resolve("b") == "10.0.0.2"
    resolver.set_overrides(None)
    assert resolver.overrides == {}


def test_resolve_many_and_threads() -> None:
    dns = ScriptedDNS(*[[f"10.0.1.{i}"] for i in range(20)])
    clock = Clock()
    resolver = make(dns, clock, overrides={"pinned": "10.9.9.9"})
    hosts = [f"n{i}" for i in range(20)] + ["pinned", "n0", "127.0.0.1", ""]
    result = resolver.resolve_many(hosts, max_workers=8)
    assert result["pinned"] == "10.9.9.9"
    assert result["127.0.0.1"] == "127.0.0.1"
    assert "" not in result
    assert sorted(result[f"n{i}"] for i in range(20)) == sorted(f"10.0.1.{i}" for i in range(20))
    assert len(dns.calls) == 20  # each distinct name once
    resolver.forget("n0")
    assert resolver.cached("n0") is None
    assert resolver.cached("n1") is not None


def test_the_system_resolver_for_localhost() -> None:
    assert "127.0.0.1" in system_lookup("localhost")
    assert NodeResolver().resolve("localhost") == "127.0.0.1"  # IPv4 preferred over ::1
    with pytest.raises(OSError):
        system_lookup("no-such-node.invalid")


def test_shared_resolver_survives_between_calls() -> None:
    first = get_resolver()
    assert get_resolver() is first
    first.set_overrides({"keep-me": "10.1.1.1"})
    try:
        assert get_resolver().resolve("keep-me") == "10.1.1.1"
    finally:
        first.set_overrides({})
