"""Operator actions shared by the Management API and the admin console.

Views, serializers and admin classes validate input and call these functions; the rules live
here: restarting a replica, clearing lost replicas, the provision-error banner, the managed spec
upsert, Slurm settings with write-only secrets, the connection test, cluster discovery and the
provisioner status view.

Secrets (the Slurm JWT, the Hugging Face token, endpoint API keys) are never logged and never
returned: answers carry ``*_set`` and ``*_last4`` only.

One module per responsibility, every name re-exported here (``from obleth.core import services``
then ``services.restart_replica`` keeps working):

- :mod:`.audit`: the ``obleth.audit`` logger and the ``action_done`` signal
- :mod:`.provisioner_status`: the provisioner status view (``provisioner_view``)
- :mod:`.replicas`: restart replicas, clear lost replicas
- :mod:`.specs`: the managed spec upsert and deletion, the provision-error banner
- :mod:`.slurm_settings`: Slurm settings and endpoint API keys (write-only secrets), JWT display

The Slurm client section (the client factory, the connection test and cluster discovery) stays
in this module: tests replace ``obleth.core.services.make_slurm_client`` and
``obleth.core.services.discover_resources``, and the connection test and discovery look the
factory up here, so a replaced one takes effect.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import ValidationError

from obleth.core.models import SlurmSettings
from obleth.core.secrets import (
    BoundSecret,
    may_keep_secret,
    refuse_keep_secret,
    same_destination,
    secret_for_destination,
)
from obleth.core.services.audit import action_done
from obleth.core.services.provisioner_status import (
    RUNNING_WINDOW_SECS,
    ProvisionerView,
    provisioner_view,
)
from obleth.core.services.replicas import clear_lost, restart_replica, restart_replicas
from obleth.core.services.slurm_settings import (
    SETTINGS_FIELDS,
    endpoint_api_key,
    jwt_expiry,
    jwt_view,
    keep_or_replace_secret,
    update_slurm_settings,
    validate_images,
)
from obleth.core.services.specs import (
    delete_managed_spec,
    dismiss_provision_error,
    require_slurm_model,
    set_provision_error,
    spec_editable_fields,
    upsert_managed_spec,
)
from obleth.logging import redact

if TYPE_CHECKING:
    from provisioner.slurm.types import PingResult

__all__ = [
    # the secret rule of obleth.core.secrets, re-exported for the API and admin
    "BoundSecret",
    "may_keep_secret",
    "refuse_keep_secret",
    "same_destination",
    "secret_for_destination",
    # audit
    "action_done",
    # provisioner status
    "RUNNING_WINDOW_SECS",
    "ProvisionerView",
    "provisioner_view",
    # replicas
    "clear_lost",
    "restart_replica",
    "restart_replicas",
    # managed specs
    "delete_managed_spec",
    "dismiss_provision_error",
    "require_slurm_model",
    "set_provision_error",
    "spec_editable_fields",
    "upsert_managed_spec",
    # Slurm settings and secrets
    "SETTINGS_FIELDS",
    "endpoint_api_key",
    "jwt_expiry",
    "jwt_view",
    "keep_or_replace_secret",
    "update_slurm_settings",
    "validate_images",
    # the Slurm client (defined here)
    "RESOURCE_PARTS",
    "SlurmClientLike",
    "SlurmSettings",  # obleth.core.cockpit reads services.SlurmSettings
    "check_slurm_connection",
    "discover_resources",
    "empty_resources",
    "make_slurm_client",
]

RESOURCE_PARTS = ("partitions", "nodes", "accounts", "qos", "associations")


# --------------------------------------------------------------------------------- Slurm client


class SlurmClientLike(Protocol):
    def ping(self) -> PingResult: ...

    def detect_version(self) -> str: ...

    def discover(self) -> Any: ...


def make_slurm_client(
    settings: SlurmSettings, api_version: str | None = None, **options: Any
) -> SlurmClientLike:
    """The Slurm client for the stored connection (tests replace this to fake slurmrestd).
    ``options`` go to the client (``timeout`` seconds per read, for a caller that waits)."""
    from provisioner.slurm.client import SlurmClient

    client: SlurmClientLike = SlurmClient(
        settings.slurmrestd_url,
        settings.user,
        settings.jwt,
        (api_version if api_version is not None else settings.effective_api_version) or None,
        **options,
    )
    return client


@contextlib.contextmanager
def _closing(client: SlurmClientLike) -> Iterator[SlurmClientLike]:
    try:
        yield client
    finally:
        close = getattr(client, "close", None)
        if callable(close):
            close()


def _safe_error(exc: BaseException, settings: SlurmSettings) -> str:
    """An exception as text fit for an answer: no token, whatever the exception carried."""
    text = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    for secret in (settings.jwt, settings.hf_token):
        if secret:
            text = text.replace(secret, "[redacted]")
    return redact(text)[:500]


def _version_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    for attr in ("api_version", "version"):
        inner = getattr(value, attr, None)
        if isinstance(inner, str):
            return inner
    return str(value)


def check_slurm_connection(settings: SlurmSettings | None = None) -> dict[str, Any]:
    """Ping slurmrestd with the stored settings and report the JWT's expiry.

    Raises ``ValidationError`` on ``slurmrestd_url`` when no URL is set. Never raises for a
    failed ping: the answer says ``ok: false`` and why. A successful detection is stored as
    ``detected_api_version``/``detected_release``.
    """
    settings = settings or SlurmSettings.load()
    if not settings.slurmrestd_url:
        raise ValidationError(
            {
                "slurmrestd_url": (
                    "No slurmrestd URL is configured. Set slurmrestd_url (e.g. "
                    "http://slurm-head:6820) in the Slurm settings, then test again."
                )
            }
        )
    result: dict[str, Any] = {
        "ok": False,
        "latency_ms": None,
        "api_version": settings.effective_api_version,
        "detected_api_version": "",
        "slurm_release": "",
        "detail": "",
        "jwt": jwt_view(settings.jwt),
    }
    if not settings.jwt:
        result["detail"] = "No JWT is set: slurmrestd will refuse the requests. Paste a token."
    details: list[str] = []
    detected = ""
    try:
        with _closing(make_slurm_client(settings, api_version="")) as client:
            detected = _version_text(client.detect_version())
        result["detected_api_version"] = detected
    except Exception as exc:  # the client's own errors, transport errors: never a 500
        details.append(f"version detection failed: {_safe_error(exc, settings)}")
    version = settings.api_version or detected or settings.detected_api_version
    result["api_version"] = version
    try:
        with _closing(make_slurm_client(settings, api_version=version)) as client:
            ping = client.ping()
    except Exception as exc:
        details.append(f"ping failed: {_safe_error(exc, settings)}")
    else:
        result["ok"] = bool(ping.ok)
        result["latency_ms"] = round(float(ping.latency_ms), 1)
        result["slurm_release"] = ping.slurm_release or ""
        if ping.api_version:
            result["api_version"] = ping.api_version
        if ping.detail:
            details.append(_safe_error(Exception(ping.detail), settings))
    if details:
        result["detail"] = "; ".join([result["detail"], *details] if result["detail"] else details)
    if result["ok"] and (detected or result["slurm_release"]):
        changed: list[str] = []
        if detected and settings.detected_api_version != detected:
            settings.detected_api_version = detected
            changed.append("detected_api_version")
        release = result["slurm_release"]
        if release and settings.detected_release != release:
            settings.detected_release = release[:40]
            changed.append("detected_release")
        if changed:
            SlurmSettings.objects.filter(pk=settings.pk).update(
                **{name: getattr(settings, name) for name in changed}
            )
    return result


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def empty_resources(reason: str) -> dict[str, Any]:
    return {
        **{part: [] for part in RESOURCE_PARTS},
        "api_version": "",
        "reason": reason,
        "errors": {},
    }


def discover_resources(
    settings: SlurmSettings | None = None, *, timeout: float | None = None
) -> dict[str, Any]:
    """Partitions, nodes, accounts, QoS and associations, best effort, never raising.

    With Slurm disabled or unconfigured the answer is empty with a ``reason``. A part the
    client could not read is an empty list with its reason under ``errors``. ``timeout``: seconds
    per read (the deploy review waits less than the client's default for a stalled slurmrestd).
    """
    settings = settings or SlurmSettings.load()
    if not settings.enabled:
        return empty_resources("Slurm is disabled: enable it in the Slurm settings.")
    if not settings.slurmrestd_url:
        return empty_resources("No slurmrestd URL is configured.")
    try:
        options: dict[str, Any] = (
            {"timeout": timeout, "connect_timeout": min(timeout, 5.0)} if timeout else {}
        )
        with _closing(make_slurm_client(settings, None, **options)) as client:
            found = client.discover()
    except Exception as exc:
        answer = empty_resources(f"cluster discovery failed: {_safe_error(exc, settings)}")
        answer["errors"] = {part: answer["reason"] for part in RESOURCE_PARTS}
        return answer
    data = _jsonable(found)
    if not isinstance(data, dict):
        return empty_resources("slurmrestd gave no cluster description.")
    answer = empty_resources("")
    raw_errors = data.get("errors") or {}
    errors: dict[str, str] = (
        {str(k): redact(str(v))[:500] for k, v in raw_errors.items()}
        if isinstance(raw_errors, dict)
        else {}
    )
    for part in RESOURCE_PARTS:
        value = data.get(part)
        if isinstance(value, list):
            answer[part] = value
        elif value is not None:
            errors.setdefault(part, "slurmrestd gave an unexpected answer")
    answer["errors"] = errors
    limits = data.get("qos_limits")
    if isinstance(limits, list) and "qos" not in errors:  # QoS -> MaxWall, for deploy checks
        answer["qos_limits"] = {
            str(row[0]): {"max_wall_minutes": row[1]}
            for row in limits
            if isinstance(row, list) and len(row) == 2
        }
    answer["api_version"] = str(data.get("api_version") or "")
    answer["reason"] = "" if not errors else "some parts could not be read (see errors)"
    return answer
