"""The bounds the field validators and the model fields share: the most nodes, replicas,
failures, seconds, days, megabytes, GRES and path characters a value may hold."""

from __future__ import annotations

# ------------------------------------------------------------------------------------- bounds

MAX_NODES = 10_000
MAX_CPUS_PER_TASK = 10_000
MAX_REPLICAS = 1_000
MAX_JOB_FAILURES = 1_000_000
MAX_HANDOVER_SECS = 7 * 24 * 3600  # a week: longer than any walltime worth handing over
MAX_TARGET_IN_FLIGHT = 100_000  # in-flight requests per replica an autoscaled model aims at
MAX_SCALE_DELAY_SECS = 24 * 3600  # scale-up / scale-down delays and the idle time before zero
MAX_TIME_LIMIT_DAYS = 365
MAX_MEMORY_MB = 64 * 1024 * 1024  # 64 TiB: more than any node has
MAX_GRES_COUNT = 1_024
MAX_PATH_CHARS = 500
