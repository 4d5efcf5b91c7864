"""The real model of ``scripts/run``: SmolLM2-135M on llama.cpp, up without anyone asking.

:func:`bring_up` (``manage.py real_model up``, a one-shot program under scripts/run's
supervisord):

1. asks ``scripts/real-engines status llamacpp`` whether the engine is built (cached after the
   first time);
2. if not, runs the build (``scripts/real-engines install llamacpp``, about 8 minutes on 2
   cores, at a lower CPU priority so the instance stays responsive) and follows its output
   (:mod:`obleth.devrun.build_progress`): a line every 5 % and at each step on stdout, the whole
   output in the build log, the state in the status file;
3. deploys the library recipe ``llamacpp-smollm2`` through the deploy service
   (:func:`recipes.deploy.service.deploy`, the path of ``POST /api/v1/deployments``), unless
   a model of that name exists;
4. waits until the provisioner registered an endpoint for it and says how to call it.

The status file (JSON, replaced atomically) is what ``scripts/run status`` shows
(:func:`render`). A status whose writer is gone while it was still working is shown as
interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from obleth.devrun.build_progress import Progress, advance, milestone, remaining_seconds

LIBRARY_RECIPE = "llamacpp-smollm2"
MODEL_NAME = "smollm2"
#: States in which the writer is still at work (shown as interrupted when it is gone).
WORKING = ("checking", "waiting", "building", "deploying", "starting")
FINAL = ("serving", "deployed", "failed", "interrupted", "off")


@dataclasses.dataclass
class Status:
    state: str
    model: str = MODEL_NAME
    message: str = ""
    percent: int | None = None
    step: str = ""
    build_log: str = ""
    started_at: float = 0.0
    updated_at: float = 0.0
    build_started_at: float | None = None
    build_seconds: float | None = None
    pid: int = 0


def write_status(path: Path, status: Status) -> None:
    """Replace the status file at once (readers never see half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(status), indent=1) + "\n")
    os.replace(tmp, path)


def read_status(path: Path) -> Status | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("state"), str):
        return None
    known = {f.name for f in dataclasses.fields(Status)}
    return Status(**{k: v for k, v in data.items() if k in known})


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def render(status: Status | None, now: float, alive: Callable[[int], bool] = pid_alive) -> str:
    """The ``scripts/run status`` line(s) for the real model."""
    if status is None:
        return "  real model  not started yet (it starts with the instance)"
    head = f"  real model  {status.model}: "
    if status.state in WORKING and not alive(status.pid):
        return (
            head + f"interrupted while {status.state} (scripts/run stopped); "
            "the next scripts/run starts it again"
        )
    if status.state == "waiting":
        return head + "waiting for another install of llama.cpp (same engines folder) to finish"
    if status.state == "building":
        started = status.build_started_at or status.started_at
        elapsed = now - started
        text = f"building llama.cpp (first run only): {status.percent or 0}%, {status.step}"
        text += f", {duration(elapsed)} so far"
        left = remaining_seconds(elapsed, status.percent or 0)
        if left is not None:
            text += f", about {duration(left)} left"
        return head + text + f"\n              build log: {status.build_log}"
    text = head + status.state
    if status.message:
        text += f": {status.message}"
    if status.state == "failed" and status.build_log:
        text += f"\n              build log: {status.build_log}"
    return text


# ----------------------------------------------------------------------------- the bring-up


@dataclasses.dataclass
class Config:
    status_file: Path
    build_log: Path
    engines_dir: Path
    build_argv: list[str]  # the install command (scripts/real-engines install llamacpp)
    check_argv: list[str]  # exit 0 when the engine is installed and runs
    model_name: str = MODEL_NAME
    serve_timeout: float = 900.0
    poll: float = 2.0
    every: int = 5  # a progress line every this many percent


