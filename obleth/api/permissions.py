"""Who may do what in the Management API: the Django permissions the admin checks.

- Every route needs an active staff user (or the bootstrap admin token) first.
- Model routes: ``view`` for GET/HEAD/OPTIONS, ``add`` for POST, ``change`` for PUT/PATCH,
  ``delete`` for DELETE, on the model of the view's queryset (:class:`ModelPermissions`).
- Actions have explicit permissions (:func:`requires`): restart a replica
  (``core.restart_replica``), clear lost replicas (``core.clear_lost``), dismiss a provision
  error (``core.dismiss_error``), test the Slurm connection (``core.change_slurmsettings``).
- A managed spec (:class:`ManagedSpecPermission`): creating one is a deploy
  (``core.add_managedspec`` and ``core.deploy``), changing one needs
  ``core.change_managedspec``, and writing its shell (script_body, preamble, launch_command,
  image, launcher_spec) needs ``core.change_launch_script`` too.

The roles (viewer, operator, admin) are groups holding these permissions: obleth.accounts.roles.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Field
from django.db.models import Model as DjangoModel
from rest_framework import permissions
from rest_framework.request import Request

from obleth.accounts.roles import SHELL_SPEC_FIELDS
from obleth.api.auth import IsStaff

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
METHOD_ACTIONS = {
    "GET": "view",
    "HEAD": "view",
    "OPTIONS": "view",
    "POST": "add",
    "PUT": "change",
    "PATCH": "change",
    "DELETE": "delete",
}


def perm_name(model: type[DjangoModel], action: str) -> str:
    return f"{model._meta.app_label}.{action}_{model._meta.model_name}"


def _missing(request: Request, perms: list[str]) -> list[str]:
    user = request.user
    return [p for p in perms if not user.has_perm(p)]


class CheckedPermission(IsStaff):
    """Staff first; then ``required(request, view)``; the 403 names the missing permission."""

    def required(self, request: Request, view: Any) -> list[str]:
        raise NotImplementedError

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        missing = _missing(request, self.required(request, view))
        if missing:
            self.message = (
                f"Your role does not allow this: it needs the permission {', '.join(missing)}. "
                "Ask an admin for a role (viewer, operator, admin) that has it."
            )
            return False
        return True


class ModelPermissions(CheckedPermission):
    """DjangoModelPermissions, with view permission for reads."""

    def required(self, request: Request, view: Any) -> list[str]:
        queryset = getattr(view, "queryset", None)
        if queryset is None and hasattr(view, "get_queryset"):
            queryset = view.get_queryset()
        if queryset is None:
            return ["obleth.no-such-permission"]  # a route without a model: refuse, loudly
        action = METHOD_ACTIONS.get(str(request.method).upper(), "change")  # then a 405
        return [perm_name(queryset.model, action)]


def requires(*perms: str, reads: tuple[str, ...] | None = None) -> type[permissions.BasePermission]:
    """A permission class needing ``perms`` (and, for GET/HEAD/OPTIONS, ``reads`` if given)."""

    class Requires(CheckedPermission):
        needed = tuple(perms)
        needed_for_reads = tuple(reads) if reads is not None else tuple(perms)

        def required(self, request: Request, view: Any) -> list[str]:
            if str(request.method).upper() in READ_METHODS:
                return list(self.needed_for_reads)
            return list(self.needed)

    Requires.__name__ = "Requires_" + "_".join(p.replace(".", "_") for p in perms)
    return Requires


RestartReplica = requires("core.restart_replica", reads=("core.view_replica",))
ClearLost = requires("core.clear_lost", reads=("core.view_replica",))
TestSlurmConnection = requires("core.change_slurmsettings", reads=("core.view_slurmsettings",))
ViewProvisionerStatus = requires("core.view_provisionerstatus")


class DismissError(CheckedPermission):
    """PATCH error: null dismisses (core.dismiss_error); setting a message changes the spec."""

    def required(self, request: Request, view: Any) -> list[str]:
        if str(request.method).upper() in READ_METHODS:
            return ["core.view_managedspec"]
        data = request.data if isinstance(request.data, dict) else {}
        if data.get("error") in (None, ""):
            return ["core.dismiss_error"]
        return ["core.dismiss_error", "core.change_managedspec"]


class ManagedSpecPermission(CheckedPermission):
    def required(self, request: Request, view: Any) -> list[str]:
        from obleth.core.models import ManagedSpec

        method = str(request.method).upper()
        if method in READ_METHODS:
            return ["core.view_managedspec"]
        if method == "DELETE":
            return ["core.delete_managedspec"]
        if method not in {"PUT", "PATCH"}:
            return ["core.change_managedspec"]  # then 405: this route takes no such method
        spec = ManagedSpec.objects.filter(pk=view.kwargs.get("model_id")).first()
        needed = ["core.change_managedspec"] if spec else ["core.add_managedspec", "core.deploy"]
        if shell_changes(spec, request.data, replace=method == "PUT"):
            needed.append("core.change_launch_script")
        return needed


def shell_changes(spec: Any, data: Any, *, replace: bool) -> list[str]:
    """The shell fields this write would change (PUT: a field left out returns to its default)."""
    from obleth.core.models import ManagedSpec

    if not isinstance(data, dict):
        return []
    changed = []
    for name in SHELL_SPEC_FIELDS:
        field = ManagedSpec._meta.get_field(name)
        assert isinstance(field, Field)
        current = getattr(spec, name) if spec is not None else field.get_default()
        if name in data:
            new = data[name]
        elif replace:
            new = field.get_default()
        else:
            continue
        if _normal(new) != _normal(current):
            changed.append(name)
    return changed


def _normal(value: Any) -> Any:
    return "" if value is None else value
