"""The same restart policy as ``scripts/run`` in Compose, Helm and systemd, tested as far as this
machine allows.

Real here: PyYAML parses compose.yaml (merge keys resolved); the Helm probe commands are cut out
of the templates and RUN with ``sh`` (the beat probe against a fresh and a stale schedule file;
the worker probe's celery command line is checked by ``celery inspect ping --help`` of the
installed Celery); ``systemd-analyze verify`` runs on the units in tests/test_deploy_files.py.
Not possible here (no Docker engine, no helm, no Kubernetes, PID 1 is not systemd): an actual
restart by those managers; ``scripts/run``'s own restarts are tested for real in
test_supervised_run.py.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
TEMPLATES = ROOT / "deploy" / "helm" / "obleth" / "templates"
SYSTEMD = ROOT / "deploy" / "systemd"
LONG_RUNNING_UNITS = (
    "obleth-web.service",
    "obleth-worker.service",
    "obleth-beat.service",
    "obleth-provisioner.service",
)


def test_every_long_running_compose_service_restarts_unless_stopped() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    one_shot = {"migrate"}
    assert set(services) >= {"postgres", "redis", "web", "worker", "beat", "loop", "migrate"}
    for name, service in services.items():
        if name in one_shot:
            assert service.get("restart") == "no", name
        else:
            assert service.get("restart") == "unless-stopped", name


def probe_commands(template: str) -> list[tuple[str, str]]:
    """(probe kind, the `sh -c` script) of each exec probe in a template."""
    text = (TEMPLATES / template).read_text()
    found = re.findall(
        r"(livenessProbe|readinessProbe):\n\s+exec:\n\s+command:\n\s+- sh\n\s+- -c\n\s+- (.+)",
        text,
    )
    return [(kind, script.strip()) for kind, script in found]


def test_web_has_healthz_probes() -> None:
    text = (TEMPLATES / "deployment-web.yaml").read_text()
    for kind in ("readinessProbe", "livenessProbe"):
        block = text.split(f"{kind}:", 1)[1].split("Probe:", 1)[0]
        assert "path: /healthz" in block, kind
        assert "port: http" in block, kind


def test_worker_liveness_pings_the_worker_over_the_broker() -> None:
    probes = probe_commands("deployment-worker.yaml")
    assert [kind for kind, _ in probes] == ["livenessProbe"]
    script = probes[0][1]
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0
    assert "celery@$(hostname)" in script
    argv = script.removeprefix("exec ").split(">", 1)[0].split()
    assert argv[:5] == ["celery", "-A", "obleth", "inspect", "ping"]
    celery = Path(sys.executable).with_name("celery")
    helped = subprocess.run(
        [str(celery), "-A", "obleth", "inspect", "ping", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
    )
    assert helped.returncode == 0, helped.stderr
    for flag in ("--destination", "--timeout"):
        assert flag in helped.stdout, flag


def run_probe(script: str, env: dict[str, str]) -> int:
    return subprocess.run(
        ["sh", "-c", script], env={"PATH": os.environ["PATH"], **env}, timeout=30, check=False
    ).returncode


def test_beat_liveness_fails_only_on_a_stale_schedule(tmp_path: Path) -> None:
    probes = probe_commands("deployment-provisioner.yaml")
    assert [kind for kind, _ in probes] == ["livenessProbe"]
    script = probes[0][1]
    text = (TEMPLATES / "deployment-provisioner.yaml").read_text()
    assert "{{- if not $loop }}" in text.split("livenessProbe")[0], "the loop has no schedule"
    schedule = tmp_path / "celerybeat-schedule"
    env = {"OBLETH_BEAT_SCHEDULE": str(schedule)}
    assert run_probe(script, env) != 0, "no schedule file at all must fail"
    # Python's shelve (dbm.dumb here) writes NAME.dat/.dir/.bak; other dbm modules NAME or NAME.db
    (tmp_path / "celerybeat-schedule.dat").write_bytes(b"x")
    assert run_probe(script, env) == 0
    old = time.time() - 11 * 60
    os.utime(tmp_path / "celerybeat-schedule.dat", (old, old))
    assert run_probe(script, env) != 0, "a schedule untouched for 11 minutes must fail"
    # default path: $TMPDIR/celerybeat-schedule (what the entrypoint's beat role uses)
    (tmp_path / "celerybeat-schedule").write_bytes(b"x")
    assert run_probe(script, {"TMPDIR": str(tmp_path)}) == 0


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(SYSTEMD / name)
    return parser


def test_units_restart_a_crashed_process_without_tripping_the_start_limit() -> None:
    for name in LONG_RUNNING_UNITS:
        service = unit(name)["Service"]
        assert service["Restart"] in {"on-failure", "always"}, name
        # systemd's default start limit is 5 starts in 10 s: with RestartSec >= 3 a process that
        # keeps crashing is restarted forever (every RestartSec), never left failed.
        assert int(service["RestartSec"]) >= 3, name
        assert "StartLimitBurst" not in service, name
