"""A steady pass costs the same number of queries at 3 models as at 12 (no N+1).

Every replica serves (promoted, endpoint registered), nothing changes between passes: a full
pass (probes every serving replica) and a fast pass (probes none) must run the same statements
whatever the number of models, and a pass that only re-stamps every replica's probe time writes
them in one statement; changed observations of many replicas are written in one statement too.
Counted with Django's ``CaptureQueriesContext`` (a count, not a timing).

What is fake: slurmrestd (the in-process FakeSlurmrestd of test_execute's ``cluster`` fixture,
every job RUNNING on "localhost" at once), because there is no cluster to scale on here. The
engines are the project's real test engine request handlers (provisioner/testengine/server.py),
one per replica with that replica's own key, served from one event loop in a thread so that a
dozen of them do not cost a dozen processes.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import functools
import re
import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from obleth.core.choices import ReplicaState
from obleth.core.models import Launch, Model, Replica
from provisioner import observed
from provisioner.reconcile import run_pass
from provisioner.slurm.types import JobInfo, JobPhase
from provisioner.testengine.server import MAX_HEAD_BYTES, Engine, EngineConfig
from tests.plugins.factories import make_slurm_model
from tests.provisioner.test_execute import Cluster, cluster  # noqa: F401  (the fixture)

SMALL, LARGE = 3, 12
WRITES = ("UPDATE", "INSERT", "DELETE")


class Engines:
    """Test engines on pre-bound sockets, one per replica, in one event loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servers: list[asyncio.Server] = []
        self.sockets: dict[int, socket.socket] = {}

    def reserve(self) -> int:
        """A free port, bound now (so nothing takes it) and served once ``serve`` is called;
        at least 4 away from the others (one model's windows never touch another's)."""
        while True:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if all(abs(port - other) > 4 for other in self.sockets):
                self.sockets[port] = sock
                return port
            sock.close()

    def serve(self, port: int, api_key: str) -> None:
        sock = self.sockets.pop(port)

        async def start() -> asyncio.Server:
            config = EngineConfig(
                host="127.0.0.1", port=port, port_count=1, model="m", quiet=True, api_key=api_key
            )
            engine = Engine(config, asyncio.Event())
            return await asyncio.start_server(
                functools.partial(engine.handle_connection, port), sock=sock, limit=MAX_HEAD_BYTES
            )

        self.servers.append(asyncio.run_coroutine_threadsafe(start(), self.loop).result(10))

    def close(self) -> None:
        async def stop() -> None:
            for server in self.servers:
                server.close()
                await server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        for sock in self.sockets.values():
            sock.close()


@pytest.fixture
def engines() -> Iterator[Engines]:
    running = Engines()
    try:
        yield running
    finally:
        running.close()


def add_models(count: int, engines: Engines) -> list[tuple[Model, int]]:
    return [
        (make_slurm_model(spec={"target_replicas": 1, "serving_port": port}), port)
        for port in (engines.reserve() for _ in range(count))
    ]


def converge(added: list[tuple[Model, int]], engines: Engines) -> None:
    """Submit the new models' jobs, start their engines with their keys, pass until nothing is
    planned and every replica serves."""
    run_pass()  # submits; the fake runs every job at once
    for model, port in added:
        engines.serve(port, Replica.objects.get(model_id=model.pk).api_key)
    for _ in range(6):
        if not run_pass().planned:
            break
    rows = list(Replica.objects.values_list("state", "endpoint_id"))
    assert rows and all(s == ReplicaState.HEALTHY and e for s, e in rows), rows
    assert not run_pass().planned  # steady: nothing left to do


def statement(sql: str) -> str:
    """The statement with its literals taken out, so one statement run for different rows
    counts as one statement."""
    sql = re.sub(r'"s\d+_x\d+"', '"savepoint"', sql)
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    sql = re.sub(r"\b\d+(?:\.\d+)?\b", "?", sql)
    return re.sub(r"IN \((?:\?(?:::\w+)?(?:, )?)+\)", "IN (...)", sql)


def steady_pass(*, fast: bool) -> collections.Counter[str]:
    with CaptureQueriesContext(connection) as captured:
        report = run_pass(fast=fast)
    assert report.status == "ok" and not report.planned, (report.detail, report.planned)
    return collections.Counter(statement(q["sql"]) for q in captured.captured_queries)


