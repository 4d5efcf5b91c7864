"""Make-before-break over many passes: the pure planner driven against a small model of the world.

The world (jobs start one pass after submit, servers answer one pass after that, cancelled jobs
end at once) is simulated here because the plan is pure; the real cluster runs handover in
tests/e2e/test_handover_real_slurm.py. After every pass the serving count (healthy replicas with
a registered endpoint) is sampled and must never fall below min(target, serving before).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest

from provisioner.domain import (
    Cancel,
    DeleteEndpoint,
    DeleteReplica,
    EndpointView,
    JobInfo,
    JobPhase,
    Knobs,
    MarkLost,
    ModelSpec,
    Promote,
    ReplicaState,
    ReplicaView,
    Retire,
    SetTransition,
    Snapshot,
    Submit,
    UpdateMessage,
)
from provisioner.plan import plan

M = uuid.UUID(int=0xA1)
T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
OLD, NEW = "a" * 64, "b" * 64


@dataclasses.dataclass
class World:
    spec: ModelSpec
    replicas: dict[uuid.UUID, ReplicaView]
    jobs: dict[str, JobInfo]
    endpoints: dict[uuid.UUID, EndpointView]
    ages: dict[uuid.UUID, int]  # passes since the job was submitted
    now: dt.datetime = T0
    next_job: int = 100
    fail_new: bool = False

    def serving(self) -> int:
        return sum(
            1
            for r in self.replicas.values()
            if r.state is ReplicaState.HEALTHY and r.endpoint_id in self.endpoints
        )

    def snapshot(self) -> Snapshot:
        probes: dict[uuid.UUID, int | None] = {}
        for r in self.replicas.values():
            job = self.jobs.get(r.job_id)
            if job is not None and job.phase is JobPhase.RUNNING:
                ready = self.ages[r.id] >= 2 and not (self.fail_new and r.spec_fingerprint == NEW)
                probes[r.id] = (r.port_base or 0) if ready else None
        return Snapshot(
            now=self.now,
            knobs=Knobs(),
            specs=(self.spec,),
            replicas=tuple(self.replicas.values()),
            jobs=dict(self.jobs),
            jobs_listed_at=self.now,
            probes=probes,
            addresses={"gpu1": "10.0.0.1"},
            endpoints=tuple(self.endpoints.values()),
        )

    def tick(self) -> None:
        self.now += dt.timedelta(seconds=15)
        for r in self.replicas.values():
            job = self.jobs.get(r.job_id)
            if job is None:
                continue
            self.ages[r.id] += 1
            if job.phase is JobPhase.PENDING and self.ages[r.id] >= 1:
                self.jobs[r.job_id] = dataclasses.replace(
                    job, phase=JobPhase.RUNNING, state="RUNNING", nodes=("gpu1",)
                )
            elif self.fail_new and r.spec_fingerprint == NEW and self.ages[r.id] >= 3:
                self.jobs[r.job_id] = dataclasses.replace(
                    job, phase=JobPhase.GONE, state="FAILED", reason="NonZeroExitCode"
                )

    def apply(self, actions: list[object]) -> None:
        for a in actions:
            match a:
                case Submit():
                    job_id = str(self.next_job)
                    self.next_job += 1
                    self.jobs[job_id] = JobInfo(job_id, a.job_name, "PENDING", JobPhase.PENDING)
                    self.replicas[a.replica_id] = ReplicaView(
                        id=a.replica_id,
                        model_id=M,
                        state=ReplicaState.PENDING,
                        job_name=a.job_name,
                        created_at=self.now,
                        job_id=job_id,
                        submitted_at=self.now - dt.timedelta(seconds=1),
                        port_base=a.port_base,
                        spec_fingerprint=self.spec.spec_fingerprint,
                        successor_of=a.successor_of,
                    )
                    self.ages[a.replica_id] = 0
                case Promote():
                    eid = a.endpoint_id or uuid.uuid4()
                    self.endpoints[eid] = EndpointView(
                        eid, M, a.endpoint_name, a.api_base, a.replica_id
                    )
                    self.replicas[a.replica_id] = dataclasses.replace(
                        self.replicas[a.replica_id],
                        state=ReplicaState.HEALTHY,
                        endpoint_id=eid,
                        nodes=(a.node,),
                        served=True,
                        last_message="promoted",
                    )
                case Retire():
                    self.endpoints.pop(a.endpoint_id, None)  # type: ignore[arg-type]
                    self.replicas[a.replica_id] = dataclasses.replace(
                        self.replicas[a.replica_id],
                        state=ReplicaState.DRAINING,
                        endpoint_id=None,
                        drain_deadline=a.drain_deadline,
                    )
                case Cancel():
                    if a.endpoint_id is not None:
                        self.endpoints.pop(a.endpoint_id, None)
                    job = self.jobs[a.job_id]
                    self.jobs[a.job_id] = dataclasses.replace(
                        job, phase=JobPhase.GONE, state="CANCELLED"
                    )
                    self.replicas[a.replica_id] = dataclasses.replace(
                        self.replicas[a.replica_id],
                        state=ReplicaState.DRAINING,
                        endpoint_id=None,
                        drain_deadline=None,
                    )
                case MarkLost():
                    if a.endpoint_id is not None:
                        self.endpoints.pop(a.endpoint_id, None)
                    self.replicas[a.replica_id] = dataclasses.replace(
                        self.replicas[a.replica_id],
                        state=ReplicaState.LOST,
                        endpoint_id=None,
                        last_message=a.message,
                        end_state=a.end_state,
                        served=a.served,
                    )
                case DeleteReplica():
                    self.replicas.pop(a.replica_id, None)
                case DeleteEndpoint():
                    self.endpoints.pop(a.endpoint_id, None)
                case UpdateMessage():
                    r = self.replicas[a.replica_id]
                    self.replicas[a.replica_id] = dataclasses.replace(
                        r,
                        last_message=a.message if a.message is not None else r.last_message,
                        state=a.state or r.state,
                    )
                case SetTransition():
                    self.spec = dataclasses.replace(
                        self.spec, handover_message=a.handover, rollout_message=a.rollout
                    )


def _world(target: int) -> World:
    spec = ModelSpec(M, "llama", True, target, serving_port=8000, spec_fingerprint=OLD)
    w = World(spec=spec, replicas={}, jobs={}, endpoints={}, ages={})
    for _ in range(12):  # bring the old spec up
        w.apply(plan(w.snapshot()))  # type: ignore[arg-type]
        w.tick()
    assert w.serving() == target
    return w


@pytest.mark.parametrize("target", [1, 2, 3])
def test_rollout_never_serves_fewer_than_before(target: int) -> None:
    w = _world(target)
    w.spec = dataclasses.replace(w.spec, spec_fingerprint=NEW)  # the operator edits the image
    samples = []
    for _ in range(60):
        w.apply(plan(w.snapshot()))  # type: ignore[arg-type]
        samples.append(w.serving())
        w.tick()
    assert min(samples) >= target, samples
    live = [r for r in w.replicas.values() if r.state is ReplicaState.HEALTHY]
    assert len(live) == target and all(r.spec_fingerprint == NEW for r in live)
    assert w.spec.rollout_message == ""
    assert not [r for r in w.replicas.values() if r.state is ReplicaState.DRAINING]


def test_failing_new_spec_stops_the_rollout_and_keeps_the_old_replicas() -> None:
    w = _world(2)
    w.fail_new = True
    w.spec = dataclasses.replace(w.spec, spec_fingerprint=NEW)
    samples = []
    for _ in range(30):
        w.apply(plan(w.snapshot()))  # type: ignore[arg-type]
        samples.append(w.serving())
        w.tick()
    assert min(samples) >= 2, samples
    serving = [r for r in w.replicas.values() if r.state is ReplicaState.HEALTHY]
    assert len(serving) == 2 and all(r.spec_fingerprint == OLD for r in serving)
    assert w.spec.rollout_message.startswith("rollout stopped: a replica of the edited spec"), (
        w.spec.rollout_message
    )
    assert "FAILED (NonZeroExitCode)" in w.spec.rollout_message
