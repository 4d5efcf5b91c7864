"""Client authentication for the data plane: optional shared API keys.

OBLETH_GATEWAY_API_KEYS unset (or empty): requests need no key. Set to a comma-separated list:
every request must send ``Authorization: Bearer <one of them>``.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest

from obleth.logging import register_secret


def client_keys() -> list[str]:
    """The accepted client keys (settings.OBLETH_GATEWAY_API_KEYS)."""
    keys = list(settings.OBLETH_GATEWAY_API_KEYS)
    for key in keys:
        register_secret(key)
    return keys


def is_authorized(request: HttpRequest) -> bool:
    keys = client_keys()
    if not keys:
        return True
    header = request.headers.get("Authorization", "")
    scheme, _, supplied = header.partition(" ")
    supplied = supplied.strip()
    if scheme.lower() != "bearer" or not supplied:
        return False
    ok = False
    for key in keys:  # compare against every key: no early exit that times the match
        ok |= hmac.compare_digest(supplied.encode(), key.encode())
    return ok
