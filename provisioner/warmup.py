"""Warm-up of a freshly promoted replica: one throwaway request so the first real user does not
pay the cold first-token cost (reference 2.7).

``GET <api_base>/models`` gives the served model id (``data[0].id``); then one request of the
model's kind: chat (``/chat/completions``, one user message "warmup", ``max_tokens`` 1,
``temperature`` 0, not streamed), completion (``/completions``) or embedding (``/embeddings``).
Best effort: every failure is returned in the result, never raised (logged at DEBUG only:
the caller logs the outcome). The whole warm-up shares one time budget; a server still loading
(503) is asked again while the budget lasts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, Literal

import httpx

from obleth.logging import redact

__all__ = ["WarmupResult", "warm_up"]

log = logging.getLogger(__name__)

ModelKind = Literal["chat", "completion", "embedding"]
_MAX_BODY_BYTES = 1024 * 1024
_RETRY_PAUSE_SECS = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class WarmupResult:
    ok: bool
    detail: str
    model_id: str | None = None


class _Failed(Exception):
    pass


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Failed("warm-up time budget used up")
        return left


def _request(
    client: httpx.Client,
    budget: _Budget,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One request within the budget; returns (status, parsed JSON or None)."""
    what = f"{method} {url}"
    try:
        with client.stream(
            method, url, json=body, headers=headers, timeout=httpx.Timeout(budget.left())
        ) as response:
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > _MAX_BODY_BYTES:
                    raise _Failed(f"{what}: answer larger than {_MAX_BODY_BYTES} bytes")
                budget.left()
            status = response.status_code
    except httpx.TimeoutException as exc:
        raise _Failed(f"{what}: timed out") from exc
    except httpx.HTTPError as exc:
        raise _Failed(f"{what}: {type(exc).__name__}: {redact(str(exc))[:200]}") from exc
    raw = b"".join(chunks)
    try:
        parsed = json.loads(raw) if raw.strip() else None
    except ValueError:
        parsed = None
    return status, parsed


def _error_text(parsed: Any) -> str:
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:200]
        if isinstance(error, str):
            return error[:200]
        if isinstance(parsed.get("detail"), str):
            return str(parsed["detail"])[:200]
    return ""


def _with_retry(
    client: httpx.Client,
    budget: _Budget,
    method: str,
    url: str,
    body: dict[str, Any] | None,
    headers: dict[str, str],
) -> Any:
    """The 2xx JSON answer; 503 (still loading) is asked again while the budget lasts."""
    while True:
        status, parsed = _request(client, budget, method, url, body, headers)
        if 200 <= status < 300:
            return parsed
        why = _error_text(parsed)
        if status == 503 and budget.deadline - time.monotonic() > 2 * _RETRY_PAUSE_SECS:
            time.sleep(_RETRY_PAUSE_SECS)
            continue
        raise _Failed(f"{method} {url}: HTTP {status}" + (f" ({why})" if why else ""))


def _payload(kind: str, model_id: str) -> tuple[str, dict[str, Any]]:
    if kind == "embedding":
        return "/embeddings", {"model": model_id, "input": "warmup"}
    if kind == "completion":
        return "/completions", {
            "model": model_id,
            "prompt": "warmup",
            "max_tokens": 1,
            "temperature": 0,
            "stream": False,
        }
    return "/chat/completions", {
        "model": model_id,
        "messages": [{"role": "user", "content": "warmup"}],
        "max_tokens": 1,
        "temperature": 0,
        "stream": False,
    }


def warm_up(
    api_base: str,
    *,
    timeout: float,
    client: httpx.Client | None = None,
    model_type: str = "chat",
    api_key: str = "",
) -> WarmupResult:
    """Send the warm-up to the replica at ``api_base`` (its ``/v1`` root); never raises.

    ``timeout`` is the budget of the whole warm-up in seconds (<= 0: skipped, not ok).
    ``model_type``: "chat" (default), "completion" or "embedding" (obleth's model types).
    """
    base = (api_base or "").strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        return WarmupResult(False, f"api_base {api_base!r} is not an http(s) URL; nothing sent")
    if not timeout > 0:
        return WarmupResult(False, "warm-up disabled (timeout 0)")
    kind = model_type if model_type in ("chat", "completion", "embedding") else "chat"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    budget = _Budget(timeout)
    own = client is None
    http = client or httpx.Client(follow_redirects=False, trust_env=False)
    model_id: str | None = None
    started = time.monotonic()
    try:
        listing = _with_retry(http, budget, "GET", f"{base}/models", None, headers)
        data = listing.get("data") if isinstance(listing, dict) else None
        first = data[0] if isinstance(data, list) and data else None
        candidate = first.get("id") if isinstance(first, dict) else None
        if not isinstance(candidate, str) or not candidate.strip():
            raise _Failed(f"GET {base}/models: no model id in data[0].id")
        model_id = candidate
        path, payload = _payload(kind, model_id)
        _with_retry(http, budget, "POST", f"{base}{path}", payload, headers)
    except _Failed as exc:
        detail = redact(str(exc))
        log.debug("warm-up of %s failed: %s", base, detail)
        return WarmupResult(False, detail, model_id)
    except Exception as exc:  # best effort: nothing escapes
        detail = redact(f"unexpected {type(exc).__name__}: {exc}")[:300]
        log.debug("warm-up of %s failed: %s", base, detail)
        return WarmupResult(False, detail, model_id)
    finally:
        if own:
            http.close()
    took = time.monotonic() - started
    detail = f"warm-up {kind} request to {model_id} answered in {took:.1f}s"
    log.debug("warm-up of %s done: %s", base, detail)
    return WarmupResult(True, detail, model_id)
