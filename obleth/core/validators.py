"""Field validators. Each message names the field's rule and how to fix the value."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlparse

from django.core.exceptions import ValidationError

API_VERSION_RE = re.compile(r"^[A-Za-z0-9.]+$")
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,253})$")


def validate_port(value: int) -> None:
    if value is None or not 1 <= int(value) <= 65535:
        raise ValidationError(f"{value} is not a TCP port: use a number from 1 to 65535.")


def validate_api_version(value: str) -> None:
    if not value:
        return
    if not API_VERSION_RE.match(value):
        raise ValidationError(
            "Use letters, digits and dots only, like v0.0.40 (or leave blank to detect it)."
        )
    from provisioner.slurm.adapters import supported_versions

    supported = supported_versions()
    if value not in supported:
        raise ValidationError(
            f"obleth has no adapter for slurmrestd API {value}. Use one of "
            f"{', '.join(supported)}, or leave it blank to detect the newest the server serves."
        )


def validate_ip_literal(value: str) -> None:
    try:
        ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        raise ValidationError(
            f"{value!r} is not an IP address. Node address overrides take an IP literal such as "
            "10.0.0.24 or fd00::24; a hostname would bring the DNS lookup back."
        ) from None


def validate_node_addresses(value: object) -> None:
    if value in (None, ""):
        return
    if not isinstance(value, dict):
        raise ValidationError("Give node address overrides as a mapping of hostname to IP address.")
    for host, address in value.items():
        if not isinstance(host, str) or not HOSTNAME_RE.match(host.strip()):
            raise ValidationError(f"{host!r} is not a node hostname.")
        if not isinstance(address, str):
            raise ValidationError(f"The address of {host} must be an IP address string.")
        try:
            validate_ip_literal(address)
        except ValidationError as exc:
            raise ValidationError(f"{host}: {exc.messages[0]}") from None


def validate_http_url(value: str) -> None:
    if not value:
        return
    parsed = urlparse(value)
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        raise ValidationError(f"{value!r} is not an http(s) URL, e.g. http://slurm-head:6820.")


def validate_time_limit(value: str) -> None:
    if not value:
        return
    from provisioner.slurm.convert import parse_time_limit

    try:
        parse_time_limit(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def validate_memory(value: str) -> None:
    if not value:
        return
    from provisioner.slurm.convert import parse_memory_mb

    try:
        parse_memory_mb(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def validate_health_path(value: str) -> None:
    if not value.startswith("/"):
        raise ValidationError("The health path must start with '/', e.g. /health or /api/tags.")
