"""Management API authentication: the admin bearer token or a staff session. Nothing else."""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request


class AdminPrincipal:
    """The caller holding OBLETH_ADMIN_TOKEN (scripts, CI, the provisioner's own tools)."""

    is_authenticated = True
    is_staff = True
    is_active = True
    username = "admin-token"
    pk = None

    def __str__(self) -> str:
        return self.username


class AdminTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        supplied = supplied.strip()
        expected = settings.OBLETH_ADMIN_TOKEN
        if not expected:
            raise exceptions.AuthenticationFailed(
                "Bearer tokens are disabled: OBLETH_ADMIN_TOKEN is not set on this server."
            )
        if not supplied or not hmac.compare_digest(supplied.encode(), expected.encode()):
            raise exceptions.AuthenticationFailed("Invalid admin token.")
        return AdminPrincipal(), None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="obleth"'


class IsOperator(permissions.BasePermission):
    """Admin token holders and active staff users."""

    message = "Authenticate with 'Authorization: Bearer <OBLETH_ADMIN_TOKEN>' or a staff session."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(
            user and getattr(user, "is_authenticated", False) and getattr(user, "is_staff", False)
        )
