"""The three roles as rules over permissions: ``viewer``, ``operator`` and ``admin``.

A rule names an app label, a model and an action. The action is a standard one (``view``,
``add``, ``change``, ``delete``: the codename ``<action>_<model>``), an explicit codename
(``restart_replica``), or ``*``. ``app="obleth"`` means every app whose code lives under
``obleth.`` (core, gateway, accounts and any app added later), so a model added by another app
is covered by the same rules without editing this file.

The groups are made to match these rules exactly by a data migration and again after every
``migrate`` (a ``post_migrate`` handler): permissions added by hand to these three groups are
removed then. Build a group of your own for a custom mix.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable
from typing import Any

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLE_NAMES = (VIEWER, OPERATOR, ADMIN)

#: Fields of a managed spec that are shell (run by the job): changing them needs
#: ``core.change_launch_script`` besides the change permission.
SHELL_SPEC_FIELDS = ("script_body", "preamble", "launch_command", "image", "launcher_spec")

STANDARD_ACTIONS = ("view", "add", "change", "delete")


@dataclasses.dataclass(frozen=True)
class Rule:
    """Which permissions a rule matches: shell-style patterns over app label and model."""

    app: str = "*"
    model: str = "*"
    action: str = "*"

    def matches(self, app_label: str, app_module: str, model: str, codename: str) -> bool:
        if self.app == "obleth":
            if not app_module.startswith("obleth."):
                return False
        elif not fnmatch.fnmatchcase(app_label, self.app):
            return False
        if not fnmatch.fnmatchcase(model, self.model):
            return False
        if self.action == "*":
            return True
        if self.action in STANDARD_ACTIONS:
            return codename == f"{self.action}_{model}"
        return codename == self.action


@dataclasses.dataclass(frozen=True)
class Role:
    name: str
    description: str
    grants: tuple[Rule, ...]
    denies: tuple[Rule, ...] = ()

    def allows(self, app_label: str, app_module: str, model: str, codename: str) -> bool:
        args = (app_label, app_module, model, codename)
        return any(r.matches(*args) for r in self.grants) and not any(
            r.matches(*args) for r in self.denies
        )


#: Viewing other users' API tokens (hashed, but whose token is where) is for admins.
_OTHERS_TOKENS = Rule("accounts", "apitoken", "*")

ROLES: tuple[Role, ...] = (
    Role(
        VIEWER,
        "Reads everything obleth shows (secrets stay masked); changes nothing.",
        grants=(Rule("obleth", "*", "view"),),
        denies=(_OTHERS_TOKENS,),
    ),
    Role(
        OPERATOR,
        "A viewer who also deploys and scales models, restarts replicas, dismisses provision "
        "errors, clears lost replicas and reads job logs. No Slurm settings, no secrets "
        "(endpoints, gateway keys), no recipes and no spec shell (script, preamble, command, "
        "image).",
        grants=(
            Rule("obleth", "*", "view"),
            Rule("core", "model", "add"),
            Rule("core", "model", "change"),
            Rule("core", "managedspec", "add"),
            Rule("core", "managedspec", "change"),
            Rule("core", "managedspec", "delete"),
            Rule("core", "managedspec", "deploy"),
            Rule("core", "managedspec", "dismiss_error"),
            Rule("core", "replica", "restart_replica"),
            Rule("core", "replica", "clear_lost"),
            Rule("core", "replica", "read_job_log"),
        ),
        denies=(_OTHERS_TOKENS,),
    ),
    Role(
        ADMIN,
        "Everything, users and roles included.",
        grants=(Rule("*", "*", "*"),),
    ),
)


def role(name: str) -> Role:
    for item in ROLES:
        if item.name == name:
            return item
    raise KeyError(name)


def _app_module(app_label: str) -> str:
    """The app's Python package. Read from the live registry: a migration's historical apps
    name every app by its label only."""
    from django.apps import apps as live_apps

    try:
        return str(live_apps.get_app_config(app_label).name)
    except LookupError:
        return ""


def permissions_of(the_role: Role, permissions: Iterable[Any]) -> list[Any]:
    """The Permission rows (of any model class, historical ones included) a role grants."""
    chosen = []
    for perm in permissions:
        ct = perm.content_type
        module = _app_module(ct.app_label)
        if the_role.allows(ct.app_label, module, ct.model, perm.codename):
            chosen.append(perm)
    return chosen


def ensure_permissions(app_registry: Any, using: str = "default") -> None:
    """Create the Permission rows of every installed model now (Django does it only after
    ``migrate`` ends, too late for a data migration)."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes

    for app_config in app_registry.get_app_configs():
        if getattr(app_config, "models_module", None) is None:
            app_config.models_module = True  # historical app configs leave it unset
        create_contenttypes(app_config, verbosity=0, using=using, apps=app_registry)
        create_permissions(app_config, verbosity=0, using=using, apps=app_registry)


def apply_roles(app_registry: Any, using: str = "default") -> dict[str, int]:
    """Make the three groups hold exactly what their rules grant. Returns name -> count."""
    ensure_permissions(app_registry, using=using)
    group_model = app_registry.get_model("auth", "Group")
    permission_model = app_registry.get_model("auth", "Permission")
    every = list(permission_model.objects.using(using).select_related("content_type"))
    counts: dict[str, int] = {}
    for item in ROLES:
        group, _ = group_model.objects.using(using).get_or_create(name=item.name)
        chosen = permissions_of(item, every)
        group.permissions.set(chosen)
        counts[item.name] = len(chosen)
    return counts
