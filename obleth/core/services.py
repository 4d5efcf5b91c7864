"""Operator actions shared by the Management API and the admin console.

Views, serializers and admin classes validate input and call these functions; the rules live
here: restarting a replica, clearing lost replicas, the provision-error banner, the managed spec
upsert, Slurm settings with write-only secrets, the connection test, cluster discovery and the
provisioner status view.

Secrets (the Slurm JWT, the Hugging Face token, endpoint API keys) are never logged and never
returned: answers carry ``*_set`` and ``*_last4`` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.dispatch import Signal
from django.utils import timezone

from obleth.core import validators
from obleth.core.choices import HostingMode, PassStatus, ReplicaState
from obleth.core.models import (
    Endpoint,
    ManagedSpec,
    Model,
    ProvisionerStatus,
    Replica,
    SlurmSettings,
    mask_secret,
)
from obleth.core.secrets import (  # noqa: F401  (the rule, re-exported for the API and admin)
    BoundSecret,
    may_keep_secret,
    refuse_keep_secret,
    same_destination,
    secret_for_destination,
)
from obleth.logging import redact, register_secret

if TYPE_CHECKING:
    from provisioner.slurm.types import PingResult

logger = logging.getLogger("obleth.audit")

#: Sent after an operator action (restart, clear lost, dismiss) with ``action``, ``model``,
#: ``object_id``, ``object_repr`` and ``detail``; obleth.accounts records it in the audit log.
action_done = Signal()

#: A provisioner whose heartbeat is at most this old is "running" (inclusive).
RUNNING_WINDOW_SECS = 60

RESOURCE_PARTS = ("partitions", "nodes", "accounts", "qos", "associations")


# --------------------------------------------------------------------------------------- secrets


def keep_or_replace_secret(stored: str, supplied: str | None, *, clear: bool = False) -> str:
    """The rule for write-only secrets in settings: blank or omitted keeps, ``clear`` empties."""
    if clear:
        return ""
    if supplied is None or not supplied.strip():
        return stored
    return supplied.strip()


def jwt_expiry(token: str | None) -> dt.datetime | None:
    """The ``exp`` claim of a JWT, read WITHOUT verifying its signature (display only)."""
    if not token:
        return None
    import jwt

    try:
        claims = jwt.decode(
            token, options={"verify_signature": False, "verify_exp": False, "verify_aud": False}
        )
    except (jwt.PyJWTError, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        return dt.datetime.fromtimestamp(exp, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def jwt_view(token: str | None, now: dt.datetime | None = None) -> dict[str, Any]:
    """What an answer may say about a JWT: set, last four characters, expiry."""
    now = now or timezone.now()
    masked = mask_secret(token)
    expires_at = jwt_expiry(token)
    return {
        "set": masked["set"],
        "last4": masked["last4"],
        "expires_at": expires_at,
        "expired": (expires_at <= now) if expires_at is not None else None,
    }


# ------------------------------------------------------------------------------- provisioner view


@dataclasses.dataclass(frozen=True)
class ProvisionerView:
    """The provisioner as operators see it: alive or not, and whether its passes succeed."""

    state: str  # "running" | "failing" | "not_running"
    label: str  # "running", "running but failing since <time>", "not running"
    running: bool
    failing: bool
    failing_since: dt.datetime | None
    held_secs: int | None
    last_seen_at: dt.datetime | None
    last_seen_secs: int | None
    version: str
    host: str
    last_pass_status: str
    last_pass_detail: str
    last_pass_at: dt.datetime | None
    last_pass_ms: int | None
    last_ok_at: dt.datetime | None
    held_alert_active: bool

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def provisioner_view(
    status: ProvisionerStatus | None = None,
    *,
    slurm_enabled: bool | None = None,
    now: dt.datetime | None = None,
) -> ProvisionerView:
    """Summarise the heartbeat row.

    Running means a heartbeat at most ``RUNNING_WINDOW_SECS`` ago. Failing means the last pass
    ended in ``error`` (or ``idle`` while Slurm is enabled, which freezes replica states just the
    same); ``failing_since`` is the start of that streak.
    """
    now = now or timezone.now()
    status = status or ProvisionerStatus.load()
    if slurm_enabled is None:
        slurm_enabled = bool(
            SlurmSettings.objects.filter(pk=1).values_list("enabled", flat=True).first()
        )
    last_seen_secs = (
        max(0, int((now - status.heartbeat_at).total_seconds()))
        if status.heartbeat_at is not None
        else None
    )
    running = last_seen_secs is not None and last_seen_secs <= RUNNING_WINDOW_SECS
    pass_status = status.last_pass_status or ""
    non_ok = pass_status == PassStatus.ERROR or (pass_status == PassStatus.IDLE and slurm_enabled)
    failing_since = (status.non_ok_since or status.last_pass_at) if non_ok else None
    held_secs = (
        max(0, int((now - failing_since).total_seconds())) if failing_since is not None else None
    )
    failing = running and non_ok
    if not running:
        state, label = "not_running", "not running"
    elif failing and failing_since is not None:
        state = "failing"
        label = (
            f"running but failing since {timezone.localtime(failing_since):%Y-%m-%d %H:%M:%S %Z}"
        )
    else:
        state, label = "running", "running"
    return ProvisionerView(
        state=state,
        label=label,
        running=running,
        failing=failing,
        failing_since=failing_since,
        held_secs=held_secs,
        last_seen_at=status.heartbeat_at,
        last_seen_secs=last_seen_secs,
        version=status.version,
        host=status.host,
        last_pass_status=pass_status,
        last_pass_detail=status.last_pass_detail,
        last_pass_at=status.last_pass_at,
        last_pass_ms=status.last_pass_ms,
        last_ok_at=status.last_ok_at,
        held_alert_active=status.held_alert_active,
    )


# --------------------------------------------------------------------------------------- replicas


def _gateway_changed() -> None:
    """A write with QuerySet.update (no signal) changed what a model's 503 says: tell the
    gateways (obleth.gateway.signals covers saves and deletes)."""
    from obleth.gateway.table import publish_change

    publish_change("replicas")


def restart_replica(replica_id: uuid.UUID | str, *, actor: str = "admin") -> Replica:
    """Ask the provisioner to cancel this replica's job and launch a fresh one.

    Raises ``Replica.DoesNotExist`` when there is no such replica.
    """
    updated = Replica.objects.filter(pk=replica_id).update(
        cancel_requested=True, updated_at=timezone.now()
    )
    if not updated:
        raise Replica.DoesNotExist(f"No replica {replica_id}.")
    _gateway_changed()
    replica = Replica.objects.get(pk=replica_id)
    logger.info(
        "audit: %s asked to restart replica %s of %s (job %s)",
        actor,
        replica.pk,
        replica.model_name,
        replica.job_id or "not submitted",
    )
    action_done.send(
        Replica,
        action="restart_replica",
        model="replica",
        object_id=replica.pk,
        object_repr=str(replica),
        detail=f"model {replica.model_name}",
    )
    return replica


def restart_replicas(replica_ids: Iterable[uuid.UUID | str], *, actor: str = "admin") -> int:
    """Restart several replicas at once; returns how many were flagged."""
    ids = list(replica_ids)
    rows = list(Replica.objects.filter(pk__in=ids))
    count = Replica.objects.filter(pk__in=[r.pk for r in rows]).update(
        cancel_requested=True, updated_at=timezone.now()
    )
    if count:
        _gateway_changed()
    logger.info("audit: %s asked to restart %d replica(s)", actor, count)
    for replica in rows:
        action_done.send(
            Replica,
            action="restart_replica",
            model="replica",
            object_id=replica.pk,
            object_repr=str(replica),
            detail=f"model {replica.model_name}",
        )
    return count


def clear_lost(model_id: uuid.UUID | str, *, actor: str = "admin") -> int:
    """Delete a model's lost replicas now (they no longer count against max_job_failures):
    "Try once more". A tripped failed-launch breaker is cleared at once (banner, API, gateway);
    the next pass launches again, and trips it again if the limit is reached again."""
    count, _ = Replica.objects.filter(model_id=model_id, state=ReplicaState.LOST).delete()
    ManagedSpec.objects.filter(model_id=model_id).exclude(breaker_message="").update(
        breaker_message="", breaker_tripped_at=None
    )
    _gateway_changed()  # its 503 no longer says "stopped"
    logger.info("audit: %s cleared %d lost replica(s) of model %s", actor, count, model_id)
    action_done.send(
        Model,
        action="clear_lost",
        model="model",
        object_id=model_id,
        object_repr=str(Model.objects.filter(pk=model_id).first() or model_id),
        detail=f"cleared {count} lost replica(s)",
    )
    return count


# ---------------------------------------------------------------------------------- managed specs


def require_slurm_model(model: Model) -> None:
    if model.hosting_mode != HostingMode.SLURM:
        raise ValidationError(
            {
                "hosting_mode": (
                    f"Model {model.name!r} hosts static endpoints; only a model created with "
                    "hosting_mode 'slurm' takes a managed spec. Create a Slurm-provisioned model."
                )
            }
        )


_STRIPPED_SPEC_FIELDS = frozenset(
    {"partition", "gres", "constraints", "exclude", "account", "qos", "time_limit", "mem"}
)


def _field_default(model: type[models.Model], name: str) -> Any:
    field = model._meta.get_field(name)
    return field.get_default() if isinstance(field, models.Field) else None


def spec_editable_fields() -> list[str]:
    return [
        f.name
        for f in ManagedSpec._meta.concrete_fields
        if f.editable and f.name not in {"model", "created_at", "updated_at"}
    ]


def upsert_managed_spec(
    model: Model,
    values: Mapping[str, Any],
    *,
    partial: bool = False,
    actor: str = "admin",
) -> tuple[ManagedSpec, bool]:
    """Create or replace a model's managed spec after full validation.

    ``partial=False`` (PUT) replaces the spec: fields not given return to their defaults.
    ``partial=True`` (PATCH) changes only the given fields. Raises ``ValidationError`` naming the
    field. The provision-error banner is kept.
    """
    require_slurm_model(model)
    with transaction.atomic():
        spec = ManagedSpec.objects.select_for_update().filter(model=model).first()
        created = spec is None
        if spec is None:
            spec = ManagedSpec(model=model)
        if not partial:
            for name in spec_editable_fields():
                if name not in values:
                    setattr(spec, name, _field_default(ManagedSpec, name))
        for name, value in values.items():
            if name in _STRIPPED_SPEC_FIELDS and isinstance(value, str):
                value = value.strip()
            setattr(spec, name, value)
        # A blank partition: the model's clean() gives the helpful message, not "cannot be
        # blank". Any other partition goes through its validator like every other field.
        exclude = ["model"] if str(spec.partition or "").strip() else ["model", "partition"]
        spec.full_clean(exclude=exclude, validate_unique=False)
        spec.save()
    logger.info(
        "audit: %s %s the managed spec of %s (fields: %s)",
        actor,
        "created" if created else "updated",
        model.name,
        ", ".join(sorted(values)) or "none",
    )
    return spec, created


def delete_managed_spec(model: Model, *, actor: str = "admin") -> bool:
    """Stop launching a model: its replicas are drained by the provisioner's next pass."""
    count, _ = ManagedSpec.objects.filter(model=model).delete()
    if count:
        logger.info("audit: %s deleted the managed spec of %s", actor, model.name)
    return bool(count)


