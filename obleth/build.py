"""What build is running: the version with its commit, ``0.1.0 (commit abc1234)``.

The commit comes from the build (``OBLETH_BUILD_COMMIT``, set by the Dockerfile's build
argument) or, when running from a checkout, from ``git rev-parse``. Looked up once per process
(cached); a missing git, a directory that is not a checkout or a junk value give no commit,
never an error.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

import obleth

__all__ = ["build_commit", "version_label"]

_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_SHORT = 7
_GIT_TIMEOUT_SECS = 2.0
_ROOT = Path(__file__).resolve().parent.parent


def _clean(value: str) -> str:
    value = value.strip().lower()
    return value[:_SHORT] if _COMMIT.fullmatch(value) else ""


def _from_git() -> str:
    try:
        answer = subprocess.run(
            ["git", "rev-parse", f"--short={_SHORT}", "HEAD"],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_SECS,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return ""
    return _clean(answer.stdout) if answer.returncode == 0 else ""


@functools.cache
def build_commit() -> str:
    """The short commit of this build ("" when unknown)."""
    built = os.environ.get("OBLETH_BUILD_COMMIT", "")
    if built.strip():
        return _clean(built)
    return _from_git()


def version_label() -> str:
    """``0.1.0 (commit abc1234)``, or just the version when the commit is unknown."""
    commit = build_commit()
    return f"{obleth.__version__} (commit {commit})" if commit else obleth.__version__
