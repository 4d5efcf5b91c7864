"""Slurm settings and endpoint API keys: the writes that carry write-only secrets (blank keeps,
clear empties, a new destination drops them), and what an answer may say about the JWT."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from obleth.core import validators
from obleth.core.models import Endpoint, SlurmSettings, mask_secret
from obleth.core.secrets import BoundSecret, secret_for_destination
from obleth.core.services.audit import logger
from obleth.core.services.specs import _field_default
from obleth.logging import register_secret

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
