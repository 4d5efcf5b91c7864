"""Replica identity: the per-replica key and how the probe proves a port is the replica's own.

Every replica row gets a fresh high-entropy key when it is written (:func:`new_replica_key`). The
job receives it in its environment as ``OBLETH_REPLICA_API_KEY`` (never in the script text, the
job name or the launch record), the recipe hands it to the engine (``--api-key`` or the engine's
own variable), the probe promotes a port only when the server there refuses a request without
the key and accepts it with the key, and the endpoint registered for the replica carries the key
so the gateway, its endpoint check and the warm-up send it upstream.

Engines that cannot check a key (Ollama) are proven by the model name in ``/v1/models`` only,
and their replicas are shown as "identity not proven". Which check a spec gets comes from its
recipe's engine (``launcher_spec.recipe.engine``), or from ``launcher_spec.identity_check``
(``key`` or ``model-name``) when an operator set one.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from obleth.core.choices import IdentityCheck
from obleth.logging import register_secret
from provisioner.probe import IdentityProof

if TYPE_CHECKING:
    from obleth.core.models import ManagedSpec, Replica

__all__ = [
    "DEFAULT_IDENTITY_PATH",
    "ENGINES_WITHOUT_KEY",
    "KEY_ENV",
    "identity_check_for",
    "identity_path_for",
    "new_replica_key",
    "probe_identity",
]

KEY_ENV = "OBLETH_REPLICA_API_KEY"
# Engines whose server cannot demand an API key: proven by the model name only.
ENGINES_WITHOUT_KEY = frozenset({"ollama"})
DEFAULT_IDENTITY_PATH = "/v1/models"
# Engines that leave /v1/models open even with a key: a route they do protect.
# llama.cpp's llama-server keeps /health, /v1/health, /models, /v1/models and /api/tags public.
_PATH_RE = re.compile(r"/[A-Za-z0-9._~/-]{0,200}")
_IDENTITY_PATHS = {"llamacpp": "/props", "llama.cpp": "/props", "llama-cpp": "/props"}


def new_replica_key() -> str:
    """A fresh replica key: 256 random bits, URL-safe, printable ASCII (a valid header value).
    Registered with the log redaction at once."""
    key = "obr_" + secrets.token_urlsafe(32)
    register_secret(key)
    return key


def _engine(launcher_spec: Any) -> str:
    if not isinstance(launcher_spec, Mapping):
        return ""
    recipe = launcher_spec.get("recipe")
    engine = recipe.get("engine") if isinstance(recipe, Mapping) else None
    return engine.strip().lower() if isinstance(engine, str) else ""


def identity_check_for(launcher_spec: Any) -> str:
    """``key`` (the default: hand-written specs and every engine that can check a key) or
    ``model-name`` (Ollama, or an operator's ``launcher_spec.identity_check``)."""
    if isinstance(launcher_spec, Mapping):
        chosen = launcher_spec.get("identity_check")
        if chosen in (IdentityCheck.KEY, IdentityCheck.MODEL_NAME):
            return str(chosen)
    if _engine(launcher_spec) in ENGINES_WITHOUT_KEY:
        return str(IdentityCheck.MODEL_NAME)
    return str(IdentityCheck.KEY)


def identity_path_for(launcher_spec: Any) -> str:
    """The route the key is proven on: ``/v1/models``, or the engine's protected route."""
    if isinstance(launcher_spec, Mapping):
        chosen = launcher_spec.get("identity_path")
        if isinstance(chosen, str) and _PATH_RE.fullmatch(chosen):
            return chosen
    return _IDENTITY_PATHS.get(_engine(launcher_spec), DEFAULT_IDENTITY_PATH)


def probe_identity(replica: Replica, spec: ManagedSpec) -> IdentityProof | None:
    """What the probe must see on a ready port of ``replica``; None for rows written before
    replicas had keys (health only, shown as "identity not proven")."""
    check = replica.identity_check
    if check == IdentityCheck.MODEL_NAME:
        return IdentityProof(
            check=check,
            api_key=replica.api_key or "",
            path=DEFAULT_IDENTITY_PATH,
            model_name=spec.model.forwarded_name,
        )
    if check == IdentityCheck.KEY:
        return IdentityProof(
            check=check,
            api_key=replica.api_key or "",
            path=identity_path_for(spec.launcher_spec),
        )
    return None
