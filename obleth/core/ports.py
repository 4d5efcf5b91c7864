"""The port-window rule, in one place: the spec check (when a spec is saved) and the planner
(where a replica's window may start) both use it.

A Slurm model's replicas serve on windows of ``span`` ports (``OBLETH_PORT_SPAN``): window ``i``
is ``serving_port + i*span .. serving_port + (i+1)*span - 1`` for ``i`` in
``0 .. target_replicas - 1``. A replica never gets a window outside that range: when every
window in it is taken, its replacement waits. Pure: no Django, no settings.
"""

from __future__ import annotations

__all__ = ["MAX_PORT", "first_free_range", "model_range", "window_bases", "window_range_error"]

MAX_PORT = 65535


def window_bases(serving_port: int, replicas: int, span: int) -> list[int]:
    """The bases of the model's windows, lowest first; windows past 65535 are left out."""
    span = max(span, 1)
    bases = []
    for i in range(max(replicas, 0)):
        base = serving_port + i * span
        if base < 1 or base + span - 1 > MAX_PORT:
            break
        bases.append(base)
    return bases


def window_range_error(serving_port: int, replicas: int, span: int) -> str | None:
    """Why ``serving_port`` with ``replicas`` windows of ``span`` ports does not fit in TCP's
    1..65535, or None when it fits."""
    span = max(span, 1)
    last = serving_port + max(replicas, 1) * span - 1
    if serving_port < 1 or last <= MAX_PORT:
        return None
    highest = MAX_PORT - max(replicas, 1) * span + 1
    fit = (MAX_PORT - serving_port + 1) // span
    lower = f"use a serving_port of at most {highest}" if highest >= 1 else "use fewer replicas"
    fewer = f", or at most {fit} replica(s) from this port" if fit >= 1 else ""
    return (
        f"serving_port {serving_port} with target_replicas {replicas} needs ports up to {last} "
        f"({max(replicas, 1)} windows of OBLETH_PORT_SPAN={span} ports), past 65535: "
        f"{lower}{fewer}."
    )


def model_range(serving_port: int, replicas: int, span: int, spare: int = 1) -> tuple[int, int]:
    """The ports a model may use: its windows, plus ``spare`` windows for successors and
    rollouts that run beside the replicas they replace (first, last)."""
    span = max(span, 1)
    return serving_port, serving_port + (max(replicas, 1) + spare) * span - 1


def first_free_range(
    start: int, replicas: int, span: int, taken: list[tuple[int, int]], spare: int = 1
) -> int | None:
    """The lowest serving_port from ``start`` whose range overlaps none of ``taken`` (other
    models' ranges), or None when none fits below 65536. Two models deployed from one recipe
    would otherwise share windows, and their servers starting at once on a node would race for
    the same first port."""
    port = max(start, 1)
    while True:
        first, last = model_range(port, replicas, span, spare)
        if last > MAX_PORT:
            return None
        clash = [t_last for t_first, t_last in taken if t_first <= last and first <= t_last]
        if not clash:
            return port
        port = max(clash) + 1
