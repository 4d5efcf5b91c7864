"""In-flight requests per model, shared through Redis across gateway processes.

Each gateway process counts the requests it relays (or holds, waiting for a replica to wake)
per model, in memory: :meth:`InflightCounter.track` costs no I/O. Once a second it writes its
counts to its own Redis hash ``obleth:gw:load:<process>`` (one field per model: ``"<in flight>
<latest arrival, epoch>"``) with a short TTL, and registers the hash in the set
``obleth:gw:procs``. A process that dies stops refreshing its hash and Redis drops it within
:data:`PROCESS_TTL_SECS`, so its requests stop counting.

The provisioner reads everything in ONE Redis call per pass (:func:`read_load`, a Lua script
that sums nothing itself: it returns the live hashes and the wake signals; :func:`parse_reading`
adds them up). Wake signals: a request for a model at zero writes ``obleth:gw:wake`` (model id ->
epoch) and publishes the model id on :data:`TRIGGER` so a provisioner loop runs a pass at once
(:meth:`InflightCounter.wake`).

Redis being down never fails a request: counts are kept in memory and written again when it is
back; the provisioner sees "load unknown" meanwhile and keeps each model's count.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from obleth.gateway import metrics

log = logging.getLogger(__name__)

__all__ = [
    "FLUSH_SECS",
    "PROCESSES",
    "PROCESS_TTL_SECS",
    "TRIGGER",
    "WAKES",
    "InflightCounter",
    "LoadReading",
    "ModelCount",
    "parse_reading",
    "read_load",
]

PROCESSES = "obleth:gw:procs"
PROCESS_PREFIX = "obleth:gw:load:"
WAKES = "obleth:gw:wake"
TRIGGER = "obleth:provisioner:trigger"
FLUSH_SECS = 1.0
PROCESS_TTL_SECS = 5

# One call returns every live process hash and the wake signals; hashes that expired are
# dropped from the registry on the way (a process that died leaves its name behind).
_READ_SCRIPT = """
local out = {}
for _, key in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local fields = redis.call('HGETALL', key)
  if #fields == 0 then
    redis.call('SREM', KEYS[1], key)
  else
    table.insert(out, key)
    table.insert(out, fields)
  end
end
return {out, redis.call('HGETALL', KEYS[2])}
"""


def redis_url() -> str:
    from django.conf import settings

    return str(getattr(settings, "REDIS_URL", "") or "redis://127.0.0.1:6379/0")


# ----------------------------------------------------------------------------- the reading


@dataclasses.dataclass(frozen=True, slots=True)
class ModelCount:
    in_flight: int = 0
    last_request_at: float | None = None  # epoch seconds of the latest arrival


@dataclasses.dataclass(frozen=True, slots=True)
class LoadReading:
    """What the gateways report, summed over their live processes."""

    processes: int
    models: dict[str, ModelCount]  # model id (text) -> count
    wakes: dict[str, float]  # model id (text) -> epoch of its latest wake signal


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: Sequence[Any]) -> Iterator[tuple[Any, Any]]:
    return zip(flat[::2], flat[1::2], strict=False)


def parse_reading(raw: Sequence[Any]) -> LoadReading:
    """Sum the script's answer (pure): ``[[key, [field, value, ...], ...], [model, epoch...]]``.
    A malformed field is skipped, never an error."""
    processes, wake_fields = raw[0] or [], raw[1] or []
    models: dict[str, ModelCount] = {}
    count = 0
    for _key, fields in _pairs(processes):
        count += 1
        for model, value in _pairs(fields or []):
            parts = _text(value).split()
            try:
                in_flight = max(int(parts[0]), 0)
                last = float(parts[1]) if len(parts) > 1 and parts[1] != "-" else None
            except (IndexError, ValueError):
                continue
            name = _text(model)
            if name == "-":  # the placeholder of a process with nothing counted yet
                continue
            before = models.get(name, ModelCount())
            latest = before.last_request_at
            if last is not None and (latest is None or last > latest):
                latest = last
            models[name] = ModelCount(before.in_flight + in_flight, latest)
    wakes: dict[str, float] = {}
    for model, value in _pairs(wake_fields):
        with contextlib.suppress(ValueError):
            wakes[_text(model)] = float(_text(value))
    return LoadReading(processes=count, models=models, wakes=wakes)


_reader: Any = None
_script: Any = None


def read_load(url: str | None = None) -> LoadReading:
    """One Redis call: every live gateway process's counts and the wake signals. Raises the
    Redis client's error when Redis cannot be read (the caller says "load unknown")."""
    global _reader, _script
    import redis

    target = url or redis_url()
    if _reader is None or getattr(_reader, "_obleth_url", None) != target:
        _reader = redis.Redis.from_url(target, socket_timeout=1.0, socket_connect_timeout=1.0)
        _reader._obleth_url = target
        _script = _reader.register_script(_READ_SCRIPT)
    raw = _script(keys=[PROCESSES, WAKES])
    return parse_reading(raw)


