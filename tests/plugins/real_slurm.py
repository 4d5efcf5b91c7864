"""pytest plugin: the REAL local Slurm 22.05 cluster + slurmrestd (JWT) for tests.

Registered by ``tests/conftest.py`` (``pytest_plugins``). The session fixture ``real_slurm`` runs
``scripts/slurm-local start`` once per session (idempotent, fast when the cluster is already up)
and fails, never skips, when the cluster cannot start. The cluster is left running at the end of
the session: starting costs time, and ``scripts/slurm-local stop`` exists for humans.

Helpers for tests: ``wait_for_job_state``, ``submit_job``, ``job_workdir``, ``scancel``,
``scontrol_requeue``. Tokens are never put into assertion or exception messages.
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SLURM_LOCAL = REPO_ROOT / "scripts" / "slurm-local"

#: States after which a job never runs again on its own (requeue aside).
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)

_ENV_KEYS = {
    "OBLETH_SLURM_URL": "url",
    "OBLETH_SLURM_USER": "user",
    "OBLETH_SLURM_API_VERSION": "api_version",
    "OBLETH_SLURM_JWT": "token",
}


class SlurmLocalError(RuntimeError):
    """``scripts/slurm-local`` or a Slurm CLI command failed (message never holds a token)."""


def run_slurm_local(
    *args: str, timeout: float = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/slurm-local ARGS`` and return the completed process (no check)."""
    return subprocess.run(
        [str(SLURM_LOCAL), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def parse_env_output(stdout: str) -> dict[str, str]:
    """Parse the ``export NAME=value`` lines printed by ``scripts/slurm-local env``."""
    values: dict[str, str] = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        if not line.startswith("export ") or "=" not in line:
            raise SlurmLocalError("slurm-local env printed a line that is not 'export NAME=value'")
        name, _, value = line.removeprefix("export ").partition("=")
        values[name] = value.strip("'\"")
    return values


def issue_token(user: str, lifespan: int = 3600) -> str:
    """Return a raw JWT for ``user`` from ``scripts/slurm-local token USER LIFESPAN``."""
    if lifespan <= 0:
        raise ValueError(f"lifespan must be a positive number of seconds, got {lifespan}")
    proc = run_slurm_local("token", user, str(lifespan), timeout=60)
    if proc.returncode != 0:
        raise SlurmLocalError(
            f"scripts/slurm-local token {user} {lifespan} failed (rc={proc.returncode}): "
            f"{_tail(proc.stderr, 5)}"
        )
    return proc.stdout.strip()


@dataclass(frozen=True)
class RealSlurm:
    """Where the real slurmrestd is, and who to call it as."""

    url: str
    user: str
    api_version: str
    token: str = field(repr=False)

    def fresh_token(self, lifespan: int = 3600) -> str:
        """Issue a new JWT for ``self.user`` valid for ``lifespan`` seconds."""
        return issue_token(self.user, lifespan)

    def headers(self, token: str | None = None) -> dict[str, str]:
        """slurmrestd auth headers (22.05 accepts only these, not ``Authorization``)."""
        return {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": token or self.token}

    def api_url(self, path: str) -> str:
        """``/slurm/<api_version>/<path>`` on this slurmrestd."""
        return f"{self.url}/slurm/{self.api_version}/{path.lstrip('/')}"


def start_real_slurm() -> RealSlurm:
    """Run ``scripts/slurm-local start`` and read the connection settings from ``env``."""
    if os.geteuid() != 0:
        raise SlurmLocalError(
            "the real Slurm cluster needs root: run the tests as root (CI does), "
            "or start it first with: sudo scripts/slurm-local start"
        )
    started = run_slurm_local("start", timeout=900)
    if started.returncode != 0:
        raise SlurmLocalError(
            f"scripts/slurm-local start failed (rc={started.returncode}):\n{_tail(started.stderr)}"
        )
    env = run_slurm_local("env", timeout=60)
    if env.returncode != 0:
        raise SlurmLocalError(
            f"scripts/slurm-local env failed (rc={env.returncode}): {_tail(env.stderr, 5)}"
        )
    values = parse_env_output(env.stdout)
    missing = sorted(set(_ENV_KEYS) - set(values))
    if missing:
        raise SlurmLocalError(f"scripts/slurm-local env did not print {', '.join(missing)}")
    return RealSlurm(**{attr: values[name] for name, attr in _ENV_KEYS.items()})


@pytest.fixture(scope="session")
def real_slurm() -> RealSlurm:
    """The real local Slurm cluster, started once per session and left running afterwards."""
    try:
        return start_real_slurm()
    except (SlurmLocalError, subprocess.TimeoutExpired, OSError) as exc:
        pytest.fail(f"real Slurm cluster is not available: {exc}", pytrace=False)


def get_job(
    real_slurm: RealSlurm, job_id: int, *, client: httpx.Client | None = None
) -> dict[str, Any]:
    """GET ``/slurm/<version>/job/<id>`` and return the job record (raises when there is none)."""
    own = client is None
    http = client or httpx.Client(timeout=30, trust_env=False)
    try:
        resp = http.get(real_slurm.api_url(f"job/{job_id}"), headers=real_slurm.headers())
    finally:
        if own:
            http.close()
    body = resp.json()
    jobs = body.get("jobs") or []
    if resp.status_code != 200 or not jobs:
        errors = body.get("errors") or []
        raise SlurmLocalError(f"GET job/{job_id} -> HTTP {resp.status_code}: {errors}")
    job: dict[str, Any] = jobs[0]
    return job


def wait_for_job_state(
    real_slurm: RealSlurm,
    job_id: int,
    states: Iterable[str],
    timeout: float,
    *,
    interval: float = 0.1,
    fail_fast: bool = True,
) -> dict[str, Any]:
    """Poll GET ``job/<id>`` until ``job_state`` is one of ``states``; return the job record.

    Fails the test (AssertionError) after ``timeout`` seconds, or at once when ``fail_fast`` and
    the job reached a terminal state that is not wanted (it would never get there).
    Transport errors and 5xx answers are retried until the timeout (slurmctld may be restarting).
    """
    wanted = {s.upper() for s in states}
    if not wanted:
        raise ValueError("states must name at least one job state, e.g. {'RUNNING'}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    with httpx.Client(timeout=30, trust_env=False) as client:
        while True:
            try:
                job = get_job(real_slurm, job_id, client=client)
            except (httpx.HTTPError, ValueError, SlurmLocalError) as exc:
                last = f"error: {exc}"
            else:
                state = str(job.get("job_state", ""))
                last = f"{state} (reason {job.get('state_reason')})"
                if state in wanted:
                    return job
                if fail_fast and state in TERMINAL_STATES:
                    raise AssertionError(
                        f"job {job_id} ended {last}, exit_code {job.get('exit_code')}; "
                        f"waited for {sorted(wanted)}"
                    )
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"job {job_id} not in {sorted(wanted)} after {timeout:.0f} s; last: {last}"
                )
            time.sleep(interval)


def job_workdir(real_slurm: RealSlurm, name: str = "job") -> Path:
    """A new empty directory under the job user's home, owned by that user (job cwd / output)."""
    pw = pwd.getpwnam(real_slurm.user)
    base = Path(pw.pw_dir) / "obleth-test-jobs"
    path = base / f"{name}-{secrets.token_hex(4)}"
    path.mkdir(parents=True, exist_ok=False)
    group = grp.getgrgid(pw.pw_gid).gr_name
    for p in (base, path):
        shutil.chown(p, user=real_slurm.user, group=group)
    return path


def submit_job(real_slurm: RealSlurm, script: str, **job: Any) -> int:
    """POST ``job/submit`` with ``script`` and the ``job`` properties; return the job id.

    ``environment`` defaults to ``{"PATH": "/usr/local/bin:/usr/bin:/bin"}`` (a dict, required
    on v0.0.38). Give ``current_working_directory``: the default is slurmrestd's cwd ``/``.
    """
    job.setdefault("environment", {"PATH": "/usr/local/bin:/usr/bin:/bin"})
    with httpx.Client(timeout=30, trust_env=False) as client:
        resp = client.post(
            real_slurm.api_url("job/submit"),
            headers=real_slurm.headers(),
            json={"script": script, "job": job},
        )
    body = resp.json()
    if resp.status_code != 200 or body.get("errors") or "job_id" not in body:
        raise SlurmLocalError(f"job/submit -> HTTP {resp.status_code}: {body.get('errors')}")
    return int(body["job_id"])


def _run_cli(args: list[str], *, ok_if: tuple[str, ...] = ()) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 and not any(s in proc.stderr for s in ok_if):
        raise SlurmLocalError(
            f"{' '.join(args)} failed (rc={proc.returncode}): {proc.stderr.strip()}"
        )


def scancel(job_id: int) -> None:
    """Cancel a job with the ``scancel`` CLI (a job that already ended is not an error)."""
    _run_cli(["scancel", str(int(job_id))], ok_if=("already completing or completed",))


def scontrol_requeue(job_id: int, *, eligible_now: bool = False) -> None:
    """``scontrol requeue JOB``: same job id, back to PENDING (reason BeginTime, ~120 s wait).

    ``eligible_now=True`` also runs ``scontrol update jobid=JOB starttime=now`` so the job can
    start again at once instead of after Slurm's ~121 s requeue delay.
    """
    _run_cli(["scontrol", "requeue", str(int(job_id))])
    if eligible_now:
        _run_cli(["scontrol", "update", f"jobid={int(job_id)}", "starttime=now"])
