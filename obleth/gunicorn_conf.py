"""gunicorn settings for obleth's web process: an access log without secrets.

Used as ``gunicorn -c python:obleth.gunicorn_conf ...`` by ``docker/entrypoint.sh web``,
``scripts/run`` and the systemd unit; options given on the command line still win.

Clients may put a secret in a URL (``/v1/models?api_key=...``, a ``?token=`` link, a password in
a form sent with GET) and in headers; gunicorn's access log writes the request line, the query
string, the Referer and, if a custom ``access_log_format`` asks for them, any header or environ
variable. :class:`RedactingLogger` replaces the value of every query parameter whose name looks
like a secret with ``***`` in all of those, masks sensitive headers whole, and drops the Basic
auth user name (obleth has no Basic auth users, so such a name can only be a key).

This module must not import Django: gunicorn reads it before the application is loaded.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus

from gunicorn.glogging import Logger  # type: ignore[import-untyped]

from obleth.parent_death import die_with_parent

MASK = "***"

#: A query parameter is masked when its (decoded, lower-cased) name contains one of these.
SECRET_NAME_PARTS = (
    "key",
    "token",
    "secret",
    "passw",
    "pwd",
    "auth",
    "jwt",
    "signature",
    "credential",
    "session",
    "cookie",
)
#: ... or is exactly one of these (too short to match as a part).
SECRET_NAMES = frozenset({"sig", "pass", "pw", "code", "hmac"})

#: Headers masked whole (request ``{name}i``, response ``{name}o`` atoms).
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "x-auth-token",
        "x-csrftoken",
    }
)

#: Atoms whose value is a bare query string (no ``?``).
QUERY_ATOMS = frozenset({"q", "{query_string}e"})

# name=value after ?, &, ; or # (a value runs to the next separator or whitespace).
_PARAM = re.compile(r"(?P<sep>[?&;#])(?P<name>[^=&;#\s?]*)=(?P<value>[^&;#\s]*)")


def is_secret_name(name: str) -> bool:
    """Whether a query parameter of this name may carry a secret."""
    try:
        decoded = unquote_plus(name, errors="replace")
    except Exception:  # noqa: BLE001 - a name that does not decode is masked, not logged
        return True
    lowered = decoded.strip().lower()
    return lowered in SECRET_NAMES or any(part in lowered for part in SECRET_NAME_PARTS)


def redact_query(text: str, *, bare: bool = False) -> str:
    """``text`` (a request line or URL; ``bare``: a query string without its ``?``) with the
    values of secret-looking parameters masked."""
    if "=" not in text:
        return text
    if bare:  # QUERY_STRING, the 'q' atom: its first pair has no separator before it
        return _PARAM.sub(_mask_match, "&" + text)[1:]
    return _PARAM.sub(_mask_match, text)


def _mask_match(match: re.Match[str]) -> str:
    if not is_secret_name(match.group("name")):
        return match.group(0)
    return f"{match.group('sep')}{match.group('name')}={MASK}"


def redact_atoms(atoms: dict[str, Any]) -> dict[str, Any]:
    """Mask secrets in gunicorn's access-log atoms (a new dict; the input is left alone)."""
    clean: dict[str, Any] = {}
    for key, value in atoms.items():
        lowered = key.lower()
        if not isinstance(value, str):
            clean[key] = value
        elif key == "u":  # single-letter atoms are case-sensitive ('U' is the path)
            clean[key] = "-"
        elif key in QUERY_ATOMS or lowered == "{query_string}e":
            clean[key] = redact_query(value, bare=True)
        elif key in ("r", "f"):
            clean[key] = redact_query(value)
        elif lowered.startswith("{") and lowered[-2:] in ("}i", "}o"):
            header = lowered[1:-2]
            clean[key] = MASK if header in SECRET_HEADERS else redact_query(value)
        elif lowered.startswith("{") and lowered.endswith("}e"):
            name = lowered[1:-2]
            if name.startswith("http_") and name[5:].replace("_", "-") in SECRET_HEADERS:
                clean[key] = MASK
            elif name.startswith("http_") or name in ("raw_uri", "request_uri", "path_info"):
                clean[key] = redact_query(value)
            else:
                clean[key] = value
        else:
            clean[key] = value
    return clean


def redact_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Error-log arguments with secret query parameters masked (gunicorn logs a failed
    request as ``"Error handling request %s", req.uri``, query string included)."""
    return tuple(redact_query(arg) if isinstance(arg, str) else arg for arg in args)


def _clean(msg: Any) -> str:
    return redact_query(msg if isinstance(msg, str) else str(msg))


class RedactingLogger(Logger):
    """gunicorn's logger with secrets masked in every access-log line (:func:`redact_atoms`)
    and in the arguments of every error-log message (:func:`redact_args`)."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> Any:
        return redact_atoms(super().atoms(resp, req, environ, request_time))

    def critical(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().critical(_clean(msg), *redact_args(args), **kwargs)

    def error(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().error(_clean(msg), *redact_args(args), **kwargs)

    def warning(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().warning(_clean(msg), *redact_args(args), **kwargs)

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().info(_clean(msg), *redact_args(args), **kwargs)

    def debug(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().debug(_clean(msg), *redact_args(args), **kwargs)

    def exception(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().exception(_clean(msg), *redact_args(args), **kwargs)

    def log(self, lvl: Any, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().log(lvl, _clean(msg), *redact_args(args), **kwargs)


# gunicorn settings (module-level names gunicorn knows; others are ignored).
logger_class = "obleth.gunicorn_conf.RedactingLogger"


def post_fork(server: Any, worker: Any) -> None:
    """In each worker: die with the master at once, SIGKILL included, instead of serving as an
    orphan until gunicorn's own check of the parent notices (a few seconds, then a graceful
    exit)."""
    die_with_parent(worker.ppid)
