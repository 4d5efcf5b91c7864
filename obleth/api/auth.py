"""Management API authentication: a bearer token (the bootstrap OBLETH_ADMIN_TOKEN or a
personal API token) or a staff session. What a caller may then do is decided by
:mod:`obleth.api.permissions`, from the same Django permissions the admin uses.

Failed bearer attempts are throttled per client address (``obleth.core.limits``, scope
``api-token``): past the limit every bearer attempt from that address is a 429 with
``Retry-After``, even with a right token. Failures are logged without the token.
"""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from obleth.accounts import services as tokens
from obleth.core import limits


class AdminPrincipal:
    """The caller holding OBLETH_ADMIN_TOKEN (bootstrap, scripts, CI): a superuser."""

    is_authenticated = True
    is_anonymous = False
    is_staff = True
    is_superuser = True
    is_active = True
    username = "admin-token"
    pk = None
    id = None

    def __str__(self) -> str:
        return self.username

    def get_username(self) -> str:
        return self.username

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return True

    def has_perms(self, perm_list: Any, obj: Any = None) -> bool:
        return True

    def has_module_perms(self, app_label: str) -> bool:
        return True


class Throttled(exceptions.Throttled):
    default_detail = "Too many failed token attempts from this address."


class BearerAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>``: a personal token (``obt_...``) or the admin token."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        supplied = supplied.strip()
        address = limits.client_address(request._request)
        try:
            tokens.check_throttle(address)
            if tokens.looks_like_personal_token(supplied):
                token = tokens.authenticate(supplied, address)
                return token.user, token
        except tokens.TokenThrottled as exc:
            raise Throttled(wait=exc.wait) from None
        except tokens.TokenRefused as exc:
            raise exceptions.AuthenticationFailed(exc.message) from None
        expected = settings.OBLETH_ADMIN_TOKEN
        if (
            not supplied
            or not expected
            or not hmac.compare_digest(supplied.encode("utf-8", "surrogatepass"), expected.encode())
        ):
            tokens.record_failure(address, "wrong admin token" if expected else "no admin token")
            if not expected:
                raise exceptions.AuthenticationFailed(
                    "This bearer token is not a personal API token, and OBLETH_ADMIN_TOKEN is "
                    "not set on this server. Create a token in the admin (API tokens) or at "
                    "POST /api/v1/tokens."
                )
            raise exceptions.AuthenticationFailed("Invalid or expired API token.")
        # No record_success: a write on every call is too dear; failures age out of the window.
        return AdminPrincipal(), None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="obleth"'


#: The old name, kept so settings and imports elsewhere keep working.
AdminTokenAuthentication = BearerAuthentication


class IsStaff(permissions.BasePermission):
    """Any active staff member (any role) or the admin token: the schema, the docs, own tokens."""

    message = (
        "Authenticate with 'Authorization: Bearer <token>' (a personal API token or "
        "OBLETH_ADMIN_TOKEN) or a staff session."
    )

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(
            user
            and getattr(user, "is_authenticated", False)
            and getattr(user, "is_active", False)
            and getattr(user, "is_staff", False)
        )


class IsOperator(permissions.BasePermission):
    """The old name of the API's permission class, kept for views that still import it: it now
    checks the view's model permissions (obleth.api.permissions.ModelPermissions), never just
    staff status."""

    message = IsStaff.message

    def has_permission(self, request: Request, view: Any) -> bool:
        from obleth.api.permissions import ModelPermissions

        check = ModelPermissions()
        allowed = check.has_permission(request, view)
        self.message = check.message
        return allowed
