"""Leases on the database: threads and separate processes race for one lease on the real
PostgreSQL test database, and the same is checked on a real SQLite file. Nothing is faked;
expiry is simulated by moving ``expires_at`` into the past (no sleeping)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from obleth.core.models import Lease
from provisioner import lease

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)

WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    import django
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.db import connection
    from provisioner import lease
    mode, name, ttl, barrier = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    if mode == "create-table":
        from obleth.core.models import Lease
        with connection.schema_editor() as editor:
            editor.create_model(Lease)
        print(json.dumps({"ok": True}))
        sys.exit(0)
    owner = "racer-" + lease.make_owner()  # as if on another host: only the TTL frees it
    connection.ensure_connection()
    open(barrier + "." + str(os.getpid()), "w").close()  # ready
    deadline = time.monotonic() + 60
    while not os.path.exists(barrier) and time.monotonic() < deadline:
        time.sleep(0.002)
    got = lease.acquire(name, owner, ttl)
    print(json.dumps({"got": got, "owner": owner, "vendor": connection.vendor}))
    """
)


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def race_in_processes(
    name: str, ttl: float, count: int, tmp: Path, database_url: str
) -> list[dict[str, Any]]:
    """``count`` fresh Python processes (own Django, own DB connection) acquire at once."""
    tmp.mkdir(parents=True, exist_ok=True)
    barrier = tmp / f"go-{name.replace(':', '_')}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DATABASE_URL": database_url}
    env.pop("OBLETH_DATABASE_URL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, "race", name, str(ttl), str(barrier)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp.glob(barrier.name + ".*"))) < count:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.02)
    barrier.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _expire(name: str) -> None:
    Lease.objects.filter(name=name).update(expires_at=timezone.now() - dt.timedelta(seconds=1))


def test_acquire_renew_release() -> None:
    assert lease.acquire("model:a", "one", 60) is True
    assert lease.acquire("model:a", "two", 60) is False
    assert lease.holder("model:a") == "one"
    first_expiry = Lease.objects.get(name="model:a").expires_at
    assert lease.acquire("model:a", "one", 600) is True  # re-entrant: extends
    assert Lease.objects.get(name="model:a").expires_at > first_expiry
    assert lease.renew("model:a", "one", 60) is True
    assert lease.renew("model:a", "two", 60) is False
    assert lease.release("model:a", "two") is False
    assert lease.holder("model:a") == "one"
    assert lease.release("model:a", "one") is True
    assert lease.holder("model:a") is None
    assert lease.acquire("model:a", "two", 60) is True


def test_an_expired_lease_can_be_taken_over() -> None:
    assert lease.acquire("pass", "dead-worker", 60)
    _expire("pass")
    assert lease.holder("pass") is None
    assert lease.held_names() == set()
    assert lease.acquire("pass", "new-worker", 60) is True
    assert lease.holder("pass") == "new-worker"
    assert lease.renew("pass", "dead-worker", 60) is False  # the dead holder lost it
    assert lease.release("pass", "dead-worker") is False
    assert lease.holder("pass") == "new-worker"


def test_held_context_manager_and_held_names() -> None:
    with lease.held("model:x", 60) as got:
        assert got is True
        with lease.held("model:x", 60) as second:
            assert second is False
        assert lease.held_names("model:") == {"model:x"}  # the loser did not release it
    assert lease.held_names("model:") == set()
    lease.acquire("model:y", "o", 60)
    lease.acquire("model:z", "o", 60)
    lease.acquire("other:y", "o", 60)
    _expire("model:z")
    assert lease.held_names("model:") == {"model:y"}
    assert lease.held_names() == {"model:y", "other:y"}
    assert lease.purge_expired(older_than_secs=0) == 1


def test_held_releases_on_error_and_accepts_an_owner() -> None:
    with pytest.raises(RuntimeError), lease.held("model:e", 60, owner="me") as got:
        assert got
        assert lease.renew("model:e", "me", 120)
        raise RuntimeError("the pass failed")
    assert lease.holder("model:e") is None


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="ttl_secs"):
        lease.acquire("n", "o", 0)
    with pytest.raises(ValueError, match="name"):
        lease.acquire("", "o", 10)
    with pytest.raises(ValueError, match="owner"):
        lease.acquire("n", "", 10)
    with pytest.raises(ValueError, match="name"):
        lease.acquire("x" * 201, "o", 10)
    owner = lease.make_owner()
    assert owner.count(":") >= 2 and str(os.getpid()) in owner
    assert owner != lease.make_owner()


