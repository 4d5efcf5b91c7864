"""Table tests of walltime handover and make-before-break rollouts in the pure planner.

Same builders as tests/provisioner/test_plan.py; every case compares the whole action list.
Nothing is faked: ``plan`` is a pure function of the snapshot.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable

import pytest

from provisioner.domain import (
    Action,
    Cancel,
    CancelReason,
    DeleteReplica,
    JobInfo,
    Knobs,
    MarkLost,
    ModelSpec,
    ReplicaView,
    Retire,
    SetTransition,
    Snapshot,
    Submit,
    UpdateMessage,
)
from provisioner.plan import CANCEL_MESSAGES, plan
from tests.provisioner.test_plan import (
    CHURN_SUFFIX,
    GONE,
    KNOBS,
    NOW,
    PEND,
    D,
    H,
    L,
    M,
    P,
    S,
    ep,
    job,
    promote,
    rep,
    rid,
    snap,
    spec,
    sub,
)

EPOCH = int(NOW.timestamp())  # 12:00 UTC
HO = 300  # handover_secs of the model in these tables
OLD, NEW = "a" * 64, "b" * 64


def hspec(target: int = 1, **kw: object) -> ModelSpec:
    kw.setdefault("handover_secs", HO)
    kw.setdefault("spec_fingerprint", NEW)
    return spec(target=target, **kw)


def r(n: int, state=H, job_id: str = "", **kw: object) -> ReplicaView:  # type: ignore[no-untyped-def]
    """Replica n (healthy rows serve through endpoint n); extra fields via ``kw``."""
    extra = {
        k: kw.pop(k) for k in ("successor_of", "spec_fingerprint", "drain_deadline") if k in kw
    }
    extra.setdefault("spec_fingerprint", NEW)
    if state is H and "endpoint" not in kw:
        kw["endpoint"] = ep(n).id
    return dataclasses.replace(rep(n, state, job_id, **kw), **extra)  # type: ignore[arg-type]


def j(job_id: str, n: int, phase=None, *, ends_in: float | None = 3600, **kw: object) -> JobInfo:  # type: ignore[no-untyped-def]
    base = job(job_id, n, phase, **kw) if phase is not None else job(job_id, n, **kw)  # type: ignore[arg-type]
    end = None if ends_in is None else EPOCH + int(ends_in)
    return dataclasses.replace(base, end_time=end, time_limit_minutes=60)


def hsnap(
    specs: Iterable[ModelSpec] | None = None,
    *,
    replicas: Iterable[ReplicaView] = (),
    jobs: Iterable[JobInfo] = (),
    endpoints: Iterable[int] = (),
    signals: Iterable[int] = (),
    knobs: Knobs = KNOBS,
) -> Snapshot:
    s = snap(
        specs=list(specs) if specs is not None else [hspec()],
        replicas=replicas,
        jobs=jobs,
        endpoints=[ep(n) for n in endpoints],
        knobs=knobs,
    )
    return dataclasses.replace(s, drain_signals=frozenset(rid(n) for n in signals))


def successor(i: int, port: int, of: int) -> Submit:
    return dataclasses.replace(sub(i, port), successor_of=rid(of))


def msg(n: int, text: str) -> UpdateMessage:
    return UpdateMessage(M, rid(n), message=text)


def retire(n: int, text: str) -> Retire:
    return Retire(M, rid(n), NOW + dt.timedelta(seconds=KNOBS.drain_secs), text, ep(n).id)


def handed(to: int, why: str = "its job ends at 12:03 UTC") -> str:
    return (
        f"handed over to replica {rid(to).hex[:8]} ({why}); draining in-flight requests "
        f"for up to {KNOBS.drain_secs} s, then its job is cancelled"
    )


ROLLED = (
    "rolled out: replaced by a replica of the edited spec; draining in-flight requests for "
    f"up to {KNOBS.drain_secs} s, then its job is cancelled"
)
STARTING_NOTE = (
    "successor still starting (not answering its health probe yet); the current replica ends "
    "at {end} UTC"
)
PENDING_NOTE = "successor still pending (Resources); the current replica ends at 12:03 UTC"

HANDOVER_CASES: list[tuple[str, Snapshot, list[Action]]] = [
    (
        "far from its end: nothing",
        hsnap(replicas=[r(1, H, "101")], jobs=[j("101", 1)], endpoints=[1]),
        [],
    ),
    (
        "approaching its end: a successor is submitted beside it (not counted)",
        hsnap(replicas=[r(1, H, "101")], jobs=[j("101", 1, ends_in=200)], endpoints=[1]),
        [
            msg(1, "handing over: successor submitted; the job ends at 12:03 UTC"),
            successor(0, 8008, of=1),
        ],
    ),
    (
        "successor pending (Resources): reported on the replica and the spec, old kept",
        hsnap(
            replicas=[r(1, H, "101"), r(2, P, "102", successor_of=rid(1), age=60)],
            jobs=[j("101", 1, ends_in=200), j("102", 2, PEND, reason="Resources")],
            endpoints=[1],
        ),
        [
            msg(1, PENDING_NOTE),
            msg(2, "PENDING \u2014 Resources"),
            SetTransition(M, handover=PENDING_NOTE, rollout=""),
        ],
    ),
    (
        "successor starting, most of the window left: said on the replica only",
        hsnap(
            replicas=[
                r(1, H, "101"),
                r(2, S, "102", successor_of=rid(1), age=60, message="RUNNING", nodes=("gpu1",)),
            ],
            jobs=[j("101", 1, ends_in=200), j("102", 2)],
            endpoints=[1],
        ),
        [msg(1, STARTING_NOTE.format(end="12:03"))],
    ),
    (
        "successor starting with under half the window left: the spec's banner says so",
        hsnap(
            replicas=[
                r(1, H, "101"),
                r(2, S, "102", successor_of=rid(1), age=60, message="RUNNING", nodes=("gpu1",)),
            ],
            jobs=[j("101", 1, ends_in=100), j("102", 2)],
            endpoints=[1],
        ),
        [
            msg(1, STARTING_NOTE.format(end="12:01")),
            SetTransition(M, handover=STARTING_NOTE.format(end="12:01"), rollout=""),
        ],
    ),
    (
        "report already shown: nothing rewritten",
        hsnap(
            [hspec(handover_message=PENDING_NOTE)],
            replicas=[
                r(1, H, "101", message=PENDING_NOTE),
                r(2, P, "102", successor_of=rid(1), age=60, message="PENDING \u2014 Resources"),
            ],
            jobs=[j("101", 1, ends_in=200), j("102", 2, PEND, reason="Resources")],
            endpoints=[1],
        ),
        [],
    ),
    (
        "successor healthy: the old one leaves routing and drains (job not cancelled yet)",
        hsnap(
            replicas=[r(1, H, "101"), r(2, H, "102", successor_of=rid(1), age=60, port=8008)],
            jobs=[j("101", 1, ends_in=200), j("102", 2)],
            endpoints=[1, 2],
        ),
        [retire(1, handed(2))],
    ),
    (
        "successor healthy after the handover window was changed: still handed over",
        hsnap(
            [hspec(handover_secs=0)],
            replicas=[r(1, H, "101"), r(2, H, "102", successor_of=rid(1), age=60, port=8008)],
            jobs=[j("101", 1, ends_in=200), j("102", 2)],
            endpoints=[1, 2],
        ),
        [retire(1, handed(2))],
    ),
    (
        "drain bound not passed: wait",
        hsnap(
            replicas=[
                r(1, D, "101", drain_deadline=NOW + dt.timedelta(seconds=10)),
                r(2, H, "102", successor_of=rid(1), age=60, port=8008),
            ],
            jobs=[j("101", 1, ends_in=200), j("102", 2)],
            endpoints=[2],
        ),
        [],
    ),
    (
        "drain bound passed: the old job is cancelled",
        hsnap(
            replicas=[
                r(1, D, "101", drain_deadline=NOW - dt.timedelta(seconds=1)),
                r(2, H, "102", successor_of=rid(1), age=60, port=8008),
            ],
            jobs=[j("101", 1, ends_in=170), j("102", 2)],
            endpoints=[2],
        ),
        [
            Cancel(
                M,
                rid(1),
                "101",
                CancelReason.HANDED_OVER,
                CANCEL_MESSAGES[CancelReason.HANDED_OVER],
            )
        ],
    ),
    (
        "drained job ended by itself before the bound: row deleted",
        hsnap(
            replicas=[
                r(1, D, "101", drain_deadline=NOW + dt.timedelta(seconds=10)),
                r(2, H, "102", successor_of=rid(1), age=60, port=8008),
            ],
            jobs=[j("101", 1, GONE, state="CANCELLED"), j("102", 2)],
            endpoints=[2],
        ),
        [DeleteReplica(M, rid(1), why="drained: job ended")],
    ),
    (
        "successor still pending past the end: old reaches its limit (churn), successor counts",
        hsnap(
            [hspec(handover_message=PENDING_NOTE)],
            replicas=[
                r(1, H, "101"),
                r(2, P, "102", successor_of=rid(1), age=60, message="PENDING \u2014 Resources"),
            ],
            jobs=[
                j("101", 1, GONE, state="TIMEOUT", reason="TimeLimit", ends_in=-5),
                j("102", 2, PEND, reason="Resources"),
            ],
            endpoints=[1],
        ),
        [
            MarkLost(
                M,
                rid(1),
                "job ended: TIMEOUT (TimeLimit)" + CHURN_SUFFIX,
                endpoint_id=ep(1).id,
                end_state="TIMEOUT",
                end_reason="TimeLimit",
                nodes=("gpu1",),
                failed_launch=False,
                served=True,
            ),
            SetTransition(M, handover="", rollout=""),
        ],
    ),
    (
        "UNLIMITED time limit: never handed over",
        hsnap(
            replicas=[r(1, H, "101")],
            jobs=[dataclasses.replace(j("101", 1, ends_in=100), time_unlimited=True)],
            endpoints=[1],
        ),
        [],
    ),
    (
        "no end time known: nothing",
        hsnap(replicas=[r(1, H, "101")], jobs=[j("101", 1, ends_in=None)], endpoints=[1]),
        [],
    ),
    (
        "handover_secs 0: off",
        hsnap(
            [hspec(handover_secs=0)],
            replicas=[r(1, H, "101")],
            jobs=[j("101", 1, ends_in=100)],
            endpoints=[1],
        ),
        [],
    ),
    (
        "Slurm's warning signal: handed over at once although far from the end",
        hsnap(replicas=[r(1, H, "101")], jobs=[j("101", 1)], endpoints=[1], signals=[1]),
        [
            msg(1, "handing over: successor submitted; the job ends at 13:00 UTC"),
            successor(0, 8008, of=1),
        ],
    ),
    (
        "signalled replica handed over once its successor serves",
        hsnap(
            replicas=[r(1, H, "101"), r(2, H, "102", successor_of=rid(1), age=60, port=8008)],
            jobs=[j("101", 1), j("102", 2)],
            endpoints=[1, 2],
            signals=[1],
        ),
        [retire(1, handed(2, "Slurm's warning signal"))],
    ),
    (
        "submits held (Slurm refused one moments ago): reported, old kept",
        hsnap(
            [hspec(hold_submits=True)],
            replicas=[r(1, H, "101")],
            jobs=[j("101", 1, ends_in=200)],
            endpoints=[1],
        ),
        [
            msg(
                1,
                "no successor submitted (Slurm refused a submit moments ago); the current "
                "replica ends at 12:03 UTC",
            ),
            SetTransition(
                M,
                handover="no successor submitted (Slurm refused a submit moments ago); the "
                "current replica ends at 12:03 UTC",
                rollout="",
            ),
        ],
    ),
    (
        "a lost successor is replaced by a new one",
        hsnap(
            replicas=[
                r(1, H, "101"),
                r(2, L, "102", successor_of=rid(1), age=60, message="job ended: FAILED"),
            ],
            jobs=[j("101", 1, ends_in=200)],
            endpoints=[1],
        ),
        [
            msg(1, "handing over: successor submitted; the job ends at 12:03 UTC"),
            successor(0, 8008, of=1),
        ],
    ),
    (
        "two serving replicas, one near its end: only that one gets a successor",
        hsnap(
            [hspec(target=2)],
            replicas=[r(1, H, "101"), r(2, H, "102", port=8008)],
            jobs=[j("101", 1), j("102", 2, ends_in=100)],
            endpoints=[1, 2],
        ),
        [
            msg(2, "handing over: successor submitted; the job ends at 12:01 UTC"),
            successor(0, 8016, of=2),
        ],
    ),
]


ROLLOUT_CASES: list[tuple[str, Snapshot, list[Action]]] = [
    (
        "spec edited, 2 serving: one replica of the new spec is started first",
        hsnap(
            [hspec(target=2)],
            replicas=[
                r(1, H, "101", spec_fingerprint=OLD),
                r(2, H, "102", port=8008, spec_fingerprint=OLD),
            ],
            jobs=[j("101", 1), j("102", 2)],
            endpoints=[1, 2],
        ),
        [
            SetTransition(
                M,
                handover="",
                rollout="rolling out the edited spec: 0 of 2 replica(s) on it serving, "
                "1 starting; 2 of the previous spec still serving",
            ),
            sub(0, 8016),
        ],
    ),
    (
        "new one starting: nothing retired yet, no more submitted",
        hsnap(
            [
                hspec(
                    target=2,
                    rollout_message="rolling out the edited spec: 0 of 2 replica(s) on it "
                    "serving, 1 starting; 2 of the previous spec still serving",
                )
            ],
            replicas=[
                r(1, H, "101", spec_fingerprint=OLD),
                r(2, H, "102", port=8008, spec_fingerprint=OLD),
                r(3, P, "103", port=8016, age=60, message="PENDING"),
            ],
            jobs=[j("101", 1), j("102", 2), j("103", 3, PEND)],
            endpoints=[1, 2],
        ),
        [],
    ),
    (
        "new one healthy: the oldest old one drains and the next new one starts",
        hsnap(
            [hspec(target=2)],
            replicas=[
                r(1, H, "101", spec_fingerprint=OLD),
                r(2, H, "102", port=8008, spec_fingerprint=OLD),
                r(3, H, "103", port=8016, age=60),
            ],
            jobs=[j("101", 1), j("102", 2), j("103", 3)],
            endpoints=[1, 2, 3],
        ),
        [
            retire(1, ROLLED),
            SetTransition(
                M,
                handover="",
                rollout="rolling out the edited spec: 1 of 2 replica(s) on it serving, "
                "1 starting; 1 of the previous spec still serving",
            ),
            sub(0, 8000),  # the drained one's window is shared (port span 8)
        ],
    ),
    (
        "last old one drains once a second new one serves; rollout done next pass",
        hsnap(
            [hspec(target=2)],
            replicas=[
                r(2, H, "102", port=8008, spec_fingerprint=OLD),
                r(3, H, "103", port=8016, age=60),
                r(4, H, "104", port=8000, age=30),
            ],
            jobs=[j("102", 2), j("103", 3), j("104", 4)],
            endpoints=[2, 3, 4],
        ),
        [
            retire(2, ROLLED),
            SetTransition(
                M,
                handover="",
                rollout="rolling out the edited spec: 2 of 2 replica(s) on it serving, "
                "0 starting; 0 of the previous spec still serving",
            ),
        ],
    ),
    (
        "every replica on the new spec: the rollout sentence is cleared",
        hsnap(
            [hspec(target=2, rollout_message="rolling out the edited spec: ...")],
            replicas=[r(3, H, "103", port=8016, age=60), r(4, H, "104", port=8000, age=30)],
            jobs=[j("103", 3), j("104", 4)],
            endpoints=[3, 4],
        ),
        [SetTransition(M, handover="", rollout="")],
    ),
    (
        "only one of two serves: no old one retired until two new ones serve",
        hsnap(
            [hspec(target=2)],
            replicas=[
                r(1, H, "101", spec_fingerprint=OLD),
                r(3, H, "103", port=8016, age=60),
                r(4, P, "104", port=8008, age=30, message="PENDING"),
            ],
            jobs=[j("101", 1), j("103", 3), j("104", 4, PEND)],
            endpoints=[1, 3],
        ),
        [
            SetTransition(
                M,
                handover="",
                rollout="rolling out the edited spec: 1 of 2 replica(s) on it serving, "
                "1 starting; 1 of the previous spec still serving",
            ),
        ],
    ),
    (
        "an old replica that does not serve yet is cancelled at once",
        hsnap(
            [hspec(target=1)],
            replicas=[r(1, P, "101", spec_fingerprint=OLD, message="PENDING")],
            jobs=[j("101", 1, PEND)],
        ),
        [
            Cancel(M, rid(1), "101", CancelReason.ROLLOUT, CANCEL_MESSAGES[CancelReason.ROLLOUT]),
            SetTransition(
                M,
                handover="",
                rollout="rolling out the edited spec: 0 of 1 replica(s) on it serving, "
                "1 starting; 0 of the previous spec still serving",
            ),
            sub(0, 8000),
        ],
    ),
    (
        "a replica of the new spec failed to start: rollout stopped, old ones keep serving",
        hsnap(
            [hspec(target=2)],
            replicas=[
                r(1, H, "101", spec_fingerprint=OLD),
                r(2, H, "102", port=8008, spec_fingerprint=OLD),
                r(3, L, "103", port=8016, age=60, message="job ended: FAILED (NonZeroExitCode)"),
            ],
            jobs=[j("101", 1), j("102", 2)],
            endpoints=[1, 2],
        ),
        [
            SetTransition(
                M,
                handover="",
                rollout="rollout stopped: a replica of the edited spec failed to start (job "
                "ended: FAILED (NonZeroExitCode)); 2 replica(s) of the previous spec keep "
                "serving. Fix the spec to roll out again.",
            ),
        ],
    ),
    (
        "a new replica failing in this pass stops the rollout at once",
        hsnap(
            [hspec(target=1)],
            replicas=[r(1, H, "101", spec_fingerprint=OLD), r(2, P, "102", port=8008, age=60)],
            jobs=[j("101", 1), j("102", 2, GONE, state="FAILED")],
            endpoints=[1],
        ),
        [
            MarkLost(
                M,
                rid(2),
                "job ended: FAILED",
                end_state="FAILED",
                nodes=("gpu1",),
            ),
            SetTransition(
                M,
                handover="",
                rollout="rollout stopped: a replica of the edited spec failed to start (job "
                "ended: FAILED); 1 replica(s) of the previous spec keep serving. Fix the spec "
                "to roll out again.",
            ),
        ],
    ),
    (
        "rows from before fingerprints (empty hash) are taken as current: no rollout",
        hsnap(replicas=[r(1, H, "101", spec_fingerprint="")], jobs=[j("101", 1)], endpoints=[1]),
        [],
    ),
    (
        "submits held: the rollout waits and says why",
        hsnap(
            [hspec(target=1, hold_submits=True)],
            replicas=[r(1, H, "101", spec_fingerprint=OLD)],
            jobs=[j("101", 1)],
            endpoints=[1],
        ),
        [
            SetTransition(
                M,
                handover="",
                rollout="rolling out the edited spec: 0 of 1 replica(s) on it serving, "
                "0 starting; 1 of the previous spec still serving (new replicas held: Slurm "
                "refused a submit moments ago)",
            ),
        ],
    ),
]


EDGE_CASES: list[tuple[str, Snapshot, list[Action]]] = [
    (
        "promotion carries Slurm's job start (for the measured start-to-serving time)",
        dataclasses.replace(
            hsnap(
                replicas=[r(1, P, "101", message="RUNNING")],
                jobs=[dataclasses.replace(j("101", 1), start_time=EPOCH - 40)],
            ),
            probes={rid(1): 8000},
        ),
        [dataclasses.replace(promote(1), job_started_at=EPOCH - 40)],
    ),
    (
        "scaled to 0 near its end: cancelled, no successor",
        hsnap(
            [hspec(target=0)],
            replicas=[r(1, H, "101")],
            jobs=[j("101", 1, ends_in=200)],
            endpoints=[1],
        ),
        [
            Cancel(
                M,
                rid(1),
                "101",
                CancelReason.SCALE_DOWN,
                CANCEL_MESSAGES[CancelReason.SCALE_DOWN],
                ep(1).id,
            )
        ],
    ),
    (
        "old-spec replica near its end during a rollout: the rollout replaces it, no successor",
        hsnap(
            [hspec(target=1)],
            replicas=[r(1, H, "101", spec_fingerprint=OLD)],
            jobs=[j("101", 1, ends_in=200)],
            endpoints=[1],
        ),
        [
            SetTransition(
                M,
                handover="",
                rollout="rolling out the edited spec: 0 of 1 replica(s) on it serving, "
                "1 starting; 1 of the previous spec still serving",
            ),
            sub(0, 8008),
        ],
    ),
]


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [pytest.param(s, e, id=name) for name, s, e in HANDOVER_CASES + ROLLOUT_CASES + EDGE_CASES],
)
def test_plan(snapshot: Snapshot, expected: list[Action]) -> None:
    assert plan(snapshot) == expected
