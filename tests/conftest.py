"""Shared fixtures. Plugin modules hold the heavier ones (real Slurm, API clients...)."""

from __future__ import annotations

pytest_plugins = [
    "tests.plugins.real_slurm",
    "tests.plugins.factories",
    "tests.plugins.gateway_client",
]
