"""Request body parsers that refuse a NUL character anywhere (a 400 naming where it sits).

PostgreSQL text and jsonb columns cannot hold U+0000: without this, a NUL inside a JSON field
(``images``, ``launcher_spec``) reached the database and came back as a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ValidationError

from obleth.core.validators import nul_path


def refuse_nul(data: Any) -> Any:
    """``data`` unchanged, or a ParseError naming the first field that holds a NUL."""
    if isinstance(data, Mapping) and hasattr(data, "lists"):  # a QueryDict of a form post
        data_items: Any = {key: values for key, values in data.lists()}
    else:
        data_items = data
    where = nul_path(data_items)
    if where is not None:
        field = where.split(".", 1)[0].split("[", 1)[0] or where
        raise ValidationError(
            {
                field: [
                    f"{where}: the request holds a NUL character (\\u0000), which no field "
                    "accepts. Remove it and send the request again."
                ]
            }
        )
    return data


class _RefuseNul:
    """Mixed in before a DRF parser: whatever it parsed is checked for NUL characters."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        result = super().parse(stream, media_type, parser_context)  # type: ignore[misc]
        refuse_nul(getattr(result, "data", result))  # multipart: DataAndFiles
        return result


class StrictJSONParser(_RefuseNul, parsers.JSONParser):
    pass


class StrictFormParser(_RefuseNul, parsers.FormParser):
    pass


class StrictMultiPartParser(_RefuseNul, parsers.MultiPartParser):
    pass
