"""One-line text: the rule every text field shares (no NUL, CR, LF or other control character,
a length limit), the names, author and upstream model that are nothing more, and ``_named``,
which runs a shared rule under a field's own name."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from obleth.core.http_validators import describe_char as _describe
from obleth.core.http_validators import first_control as _first_control


def validate_one_line(value: str, field: str = "value", max_chars: int | None = None) -> None:
    """No NUL, CR, LF or other control character; at most ``max_chars``."""
    if not isinstance(value, str):
        raise ValidationError(f"{field}: give text, not {type(value).__name__}.")
    if max_chars is not None and len(value) > max_chars:
        raise ValidationError(f"{field} is {len(value)} characters long; use at most {max_chars}.")
    bad = _first_control(value)
    if bad is not None:
        raise ValidationError(
            f"{field} holds {_describe(bad)}: write it on one line without control characters."
        )


def validate_name_text(value: str) -> None:
    """Names of models, endpoints and recipes: one line of text."""
    validate_one_line(value, "name", 300)


def validate_author(value: str) -> None:
    validate_one_line(value, "author", 200)


def validate_upstream_model(value: str) -> None:
    validate_one_line(value, "upstream_model", 200)


def _named(field: str, check: Any, value: Any) -> None:
    """Run ``check`` and name ``field`` in each message (one validator per field, sharing rules)."""
    try:
        check(value)
    except ValidationError as exc:
        raise ValidationError([f"{field}: {m}" for m in exc.messages]) from None
