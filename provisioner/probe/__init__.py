"""The provisioner's own health probe: which port of a replica's window is ready to serve.

DB-free on purpose (it runs inside asyncio). ``probe_all`` probes every port of every window
concurrently, bounded by a semaphore, through ONE ``httpx.AsyncClient`` (no redirects, no proxies
from the environment). It is safe to call from synchronous code: it runs its own event loop, in a
worker thread when the calling thread already runs one.

A port is READY only when ``GET http://<host>:<port><health_path>`` answers 2xx and the body does
not say the server is still loading (``{"status": "loading"}`` and friends, or a text body with
"loading model"). llama.cpp's 503 "Loading model" is not ready either (it is not 2xx). The lowest
ready port of a window wins.

Identity. A ready health answer only says that *some* server listens there; on a shared node it
may be another user's. A target with an ``identity`` is promoted only when the server also
proves it is this replica's:

* ``check="key"``: ``GET <identity path>`` (``/v1/models``; llama.cpp: ``/props``) WITHOUT the
  replica's key is refused (401/403), with a wrong key is refused too, and WITH
  ``Authorization: Bearer <key>`` succeeds (2xx). A server that answers without the key (or to
  any key) accepts anything: not ours.
* ``check="model-name"`` (engines that cannot check a key, e.g. Ollama): ``GET /v1/models``
  lists the expected model id. Weaker; the replica is shown as "identity not proven".

The key is sent only to ports whose health answer was ready, and never appears in a detail.

Scale: a pass may probe thousands of windows of 8 ports, most of them closed. Each port is first
connected with a plain non-blocking socket (a refused port costs a few microseconds and no HTTP
machinery); only ports that accept the connection are asked over HTTP, on that same socket, by the
shared httpx client. Probes never reuse connections (each port is its own origin), so the client's
transport opens none itself and keeps no pool (httpcore's pool scans every connection on every
request, which is quadratic at this scale).

The code: ``targets`` (what is probed and answered), ``answers`` (reading health and model
answers), ``transport`` (the one-shot httpx transport), ``proof`` (identity), ``prober`` (one
port) and ``run`` (a pass: ``probe_all``, ``probe_one``).
"""

from __future__ import annotations

from provisioner.probe.answers import (
    LOADING_WORDS,
    body_says_loading,
    health_url,
    listed_model_ids,
    model_listed,
    url_host,
)
from provisioner.probe.run import probe_all, probe_one
from provisioner.probe.targets import IdentityProof, ProbeOutcome, ProbeTarget

__all__ = [
    "LOADING_WORDS",
    "IdentityProof",
    "ProbeOutcome",
    "ProbeTarget",
    "body_says_loading",
    "health_url",
    "listed_model_ids",
    "model_listed",
    "probe_all",
    "probe_one",
    "url_host",
]
