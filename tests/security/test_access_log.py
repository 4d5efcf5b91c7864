"""gunicorn's access log keeps secrets out: real gunicorn, real requests, the log file read back.

gunicorn runs ``obleth.wsgi:application`` with ``-c python:obleth.gunicorn_conf`` (as
``docker/entrypoint.sh web`` and ``scripts/run`` start it) on a free port of 127.0.0.1. The
application answers without a database (DATABASE_URL points at a closed port): the log line is
written whatever the status. A control run without the config module shows the same requests
do put the secrets in the log, so the test can fail.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from obleth.gunicorn_conf import MASK, is_secret_name, redact_atoms, redact_query

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).parent / "gunicorn"
PORTS = range(20200, 20300)  # this suite's port range (see HELPERS.md)

SECRETS = {
    "api_key": "sk-GATEWAY-KEY-1111",
    "token": "TOKEN-2222",
    "access_token": "ACCESS-3333",
    "password": "PASSWORD-4444",
    "key": "KEY-5555",
    "Api%5FKey": "ENCODED-NAME-6666",
    "client_secret": "CLIENT-7777",
}


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 20200-20299")


@contextmanager
def start_gunicorn(
    log: Path,
    *,
    redact: bool,
    app: str = "obleth.wsgi:application",
    extra: tuple[str, ...] = (),
) -> Iterator[str]:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OBLETH_", "DJANGO_"))}
    env = {
        **clean,
        "DJANGO_SETTINGS_MODULE": "obleth.settings",
        "OBLETH_SECRET_KEY": "s" * 60,
        "OBLETH_ENCRYPTION_KEY": "e" * 40,
        "OBLETH_ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
    }
    cmd = [str(GUNICORN), app, *extra]
    if redact:
        cmd += ["-c", "python:obleth.gunicorn_conf"]
    cmd += [
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "1",
        "--worker-class",
        "gthread",
        "--threads",
        "2",
        "--no-control-socket",
        "--access-logfile",
        str(log),
        "--access-logformat",
        # The default line plus atoms a custom format could ask for.
        '%(h)s %(u)s "%(r)s" %(s)s "%(f)s" q=%(q)s auth=%({authorization}i)s '
        "xkey=%({x-api-key}i)s cookie=%({cookie}i)s env=%({query_string}e)s",
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/nothing-here", timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read() if proc.stdout else ""
                    pytest.fail(f"gunicorn did not start: {shlex.join(cmd)}\n{out}")
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def send_secret_requests(base: str) -> None:
    query = "&".join(f"{name}={value}" for name, value in SECRETS.items())
    headers = {
        "Authorization": "Bearer BEARER-8888",
        "X-Api-Key": "XAPIKEY-9999",
        "Cookie": "sessionid=SESSION-0000",
        "Referer": "https://elsewhere.example/?token=REFERER-1212&page=2",
    }
    with httpx.Client(timeout=60) as client:  # a loaded machine can be slow; no timing claim
        client.get(f"{base}/v1/models?model=demo&{query}", headers=headers)
        client.get(f"{base}/admin/login/?next=/admin/&password=PASSWORD-4444")
        client.post(f"{base}/v1/chat/completions?api_key=sk-GATEWAY-KEY-1111", json={})
        # Basic auth whose user name is a key.
        client.get(f"{base}/v1/models", auth=("sk-BASIC-USER-3434", ""))


def read_log(log: Path, lines: int) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= lines:
            break
        time.sleep(0.1)
    return log.read_text()


ALL_SECRETS = [
    *SECRETS.values(),
    "BEARER-8888",
    "XAPIKEY-9999",
    "SESSION-0000",
    "REFERER-1212",
    "sk-BASIC-USER-3434",
]


def test_access_log_has_no_secrets(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    with start_gunicorn(log, redact=True) as base:
        send_secret_requests(base)
    text = read_log(log, 5)
    leaked = [secret for secret in ALL_SECRETS if secret in text]
    assert not leaked, f"secrets in the access log: {leaked}\n{text}"
    lines = text.splitlines()
    assert len(lines) >= 5, text
    line = next(line for line in lines if "/v1/models?model=demo" in line)
    # Non-secret parameters and the rest of the line stay readable.
    assert f'"GET /v1/models?model=demo&api_key={MASK}&token={MASK}' in line
    assert f"Api%5FKey={MASK}" in line
    assert "page=2" in line and "auth=***" in line and "cookie=***" in line
    assert f"env=model=demo&api_key={MASK}" in line
    assert f"q=model=demo&api_key={MASK}" in line
    assert "/admin/login/?next=/admin/&password=***" in text


def test_control_without_the_config_module_the_secrets_are_logged(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    with start_gunicorn(log, redact=False) as base:
        send_secret_requests(base)
    text = read_log(log, 5)
    assert "sk-GATEWAY-KEY-1111" in text and "BEARER-8888" in text


RAISING_APP = """
def app(environ, start_response):
    if environ["PATH_INFO"] == "/boom":
        raise RuntimeError("the application failed")
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]
"""


def test_error_log_of_a_failing_request_has_no_secrets(tmp_path: Path) -> None:
    """gunicorn logs "Error handling request <uri>" (query string included) when the
    application raises; our logger masks it. A tiny WSGI app raises on purpose."""
    (tmp_path / "raising_app.py").write_text(RAISING_APP)
    for redact in (True, False):
        errors = tmp_path / f"error-{redact}.log"
        extra = ("--pythonpath", str(tmp_path), "--error-logfile", str(errors))
        with start_gunicorn(
            tmp_path / "access.log", redact=redact, app="raising_app:app", extra=extra
        ) as base:
            httpx.get(f"{base}/boom?api_key=sk-ERROR-LOG-5656&model=x", timeout=60)
        text = errors.read_text()
        assert "Error handling request" in text, text
        if redact:
            assert "sk-ERROR-LOG-5656" not in text and f"api_key={MASK}&model=x" in text
        else:  # the control: plain gunicorn does write it
            assert "sk-ERROR-LOG-5656" in text


def test_the_entrypoint_unit_and_scripts_run_use_the_config_module(tmp_path: Path) -> None:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "OBLETH_ENTRYPOINT_DRY_RUN": "1",
        "OBLETH_APP_DIR": str(ROOT),
        "TMPDIR": str(tmp_path),
        "OBLETH_DEBUG": "1",
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "docker" / "entrypoint.sh"), "web"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("run:")]
    cmd = shlex.split(line[4:])
    assert cmd[cmd.index("--config") + 1] == "python:obleth.gunicorn_conf"
    run = (ROOT / "scripts" / "run").read_text()
    assert re.search(r"gunicorn\" obleth\.wsgi:application -c python:obleth\.gunicorn_conf", run)
    unit = (ROOT / "deploy" / "systemd" / "obleth-web.service").read_text()
    assert "--config python:obleth.gunicorn_conf" in unit


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("GET /v1?api_key=abc HTTP/1.1", f"GET /v1?api_key={MASK} HTTP/1.1"),
        ("GET /v1?a=1&TOKEN=x;b=2#sig=y", f"GET /v1?a=1&TOKEN={MASK};b=2#sig={MASK}"),
        ("GET /v1?api_key=a=b=c&x=1 HTTP/1.1", f"GET /v1?api_key={MASK}&x=1 HTTP/1.1"),
        ("GET /v1?model=x HTTP/1.1", "GET /v1?model=x HTTP/1.1"),
        ("GET /v1?%zz=1&api%2Dkey=2", f"GET /v1?%zz=1&api%2Dkey={MASK}"),
        ("GET /v1?api_key HTTP/1.1", "GET /v1?api_key HTTP/1.1"),
        ("GET /v1?&&api_key=&x HTTP/1.1", f"GET /v1?&&api_key={MASK}&x HTTP/1.1"),
    ],
)
def test_redact_query(raw: str, expected: str) -> None:
    assert redact_query(raw) == expected


def test_redact_bare_query_strings_mask_the_first_pair_too() -> None:
    assert redact_query("token=x?y&a=1", bare=True) == f"token={MASK}&a=1"
    atoms = redact_atoms({"q": "api_key=s", "U": "/v1/models", "u": "someone", "s": 200})
    assert atoms == {"q": f"api_key={MASK}", "U": "/v1/models", "u": "-", "s": 200}


def test_secret_names() -> None:
    for name in ("api_key", "apikey", "X-API-KEY", "access_token", "password", "jwt", "sig"):
        assert is_secret_name(name), name
    for name in ("model", "next", "page", "format", "stream"):
        assert not is_secret_name(name), name


def test_huge_query() -> None:
    raw = "GET /v1?" + "&".join(f"p{i}=v" for i in range(20_000)) + "&api_key=zz HTTP/1.1"
    assert redact_query(raw).endswith(f"&api_key={MASK} HTTP/1.1")