def set_provision_error(
    spec: ManagedSpec, error: str | None, *, actor: str = "admin"
) -> ManagedSpec:
    """``None`` (or blank) dismisses the last refused-job message; a string records one."""
    text = (error or "").strip()
    spec.last_provision_error = text
    spec.last_provision_error_at = timezone.now() if text else None
    spec.save(update_fields=["last_provision_error", "last_provision_error_at", "updated_at"])
    logger.info(
        "audit: %s %s the provision error of %s",
        actor,
        "set" if text else "dismissed",
        spec.model_id,
    )
    action_done.send(
        ManagedSpec,
        action="set_provision_error" if text else "dismiss_error",
        model="managedspec",
        object_id=spec.model_id,
        object_repr=str(spec),
        detail=text[:200],
    )
    return spec


def dismiss_provision_error(spec: ManagedSpec, *, actor: str = "admin") -> ManagedSpec:
    return set_provision_error(spec, None, actor=actor)


# ---------------------------------------------------------------------------------- Slurm settings

SETTINGS_FIELDS = (
    "enabled",
    "slurmrestd_url",
    "api_version",
    "user",
    "cache_dir",
    "images_dir",
    "log_dir",
    "setup",
    "images",
    "node_addresses",
)


validate_images = validators.validate_images


def update_slurm_settings(
    values: Mapping[str, Any],
    *,
    jwt: str | None = None,
    jwt_clear: bool = False,
    hf_token: str | None = None,
    hf_token_clear: bool = False,
    keep_secret: bool = False,
    actor: str = "admin",
) -> SlurmSettings:
    """Apply a change to the Slurm connection and cluster defaults.

    Fields not in ``values`` keep their stored value. A blank or omitted secret keeps the stored
    one; ``jwt_clear``/``hf_token_clear`` empty it. A changed ``slurmrestd_url`` drops the
    stored JWT and Hugging Face token (both travel to that host: the token in every job's
    environment) unless they are sent again or ``keep_secret`` is set (the caller checks
    ``may_keep_secret``). Raises ``ValidationError`` naming the field (e.g. enabled without a
    URL or user). The audit line lists field names and whether each secret is set, never a
    secret.
    """
    unknown = set(values) - set(SETTINGS_FIELDS)
    if unknown:
        raise ValueError(f"not Slurm settings fields: {sorted(unknown)}")
    if "images" in values:
        try:
            validate_images(values["images"])
        except ValidationError as exc:
            raise ValidationError({"images": exc.messages}) from None
    with transaction.atomic():
        SlurmSettings.objects.get_or_create(pk=1)
        obj = SlurmSettings.objects.select_for_update().get(pk=1)
        old_url = obj.slurmrestd_url
        for name, value in values.items():
            if value is None:
                value = _field_default(SlurmSettings, name)
            setattr(obj, name, value)
        if isinstance(obj.slurmrestd_url, str):
            obj.slurmrestd_url = obj.slurmrestd_url.strip().rstrip("/")
        for name in ("user", "api_version"):
            if isinstance(getattr(obj, name), str):
                setattr(obj, name, getattr(obj, name).strip())
        old_jwt, old_hf = obj.jwt, obj.hf_token
        bound_jwt = secret_for_destination(
            obj.jwt,
            jwt,
            old_url=old_url,
            new_url=obj.slurmrestd_url,
            clear=jwt_clear,
            keep_for_new_url=keep_secret,
        )
        bound_hf = secret_for_destination(
            obj.hf_token,
            hf_token,
            old_url=old_url,
            new_url=obj.slurmrestd_url,
            clear=hf_token_clear,
            keep_for_new_url=keep_secret,
        )
        obj.jwt, obj.hf_token = bound_jwt.value, bound_hf.value
        obj.full_clean()
        obj.save()
    register_secret(obj.jwt)
    register_secret(obj.hf_token)
    logger.info(
        "audit: %s updated Slurm settings (fields: %s; jwt %s, set=%s; hf_token %s, set=%s)",
        actor,
        ", ".join(sorted(values)) or "none",
        "removed for the new URL"
        if bound_jwt.dropped
        else ("changed" if obj.jwt != old_jwt else "unchanged"),
        bool(obj.jwt),
        "removed for the new URL"
        if bound_hf.dropped
        else ("changed" if obj.hf_token != old_hf else "unchanged"),
        bool(obj.hf_token),
    )
    return obj


def endpoint_api_key(
    endpoint: Endpoint,
    supplied: str | None,
    *,
    new_api_base: str | None,
    clear: bool = False,
    keep_secret: bool = False,
) -> BoundSecret:
    """The API key an endpoint keeps after a change (``secret_for_destination`` with the stored
    ``api_base``; a new endpoint has none stored). Used by the API and the admin alike."""
    stored = None
    if endpoint.pk is not None and not endpoint._state.adding:
        stored = Endpoint.objects.filter(pk=endpoint.pk).only("api_base", "api_key").first()
    return secret_for_destination(
        (stored.api_key or "") if stored is not None else "",
        supplied,
        old_url=stored.api_base if stored is not None else new_api_base,
        new_url=new_api_base,
        clear=clear,
        keep_for_new_url=keep_secret,
    )


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
