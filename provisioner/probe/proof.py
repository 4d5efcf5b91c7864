"""Identity proof: is the server on a ready port this replica's? With ``check="key"`` it must
refuse a request without the replica key and wrong keys, and answer one with the key; with
``check="model-name"`` it must list the expected model (see the package docstring)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable
from typing import Protocol

from provisioner.probe.answers import listed_model_ids, model_listed
from provisioner.probe.targets import IdentityProof, _PortResult

_DECOYS = 2  # wrong keys sent with the replica key (in a random order) when proving identity


class _Get(Protocol):
    """The prober's one GET on a connection of its own: (status, body), or why there is none."""

    def __call__(
        self, host: str, port: int, path: str, headers: dict[str, str] | None = None
    ) -> Awaitable[tuple[int, bytes] | str]: ...


def _decoy_key() -> str:
    """A key no replica has, shaped like one: the check that a server compares the key."""
    return "obr_" + secrets.token_urlsafe(32)


async def _prove(get: _Get, host: str, port: int, identity: IdentityProof) -> _PortResult:
    """The health answer was ready: is the server on ``port`` this replica's?"""
    path = identity.path
    if identity.check == "model-name":
        answer = await get(host, port, path)
        if isinstance(answer, str):
            return _PortResult(False, f"identity not proven: GET {path} {answer}")
        status, body = answer
        if not 200 <= status < 300:
            return _PortResult(False, f"identity not proven: GET {path} answered HTTP {status}")
        listed = listed_model_ids(body)
        if not model_listed(identity.model_name, listed):
            shown = ", ".join(repr(m) for m in listed[:5]) or "none"
            return _PortResult(
                False,
                f"wrong server: {path} does not list model {identity.model_name!r} (lists {shown})",
            )
        return _PortResult(True, "", proof="model-name")
    if not identity.api_key:
        return _PortResult(False, "identity not proven: the replica has no key")
    bare = await get(host, port, path)
    if isinstance(bare, str):
        return _PortResult(False, f"identity not proven: GET {path} {bare}")
    status = bare[0]
    if 200 <= status < 300:
        return _PortResult(False, f"wrong server: answered {path} without the replica key")
    if status not in (401, 403):
        return _PortResult(
            False,
            f"identity not proven: {path} without the replica key answered HTTP {status} "
            "(expected 401 or 403)",
        )
    # A server that takes any bearer token is not checking ours: wrong keys, looking just
    # like the replica's and sent in a random order with it, must be refused too.
    keys = [identity.api_key, *(_decoy_key() for _ in range(_DECOYS))]
    secrets.SystemRandom().shuffle(keys)
    for key in keys:
        real = key == identity.api_key
        answer = await get(host, port, path, {"Authorization": f"Bearer {key}"})
        which = "the replica key" if real else "a wrong key"
        if isinstance(answer, str):
            return _PortResult(False, f"identity not proven: GET {path} with {which} {answer}")
        status = answer[0]
        if not real and 200 <= status < 300:
            return _PortResult(False, f"wrong server: accepted a wrong key on {path}")
        if real and status in (401, 403):
            return _PortResult(
                False, f"wrong server: refused the replica key on {path} (HTTP {status})"
            )
        if real and not 200 <= status < 300:
            return _PortResult(
                False,
                f"identity not proven: {path} with the replica key answered HTTP {status}",
            )
    return _PortResult(True, "", proof="key")
