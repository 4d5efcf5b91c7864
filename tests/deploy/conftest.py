"""Fixtures of the deploy tests: a cluster description as discovery answers it.

Discovery is faked here (a plain dict in the exact shape ``discover_resources`` answers) because
these tests run without slurmrestd; the e2e test reads the real local cluster instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache


def cluster(**changes: Any) -> dict[str, Any]:
    """A small cluster: partition gpu (2 GPU nodes, MaxTime 2 days, accounts ml and ops
    allowed), cpu (two 16-CPU nodes, one idle) and tiny (one 2-CPU node)."""
    data: dict[str, Any] = {
        "api_version": "v0.0.40",
        "reason": "",
        "errors": {},
        "partitions": [
            {
                "name": "gpu",
                "nodes": ["gpu01", "gpu02"],
                "state": "UP",
                "max_time_minutes": 2880,
                "allowed_accounts": ["ml", "ops"],
                "denied_accounts": [],
            },
            {
                "name": "cpu",
                "nodes": ["cpu01", "cpu02"],
                "state": "UP",
                "max_time_minutes": 2880,
                "allowed_accounts": [],
                "denied_accounts": ["guests"],
            },
            {"name": "tiny", "nodes": ["tiny01"], "state": "UP", "max_time_minutes": None},
        ],
        "nodes": [
            {
                "name": "gpu01",
                "state": ["MIXED"],
                "partitions": ["gpu"],
                "cpus": 32,
                "alloc_cpus": 8,
                "real_memory_mb": 256000,
                "alloc_memory_mb": 64000,
                "gres": "gpu:a100:4(S:0-1)",
            },
            {
                "name": "gpu02",
                "state": ["DOWN", "DRAIN"],
                "partitions": ["gpu"],
                "cpus": 32,
                "alloc_cpus": 0,
                "real_memory_mb": 256000,
                "gres": "gpu:a100:4",
            },
            {
                "name": "cpu01",
                "state": ["IDLE"],
                "partitions": ["cpu"],
                "cpus": 16,
                "alloc_cpus": 0,
                "real_memory_mb": 64000,
                "alloc_memory_mb": 0,
                "features": ["avx512"],
            },
            {
                "name": "cpu02",
                "state": ["ALLOCATED"],
                "partitions": ["cpu"],
                "cpus": 16,
                "alloc_cpus": 16,
                "real_memory_mb": 64000,
                "alloc_memory_mb": 60000,
            },
            {
                "name": "tiny01",
                "state": ["IDLE"],
                "partitions": ["tiny"],
                "cpus": 2,
                "alloc_cpus": 0,
                "real_memory_mb": 2000,
            },
        ],
        "accounts": ["ml", "ops", "guests"],
        "qos": ["normal", "long", "debug"],
        "associations": [
            {"account": "ml", "partition": None, "qos": ["normal", "long"]},
            {"account": "ops", "partition": "cpu", "qos": ["debug"]},
        ],
        "qos_limits": {"normal": {"max_wall_minutes": 1440}, "long": {"max_wall_minutes": None}},
    }
    data.update(changes)
    return data


@pytest.fixture(autouse=True)
def _fresh_discovery_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()
