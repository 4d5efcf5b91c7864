"""QoS MaxWall from slurmdbd, read by discovery for the walltime check.

slurmrestd is faked with httpx.MockTransport (the local cluster serves no slurmdbd data); the
answers follow the v0.0.40 QoS schema (``limits.max.wall_clock.per.job`` a uint32_no_val
struct) and dbv0.0.38's bare integers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from obleth.core.models import SlurmSettings
from obleth.core.services import discover_resources
from provisioner.slurm.adapters import get_adapter
from provisioner.slurm.client import SlurmClient
from recipes.deploy import checks as dc

QOS_40 = {
    "qos": [
        {
            "name": "normal",
            "limits": {
                "max": {
                    "wall_clock": {"per": {"job": {"set": True, "infinite": False, "number": 1440}}}
                }
            },
        },
        {
            "name": "long",
            "limits": {
                "max": {
                    "wall_clock": {"per": {"job": {"set": False, "infinite": True, "number": 0}}}
                }
            },
        },
        {"name": "bare"},
    ]
}
QOS_38 = {"qos": [{"name": "normal", "limits": {"max": {"wall_clock": {"per": {"job": 120}}}}}]}


@pytest.mark.parametrize(
    ("version", "body", "expected"),
    [
        ("v0.0.40", QOS_40, (("bare", None), ("long", None), ("normal", 1440))),
        ("v0.0.38", QOS_38, (("normal", 120),)),
        ("v0.0.44", {"qos": []}, ()),
    ],
)
def test_adapters_read_maxwall(version: str, body: dict[str, Any], expected: Any) -> None:
    assert get_adapter(version).parse_qos_limits(body) == expected


@pytest.mark.django_db
def test_discovery_carries_qos_limits_to_the_walltime_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.rstrip("/")
        if path.endswith("/qos"):
            return httpx.Response(200, json=QOS_40)
        if path.endswith("/partitions"):
            return httpx.Response(
                200, json={"partitions": [{"name": "cpu", "nodes": {"configured": "n1"}}]}
            )
        if path.endswith("/nodes"):
            return httpx.Response(200, json={"nodes": [{"name": "n1", "cpus": 4}]})
        return httpx.Response(200, json={path.rsplit("/", 1)[1]: []})

    def client(settings: Any, api_version: str | None = None, **options: Any) -> SlurmClient:
        return SlurmClient(
            "http://slurm.invalid:6820",
            "obleth",
            "t",
            "v0.0.40",
            transport=httpx.MockTransport(answer),
        )

    monkeypatch.setattr("obleth.core.services.make_slurm_client", client)
    slurm = SlurmSettings.load()
    slurm.enabled, slurm.slurmrestd_url, slurm.user = True, "http://slurm.invalid:6820", "obleth"
    resources = discover_resources(slurm)
    assert resources["qos"] == ["bare", "long", "normal"], resources["errors"]
    assert resources["qos_limits"] == {
        "bare": {"max_wall_minutes": None},
        "long": {"max_wall_minutes": None},
        "normal": {"max_wall_minutes": 1440},
    }
    cluster = dc.cluster_from_resources(resources)
    ask = dc.Ask(partition="cpu", qos="normal", time_limit_minutes=1500)
    assert dc.check_walltime(ask, cluster)[-1].message == (
        "Walltime 1-01:00:00 is over QoS 'normal''s limit of 1-00:00:00 (MaxWall); give at most "
        "1-00:00:00 or another QoS."
    )
