"""The role groups: created by the migration, re-applied after every migrate, and covering
models that other apps add later (a stand-in GatewayKey content type, since obleth.gateway
has no models on this branch)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command

from obleth.accounts.roles import ROLES, apply_roles, role

pytestmark = pytest.mark.django_db


def _perms(group: str) -> set[str]:
    return {
        f"{p.content_type.app_label}.{p.codename}"
        for p in Group.objects.get(name=group).permissions.select_related("content_type")
    }


def test_the_migration_made_the_three_groups() -> None:
    assert {g.name for g in Group.objects.all()} >= {"viewer", "operator", "admin"}
    viewer, operator, admin = _perms("viewer"), _perms("operator"), _perms("admin")
    assert viewer and all(p.split(".")[1].startswith("view_") for p in viewer)
    assert {"core.view_model", "core.view_slurmsettings", "accounts.view_auditentry"} <= viewer
    assert "accounts.view_apitoken" not in viewer  # other people's tokens: admins only
    assert viewer < operator < admin
    assert {
        "core.restart_replica",
        "core.clear_lost",
        "core.dismiss_error",
        "core.deploy",
        "core.change_managedspec",
    } <= operator
    for forbidden in (
        "core.change_slurmsettings",
        "core.change_launch_script",
        "core.add_recipe",
        "core.change_recipe",
        "core.change_endpoint",
        "core.add_endpoint",
        "auth.change_user",
    ):
        assert forbidden not in operator, forbidden
    assert admin == {
        f"{p.content_type.app_label}.{p.codename}"
        for p in Permission.objects.select_related("content_type")
    }


def test_a_model_added_later_by_another_obleth_app_is_covered() -> None:
    """A model no migration of the roles knew about (a stand-in, 'gateway.futurething') gets
    its permissions into the roles by the rules alone; the real gateway keys are covered too."""
    ct = ContentType.objects.create(app_label="gateway", model="futurething")
    for action in ("view", "add", "change", "delete"):
        Permission.objects.create(
            content_type=ct, codename=f"{action}_futurething", name=f"Can {action} future thing"
        )
    apply_roles(apps)
    assert "gateway.view_futurething" in _perms("viewer")
    assert "gateway.view_futurething" in _perms("operator")
    assert {"gateway.add_futurething", "gateway.delete_futurething"} <= _perms("admin")
    assert "gateway.view_gatewaykey" in _perms("viewer")
    assert "gateway.add_gatewaykey" not in _perms("operator")  # keys are secrets: admins
    assert {"gateway.add_gatewaykey", "gateway.delete_gatewaykey"} <= _perms("admin")


def test_every_migrate_puts_the_groups_back_to_their_rules() -> None:
    viewer = Group.objects.get(name="viewer")
    viewer.permissions.add(Permission.objects.get(codename="change_slurmsettings"))
    viewer.permissions.remove(Permission.objects.get(codename="view_model"))
    Group.objects.filter(name="operator").delete()
    call_command("migrate", verbosity=0)
    assert "core.change_slurmsettings" not in _perms("viewer")
    assert "core.view_model" in _perms("viewer")
    assert "core.restart_replica" in _perms("operator")


def test_rules_read_like_the_guide() -> None:
    assert [r.name for r in ROLES] == ["viewer", "operator", "admin"]
    operator = role("operator")
    assert operator.allows("core", "obleth.core", "replica", "restart_replica")
    assert not operator.allows("core", "obleth.core", "slurmsettings", "change_slurmsettings")
    assert not role("viewer").allows("auth", "django.contrib.auth", "user", "view_user")
    assert role("admin").allows("auth", "django.contrib.auth", "user", "change_user")


def test_the_legacy_isoperator_class_checks_model_permissions() -> None:
    """Views written against the old name (e.g. another app's) get model permissions, not a
    staff-only check."""
    from django.contrib.auth import get_user_model
    from rest_framework.generics import ListCreateAPIView
    from rest_framework.test import APIRequestFactory, force_authenticate

    from obleth.api.auth import IsOperator
    from obleth.api.serializers import ModelSerializer
    from obleth.core.models import Model

    class Legacy(ListCreateAPIView):  # type: ignore[type-arg]
        queryset = Model.objects.all()
        serializer_class = ModelSerializer
        permission_classes = [IsOperator]
        filter_backends: list[object] = []

    view = Legacy.as_view()
    factory = APIRequestFactory()

    def call(method: str, user: object) -> int:
        request = getattr(factory, method)("/x", {"name": "legacy-m"}, format="json")
        force_authenticate(request, user=user)
        return int(view(request).status_code)

    users = {}
    for name, group in (("none", None), ("viewer", "viewer"), ("admin", "admin")):
        user = get_user_model().objects.create_user(f"legacy-{name}", password="x", is_staff=True)
        if group:
            user.groups.add(Group.objects.get(name=group))
        users[name] = get_user_model().objects.get(pk=user.pk)
    assert call("get", users["none"]) == 403
    assert call("get", users["viewer"]) == 200
    assert call("post", users["viewer"]) == 403
    assert call("post", users["admin"]) == 201


def test_secret_fields_are_recognised_by_kind_and_name() -> None:
    from django.db import models

    from obleth.accounts.audit import is_secret_field
    from obleth.core.models import Endpoint, SlurmSettings

    assert is_secret_field(SlurmSettings._meta.get_field("jwt"))  # type: ignore[arg-type]
    assert is_secret_field(SlurmSettings._meta.get_field("hf_token"))  # type: ignore[arg-type]
    assert is_secret_field(Endpoint._meta.get_field("api_key"))  # type: ignore[arg-type]
    for name in ("digest", "token_hash", "key_digest", "password", "client_secret"):
        field = models.CharField(max_length=64)
        field.name = name
        assert is_secret_field(field), name
    for name in ("prefix", "name", "api_base", "cache_dir", "setup"):
        field = models.CharField(max_length=64)
        field.name = name
        assert not is_secret_field(field), name
