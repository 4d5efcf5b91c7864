"""Checks of the deployment files: docker/, deploy/helm/obleth/, deploy/systemd/, docs/deploy.md.

What runs here for real: PyYAML parses compose.yaml, Chart.yaml and values.yaml; the entrypoint
is run with bash (``bash -n``, ``help``, every role in its dry-run mode
``OBLETH_ENTRYPOINT_DRY_RUN=1``, which prints the command it would exec instead of exec'ing it,
one real ``manage check`` through it, and its ``healthcheck`` against a real HTTP server on
127.0.0.1); ``systemd-analyze verify`` checks the units when it is installed (with /opt/obleth
rewritten to this checkout so the ExecStart programs exist), else configparser parses them.

What CANNOT be tested here, and is not: ``docker build`` and ``docker compose up`` (no Docker
engine, no compose plugin on this machine), ``helm lint`` / ``helm template`` (no helm binary: the
Go templates are only checked by regex, for references to values.yaml keys and balanced blocks),
anything against a Kubernetes API server, and the units under a running systemd (PID 1 here is
not systemd). No database is needed.
"""

from __future__ import annotations

import ast
import configparser
import http.server
import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"
COMPOSE = DOCKER / "compose.yaml"
ENV_EXAMPLE = DOCKER / ".env.example"
DOCKERFILE = DOCKER / "Dockerfile"
CHART = ROOT / "deploy" / "helm" / "obleth"
SYSTEMD = ROOT / "deploy" / "systemd"
SYSTEMD_ENV_EXAMPLE = SYSTEMD / "obleth.env.example"
DOCS = ROOT / "docs" / "deploy.md"
SETTINGS = ROOT / "obleth" / "settings.py"
VENV_BIN = ROOT / ".venv" / "bin"

ROLES = ("web", "gateway", "worker", "beat", "loop", "migrate", "manage")
REQUIRED = {
    "OBLETH_SECRET_KEY": "test-secret",
    "OBLETH_ENCRYPTION_KEY": "test-encryption",
    "DATABASE_URL": "postgres://obleth@127.0.0.1:5432/obleth",
}
UNITS = (
    "obleth-migrate.service",
    "obleth-web.service",
    "obleth-gateway.service",
    "obleth-worker.service",
    "obleth-beat.service",
    "obleth-provisioner.service",
)


# ----------------------------------------------------------------------------- helpers


