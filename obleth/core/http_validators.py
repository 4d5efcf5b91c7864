"""Validators of values that travel over HTTP: URLs (``slurmrestd_url``, ``api_base``) and
header values (``user``, ``jwt``, ``api_key``, ``hf_token``). Re-exported by
``obleth.core.validators``, where every field's validator is found.

Messages name the field and the fix; secrets are never echoed back.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError

MAX_JWT_CHARS = 8_192
MAX_API_KEY_CHARS = 4_096
MAX_HF_TOKEN_CHARS = 1_024
MAX_USER_CHARS = 100
MAX_URL_CHARS = 500

#: Hosts that answer cloud instance metadata (credentials) on every major cloud.
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.packet.net",
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
    }
)
LINK_LOCAL_NETS = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))


def describe_char(ch: str) -> str:
    names = {"\x00": "NUL", "\n": "a newline (LF)", "\r": "a carriage return (CR)", "\t": "a tab"}
    if ch in names:
        return names[ch]
    if ch == " ":
        return "a space"
    if ord(ch) < 32 or ord(ch) == 127:
        return f"control character U+{ord(ch):04X}"
    if not ch.isascii():
        return f"non-ASCII character U+{ord(ch):04X}"
    return repr(ch)


def first_control(value: str) -> str | None:
    return next((ch for ch in value if ord(ch) < 32 or ord(ch) == 127), None)


# --------------------------------------------------------------------------------------- URLs

HOST_LABEL_RE = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _host_problem(host: str) -> str | None:
    if not host:
        return "it has no host"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if len(name) > 253 or not all(HOST_LABEL_RE.fullmatch(label) for label in labels):
        return f"{host!r} is not a host name or IP address"
    if re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]+", labels[-1]):
        # 2852039166, 0xA9FEA9FE, 169.254.43518: IPv4 spellings resolvers accept. Refused: write
        # the dotted address.
        return f"{host!r} is not a host name (write an IPv4 address as four dotted numbers)"
    return None


def _address_refused(host: str) -> str | None:
    """Why an endpoint may not point at this host (link-local, cloud metadata), or None."""
    lowered = host.lower().rstrip(".")
    if lowered in METADATA_HOSTS:
        return f"{host} answers cloud instance metadata (credentials)"
    try:
        address = ipaddress.ip_address(lowered)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in net for net in LINK_LOCAL_NETS):
        return f"{host} is a link-local address (169.254.0.0/16, fe80::/10: cloud metadata)"
    return None


def _url(value: str, field: str, *, example: str, refuse_link_local: bool) -> None:
    if not value:
        return
    if len(value) > MAX_URL_CHARS:
        raise ValidationError(
            f"{field} is {len(value)} characters long; use at most {MAX_URL_CHARS}."
        )
    text = value.strip()
    bad = next((ch for ch in value if first_control(ch)), None) or next(
        (ch for ch in text if ch.isspace() or not ch.isascii()), None
    )
    if bad is not None:
        raise ValidationError(
            f"{field} holds {describe_char(bad)}: write the URL on one line without spaces or "
            f"control characters (an international host name in its xn-- form), e.g. {example}."
        )
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        port = parts.port
    except ValueError as exc:
        raise ValidationError(
            f"{field} {value!r} is not a URL ({exc}): write it like {example}."
        ) from None
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValidationError(f"{field} {value!r} is not an http(s) URL: write it like {example}.")
    if parts.username is not None or parts.password is not None:
        # Not echoed back: the value holds a credential.
        raise ValidationError(
            f"{field}: leave credentials out of the URL, they would be stored and shown in clear. "
            "Put an endpoint's key in api_key, the Slurm token in jwt."
        )
    problem = _host_problem(host)
    if problem:
        raise ValidationError(f"{field} {value!r}: {problem}. Write it like {example}.")
    if port == 0:
        raise ValidationError(f"{field} {value!r}: port 0 is not a TCP port (use 1-65535).")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise ValidationError(
            f"{field} {value!r}: leave out the ?query and #fragment, e.g. {example}."
        )
    if refuse_link_local:
        refused = _address_refused(host)
        if refused:
            raise ValidationError(
                f"{field} {value!r} is refused: {refused}. Point it at the model server's own "
                "address."
            )


def validate_http_url(value: str) -> None:
    """Any http(s) URL (kept for migrations; fields use the named validators below)."""
    _url(value, "url", example="http://slurm-head:6820", refuse_link_local=False)


def validate_slurmrestd_url(value: str) -> None:
    _url(value, "slurmrestd_url", example="http://slurm-head:6820", refuse_link_local=False)


def validate_api_base(value: str) -> None:
    _url(value, "api_base", example="http://gpu-node-01:8000/v1", refuse_link_local=True)


# ------------------------------------------------------------------------------ header values


def _header_value(value: str, field: str, max_chars: int, fix: str) -> None:
    """Printable ASCII without spaces, bounded. The value is never echoed (it may be secret)."""
    if not value:
        return
    if not isinstance(value, str):
        raise ValidationError(f"{field}: give text.")
    if len(value) > max_chars:
        raise ValidationError(
            f"{field} is {len(value)} characters long; at most {max_chars} fit in a request "
            f"header. {fix}"
        )
    for index, ch in enumerate(value):
        if not 33 <= ord(ch) <= 126:
            raise ValidationError(
                f"{field} holds {describe_char(ch)} at position {index + 1}; it is sent as an HTTP "
                f"header, which takes printable ASCII without spaces only. {fix}"
            )


def validate_slurm_user(value: str) -> None:
    _header_value(value, "user", MAX_USER_CHARS, "Give the Slurm user name the JWT belongs to.")


def validate_jwt(value: str) -> None:
    _header_value(value, "jwt", MAX_JWT_CHARS, "Paste the token `scontrol token` printed.")


def validate_api_key(value: str) -> None:
    _header_value(value, "api_key", MAX_API_KEY_CHARS, "Paste the endpoint's key again.")


def validate_hf_token(value: str) -> None:
    _header_value(value, "hf_token", MAX_HF_TOKEN_CHARS, "Paste the Hugging Face token again.")
