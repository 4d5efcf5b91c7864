"""The Slurm connection's Cluster defaults as recipes see them (``{{cluster.cache}}``,
``{{image.<engine>}}``...): :func:`cluster_defaults` and filling cluster tokens in a text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from recipes.header import normalize_newlines
from recipes.types import _CLUSTER_FIELD, _TOKEN_RE

if TYPE_CHECKING:
    from obleth.core.models import SlurmSettings


# ----------------------------------------------------------------------------- cluster defaults


@dataclass(frozen=True)
class ClusterDefaults:
    """The values recipes refer to, from the Slurm connection's Cluster defaults."""

    cache: str = ""
    images_dir: str = ""
    logs: str = ""
    setup: str = ""
    images: Mapping[str, str] = field(default_factory=dict)

    def image(self, engine: str) -> str | None:
        path = str(self.images.get(engine) or "").strip()
        if not path:
            return None
        if path.startswith("/") or "://" in path or not self.images_dir:
            return path
        return f"{self.images_dir.rstrip('/')}/{path}"

    def value(self, token: str) -> str | None:
        """The value of a cluster token, or None when it is not set (or not a cluster default).
        ``cluster.setup`` is never missing: unset, it is empty."""
        if token == "cluster.cache":
            return self.cache or None
        if token == "cluster.images":
            return self.images_dir or None
        if token == "cluster.logs":
            return self.logs or None
        if token == "cluster.setup":
            return self.setup
        engine = _image_engine(token)
        return self.image(engine) if engine else None


def _image_engine(token: str) -> str | None:
    for prefix in ("image.", "cluster.image."):
        if token.startswith(prefix) and len(token) > len(prefix):
            return token[len(prefix) :]
    return None


def _is_cluster_token(token: str) -> bool:
    return token.startswith("cluster.") or _image_engine(token) is not None


def _cluster_hint(token: str) -> str:
    engine = _image_engine(token)
    if engine is not None:
        return (
            f"`{{{{{token}}}}}` isn't set; set it on the Slurm connection (Cluster defaults, "
            f"images: an image for engine {engine!r})."
        )
    if token in _CLUSTER_FIELD:
        return (
            f"`{{{{{token}}}}}` isn't set; set it on the Slurm connection (Cluster defaults, "
            f"{_CLUSTER_FIELD[token]})."
        )
    return (
        f"`{{{{{token}}}}}` is not a cluster default: use cluster.cache, cluster.images, "
        "cluster.logs, cluster.setup or image.<engine>; or set it on the Slurm connection."
    )


def cluster_defaults(
    cluster: SlurmSettings | Mapping[str, Any] | ClusterDefaults | None,
) -> ClusterDefaults:
    """Cluster defaults from the Slurm connection (a SlurmSettings row), a mapping with the same
    field names (cache_dir, images_dir, log_dir, setup, images), or nothing."""
    if cluster is None:
        return ClusterDefaults()
    if isinstance(cluster, ClusterDefaults):
        return cluster
    if isinstance(cluster, Mapping):

        def get(*names: str) -> Any:
            return next((cluster[n] for n in names if cluster.get(n) not in (None, "")), "")

        images = cluster.get("images") or {}
    else:

        def get(*names: str) -> Any:
            return next((getattr(cluster, n) for n in names if getattr(cluster, n, "")), "")

        images = getattr(cluster, "images", None) or {}
    if not isinstance(images, Mapping):
        images = {}
    return ClusterDefaults(
        cache=_folder(get("cache_dir", "cache")),
        images_dir=_folder(get("images_dir")),
        logs=_folder(get("log_dir", "logs")),
        setup=normalize_newlines(str(get("setup"))).strip("\n"),
        images={str(k): str(v) for k, v in images.items() if v},
    )


def _folder(value: Any) -> str:
    text = str(value or "").strip()
    return text.rstrip("/") or text[:1]


def _resolve_cluster(text: str, defaults: ClusterDefaults) -> tuple[str, list[str]]:
    """Fill cluster tokens in text; return it and the tokens left unresolved."""
    missing: list[str] = []

    def sub(match: re.Match[str]) -> str:
        token = match.group(1)
        if not _is_cluster_token(token):
            return match.group(0)
        value = defaults.value(token)
        if value is None:
            missing.append(token)
            return match.group(0)
        return value

    return _TOKEN_RE.sub(sub, text), missing
