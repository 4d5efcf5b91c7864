"""One adapter per slurmrestd API version, keyed by the version string (``v0.0.38``...)."""

from __future__ import annotations

from provisioner.slurm.adapters.base import AssociationInfo, SlurmAdapter, job_phase, number
from provisioner.slurm.adapters.v0_0_36 import V0036Adapter
from provisioner.slurm.adapters.v0_0_37 import V0037Adapter
from provisioner.slurm.adapters.v0_0_38 import V0038Adapter
from provisioner.slurm.adapters.v0_0_39 import V0039Adapter
from provisioner.slurm.adapters.v0_0_40 import V0040Adapter
from provisioner.slurm.adapters.v0_0_41 import V0041Adapter
from provisioner.slurm.adapters.v0_0_42 import V0042Adapter
from provisioner.slurm.adapters.v0_0_43 import V0043Adapter
from provisioner.slurm.adapters.v0_0_44 import V0044Adapter
from provisioner.slurm.adapters.v0_0_45 import V0045Adapter
from provisioner.slurm.errors import SlurmConfigError

__all__ = [
    "ADAPTERS",
    "AssociationInfo",
    "SlurmAdapter",
    "get_adapter",
    "job_phase",
    "number",
    "supported_versions",
    "version_key",
]

ADAPTERS: dict[str, type[SlurmAdapter]] = {
    cls.version: cls
    for cls in (
        V0036Adapter,
        V0037Adapter,
        V0038Adapter,
        V0039Adapter,
        V0040Adapter,
        V0041Adapter,
        V0042Adapter,
        V0043Adapter,
        V0044Adapter,
        V0045Adapter,
    )
}


def version_key(version: str) -> tuple[int, ...]:
    """``v0.0.38`` -> ``(0, 0, 38)`` for ordering."""
    return tuple(int(p) for p in version.lstrip("v").split("."))


def supported_versions() -> list[str]:
    """Every version with an adapter, oldest first."""
    return sorted(ADAPTERS, key=version_key)


def get_adapter(version: str) -> SlurmAdapter:
    """The adapter for ``version`` (``v0.0.40`` or ``0.0.40``); unknown -> ``SlurmConfigError``."""
    key = version.strip()
    if key and not key.startswith("v"):
        key = "v" + key
    try:
        return ADAPTERS[key]()
    except KeyError:
        raise SlurmConfigError(
            f"api_version {version!r} is not supported; use one of: "
            + ", ".join(supported_versions())
        ) from None
