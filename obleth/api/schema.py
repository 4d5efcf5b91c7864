"""OpenAPI (drf-spectacular) extensions: how the admin bearer token appears in the schema, and
the error answers every operation documents."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class AdminTokenScheme(OpenApiAuthenticationExtension):
    target_class = "obleth.api.auth.AdminTokenAuthentication"
    name = "adminToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Authorization: Bearer <OBLETH_ADMIN_TOKEN>",
        }


ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every error answer: a sentence saying what is wrong and how to fix it; on a "
    "400, the messages of each field at fault.",
    "properties": {
        "error": {"type": "string"},
        "fields": {
            "type": "object",
            "additionalProperties": True,
            "description": "Field name -> messages (400 only).",
        },
    },
    "required": ["error"],
}

ERROR_ANSWERS = {
    "400": "Invalid request: a field (named in `fields`) or the body is wrong; the message says "
    "the fix. Unknown fields and NUL characters are refused too.",
    "401": "No valid credentials: send 'Authorization: Bearer <token>' or use a staff session.",
    "403": "Authenticated, but not allowed to do this.",
    "404": "No such object (the message names what was looked for).",
    "415": "The body's Content-Type is not one the operation reads (application/json, a form "
    "or multipart), or the body could not be read as that type.",
    "429": "Too many failed authentications from this client or for this account: retry after "
    "the Retry-After header's seconds.",
}

_WRITE_METHODS = frozenset({"post", "put", "patch"})


def document_error_answers(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation documents its error answers.

    401, 403 and 429 everywhere; 404 where the path names an object; 400 where a body or a query
    parameter is read; 415 where a body is read. All in the one ``Error`` shape
    ``obleth.api.errors`` answers with.
    """
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            params = operation.get("parameters", [])
            codes = ["401", "403", "429"]
            if "{" in path:
                codes.append("404")
            if (
                method in _WRITE_METHODS
                or "requestBody" in operation
                or any(p.get("in") == "query" for p in params)
            ):
                codes.append("400")
            if "requestBody" in operation:
                codes.append("415")
            for code in codes:
                operation["responses"].setdefault(
                    code,
                    {
                        "description": ERROR_ANSWERS[code],
                        "content": {"application/json": {"schema": ref}},
                    },
                )
    return result