def settings_env_names() -> set[str]:
    """Every environment variable obleth/settings.py reads (env_str/env_int/... first argument)."""
    tree = ast.parse(SETTINGS.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.startswith("env_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def entrypoint_env_names() -> set[str]:
    return set(re.findall(r"\$\{(OBLETH_[A-Z0-9_]+)", ENTRYPOINT.read_text())) | set(
        re.findall(r"export_var (OBLETH_[A-Z0-9_]+)", ENTRYPOINT.read_text())
    )


def listed_in_env_file(text: str) -> set[str]:
    """Variables an env example lists, set (NAME=...) or commented out (# NAME=...)."""
    return set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def run_entrypoint(
    *args: str, env: dict[str, str] | None = None, dry_run: bool = True, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "OBLETH_APP_DIR": str(ROOT),
        "TMPDIR": str(tmp) if tmp else "/tmp",
        "HOME": str(tmp) if tmp else "/tmp",
    }
    if dry_run:
        base["OBLETH_ENTRYPOINT_DRY_RUN"] = "1"
    base.update(env or {})
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=str(tmp or ROOT),
    )


def dry_run_commands(proc: subprocess.CompletedProcess[str]) -> list[list[str]]:
    assert proc.returncode == 0, proc.stderr
    return [shlex.split(line[4:]) for line in proc.stdout.splitlines() if line.startswith("run:")]


def load_values() -> dict[str, Any]:
    data = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(data, dict)
    return data


def values_path_exists(values: Any, path: list[str]) -> bool:
    node = values
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def template_files() -> list[Path]:
    files = sorted((CHART / "templates").iterdir())
    assert files, "the chart has no templates"
    return files


def unit(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((SYSTEMD / name).read_text())
    return parser


# ----------------------------------------------------------------------------- settings coverage


def test_settings_env_names_are_found() -> None:
    names = settings_env_names()
    # A sanity floor so a broken parser cannot make the coverage tests below pass vacuously.
    assert {"OBLETH_SECRET_KEY", "OBLETH_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL"} <= names
    assert sum(n.startswith("OBLETH_PROVISIONER_") for n in names) >= 10


@pytest.mark.parametrize("path", [ENV_EXAMPLE, SYSTEMD_ENV_EXAMPLE], ids=lambda p: p.name)
def test_every_settings_variable_is_in_env_examples(path: Path) -> None:
    missing = settings_env_names() - listed_in_env_file(path.read_text())
    assert not missing, f"{path.relative_to(ROOT)} does not list {sorted(missing)}"


def test_every_settings_and_entrypoint_variable_is_in_the_docs() -> None:
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", DOCS.read_text()))
    missing = (settings_env_names() | entrypoint_env_names()) - documented
    assert not missing, f"docs/deploy.md does not document {sorted(missing)}"


def test_every_entrypoint_variable_is_in_the_compose_env_example() -> None:
    names = entrypoint_env_names()
    assert {"OBLETH_BIND", "OBLETH_WEB_THREADS", "OBLETH_WORKER_CONCURRENCY"} <= names
    missing = names - listed_in_env_file(ENV_EXAMPLE.read_text())
    assert not missing, f"docker/.env.example does not list {sorted(missing)}"


@pytest.mark.parametrize("path", [ENV_EXAMPLE, SYSTEMD_ENV_EXAMPLE], ids=lambda p: p.name)
def test_env_examples_set_no_empty_optional_variable(path: Path) -> None:
    """obleth reads VAR= as an empty value, not as the default: only the secrets the operator
    must fill in may be left empty and uncommented."""
    must_fill = {"OBLETH_SECRET_KEY", "OBLETH_ENCRYPTION_KEY", "OBLETH_ADMIN_TOKEN"}
    must_fill.add("POSTGRES_PASSWORD")
    empty = set(re.findall(r"^([A-Z][A-Z0-9_]*)=\s*$", path.read_text(), flags=re.MULTILINE))
    assert empty - must_fill == set()
    assert {"OBLETH_SECRET_KEY", "OBLETH_ENCRYPTION_KEY", "OBLETH_ADMIN_TOKEN"} <= empty


# ----------------------------------------------------------------------------- entrypoint


def test_entrypoint_is_valid_bash() -> None:
    proc = subprocess.run(
        ["bash", "-n", str(ENTRYPOINT)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert os.access(ENTRYPOINT, os.X_OK), "docker/entrypoint.sh must be executable"


def test_entrypoint_help_lists_every_role(tmp_path: Path) -> None:
    proc = run_entrypoint("help", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for role in (*ROLES, "healthcheck"):
        assert re.search(rf"^\s+{role}\b", proc.stdout, flags=re.MULTILINE), role


def test_entrypoint_web_runs_gunicorn_wsgi_with_threads(tmp_path: Path) -> None:
    [cmd] = dry_run_commands(run_entrypoint("web", env=REQUIRED, tmp=tmp_path))
    assert cmd[:2] == ["gunicorn", "obleth.wsgi:application"]
    assert cmd[cmd.index("--worker-class") + 1] == "gthread"
    assert cmd[cmd.index("--threads") + 1] == "16"
    assert cmd[cmd.index("--bind") + 1] == "0.0.0.0:8000"
    assert (tmp_path / "obleth-role").read_text().strip() == "web"


def test_entrypoint_web_takes_knobs_and_extra_arguments(tmp_path: Path) -> None:
    env = {**REQUIRED, "OBLETH_WEB_THREADS": "32", "OBLETH_BIND": "127.0.0.1:9000"}
    [cmd] = dry_run_commands(
        run_entrypoint("web", "--graceful-timeout", "120", env=env, tmp=tmp_path)
    )
    assert cmd[cmd.index("--threads") + 1] == "32"
    assert cmd[cmd.index("--bind") + 1] == "127.0.0.1:9000"
    assert cmd[-2:] == ["--graceful-timeout", "120"]


def test_entrypoint_gateway_runs_the_gateway_service(tmp_path: Path) -> None:
    env = {**REQUIRED, "OBLETH_GATEWAY_WORKERS": "3"}
    [cmd] = dry_run_commands(run_entrypoint("gateway", "--x", env=env, tmp=tmp_path))
    assert cmd[:3] == ["python", "-m", "obleth.gateway.serve"]
    assert cmd[cmd.index("--bind") + 1] == "0.0.0.0:8001"
    assert cmd[cmd.index("--workers") + 1] == "3"
    assert cmd[-1] == "--x"
    assert (tmp_path / "obleth-role").read_text().strip() == "gateway"


def test_healthcheck_gateway_answers_on_its_own_port(
    fake_web: tuple[int, type[_Handler]], tmp_path: Path
) -> None:
    port, handler = fake_web
    (tmp_path / "obleth-role").write_text("gateway\n")
    env = {"OBLETH_GATEWAY_BIND": f"0.0.0.0:{port}", "OBLETH_BIND": "0.0.0.0:1"}
    proc = run_entrypoint("healthcheck", env=env, dry_run=False, tmp=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gateway answered HTTP 200" in proc.stdout
    handler.status = 500
    assert run_entrypoint("healthcheck", env=env, dry_run=False, tmp=tmp_path).returncode == 1


def test_entrypoint_worker_and_beat_run_celery(tmp_path: Path) -> None:
    env = {**REQUIRED, "REDIS_URL": "redis://127.0.0.1:6379/0"}
    [worker] = dry_run_commands(run_entrypoint("worker", env=env, tmp=tmp_path))
    assert worker[:4] == ["celery", "-A", "obleth", "worker"]
    [beat] = dry_run_commands(run_entrypoint("beat", env=env, tmp=tmp_path))
    assert beat[:4] == ["celery", "-A", "obleth", "beat"]
    assert beat[beat.index("--schedule") + 1] == f"{tmp_path}/celerybeat-schedule"


@pytest.mark.parametrize("role", ["worker", "beat"])
def test_entrypoint_celery_roles_need_a_broker(role: str, tmp_path: Path) -> None:
    proc = run_entrypoint(role, env=REQUIRED, tmp=tmp_path)
    assert proc.returncode == 64
    assert "REDIS_URL is not set" in proc.stderr
    assert "run:" not in proc.stdout


def test_entrypoint_loop_forces_inline_dispatch(tmp_path: Path) -> None:
    env = {**REQUIRED, "OBLETH_PROVISIONER_DISPATCH": "celery"}
    proc = run_entrypoint("loop", "--interval", "5", env=env, tmp=tmp_path)
    [cmd] = dry_run_commands(proc)
    assert cmd == ["python", "manage.py", "reconcile", "--loop", "--interval", "5"]
    assert "env: OBLETH_PROVISIONER_DISPATCH=inline" in proc.stdout.splitlines()
    assert "was celery" in proc.stderr


def test_entrypoint_migrate_creates_the_admin_only_with_a_password(tmp_path: Path) -> None:
    [only] = dry_run_commands(run_entrypoint("migrate", env=REQUIRED, tmp=tmp_path))
    assert only == ["python", "manage.py", "migrate", "--noinput"]
    env = {**REQUIRED, "OBLETH_ADMIN_PASSWORD": "a-long-password"}
    proc = run_entrypoint("migrate", env=env, tmp=tmp_path)
    first, second = dry_run_commands(proc)
    assert first == ["python", "manage.py", "migrate", "--noinput"]
    assert second[:3] == ["python", "manage.py", "ensure_admin"]
    assert "a-long-password" not in proc.stdout + proc.stderr


def test_entrypoint_manage_passes_arguments(tmp_path: Path) -> None:
    [cmd] = dry_run_commands(run_entrypoint("manage", "reconcile", "--dry-run", tmp=tmp_path))
    assert cmd == ["python", "manage.py", "reconcile", "--dry-run"]


@pytest.mark.parametrize("missing", sorted(REQUIRED))
@pytest.mark.parametrize("role", ["web", "loop", "migrate"])
def test_entrypoint_refuses_to_start_without_required_settings(
    role: str, missing: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in REQUIRED.items() if k != missing}
    proc = run_entrypoint(role, env=env, tmp=tmp_path)
    assert proc.returncode == 64
    assert f"{missing} is not set" in proc.stderr
    assert "run:" not in proc.stdout


def test_entrypoint_debug_skips_the_required_settings(tmp_path: Path) -> None:
    [cmd] = dry_run_commands(run_entrypoint("web", env={"OBLETH_DEBUG": "1"}, tmp=tmp_path))
    assert cmd[0] == "gunicorn"


def test_entrypoint_unknown_role_and_commands_on_path(tmp_path: Path) -> None:
    proc = run_entrypoint("serve", tmp=tmp_path)
    assert proc.returncode == 64
    assert "unknown role 'serve'" in proc.stderr
    proc = run_entrypoint(tmp=tmp_path)
    assert proc.returncode == 64
    assert "no role given" in proc.stderr
    [cmd] = dry_run_commands(run_entrypoint("true", "x", tmp=tmp_path))
    assert cmd == ["true", "x"]


def test_entrypoint_really_execs_manage_py(tmp_path: Path) -> None:
    """Not a dry run: the entrypoint execs python manage.py check (no database connection)."""
    env = {**REQUIRED, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
    proc = run_entrypoint("manage", "check", env=env, dry_run=False, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "System check identified no issues" in proc.stdout


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200
    hosts: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).hosts.append(f"{self.headers.get('Host')} {self.path}")
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@pytest.fixture
def fake_web() -> Iterator[tuple[int, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"status": 200, "hosts": []})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_web_answers(fake_web: tuple[int, type[_Handler]], tmp_path: Path) -> None:
    port, handler = fake_web
    (tmp_path / "obleth-role").write_text("web\n")
    env = {"OBLETH_BIND": f"0.0.0.0:{port}", "OBLETH_ALLOWED_HOSTS": "*,obleth.example.org"}
    proc = run_entrypoint("healthcheck", env=env, dry_run=False, tmp=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert handler.hosts == ["obleth.example.org /healthz"]
    handler.status = 302
    assert run_entrypoint("healthcheck", env=env, dry_run=False, tmp=tmp_path).returncode == 0
    handler.status = 500
    proc = run_entrypoint("healthcheck", env=env, dry_run=False, tmp=tmp_path)
    assert proc.returncode == 1
    assert "HTTP 500" in proc.stdout


def test_healthcheck_fails_when_nothing_listens(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"OBLETH_BIND": f"0.0.0.0:{port}"}
    proc = run_entrypoint("healthcheck", env=env, dry_run=False, tmp=tmp_path)
    assert proc.returncode == 1
    assert "does not answer" in proc.stdout


def test_healthcheck_passes_for_roles_without_http(tmp_path: Path) -> None:
    (tmp_path / "obleth-role").write_text("worker\n")
    proc = run_entrypoint(
        "healthcheck", env={"OBLETH_BIND": "0.0.0.0:1"}, dry_run=False, tmp=tmp_path
    )
    assert proc.returncode == 0
    assert "role worker" in proc.stdout


# ----------------------------------------------------------------------------- Dockerfile


def test_dockerfile_builds_one_non_root_image_for_all_roles() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, flags=re.MULTILINE)
    assert "pip install -r /tmp/requirements-base.txt" in text
    assert "COPY requirements/base.txt /tmp/requirements-base.txt" in text
    assert "collectstatic --noinput" in text
    users = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert 'ENTRYPOINT ["obleth-entrypoint"]' in text
    assert 'CMD ["web"]' in text
    assert re.search(r'HEALTHCHECK .*\n?.*CMD \["obleth-entrypoint", "healthcheck"\]', text)
    assert "COPY docker/entrypoint.sh /usr/local/bin/obleth-entrypoint" in text


def test_dockerfile_copies_existing_paths_and_every_app() -> None:
    text = DOCKERFILE.read_text()
    sources = [line.split()[1] for line in text.splitlines() if line.startswith("COPY ")]
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository"
    top = {src.rstrip("/").split("/")[0] for src in sources}
    apps = {
        app.split(".")[0]
        for app in re.findall(r'^\s+"([a-z_.]+)",$', SETTINGS.read_text(), flags=re.MULTILINE)
        if (ROOT / app.split(".")[0]).is_dir()
    }
    assert {"obleth", "provisioner"} <= apps
    assert apps | {"manage.py", "templates", "recipes"} <= top


def test_runtime_requirements_hold_the_processes() -> None:
    base = (ROOT / "requirements" / "base.txt").read_text().lower()
    for package in (
        "gunicorn==",
        "celery==",
        "redis==",
        "psycopg",
        "whitenoise==",
        "dj-database-url",
    ):
        assert package in base, package


# ----------------------------------------------------------------------------- compose


def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def test_compose_services() -> None:
    services = compose()["services"]
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "web",
        "gateway",
        "worker",
        "beat",
        "loop",
    }
    assert services["redis"]["profiles"] == ["celery"]
    assert services["worker"]["profiles"] == ["celery"]
    assert services["beat"]["profiles"] == ["celery"]
    assert services["loop"]["profiles"] == ["loop"]
    assert "profiles" not in services["web"] and "profiles" not in services["migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"]["restart"] == "no"
    for name in ("web", "gateway", "worker", "beat", "loop"):
        cond = services[name]["depends_on"]["migrate"]["condition"]
        assert cond == "service_completed_successfully", name
    for name in ("worker", "beat"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "deploy" not in services["beat"] and "scale" not in services["beat"]


def test_compose_commands_are_entrypoint_roles(tmp_path: Path) -> None:
    """Every obleth service's command is accepted by the entrypoint (dry run)."""
    services = compose()["services"]
    env = {**REQUIRED, "REDIS_URL": "redis://127.0.0.1:6379/0"}
    obleth = {n: s for n, s in services.items() if "build" in s}
    assert set(obleth) == {"migrate", "web", "gateway", "worker", "beat", "loop"}
    for name, service in obleth.items():
        assert service["build"]["dockerfile"] == "docker/Dockerfile"
        assert (COMPOSE.parent / service["build"]["context"] / "docker/Dockerfile").is_file()
        command = service["command"]
        assert command[0] in ROLES, name
        assert dry_run_commands(run_entrypoint(*command, env=env, tmp=tmp_path)), name
    assert obleth["web"]["command"] == ["web"]
    assert obleth["worker"]["command"] == ["worker"]
    assert obleth["beat"]["command"] == ["beat"]
    assert obleth["loop"]["command"] == ["loop"]
    assert obleth["migrate"]["command"] == ["migrate"]


def test_compose_requires_the_secrets_and_reads_env_file() -> None:
    web = compose()["services"]["web"]
    assert web["env_file"] == [{"path": ".env", "required": True}]
    for name in ("OBLETH_SECRET_KEY", "OBLETH_ENCRYPTION_KEY", "OBLETH_ADMIN_TOKEN"):
        assert web["environment"][name].startswith(f"${{{name}:?"), name
    assert "DATABASE_URL" in web["environment"] and "REDIS_URL" in web["environment"]


def test_compose_variables_are_in_env_example() -> None:
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", COMPOSE.read_text()))
    assert {"POSTGRES_PASSWORD", "OBLETH_SECRET_KEY"} <= used
    missing = used - listed_in_env_file(ENV_EXAMPLE.read_text())
    assert not missing, f"docker/.env.example does not list {sorted(missing)}"


def test_compose_stop_grace_lets_a_pass_finish() -> None:
    services = compose()["services"]
    for name in ("worker", "loop"):
        assert int(services[name]["stop_grace_period"].rstrip("s")) >= 300, name


# ----------------------------------------------------------------------------- helm


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "obleth"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert chart["type"] == "application"


def test_values_path_helper_can_fail() -> None:
    values = load_values()
    assert values_path_exists(values, ["provisioner", "intervalSecs"])
    assert not values_path_exists(values, ["provisioner", "nope"])
    assert not values_path_exists(values, ["image", "tag", "deeper"])


def test_templates_reference_only_existing_values() -> None:
    values = load_values()
    bad: list[str] = []
    seen = 0
    for path in template_files():
        for match in re.finditer(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", path.read_text()):
            seen += 1
            keys = match.group(1).lstrip(".").split(".")
            if not values_path_exists(values, keys):
                bad.append(f"{path.name}: .Values.{'.'.join(keys)}")
    assert seen > 50
    assert not bad, "templates use values missing from values.yaml: " + ", ".join(bad)


def test_templates_have_balanced_actions_and_blocks() -> None:
    for path in template_files():
        text = path.read_text()
        assert text.count("{{") == text.count("}}"), path.name
        opens = len(re.findall(r"\{\{-?\s*(?:if|range|with|define)\b", text))
        ends = len(re.findall(r"\{\{-?\s*end\b", text))
        assert opens == ends, f"{path.name}: {opens} blocks opened, {ends} ended"


def test_chart_maps_every_provisioner_knob() -> None:
    configmap = (CHART / "templates" / "configmap.yaml").read_text()
    knobs = {n for n in settings_env_names() if n.startswith("OBLETH_PROVISIONER_")}
    missing = {n for n in knobs if f'"{n}" .Values.provisioner.' not in configmap}
    missing -= {"OBLETH_PROVISIONER_DISPATCH"}
    assert not missing, f"configmap.yaml does not map {sorted(missing)}"
    assert '"OBLETH_PROVISIONER_DISPATCH" (ternary "inline" .Values.provisioner.dispatch' in (
        configmap
    )
    not_knobs = {"mode", "resources", "terminationGracePeriodSeconds"}
    for key in set(load_values()["provisioner"]) - not_knobs:
        assert f".Values.provisioner.{key}" in configmap, key


def test_beat_and_loop_run_exactly_one_with_recreate() -> None:
    text = (CHART / "templates" / "deployment-provisioner.yaml").read_text()
    assert re.search(r"^  replicas: 1$", text, flags=re.MULTILINE)
    assert re.search(r"^  strategy:\n    type: Recreate$", text, flags=re.MULTILINE)
    assert '(list "celery" "loop")' in text
    worker = (CHART / "templates" / "deployment-worker.yaml").read_text()
    assert "replicas: {{ .Values.worker.replicas }}" in worker
    assert '{{- if eq .Values.provisioner.mode "celery" }}' in worker
    web = (CHART / "templates" / "deployment-web.yaml").read_text()
    assert "replicas: {{ .Values.web.replicas }}" in web
    for path, role in ((web, "web"), (worker, "worker")):
        assert f'args: ["{role}"]' in path


def _hook(text: str) -> tuple[str, int]:
    kinds = re.search(r"helm.sh/hook: (\S+)", text)
    weight = re.search(r'helm.sh/hook-weight: "(-?\d+)"', text)
    assert kinds and weight
    return kinds.group(1), int(weight.group(1))


def test_migrate_job_is_a_hook_after_its_config() -> None:
    job = (CHART / "templates" / "job-migrate.yaml").read_text()
    assert "kind: Job" in job and 'args: ["migrate"]' in job
    job_kinds, job_weight = _hook(job)
    assert set(job_kinds.split(",")) == {"pre-install", "pre-upgrade"}
    for name in ("configmap.yaml", "secret.yaml"):
        kinds, weight = _hook((CHART / "templates" / name).read_text())
        assert set(kinds.split(",")) >= {"pre-install", "pre-upgrade"}, name
        assert weight < job_weight, name


def test_secret_keeps_the_encryption_key() -> None:
    text = (CHART / "templates" / "secret.yaml").read_text()
    assert 'lookup "v1" "Secret"' in text
    assert 'get $current "OBLETH_ENCRYPTION_KEY"' in text
    assert ".Release.IsUpgrade" in text and "fail" in text
    values = load_values()
    assert values["secrets"]["existingSecret"] == ""


def test_node_resolution_reaches_the_pods_that_talk_to_nodes() -> None:
    values = load_values()["nodeResolution"]
    assert set(values) == {"hostAliases", "dnsConfig", "dnsPolicy"}
    for name in ("deployment-web.yaml", "deployment-worker.yaml", "deployment-provisioner.yaml"):
        assert 'include "obleth.nodeResolution"' in (CHART / "templates" / name).read_text()


def test_chart_values_parse_with_ingress_and_probes() -> None:
    values = load_values()
    assert values["provisioner"]["mode"] == "celery"
    assert values["web"]["threads"] == 16
    assert values["ingress"]["enabled"] is False
    assert isinstance(values["ingress"]["hosts"], list)
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "OBLETH_ENCRYPTION_KEY" in notes


# ----------------------------------------------------------------------------- systemd


def test_unit_files_parse_and_share_the_basics() -> None:
    for name in UNITS:
        parsed = unit(name)
        service = parsed["Service"]
        assert service["User"] == "obleth", name
        assert service["EnvironmentFile"] == "/etc/obleth/obleth.env", name
        assert service["WorkingDirectory"] == "/opt/obleth", name
        assert service["NoNewPrivileges"] == "yes", name
        assert service["ProtectSystem"] == "strict", name
        assert service["ProtectHome"] == "yes", name
        assert service["PrivateTmp"] == "yes", name
        assert "ExecStart" in service, name
        if name != "obleth-migrate.service":
            assert service["KillSignal"] == "SIGTERM", name
            assert service["Restart"] in {"always", "on-failure"}, name
            assert parsed["Install"]["WantedBy"] == "multi-user.target", name


def test_units_give_a_pass_time_to_finish() -> None:
    for name in ("obleth-worker.service", "obleth-provisioner.service"):
        service = unit(name)["Service"]
        assert int(service["TimeoutStopSec"]) >= 300, name
        assert service["KillMode"] == "mixed", name


def test_unit_commands_match_the_processes() -> None:
    web = unit("obleth-web.service")
    start = web["Service"]["ExecStart"]
    assert "gunicorn obleth.wsgi:application" in start and "--worker-class gthread" in start
    assert "obleth-migrate.service" in web["Unit"]["Requires"]
    assert "celery -A obleth worker" in unit("obleth-worker.service")["Service"]["ExecStart"]
    assert "celery -A obleth beat" in unit("obleth-beat.service")["Service"]["ExecStart"]
    loop = unit("obleth-provisioner.service")
    assert "OBLETH_PROVISIONER_DISPATCH=inline" in loop["Service"]["ExecStart"]
    assert "manage.py reconcile --loop" in loop["Service"]["ExecStart"]
    assert "obleth-beat.service" in loop["Unit"]["Conflicts"]
    migrate = (SYSTEMD / "obleth-migrate.service").read_text()
    assert "manage.py migrate --noinput" in migrate
    # systemd substitutes $VAR itself: a password must reach sh as $$VAR, not on a command line.
    assert not re.search(r"(?<!\$)\$OBLETH_ADMIN_PASSWORD", migrate)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """The units with /opt/obleth pointed at this checkout (whose .venv has the programs)."""
    env_file = tmp_path / "obleth.env"
    env_file.write_text("")
    for name in UNITS:
        text = (SYSTEMD / name).read_text()
        text = text.replace("/etc/obleth/obleth.env", str(env_file))
        (tmp_path / name).write_text(text.replace("/opt/obleth", str(ROOT)))
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / n) for n in UNITS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # Unknown keys and bad values are only warnings ("..., ignoring"): treat them as failures.
    problems = [line for line in proc.stderr.splitlines() if line.strip()]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- docs


def test_docs_cover_each_way_and_the_key_warnings() -> None:
    text = DOCS.read_text()
    for heading in ("## Docker Compose", "## Helm", "## systemd", "## Upgrades", "## Scaling"):
        assert heading in text, heading
    assert "**Keep `OBLETH_ENCRYPTION_KEY`.**" in text
    assert "unreadable" in text
    assert "exactly **one**" in text
    for path in ("docker/compose.yaml", "deploy/helm/obleth/", "deploy/systemd/"):
        assert path in text, path
        assert (ROOT / path).exists(), path
