"""Reading a server's answers: the health URL of a port, whether a health body says the server
is still loading, and which models a ``/v1/models`` answer lists."""

from __future__ import annotations

import json
from collections.abc import Sequence

# Values of "status"/"state" in a JSON health body that mean "not ready yet" (case-insensitive).
LOADING_WORDS = frozenset({"loading", "loading model", "starting", "initializing", "warming up"})


def _bare_host(host: str) -> str:
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def url_host(host: str) -> str:
    """The host as it goes in a URL: IPv6 literals bracketed (zone id escaped)."""
    host = _bare_host(host)
    if ":" in host:
        return "[" + host.replace("%", "%25") + "]"
    return host


def health_url(host: str, port: int, health_path: str) -> str:
    """``http://<host>:<port><health_path>`` with IPv6 bracketed and a leading ``/`` ensured."""
    path = health_path.strip() or "/"
    if not path.startswith("/"):
        path = "/" + path
    return f"http://{url_host(host)}:{port}{path}"


def body_says_loading(body: bytes, content_type: str = "") -> str | None:
    """What the body says if it says the server is still loading; None when it does not."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    if text[:1] == "{" or "json" in content_type.lower():
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for field in ("status", "state"):
                value = data.get(field)
                if isinstance(value, str) and value.strip().lower() in LOADING_WORDS:
                    return f"{field} {value.strip()!r}"
    if "loading model" in text.lower():
        return "'loading model'"
    return None


def listed_model_ids(body: bytes) -> list[str]:
    """The ``data[].id`` values of an OpenAI ``/v1/models`` answer (empty when it is not one)."""
    try:
        data = json.loads(body.decode("utf-8", errors="replace"))
    except ValueError:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return []
    return [str(m["id"]) for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]


def model_listed(expected: str, listed: Sequence[str]) -> bool:
    """``expected`` is served: the same id, or Ollama's ``name:latest`` for a tag-less name."""
    want = expected.strip()
    if not want:
        return False
    return any(m == want or (":" not in want and m == f"{want}:latest") for m in listed)
