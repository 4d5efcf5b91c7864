"""Names, ids and port windows of the replicas the planner submits: the Slurm job name, the
endpoint name, the deterministic replica id, and the model's bounded port windows.

Pure functions of their arguments.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterable

from obleth.core.ports import window_bases

# Namespace of the replica ids the planner chooses (uuid5 of model id, pass time and index).
_REPLICA_NAMESPACE = uuid.UUID("6f1c2d3e-8b4a-5c6d-9e0f-0b1e7a2c4d5f")
_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def next_free_window(
    serving_port: int, span: int, taken: Iterable[int], replicas: int
) -> int | None:
    """Base of the first of the model's windows ``serving_port + i*span`` (``0 <= i <
    replicas``, inside 1..65535) that overlaps no window starting at a base in ``taken``; None
    when every one is taken (the replacement waits: a window never lies above the model's range,
    where another user's server may listen). ``span`` is floored at 1.

    With one model every base is aligned, so this is the smallest base not in ``taken``; the
    overlap test also keeps models with different serving ports apart on a shared node.
    """
    span = max(span, 1)
    bases = sorted(set(taken))
    for base in window_bases(serving_port, replicas, span):
        if all(base + span <= t or t + span <= base for t in bases):
            return base
    return None


def window_wait_message(serving_port: int, span: int, replicas: int) -> str:
    """The row message of a replica waiting for a free window of its model's range."""
    span = max(span, 1)
    last = serving_port + max(replicas, 1) * span - 1
    return (
        f"waiting for a free port window in {serving_port}-{min(last, 65535)} "
        f"({replicas} window(s) of {span}); every one is still in use"
    )


def job_name_for(prefix: str, model_name: str, replica_id: uuid.UUID) -> str:
    """``<prefix><model_name>-<first 12 hex of the replica id>``.

    Characters other than letters, digits, ``.``, ``_`` and ``-`` in the model name become
    ``-``: the job name also names the job's output files, where ``/`` or spaces would break.
    """
    safe_name = _JOB_NAME_UNSAFE.sub("-", model_name)
    return f"{prefix}{safe_name}-{replica_id.hex[:12]}"


def endpoint_name_for(prefix: str, model_name: str, replica_id: uuid.UUID) -> str:
    """``<prefix><model_name>-<replica id>``: the endpoint a promoted replica is registered as."""
    return f"{prefix}{model_name}-{replica_id}"


def new_replica_id(model_id: uuid.UUID, now: dt.datetime, index: int) -> uuid.UUID:
    """The id of the ``index``-th replica submitted for ``model_id`` in the pass at ``now``."""
    return uuid.uuid5(_REPLICA_NAMESPACE, f"{model_id}/{now.isoformat()}/{index}")
