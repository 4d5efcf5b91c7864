"""Which endpoint takes the next request: least outstanding requests, weights, cooldowns.

Pure bookkeeping for one gateway process (no I/O, no Django): the service holds one
:class:`Balancer` and asks it for the order to try a model's endpoints in.

- Within the best priority tier, the endpoint with the fewest in-flight requests per unit of
  weight goes first (ties broken at random), so a slow or stuck replica gets fewer new requests
  than its quick siblings instead of an equal share.
- An endpoint that failed ``cooldown_after`` times in a row (connection error, 5xx, no first byte
  in time) is cooled down for ``cooldown_secs``: skipped while another endpoint can take the
  request, tried anyway when all of them are cooling down (better a retry than a certain 503).
- Endpoints the endpoint check marked unhealthy are treated the same way.
- With an affinity key (a header chosen by the operator), the same key prefers the same endpoint
  (rendezvous hashing), so an engine's prefix cache is reused; load still wins when that endpoint
  is cooling down.
- ``max_concurrency`` bounds in-flight requests per endpoint; a request that finds every endpoint
  full waits (in the service) up to a bound for a slot.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from obleth.core.choices import HealthStatus
from obleth.gateway.routing import RouteEndpoint


@dataclass
class EndpointState:
    """What this process knows about one endpoint (by id)."""

    in_flight: int = 0
    consecutive_failures: int = 0
    cooldown_until: float = 0.0
    cooldown_reason: str = ""
    last_failure_at: float = 0.0
    last_success_at: float = 0.0
    served: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Cooldown:
    endpoint_id: str
    reason: str
    until: float  # time.monotonic() based
    seconds_left: float


@dataclass
class Balancer:
    cooldown_after: int = 3
    cooldown_secs: float = 30.0
    max_concurrency: int = 0  # 0: unbounded
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    states: dict[str, EndpointState] = field(default_factory=dict)

    def state(self, endpoint_id: str) -> EndpointState:
        st = self.states.get(endpoint_id)
        if st is None:
            st = self.states[endpoint_id] = EndpointState()
        return st

    # ------------------------------------------------------------------ choosing

    def cooling(self, endpoint_id: str) -> bool:
        st = self.states.get(endpoint_id)
        return st is not None and st.cooldown_until > self.clock()

    def has_room(self, endpoint_id: str) -> bool:
        if self.max_concurrency <= 0:
            return True
        return self.state(endpoint_id).in_flight < self.max_concurrency

    def order(
        self, endpoints: Sequence[RouteEndpoint], affinity: str | None = None
    ) -> list[RouteEndpoint]:
        """Every endpoint, in the order to try them: usable ones first (healthy, not cooling
        down), best priority tier first, least loaded first within a tier."""
        if not endpoints:
            return []
        usable = [
            ep
            for ep in endpoints
            if ep.health_status != HealthStatus.UNHEALTHY and not self.cooling(ep.id)
        ]
        rest = [ep for ep in endpoints if ep not in usable]
        return self._ordered(usable, affinity) + self._ordered(rest, affinity)

    def _ordered(self, group: Sequence[RouteEndpoint], affinity: str | None) -> list[RouteEndpoint]:
        ordered: list[RouteEndpoint] = []
        for priority in sorted({ep.priority for ep in group}):
            tier = [ep for ep in group if ep.priority == priority]
            ordered += self._tier(tier, affinity)
        return ordered

    def _tier(self, tier: list[RouteEndpoint], affinity: str | None) -> list[RouteEndpoint]:
        if affinity:
            # Rendezvous hashing: each key has a stable favourite, weighted by the weight.
            def score(ep: RouteEndpoint) -> float:
                digest = hashlib.blake2b(f"{affinity}\0{ep.id}".encode(), digest_size=8).digest()
                unit = (int.from_bytes(digest, "big") + 1) / 2**64
                return unit ** (1.0 / max(1, ep.weight))

            return sorted(tier, key=score, reverse=True)
        keyed = [
            ((self.state(ep.id).in_flight + 1) / max(1, ep.weight), self.rng.random(), ep)
            for ep in tier
        ]
        keyed.sort(key=lambda item: (item[0], item[1]))
        return [ep for _, _, ep in keyed]

    # ------------------------------------------------------------------ accounting

    def started(self, endpoint_id: str) -> None:
        self.state(endpoint_id).in_flight += 1

    def finished(self, endpoint_id: str) -> None:
        st = self.state(endpoint_id)
        st.in_flight = max(0, st.in_flight - 1)

    def succeeded(self, endpoint_id: str) -> None:
        st = self.state(endpoint_id)
        st.consecutive_failures = 0
        st.served += 1
        st.last_success_at = self.clock()
        if st.cooldown_until and st.cooldown_until <= self.clock():
            st.cooldown_until, st.cooldown_reason = 0.0, ""

    def failed(self, endpoint_id: str, reason: str) -> bool:
        """Count one failure; True when it started a cooldown."""
        st = self.state(endpoint_id)
        now = self.clock()
        st.consecutive_failures += 1
        st.failed += 1
        st.last_failure_at = now
        if self.cooldown_after > 0 and st.consecutive_failures >= self.cooldown_after:
            started = st.cooldown_until <= now
            st.cooldown_until = now + self.cooldown_secs
            st.cooldown_reason = (
                f"{st.consecutive_failures} failures in a row, the last one: {reason}"
            )
            return started
        return False

    def cooldowns(self) -> list[Cooldown]:
        now = self.clock()
        return [
            Cooldown(eid, st.cooldown_reason, st.cooldown_until, st.cooldown_until - now)
            for eid, st in self.states.items()
            if st.cooldown_until > now
        ]

    def forget_except(self, endpoint_ids: set[str]) -> None:
        """Drop the state of endpoints that left the routing table (keep those in flight)."""
        for eid in [e for e, st in self.states.items() if e not in endpoint_ids]:
            if self.states[eid].in_flight == 0:
                del self.states[eid]
