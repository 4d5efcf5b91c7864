"""Write-only secrets bound to where they are sent.

The Slurm JWT and the Hugging Face token travel to ``slurmrestd_url`` (the token in every job's
environment), an endpoint's API key to its ``api_base``. A changed URL drops the stored secret
unless the same change sends it again, or an admin keeps it on purpose. One rule for the API,
the admin and the management commands (``obleth.core.services`` re-exports it).
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError


def same_destination(old_url: str | None, new_url: str | None) -> bool:
    """Whether two URLs name the same place (scheme, host, port and path; case of the scheme
    and host, and a trailing slash, do not matter)."""

    def key(url: str | None) -> tuple[str, str, str]:
        text = (url or "").strip()
        try:
            parts = urlsplit(text)
            netloc = parts.netloc.lower()
        except ValueError:
            return ("", text, "")
        return (parts.scheme.lower(), netloc, parts.path.rstrip("/"))

    return key(old_url) == key(new_url)


@dataclasses.dataclass(frozen=True)
class BoundSecret:
    """The secret to store, and whether a URL change dropped the stored one."""

    value: str
    dropped: bool


def secret_for_destination(
    stored: str,
    supplied: str | None,
    *,
    old_url: str | None,
    new_url: str | None,
    clear: bool = False,
    keep_for_new_url: bool = False,
) -> BoundSecret:
    """The rule for a write-only secret bound to the URL it is sent to (the Slurm JWT and the
    Hugging Face token to ``slurmrestd_url``, an endpoint's API key to its ``api_base``).

    A supplied secret always wins; ``clear`` empties it. Otherwise the stored secret is kept
    while the URL stays the same. When the URL changes, the stored secret is dropped (it was
    given for the old host; sending it to the new one would hand it over) unless
    ``keep_for_new_url`` is set, which only an admin may send (see ``may_keep_secret``).
    """
    if clear:
        return BoundSecret("", dropped=False)
    if supplied is not None and supplied.strip():
        return BoundSecret(supplied.strip(), dropped=False)
    if (
        not stored
        or keep_for_new_url
        or not (old_url or "").strip()  # no URL yet: the secret was never sent anywhere
        or same_destination(old_url, new_url)
    ):
        return BoundSecret(stored, dropped=False)
    return BoundSecret("", dropped=True)


def may_keep_secret(user: Any) -> bool:
    """Who may keep a stored secret for a new URL: the admin token, a superuser, or a member of
    the ``admin`` role."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if getattr(user, "username", "") == "admin-token" and getattr(user, "pk", 0) is None:
        return True  # obleth.api.auth.AdminPrincipal, the bootstrap token
    if getattr(user, "is_superuser", False):
        return True
    groups = getattr(user, "groups", None)
    return bool(groups is not None and groups.filter(name="admin").exists())


def refuse_keep_secret(field: str) -> ValidationError:
    return ValidationError(
        {
            field: (
                "Only an admin may keep a stored secret for a new URL. Send the secret again "
                "for the new URL, or leave keep_secret out (the stored one is then removed)."
            )
        }
    )
