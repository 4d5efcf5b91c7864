"""What the executor's parts share: the attributes they read, the live replica states, the warm-up
hook's type, the crash-safety fault points and the logger (``provisioner.execute``, so log lines
keep the name they had before the executor was split into parts).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import uuid
from collections.abc import Callable

from obleth.core.choices import ReplicaState
from obleth.core.models import ManagedSpec, SlurmSettings
from provisioner.domain import Knobs
from provisioner.slurm.client import SlurmClient

log = logging.getLogger("provisioner.execute")

LIVE_STATES = [ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.HEALTHY]

# Called after a successful promotion: (replica_id, api_base, model_type) -> None
WarmupDispatch = Callable[[uuid.UUID, str, str], None]


def fault_point(name: str) -> None:
    """Fault injection for the crash-safety tests: OBLETH_FAULT_KILL_AT=<name> SIGKILLs the
    worker at that point. Unset in production, where this is a no-op."""
    if os.environ.get("OBLETH_FAULT_KILL_AT") == name:
        log.warning("fault injection: SIGKILL at %s", name)
        os.kill(os.getpid(), signal.SIGKILL)


class ExecutorParts:
    """The attributes every group of actions reads; :class:`provisioner.execute.Executor` (a
    dataclass made of these groups) sets them."""

    client: SlurmClient
    slurm: SlurmSettings
    knobs: Knobs
    specs: dict[uuid.UUID, ManagedSpec]
    model_types: dict[uuid.UUID, str]
    warmup: WarmupDispatch | None
    now: Callable[[], dt.datetime]
