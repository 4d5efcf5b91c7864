"""A probe pass: every port of every window probed concurrently (bounded by a semaphore and the
open-file limit) through one httpx client, each window's results summed up as a
``ProbeOutcome``; ``probe_all`` and ``probe_one`` are the entry points."""

from __future__ import annotations

import asyncio
import concurrent.futures
import resource
from collections.abc import Iterable, Sequence

import httpx

from provisioner.probe.prober import _Prober
from provisioner.probe.targets import IdentityProof, K, ProbeOutcome, ProbeTarget, _PortResult
from provisioner.probe.transport import _OneShotTransport

_FD_RESERVE = 64  # file descriptors left for everything else in the process


def _summarise(
    target: ProbeTarget[K], ports: Sequence[int], results: Sequence[_PortResult]
) -> ProbeOutcome:
    if not ports:
        return ProbeOutcome(
            None,
            f"no port to probe: window {target.port_base}+{target.port_span} has no valid TCP port",
        )
    for port, result in zip(ports, results, strict=True):
        if result.ready:
            how = {
                "key": " (identity proven with the replica key)",
                "model-name": " (model listed; identity not proven)",
            }.get(result.proof, "")
            return ProbeOutcome(port, f"ready on port {port}{how}")
    by_reason: dict[str, list[int]] = {}
    for port, result in zip(ports, results, strict=True):
        by_reason.setdefault(result.reason, []).append(port)
    if len(by_reason) == 1:
        reason = next(iter(by_reason))
        if len(ports) == 1:
            return ProbeOutcome(None, f"{reason} on port {ports[0]}")
        return ProbeOutcome(None, f"{reason} on all {len(ports)} ports ({ports[0]}-{ports[-1]})")

    # Most telling first: an answer (loading, HTTP errors), then other failures, then refusals.
    def rank(reason: str) -> int:
        if reason.startswith(("wrong server", "identity")):
            return -1
        if reason.startswith(("loading", "HTTP")):
            return 0
        return 2 if reason == "connection refused" else 1

    parts = []
    for reason in sorted(by_reason, key=lambda r: (rank(r), by_reason[r][0])):
        plist = by_reason[reason]
        where = f"port {plist[0]}" if len(plist) == 1 else "ports " + ",".join(map(str, plist))
        parts.append(f"{reason} on {where}")
    detail = "; ".join(parts)
    return ProbeOutcome(None, detail if len(detail) <= 400 else detail[:397] + "...")


def _effective_concurrency(concurrency: int) -> int:
    wanted = max(1, int(concurrency))
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - platform without rlimits
        return wanted
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return wanted
    return max(1, min(wanted, soft - _FD_RESERVE))


async def _probe_all_async(
    targets: Sequence[ProbeTarget[K]], timeout: float, concurrency: int
) -> dict[K, ProbeOutcome]:
    windows = [target.ports() for target in targets]
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(timeout),
        transport=_OneShotTransport(),  # connections are bounded by the prober's semaphore
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": "obleth-provisioner-probe", "Accept": "*/*"},
    ) as client:
        prober = _Prober(client, _effective_concurrency(concurrency), timeout)
        rows = [
            [
                asyncio.ensure_future(
                    prober.probe_port(target.host, port, target.health_path, target.identity)
                )
                for port in ports
            ]
            for target, ports in zip(targets, windows, strict=True)
        ]
        every = [task for row in rows for task in row]
        if every:
            await asyncio.gather(*every)
    outcomes: dict[K, ProbeOutcome] = {}
    for target, ports, row in zip(targets, windows, rows, strict=True):
        outcomes[target.key] = _summarise(target, ports, [task.result() for task in row])
    return outcomes


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def probe_all(
    targets: Iterable[ProbeTarget[K]], *, timeout: float, concurrency: int
) -> dict[K, ProbeOutcome]:
    """Probe every port of every target's window; one outcome per target key.

    ``timeout`` bounds connecting to and hearing from each port (seconds); ``concurrency``
    bounds the ports probed at once (also capped by the process's open-file limit). Network
    errors never raise: they become the outcome's ``detail``. Targets sharing a key: last wins.
    """
    items = list(targets)
    if not items:
        return {}
    if not timeout > 0:
        raise ValueError("timeout must be a positive number of seconds (e.g. 5)")
    if not _loop_running():
        return asyncio.run(_probe_all_async(items, timeout, concurrency))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _probe_all_async(items, timeout, concurrency)).result()


def probe_one(
    host: str,
    port_base: int,
    port_span: int,
    health_path: str,
    *,
    timeout: float,
    identity: IdentityProof | None = None,
) -> ProbeOutcome:
    """Probe a single window (troubleshooting views, tests)."""
    target = ProbeTarget(
        key=0,
        host=host,
        port_base=port_base,
        port_span=port_span,
        health_path=health_path,
        identity=identity,
    )
    return probe_all([target], timeout=timeout, concurrency=max(1, port_span))[0]