def _thread_race(name: str, count: int) -> tuple[list[str], list[BaseException]]:
    start = threading.Barrier(count)
    wins: list[str] = []
    errors: list[BaseException] = []

    def contend(i: int) -> None:
        try:
            start.wait()
            if lease.acquire(name, f"thread-{i}", 60):
                wins.append(f"thread-{i}")
        except BaseException as exc:  # surfaced by the caller
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return wins, errors


def test_threads_only_one_wins() -> None:
    for round_ in range(3):
        name = f"thread-race-{round_}"
        wins, errors = _thread_race(name, 8)
        assert errors == []
        assert len(wins) == 1, wins
        assert lease.holder(name) == wins[0]
    _expire("thread-race-0")
    wins, errors = _thread_race("thread-race-0", 8)
    assert errors == [] and len(wins) == 1
    assert lease.holder("thread-race-0") == wins[0]


def test_processes_only_one_wins_then_an_expired_lease_is_taken_over(tmp_path: Path) -> None:
    url = _database_url()
    results = race_in_processes("proc-race", 60, 4, tmp_path, url)
    assert {r["vendor"] for r in results} == {"postgresql"}
    winners = [r["owner"] for r in results if r["got"]]
    assert len(winners) == 1, results
    assert lease.holder("proc-race") == winners[0]

    again = race_in_processes("proc-race", 60, 2, tmp_path / "again", url)
    assert not any(r["got"] for r in again)  # still held by the first winner

    _expire("proc-race")  # the winner "died"
    takeover = race_in_processes("proc-race", 60, 3, tmp_path / "takeover", url)
    new = [r["owner"] for r in takeover if r["got"]]
    assert len(new) == 1, takeover
    assert lease.holder("proc-race") == new[0] != winners[0]


def test_sqlite_processes_only_one_wins(tmp_path: Path) -> None:
    """The same race on a real SQLite database file (the default database of a fresh install)."""
    url = f"sqlite:///{tmp_path / 'lease.sqlite3'}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DATABASE_URL": url}
    env.pop("OBLETH_DATABASE_URL", None)
    created = subprocess.run(
        [sys.executable, "-c", WORKER, "create-table", "-", "0", "-"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert created.returncode == 0, created.stderr[-2000:]
    results = race_in_processes("sqlite-race", 60, 4, tmp_path, url)
    assert {r["vendor"] for r in results} == {"sqlite"}
    assert sum(r["got"] for r in results) == 1, results
    again = race_in_processes("sqlite-race", 60, 2, tmp_path / "again", url)
    assert not any(r["got"] for r in again)
    # Expire it in the SQLite file, then one of several new contenders takes it over.
    expire = textwrap.dedent(
        """
        import os, django, datetime as dt
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
        django.setup()
        from django.utils import timezone
        from obleth.core.models import Lease
        n = Lease.objects.filter(name="sqlite-race").update(
            expires_at=timezone.now() - dt.timedelta(seconds=1))
        assert n == 1
        """
    )
    expired = subprocess.run(
        [sys.executable, "-c", expire], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert expired.returncode == 0, expired.stderr[-2000:]
    takeover = race_in_processes("sqlite-race", 60, 3, tmp_path / "takeover", url)
    assert sum(r["got"] for r in takeover) == 1, takeover


@pytest.mark.django_db(transaction=True)
def test_lease_of_a_killed_holder_on_this_host_is_taken_over_at_once() -> None:
    """A worker SIGKILLed mid-pass cannot release its lease; the next pass must not wait out
    the TTL. Only a holder on this host whose process is gone is taken over."""
    import socket
    import subprocess

    from provisioner import lease as lease_mod

    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()[:100]
    lease_mod.acquire("takeover", f"{host}:{dead.pid}:x", 600)
    assert lease_mod.acquire("takeover", "new-owner", 600) is True

    alive = subprocess.Popen(["sleep", "30"])
    try:
        lease_mod.acquire("busy", f"{host}:{alive.pid}:y", 600)
        assert lease_mod.acquire("busy", "other", 600) is False
    finally:
        alive.kill()
        alive.wait()
    lease_mod.acquire("remote", f"elsewhere:{dead.pid}:z", 600)
    assert lease_mod.acquire("remote", "other", 600) is False  # another host: wait for the TTL


@pytest.mark.django_db(transaction=True)
def test_held_names_leaves_out_leases_of_dead_local_holders() -> None:
    import socket

    from provisioner import lease as lease_mod

    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()[:100]
    lease_mod.acquire("model:a", f"{host}:{dead.pid}:x", 600)
    lease_mod.acquire("model:b", f"{host}:{os.getpid()}:y", 600)
    lease_mod.acquire("model:c", f"elsewhere:{dead.pid}:z", 600)
    assert lease_mod.held_names("model:") == {"model:b", "model:c"}
