"""The gateway's limits and timeouts, read once from the ``OBLETH_GATEWAY_*`` settings.

:class:`GatewayConfig` is what :class:`obleth.gateway.service.GatewayService` and its parts
(:mod:`obleth.gateway.body`, :mod:`obleth.gateway.failover`, :mod:`obleth.gateway.relay`) read
on a request; nothing here is looked up in the settings per request.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class GatewayConfig:
    """The gateway's limits and timeouts (from ``OBLETH_GATEWAY_*`` settings)."""

    connect_timeout: float = 5.0
    ttfb_timeout: float = 120.0
    read_timeout: float = 600.0
    stream_idle_timeout: float = 120.0
    body_timeout: float = 30.0
    max_body_bytes: int = 8 * 1024 * 1024
    max_json_containers: int = 100_000
    max_tries: int = 3
    cooldown_after: int = 3
    cooldown_secs: float = 30.0
    endpoint_max_concurrency: int = 0
    queue_timeout: float = 30.0
    affinity_header: str = ""
    access_log: bool = False

    @classmethod
    def from_settings(cls) -> GatewayConfig:
        s = settings
        return cls(
            connect_timeout=float(getattr(s, "OBLETH_GATEWAY_CONNECT_TIMEOUT_SECS", 5)),
            ttfb_timeout=float(getattr(s, "OBLETH_GATEWAY_TTFB_TIMEOUT_SECS", 120)),
            read_timeout=float(getattr(s, "OBLETH_GATEWAY_TIMEOUT_SECS", 600)),
            stream_idle_timeout=float(getattr(s, "OBLETH_GATEWAY_STREAM_IDLE_TIMEOUT_SECS", 120)),
            body_timeout=float(getattr(s, "OBLETH_GATEWAY_BODY_TIMEOUT_SECS", 30)),
            max_body_bytes=int(getattr(s, "OBLETH_GATEWAY_MAX_BODY_BYTES", 8 * 1024 * 1024)),
            max_json_containers=int(getattr(s, "OBLETH_GATEWAY_MAX_JSON_CONTAINERS", 100_000)),
            max_tries=max(1, int(getattr(s, "OBLETH_GATEWAY_MAX_TRIES", 3))),
            cooldown_after=int(getattr(s, "OBLETH_GATEWAY_COOLDOWN_AFTER", 3)),
            cooldown_secs=float(getattr(s, "OBLETH_GATEWAY_COOLDOWN_SECS", 30)),
            endpoint_max_concurrency=int(getattr(s, "OBLETH_GATEWAY_ENDPOINT_MAX_CONCURRENCY", 0)),
            queue_timeout=float(getattr(s, "OBLETH_GATEWAY_QUEUE_TIMEOUT_SECS", 30)),
            affinity_header=str(getattr(s, "OBLETH_GATEWAY_AFFINITY_HEADER", "") or "").lower(),
            access_log=bool(getattr(s, "OBLETH_GATEWAY_ACCESS_LOG", False)),
        )
