"""Settings read from OBLETH_* variables: startup errors name the variable; switches work.

Each case imports obleth.settings in a fresh interpreter with its own environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_ENV = {
    "OBLETH_SECRET_KEY": "s" * 40,
    "OBLETH_ENCRYPTION_KEY": "e" * 40,
    "OBLETH_ADMIN_TOKEN": "t" * 32,
}


def load(env: dict[str, str], expr: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OBLETH_")}
    return subprocess.run(
        [sys.executable, "-c", f"import obleth.settings as s; print({expr})"],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_secure_cookie_switch() -> None:
    expr = "(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE)"
    assert load(BASE_ENV, expr).stdout.strip() == "(False, False)"
    on = load({**BASE_ENV, "OBLETH_SECURE_COOKIES": "1"}, expr)
    assert on.stdout.strip() == "(True, True)", on.stderr


def test_missing_encryption_key_names_the_variable() -> None:
    env = {k: v for k, v in BASE_ENV.items() if k != "OBLETH_ENCRYPTION_KEY"}
    result = load(env, "1")
    assert result.returncode != 0 and "OBLETH_ENCRYPTION_KEY is not set" in result.stderr


def test_short_admin_token_is_refused_naming_the_variable() -> None:
    result = load({**BASE_ENV, "OBLETH_ADMIN_TOKEN": "short"}, "1")
    assert result.returncode != 0 and "OBLETH_ADMIN_TOKEN is shorter than 16" in result.stderr


def test_bad_number_names_the_variable() -> None:
    result = load({**BASE_ENV, "OBLETH_PROVISIONER_INTERVAL_SECS": "fifteen"}, "1")
    assert result.returncode != 0 and "OBLETH_PROVISIONER_INTERVAL_SECS" in result.stderr
