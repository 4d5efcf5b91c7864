"""Small factories for the data model (plain functions: no extra dependency)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from obleth.core.choices import HostingMode
from obleth.core.models import Endpoint, ManagedSpec, Model, SlurmSettings

_seq = itertools.count(1)

ADMIN_TOKEN = "test-admin-token-0123456789abcdef"


def make_model(**kwargs: Any) -> Model:
    n = next(_seq)
    values: dict[str, Any] = {"name": f"model-{n}", "hosting_mode": HostingMode.STATIC}
    values.update(kwargs)
    return Model.objects.create(**values)


def make_slurm_model(*, spec: dict[str, Any] | None = None, **kwargs: Any) -> Model:
    model = make_model(hosting_mode=HostingMode.SLURM, **kwargs)
    values: dict[str, Any] = {
        "partition": "debug",
        "serving_port": 18000,
        "launch_command": "python3 -m http.server $OBLETH_SERVING_PORT",
        "target_replicas": 1,
    }
    values.update(spec or {})
    ManagedSpec.objects.create(model=model, **values)
    return model


def make_endpoint(model: Model, **kwargs: Any) -> Endpoint:
    n = next(_seq)
    values: dict[str, Any] = {"name": f"ep-{n}", "api_base": f"http://127.0.0.1:{9000 + n}/v1"}
    values.update(kwargs)
    return Endpoint.objects.create(model=model, **values)


@pytest.fixture
def api_client() -> Any:
    """A DRF client authenticated with the admin bearer token."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ADMIN_TOKEN}")
    return client


@pytest.fixture
def anon_client() -> Any:
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def slurm_settings(db: Any) -> SlurmSettings:
    return SlurmSettings.load()