class Runner:
    """One bring-up: writes the status file and the progress lines as it goes."""

    def __init__(self, cfg: Config, out: TextIO, now: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.out = out
        self.now = now
        self.status = Status(
            state="checking",
            model=cfg.model_name,
            build_log=str(cfg.build_log),
            started_at=now(),
            pid=os.getpid(),
        )
        self.build: subprocess.Popen[str] | None = None
        self.last_build_line = ""  # the build's ERROR line, else its last line

    def say(self, text: str) -> None:
        self.out.write(f"[real-model] {text}\n")
        self.out.flush()

    def set(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.status, key, value)
        self.status.updated_at = self.now()
        write_status(self.cfg.status_file, self.status)

    def fail(self, message: str) -> int:
        self.set(state="failed", message=message)
        self.say(f"failed: {message}")
        return 1

    # -- the engine

    def engine_ready(self) -> tuple[bool, str]:
        env = {**os.environ, "OBLETH_ENGINES_DIR": str(self.cfg.engines_dir)}
        try:
            done = subprocess.run(
                self.cfg.check_argv, capture_output=True, text=True, timeout=120, env=env,
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, str(exc)
        said = (done.stdout.strip() or done.stderr.strip()).splitlines()
        return done.returncode == 0, said[-1] if said else ""

    def run_build(self) -> int:
        """The install, followed line by line; its exit status."""
        env = {
            **os.environ,
            "OBLETH_ENGINES_DIR": str(self.cfg.engines_dir),
            "OBLETH_ENGINES_VERBOSE": "1",
        }
        argv = list(self.cfg.build_argv)
        if shutil.which("nice"):
            argv = ["nice", "-n", "10", *argv]  # the instance keeps its share of the CPU
        started = self.now()
        self.set(state="building", percent=0, step="starting the install", build_started_at=started)
        progress = Progress()
        shown = 0
        last_line = ""
        self.cfg.build_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.cfg.build_log, "a", buffering=1) as log:  # line by line: tail -f works
            try:
                self.build = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, text=True, bufsize=1, env=env, errors="replace",
                )  # fmt: skip
            except OSError as exc:
                log.write(f"cannot start {argv}: {exc}\n")
                return 127
            assert self.build.stdout is not None
            for line in self.build.stdout:
                log.write(line)
                if line.strip():
                    last_line = line.strip()
                before = progress
                progress = advance(progress, line)
                if progress == before:
                    continue
                changed_step = (progress.step, progress.waiting) != (before.step, before.waiting)
                if changed_step or milestone(shown, progress, self.cfg.every):
                    elapsed = self.now() - started
                    left = remaining_seconds(elapsed, progress.percent)
                    tail = f", about {duration(left)} left" if left is not None else ""
                    self.say(
                        f"building llama.cpp: {progress.percent}% ({progress.label}, "
                        f"{duration(elapsed)}{tail})"
                    )
                    shown = progress.percent
                if changed_step or progress.percent != before.percent or progress.done:
                    # at most ~100 writes for a whole build: one per percent and step
                    state = "waiting" if progress.waiting else "building"
                    self.set(state=state, percent=progress.percent, step=progress.label)
            rc = self.build.wait()
        self.build = None
        self.status.build_seconds = round(self.now() - started, 1)
        self.last_build_line = progress.error or last_line
        return rc

    # -- the model

    def deploy(self) -> Any:
        """The model: the existing one of that name, else a new deployment of the recipe."""
        from django.core.exceptions import ValidationError

        from obleth.core.models import Model
        from recipes.deploy import service as deploy_service

        existing = Model.objects.filter(name=self.cfg.model_name).first()
        if existing is not None:
            self.say(f"model {self.cfg.model_name!r} exists already: not deployed again")
            return existing
        self.set(state="deploying", message="", percent=None, step="")
        request = deploy_service.DeployRequest(
            name=self.cfg.model_name,
            library=LIBRARY_RECIPE,
            inputs={"engines_dir": str(self.cfg.engines_dir)},
            overrides={"replicas": 1},
        )
        try:
            result = deploy_service.deploy(request)
        except ValidationError as exc:
            messages = exc.message_dict if hasattr(exc, "error_dict") else {"recipe": exc.messages}
            raise DeployRefused(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in messages.items())
            ) from None
        self.say(
            f"deployed recipes/{LIBRARY_RECIPE}.recipe as model {result.model.name!r} through "
            "the deploy service; the provisioner submits its replica to Slurm"
        )
        return result.model

    def wait_serving(self, model: Any) -> int:
        from obleth.core.models import Endpoint, ManagedSpec

        spec = ManagedSpec.objects.filter(model=model).first()
        if spec is not None and not spec.enabled:
            self.set(
                state="off",
                message=f"{model.name} is disabled (enable it in the admin, or "
                "POST /api/v1/models/<id>/enable, to serve it)",
            )
            self.say(self.status.message)
            return 0
        self.set(state="starting", message="the provisioner starts its replica on Slurm")
        deadline = self.now() + self.cfg.serve_timeout
        while self.now() < deadline:
            if Endpoint.objects.filter(model=model, enabled=True).exists():
                took = duration(self.now() - self.status.started_at)
                self.set(
                    state="serving",
                    message=f'answers on the gateway as "model":"{model.name}" '
                    f"(serving {took} after the bring-up started)",
                )
                self.say(
                    f'{model.name} serves: the demo curl with "model":"{model.name}" gets '
                    "answers from the real model"
                )
                return 0
            time.sleep(self.cfg.poll)
        self.set(
            state="deployed",
            message=f"not serving after {duration(self.cfg.serve_timeout)}; open the model in "
            "the admin: its page says why",
        )
        self.say(self.status.message)
        return 0

    def run(self) -> int:
        self.set(state="checking")
        ready, said = self.engine_ready()
        if ready:
            self.say(f"llama.cpp engine found in {self.cfg.engines_dir} ({said})")
        else:
            self.say(
                f"llama.cpp is not built in {self.cfg.engines_dir}: building it now, in the "
                "background (first run only, about 8 min on 2 cores; `scripts/run status` shows "
                "the progress; OBLETH_RUN_REAL_MODEL=0 turns this off). Until then the demo "
                "model answers."
            )
            rc = self.run_build()
            if rc != 0:
                why = self.last_build_line or "no output"
                return self.fail(f"the engine build exited with status {rc}: {why}")
            ready, said = self.engine_ready()
            if not ready:
                return self.fail(f"the build ended but the engine does not run: {said}")
            self.say(f"llama.cpp built in {duration(self.status.build_seconds or 0)} ({said})")
        try:
            model = self.deploy()
        except DeployRefused as exc:
            return self.fail(f"the deploy service refused the recipe: {exc}")
        return self.wait_serving(model)

    def interrupted(self, signum: int) -> None:
        """SIGTERM/SIGINT: stop the build (this process group when it is ours), note it."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with contextlib.suppress(OSError):
            was = self.status.state
            self.set(
                state="interrupted",
                message=f"stopped (signal {signum}) while {was}; the next "
                "scripts/run starts it again",
            )
        build = self.build
        if build is not None and build.poll() is None:
            if os.getpgrp() == os.getpid():  # under supervisord: the group is the bring-up's
                with contextlib.suppress(OSError):
                    os.killpg(os.getpgrp(), signal.SIGTERM)
            else:
                build.terminate()
            try:
                build.wait(10)
            except subprocess.TimeoutExpired:
                build.kill()
        raise SystemExit(128 + signum)


class DeployRefused(Exception):
    pass


@contextlib.contextmanager
def stop_on_signals(runner: Runner) -> Iterator[None]:
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in previous:
        signal.signal(s, lambda signum, _frame: runner.interrupted(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
