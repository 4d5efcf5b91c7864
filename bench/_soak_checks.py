"""The soak's invariants and figures, as plain bookkeeping over samples (no I/O here).

A sample is what the soak saw at one instant: the live Slurm jobs carrying its prefix (from the
Slurm CLI, independent of obleth), and obleth's replica and endpoint rows. ``Checks.add`` folds
each sample into the counters; ``Checks.report`` gives the figures.

Grace: an orphan job or an endpoint pointing at an ended job is a violation only once it has
lasted longer than ``grace`` seconds (one full pass plus slack) counted from the later of its
first sighting and the end of the last outage (slurmrestd down, Redis down, the worker killed:
during those the provisioner cannot act, by design).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

# squeue states of a job that still holds (or will hold) resources and could serve; COMPLETING
# is a job on its way out (a cancelled one shows it for a moment).
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING"})


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float
    jobs: dict[str, tuple[str, str]]  # job id -> (name, squeue state)
    replicas: list[dict[str, Any]]  # id, model_name, state, job_id, job_name
    endpoints: list[dict[str, Any]]  # replica_id, model_name, enabled, health_status
    healthz_ok: bool = True


@dataclasses.dataclass
class Violation:
    kind: str
    at: float
    detail: str


@dataclasses.dataclass
class Checks:
    grace: float
    outages: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    duplicates: list[Violation] = dataclasses.field(default_factory=list)
    orphans: list[Violation] = dataclasses.field(default_factory=list)
    stale_endpoints: list[Violation] = dataclasses.field(default_factory=list)
    healthz_failures: int = 0
    samples: int = 0
    # model -> [(t, routable endpoints)] for telling a 503 with a serving replica from one without
    routable: dict[str, list[tuple[float, int]]] = dataclasses.field(default_factory=dict)
    _orphan_since: dict[str, float] = dataclasses.field(default_factory=dict)
    _stale_since: dict[str, float] = dataclasses.field(default_factory=dict)
    _reported: set[tuple[str, str]] = dataclasses.field(default_factory=set)

    labels: list[str] = dataclasses.field(default_factory=list)  # one per outage

    def outage(self, start: float, end: float, label: str = "outage") -> None:
        self.outages.append((start, end))
        self.labels.append(label)

    def overlapping(self, start: float, end: float) -> list[str]:
        """The outages (by label) that overlap the span from start to end."""
        return [
            label
            for (begin, finish), label in zip(self.outages, self.labels, strict=True)
            if begin <= end and finish >= start
        ]

    def _clock_start(self, first_seen: float, now: float) -> float:
        start = first_seen
        for begin, end in self.outages:
            if begin <= now and end >= start:
                start = max(start, end)
        return start

    def _overdue(self, since: dict[str, float], key: str, now: float) -> bool:
        first = since.setdefault(key, now)
        return now - self._clock_start(first, now) > self.grace

    def add(self, s: Sample) -> None:
        self.samples += 1
        if not s.healthz_ok:
            self.healthz_failures += 1
        live = {jid: name for jid, (name, state) in s.jobs.items() if state in LIVE_STATES}
        names = Counter(live.values())
        for name, count in names.items():
            if count > 1 and ("dup", name) not in self._reported:
                self._reported.add(("dup", name))
                jobs = sorted(j for j, n in live.items() if n == name)
                self.duplicates.append(Violation("duplicate", s.at, f"{name}: jobs {jobs}"))

        known_names = {r["job_name"] for r in s.replicas if r["job_name"]}
        known_ids = {r["job_id"] for r in s.replicas if r["job_id"]}
        orphans = {j for j, n in live.items() if j not in known_ids and n not in known_names}
        for job_id in orphans:
            if self._overdue(self._orphan_since, job_id, s.at) and (
                ("orphan", job_id) not in self._reported
            ):
                self._reported.add(("orphan", job_id))
                self.orphans.append(Violation("orphan", s.at, f"job {job_id} ({live[job_id]})"))
        for job_id in set(self._orphan_since) - orphans:
            del self._orphan_since[job_id]

        by_id = {str(r["id"]): r for r in s.replicas}
        stale: set[str] = set()
        per_model: Counter[str] = Counter()
        for ep in s.endpoints:
            if not ep["enabled"] or ep["replica_id"] is None:
                continue
            replica = by_id.get(str(ep["replica_id"]))
            job_live = replica is not None and replica["job_id"] in live
            if not job_live:
                stale.add(str(ep["replica_id"]))
            elif ep["health_status"] != "unhealthy":
                per_model[ep["model_name"]] += 1
        for key in stale:
            if self._overdue(self._stale_since, key, s.at) and ("stale", key) not in self._reported:
                self._reported.add(("stale", key))
                self.stale_endpoints.append(
                    Violation("stale endpoint", s.at, f"endpoint of replica {key}")
                )
        for key in set(self._stale_since) - stale:
            del self._stale_since[key]
        models = {r["model_name"] for r in s.replicas} | set(per_model)
        for model in models:
            self.routable.setdefault(model, []).append((s.at, per_model[model]))

    def serving_at(self, model: str, at: float) -> bool:
        """True when the samples on both sides of ``at`` saw a routable endpoint for ``model``."""
        series = self.routable.get(model, [])
        before = [n for t, n in series if t <= at]
        after = [n for t, n in series if t >= at]
        return bool(before and after and before[-1] > 0 and after[0] > 0)


@dataclasses.dataclass
class Cancel:
    at: float
    job_id: str
    replica_id: str
    model: str


@dataclasses.dataclass
class Replacement:
    cancel: Cancel
    submitted: float | None = None
    started: float | None = None  # Slurm started the job (the launch row's started_at)
    healthy: float | None = None
    routed: float | None = None


def match_replacements(
    cancels: Sequence[Cancel],
    launches: Iterable[dict[str, Any]],
    routed_at: dict[str, float],
) -> list[Replacement]:
    """Each cancel gets the earliest later launch of its model not taken by an earlier cancel.

    ``launches``: rows with id, model_name, submitted_at, started_at (optional), healthy_at
    (epoch seconds or None).
    ``routed_at``: replica id -> when its endpoint was created (epoch seconds)."""
    pool: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(launches, key=lambda r: r["submitted_at"]):
        pool.setdefault(row["model_name"], []).append(row)
    out = []
    for cancel in sorted(cancels, key=lambda c: c.at):
        candidates = pool.get(cancel.model, [])
        # 1 s of slack: the cancel's clock is read after scancel returned
        chosen = next((r for r in candidates if r["submitted_at"] >= cancel.at - 1.0), None)
        rep = Replacement(cancel)
        if chosen is not None:
            candidates.remove(chosen)
            rep.submitted = chosen["submitted_at"] - cancel.at
            if chosen.get("started_at") is not None:
                rep.started = chosen["started_at"] - cancel.at
            if chosen["healthy_at"] is not None:
                rep.healthy = chosen["healthy_at"] - cancel.at
            if str(chosen["id"]) in routed_at:
                rep.routed = routed_at[str(chosen["id"])] - cancel.at
        out.append(rep)
    return out


def slowest(
    reps: Sequence[Replacement],
    checks: Checks,
    n: int = 3,
    also: Callable[[Replacement], list[str]] | None = None,
) -> list[str]:
    """The n slowest cancel -> routed replacements, each with its phases and what overlapped
    (the outages, plus what ``also`` names for it, e.g. a replacement storm's backoff)."""
    done = sorted((r for r in reps if r.routed is not None), key=lambda r: -(r.routed or 0.0))
    lines = []
    for r in done[:n]:
        phases = ", ".join(
            f"{name} +{value:.1f}s"
            for name, value in (
                ("submitted", r.submitted),
                ("started", r.started),
                ("healthy", r.healthy),
                ("routed", r.routed),
            )
            if value is not None
        )
        during = checks.overlapping(r.cancel.at, r.cancel.at + (r.routed or 0.0))
        if also is not None:
            during += also(r)
        lines.append(
            f"job {r.cancel.job_id} of {r.cancel.model} cancelled at "
            f"{time.strftime('%H:%M:%S', time.localtime(r.cancel.at))}: {phases}"
            + (f"; during: {', '.join(during)}" if during else "; no outage overlapped")
        )
    return lines


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "median": None, "p90": None, "max": None}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, max(0, int(round(0.9 * len(ordered))) - 1))]
    return {
        "n": len(ordered),
        "median": round(statistics.median(ordered), 3),
        "p90": round(p90, 3),
        "max": round(ordered[-1], 3),
    }
