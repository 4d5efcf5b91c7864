"""Die with the parent process: ``prctl(PR_SET_PDEATHSIG)`` for server worker processes.

A worker process forked by gunicorn's master or uvicorn's process manager calls
:func:`die_with_parent`: when that parent dies, SIGKILL included, the kernel kills the worker
too, at once, instead of leaving it serving (and holding the port) with nobody supervising it.
The programs themselves get the same from ``scripts/die-with-parent`` under scripts/run's
supervisord. Linux only; elsewhere it does nothing. Standard library only (gunicorn's config
module imports it before Django is set up).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies. ``parent_pid`` is
    the parent the caller expects: if it is already gone (it died before the call), this process
    gets ``signum`` right away. False where the kernel offers no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signum), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)
    return True