# ----------------------------------------------------------------------------- the counter


class InflightCounter:
    """One gateway process's in-flight requests per model, written to Redis every second."""

    def __init__(
        self,
        *,
        url: str | None = None,
        flush_secs: float = FLUSH_SECS,
        ttl_secs: int = PROCESS_TTL_SECS,
        process: str | None = None,
    ) -> None:
        self._url = url
        self.flush_secs = flush_secs
        self.ttl_secs = ttl_secs
        self.key = PROCESS_PREFIX + (
            process or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self.counts: dict[str, int] = {}
        self.last_request: dict[str, float] = {}
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._failing = ""
        self.flushes = 0

    # -- counting (no I/O) ---------------------------------------------------------------
    @contextlib.contextmanager
    def track(self, model_id: str, model_name: str = "") -> Iterator[None]:
        """Count one request of the model while the block runs (relayed or held)."""
        self.counts[model_id] = self.counts.get(model_id, 0) + 1
        self.last_request[model_id] = time.time()
        gauge = metrics.MODEL_IN_FLIGHT.labels(model_name or model_id)
        gauge.inc()
        try:
            yield
        finally:
            self.counts[model_id] -= 1
            gauge.dec()

    def in_flight(self, model_id: str) -> int:
        return self.counts.get(model_id, 0)

    # -- Redis ---------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import redis.asyncio as aioredis

            self._client = aioredis.Redis.from_url(
                self._url or redis_url(), socket_timeout=1.0, socket_connect_timeout=1.0
            )
        return self._client

    def fields(self) -> dict[str, str]:
        """This process's hash: model id -> ``"<in flight> <latest arrival epoch>"``."""
        out: dict[str, str] = {}
        for model_id, last in self.last_request.items():
            out[model_id] = f"{max(self.counts.get(model_id, 0), 0)} {last:.3f}"
        return out

    async def flush(self) -> bool:
        """Write this process's counts (refreshing the TTL); False when Redis is unreachable."""
        fields = self.fields()
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                if fields:
                    pipe.hset(self.key, mapping=fields)
                else:
                    pipe.hset(self.key, "-", "0 -")  # a live process with nothing counted yet
                pipe.expire(self.key, self.ttl_secs)
                pipe.sadd(PROCESSES, self.key)
                await pipe.execute()
        except Exception as exc:  # Redis down: requests go on, counts are written when back
            message = f"{type(exc).__name__}: {exc}"
            if message != self._failing:
                log.warning("gateway: in-flight counts not written to Redis (%s)", message)
            self._failing = message
            return False
        if self._failing:
            log.info("gateway: in-flight counts written to Redis again")
            self._failing = ""
        self.flushes += 1
        return True

    async def wake(self, model_id: str) -> bool:
        """Signal that a request wants the model's replicas: the wake hash, the counts (so the
        provisioner sees the held request at once) and a nudge for an immediate pass."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hset(WAKES, model_id, f"{time.time():.3f}")
                pipe.publish(TRIGGER, model_id)
                await pipe.execute()
        except Exception as exc:  # the counts still show the held request within a second
            log.warning("gateway: wake signal for model %s not written (%s)", model_id, exc)
            return False
        metrics.WAKES.inc()
        await self.flush()
        return True

    async def run(self) -> None:
        while True:
            await self.flush()
            await asyncio.sleep(self.flush_secs)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run())

    async def close(self) -> None:
        """Stop writing and take this process's counts out at once (a clean shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                async with self._client.pipeline(transaction=False) as pipe:
                    pipe.delete(self.key)
                    pipe.srem(PROCESSES, self.key)
                    await pipe.execute()
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None