def growth(small: collections.Counter[str], large: collections.Counter[str]) -> str:
    return "\n".join(
        f"{small[s]} -> {large[s]} per pass: {s[:300]}"
        for s in sorted(set(small) | set(large))
        if small[s] != large[s]
    )


def test_a_steady_pass_costs_the_same_queries_at_3_and_12_models(
    cluster: Cluster,  # noqa: F811
    engines: Engines,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster.fake.start_delay = 0.0
    converge(add_models(SMALL, engines), engines)
    small = {"full": steady_pass(fast=False), "fast": steady_pass(fast=True)}

    converge(add_models(LARGE - SMALL, engines), engines)
    assert Replica.objects.count() == LARGE
    large = {"full": steady_pass(fast=False), "fast": steady_pass(fast=True)}

    for kind in ("full", "fast"):
        assert sum(large[kind].values()) == sum(small[kind].values()), (
            f"a steady {kind} pass grows with the models:\n{growth(small[kind], large[kind])}"
        )
        # Nothing changed, so no replica or launch row is written (the pass's own status,
        # heartbeat and lease rows are, once a pass).
        written = [s for s in large[kind] if s.startswith(WRITES)]
        assert not [s for s in written if '"core_replica"' in s or '"core_launch"' in s], written

    # Every replica's unchanged probe outcome is re-stamped now and then: one statement for all.
    monkeypatch.setattr(observed, "PROBE_AT_REFRESH_SECS", 0)
    restamp = steady_pass(fast=False)
    replica_writes = [s for s in restamp.elements() if s.startswith('UPDATE "core_replica"')]
    assert len(replica_writes) == 1, replica_writes
    assert sum(restamp.values()) == sum(large["full"].values()) + 1


@pytest.mark.django_db
def test_changed_observations_are_written_in_one_statement_and_keep_updated_at() -> None:
    """Eight replicas whose probe outcomes all differ: one UPDATE writes them (bulk_update),
    ``updated_at`` is untouched (execute compares it with what the plan saw), and their
    launches' log paths are resolved in one more."""
    model_id = uuid.uuid4()
    rows = [
        Replica.objects.create(
            model_id=model_id, model_name="m", job_name=f"j{i}", job_id=str(100 + i)
        )
        for i in range(8)
    ]
    for row in rows:
        Launch.objects.create(
            id=row.pk,
            model_id=model_id,
            model_name="m",
            job_name=row.job_name,
            job_id=row.job_id,
            stdout_path="/logs/%x-%j.out",
            stderr_path="/logs/%x-%j.err",
        )
    before = dict(Replica.objects.values_list("id", "updated_at"))
    now = timezone.now()
    jobs = {
        r.job_id: JobInfo(job_id=r.job_id, name=r.job_name, state="RUNNING", phase=JobPhase.RUNNING)
        for r in rows
    }
    details = {r.pk: f"ready on port {9000 + i}" for i, r in enumerate(rows)}
    with CaptureQueriesContext(connection) as captured:
        changed = observed.record(
            replica_ids_jobs={r.pk: r.job_id for r in rows},
            jobs=jobs,
            probe_details=details,
            now=now,
        )
    assert changed == len(rows)
    writes = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]
    assert [w.split(" SET ")[0] for w in writes] == [
        'UPDATE "core_replica"',
        'UPDATE "core_launch"',
    ], writes
    for row in Replica.objects.all():
        assert row.last_probe == details[row.pk] and row.last_probe_at == now
        assert (row.slurm_state, row.updated_at) == ("RUNNING", before[row.pk])
    for launch in Launch.objects.all():
        assert launch.stdout_path == f"/logs/{launch.job_name}-{launch.job_id}.out"
    # Seen again, unchanged: nothing is written.
    with CaptureQueriesContext(connection) as captured:
        again = observed.record(
            replica_ids_jobs={r.pk: r.job_id for r in rows},
            jobs=jobs,
            probe_details=details,
            now=now + dt.timedelta(seconds=1),
        )
    assert again == 0
    assert not [q for q in captured.captured_queries if q["sql"].startswith(WRITES)]
