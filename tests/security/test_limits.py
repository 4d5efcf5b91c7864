"""The shared failed-authentication limiter (obleth.core.limits), on the real database."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from obleth.core import limits

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _small_limits(settings):
    settings.OBLETH_AUTH_MAX_FAILURES = 3
    settings.OBLETH_AUTH_FAILURE_WINDOW_SECS = 60
    settings.OBLETH_AUTH_LOCKOUT_SECS = 120


def test_blocks_after_max_failures_then_releases():
    now = timezone.now()
    assert limits.record_failure("s", "ip:1", now=now) is None
    assert limits.record_failure("s", "ip:1", now=now) is None
    assert limits.retry_after("s", "ip:1", now=now) is None
    assert limits.record_failure("s", "ip:1", now=now) == 120
    assert limits.retry_after("s", "ip:1", now=now) == 120
    assert limits.retry_after("s", "ip:2", now=now) is None  # another address is not blocked
    assert limits.retry_after("other", "ip:1", now=now) is None  # nor another door
    later = now + dt.timedelta(seconds=121)
    assert limits.retry_after("s", "ip:1", now=later) is None


def test_failures_outside_the_window_do_not_add_up():
    now = timezone.now()
    limits.record_failure("s", "user:a", now=now)
    limits.record_failure("s", "user:a", now=now)
    assert limits.record_failure("s", "user:a", now=now + dt.timedelta(seconds=61)) is None


def test_success_clears_counts_but_not_a_block():
    now = timezone.now()
    limits.record_failure("s", "ip:1", now=now)
    limits.record_failure("s", "ip:1", now=now)
    limits.record_success("s", "ip:1")
    assert limits.record_failure("s", "ip:1", now=now) is None
    limits.record_failure("s", "ip:1", now=now)
    limits.record_failure("s", "ip:1", now=now)
    limits.record_success("s", "ip:1")
    assert limits.retry_after("s", "ip:1", now=now) == 120


def test_zero_disables(settings):
    settings.OBLETH_AUTH_MAX_FAILURES = 0
    for _ in range(20):
        assert limits.record_failure("s", "ip:1") is None
    assert limits.retry_after("s", "ip:1") is None


def test_hostile_keys_are_clipped():
    key = "ip:" + "\x00x" * 1000
    limits.record_failure("s", key)
    assert limits.retry_after("s", key) is None
