"""Serving replicas: promotion into routing (``Promote``), re-pointing an endpoint registered by
host name at the node's IP, and the zombie self-heal (probe failures, the gateway's verdict).
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from provisioner.domain import CancelReason, EndpointView, ModelSpec, Promote, ReplicaView
from provisioner.plan.naming import endpoint_name_for
from provisioner.plan.record import CANCEL_MESSAGES
from provisioner.plan.state import _age_secs, _Group, _Pass


def _url_host(address: str) -> str:
    bare = address.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def _api_base(address: str, port: int) -> str:
    return f"http://{_url_host(address)}:{port}/v1"


def _as_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _self_heal(
    ps: _Pass, r: ReplicaView, probed: bool, port: int | None
) -> tuple[int, CancelReason | None, str]:
    """New probe counter and, for a zombie, the restart reason and message."""
    k = ps.k
    counter = r.probe_failures
    if probed:
        counter = max(counter - 1, 0) if port is not None else counter + 1
    if k.restart_after_failures <= 0:
        return counter, None, ""
    # Only a pass that probed it may act on the counter: fast passes (no probe of serving
    # replicas) must not turn one stale count into a restart per second.
    if probed and counter >= k.restart_after_failures:
        return counter, CancelReason.PROBE_FAILED, CANCEL_MESSAGES[CancelReason.PROBE_FAILED]
    endpoint = (
        ps.endpoints_by_id.get(r.endpoint_id)
        if r.endpoint_id is not None and ps.s.endpoints_trusted
        else None
    )
    if endpoint is not None and _gateway_says_unhealthy(ps, endpoint):
        n = endpoint.consecutive_failures
        return (
            counter,
            CancelReason.GATEWAY_UNHEALTHY,
            f"restarting: gateway inference check failed {n} times",
        )
    return counter, None, ""


def _gateway_says_unhealthy(ps: _Pass, e: EndpointView) -> bool:
    return (
        e.health_status == "unhealthy"
        and e.last_http_status is None  # the engine answered: it is up, a restart cannot help
        and e.consecutive_failures >= ps.k.gateway_unhealthy_failures
        and e.last_checked_at is not None
        and _age_secs(ps.s.now, e.last_checked_at) <= ps.k.gateway_verdict_max_age_secs
    )


def _promote(ps: _Pass, g: _Group, spec: ModelSpec, r: ReplicaView, node: str, port: int) -> None:
    address = ps.s.addresses.get(node) or node
    name = endpoint_name_for(ps.k.job_prefix, spec.model_name, r.id)
    reuse = ps.reusable_endpoint(r.model_id, name, r.id)
    if reuse is not None:
        ps.reused_endpoints.add(reuse)
    g.promotes[r.id] = Promote(
        model_id=r.model_id,
        replica_id=r.id,
        node=node,
        address=address,
        port=port,
        api_base=_api_base(address, port),
        endpoint_name=name,
        endpoint_id=reuse,
        job_started_at=job.start_time if (job := ps.effective_job.get(r.id)) else None,
    )


def _maybe_migrate(ps: _Pass, g: _Group, r: ReplicaView, node: str) -> None:
    """Re-point a serving endpoint registered by host name (or an old IP) at the node's IP."""
    if not ps.s.endpoints_trusted or r.endpoint_id is None or not node:
        return
    endpoint = ps.endpoints_by_id.get(r.endpoint_id)
    address = ps.s.addresses.get(node)
    if endpoint is None or not address:
        return
    new_ip = _as_ip(address)
    if new_ip is None:  # only a resolved IP is worth a rewrite
        return
    try:
        parts = urllib.parse.urlsplit(endpoint.api_base)
        port = parts.port
    except ValueError:
        return
    host = parts.hostname or ""
    if port is None or not host or _as_ip(host) == new_ip:
        return
    ps.reused_endpoints.add(endpoint.id)
    g.promotes[r.id] = Promote(
        model_id=r.model_id,
        replica_id=r.id,
        node=node,
        address=address,
        port=port,
        api_base=_api_base(address, port),
        endpoint_name=endpoint.name,
        endpoint_id=endpoint.id,
    )
