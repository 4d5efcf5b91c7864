"""The admin console: every page renders, actions call the services, secrets stay hidden."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from obleth.accounts.models import ApiToken, AuditEntry
from obleth.accounts.services import create_token
from obleth.core import services
from obleth.core.models import (
    Alert,
    AuthFailureWindow,
    Endpoint,
    HealthEvent,
    Launch,
    Lease,
    ManagedSpec,
    Model,
    ProvisionerStatus,
    Recipe,
    Replica,
    SlurmSettings,
)
from obleth.gateway import keys
from obleth.gateway.models import GatewayKey
from tests.api.conftest import make_jwt
from tests.api.test_launches_recipes_alerts import GOOD_RECIPE
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model

pytestmark = pytest.mark.django_db

JWT_MARK = "ADMINJWTMARKER"


@pytest.fixture
def objects(admin_user: Any) -> dict[type, Any]:
    """One row of every registered model."""
    static = make_model(name="static-a")
    endpoint = make_endpoint(static, api_key="sk-admin-secret-key-5678")
    slurm = make_slurm_model(name="slurm-a")
    replica = Replica.objects.create(
        model_id=slurm.pk,
        model_name=slurm.name,
        job_name="obleth-slurm-a",
        job_id="77",
        state="healthy",
    )
    launch = Launch.objects.create(
        id=replica.pk,
        model_id=slurm.pk,
        model_name=slurm.name,
        job_name="obleth-slurm-a",
        job_id="77",
    )
    return {
        Model: static,
        Endpoint: endpoint,
        ManagedSpec: ManagedSpec.objects.get(model=slurm),
        Replica: replica,
        Launch: launch,
        Recipe: Recipe.objects.create(name="tiny", body=GOOD_RECIPE),
        SlurmSettings: SlurmSettings.load(),
        ProvisionerStatus: ProvisionerStatus.load(),
        Alert: Alert.objects.create(key="slurm_reconcile_held", title="reconciliation is failing"),
        Lease: Lease.objects.create(name="model:x", owner="w1", expires_at=timezone.now()),
        HealthEvent: HealthEvent.objects.create(
            model_id=static.pk, kind="check", at=timezone.now(), outcome="healthy"
        ),
        AuthFailureWindow: AuthFailureWindow.objects.create(
            scope="admin-login", key="ip:203.0.113.7", failures=2, window_started_at=timezone.now()
        ),
        Group: Group.objects.create(name="operators"),
        GatewayKey: keys.create_key("team", models=[static]).key,
        type(admin_user): admin_user,
        ApiToken: create_token(admin_user, "admin page test").token,
        AuditEntry: AuditEntry.objects.create(
            actor_name="someone", via="admin", action="update", app_label="core", model="model"
        ),
    }


def _url(model: type, view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


REGISTERED = sorted(admin.site._registry, key=lambda m: m._meta.label)


def test_every_core_model_is_registered() -> None:
    from django.apps import apps

    core = set(apps.get_app_config("core").get_models())
    assert core <= set(admin.site._registry)


@pytest.mark.parametrize("model", REGISTERED, ids=[m._meta.label for m in REGISTERED])
def test_every_changelist_and_change_page_renders(
    admin_client: Any, objects: dict[type, Any], model: type
) -> None:
    changelist = admin_client.get(_url(model, "changelist"), follow=True)
    assert changelist.status_code == 200
    obj = objects[model]
    change = admin_client.get(_url(model, "change", obj.pk))
    assert change.status_code == 200
    model_admin = admin.site._registry[model]
    request = change.wsgi_request
    if model_admin.has_add_permission(request):
        assert admin_client.get(_url(model, "add")).status_code == 200


def test_lists_show_coloured_state_badges(admin_client: Any, objects: dict[type, Any]) -> None:
    html = admin_client.get(_url(Replica, "changelist")).content.decode()
    assert "obleth-badge" in html
    assert "#1a7f37" in html  # healthy's colour from choices.STATE_COLOURS


def test_restart_action_sets_cancel_requested(admin_client: Any, objects: dict[type, Any]) -> None:
    replica = objects[Replica]
    other = Replica.objects.create(
        model_id=replica.model_id, model_name="slurm-a", job_name="j", job_id="78"
    )
    response = admin_client.post(
        _url(Replica, "changelist"),
        {"action": "restart_selected", "_selected_action": [str(replica.pk)]},
        follow=True,
    )
    assert response.status_code == 200
    replica.refresh_from_db()
    other.refresh_from_db()
    assert replica.cancel_requested is True
    assert other.cancel_requested is False


def test_clear_lost_action_deletes_lost_rows_of_the_selected_models(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    replica = objects[Replica]
    lost = Replica.objects.create(
        model_id=replica.model_id, model_name="slurm-a", job_name="j", state="lost"
    )
    elsewhere = Replica.objects.create(
        model_id=uuid.uuid4(), model_name="b", job_name="j", state="lost"
    )
    admin_client.post(
        _url(Replica, "changelist"),
        {"action": "clear_lost_selected", "_selected_action": [str(replica.pk)]},
        follow=True,
    )
    assert not Replica.objects.filter(pk=lost.pk).exists()
    assert Replica.objects.filter(pk=elsewhere.pk).exists()
    assert Replica.objects.filter(pk=replica.pk).exists()


def test_replica_fields_are_read_only(admin_client: Any, objects: dict[type, Any]) -> None:
    replica = objects[Replica]
    admin_client.post(_url(Replica, "change", replica.pk), {"state": "lost", "job_id": "1"})
    replica.refresh_from_db()
    assert (replica.state, replica.job_id) == ("healthy", "77")
    html = admin_client.get(_url(Replica, "change", replica.pk)).content.decode()
    assert 'name="state"' not in html


def test_replica_list_warns_while_passes_are_failing(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    status = ProvisionerStatus.load()
    status.heartbeat_at = timezone.now()
    status.last_pass_status = "error"
    status.last_pass_detail = "slurmrestd unreachable"
    status.non_ok_since = timezone.now() - dt.timedelta(minutes=15)
    status.save()
    html = admin_client.get(_url(Replica, "changelist")).content.decode()
    assert "running but failing since" in html
    assert "frozen" in html
    assert "slurmrestd unreachable" in html

    status.last_pass_status = "ok"
    status.non_ok_since = None
    status.save()
    assert "frozen" not in admin_client.get(_url(Replica, "changelist")).content.decode()


def test_model_page_shows_the_provision_error_and_dismiss_clears_it(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    spec = objects[ManagedSpec]
    services.set_provision_error(spec, "Invalid qos specification")
    change = _url(Model, "change", spec.model_id)
    html = admin_client.get(change).content.decode()
    assert "Invalid qos specification" in html
    assert "Dismiss" in html
    response = admin_client.post(
        reverse("admin:core_model_dismiss_provision_error", args=[spec.model_id]), follow=True
    )
    assert response.status_code == 200
    spec.refresh_from_db()
    assert spec.last_provision_error == ""
    assert "Invalid qos specification" not in admin_client.get(change).content.decode()


def test_slurm_model_page_has_the_managed_spec_inline_and_a_fixed_hosting_mode(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    spec = objects[ManagedSpec]
    html = admin_client.get(_url(Model, "change", spec.model_id)).content.decode()
    assert "managed_spec-0-partition" in html
    assert 'name="hosting_mode"' not in html  # read-only after creation
    static_html = admin_client.get(_url(Model, "change", objects[Model].pk)).content.decode()
    assert "managed_spec-0-partition" not in static_html


def test_slurm_settings_is_a_singleton(admin_client: Any, objects: dict[type, Any]) -> None:
    response = admin_client.get(_url(SlurmSettings, "changelist"))
    assert response.status_code == 302
    assert response["Location"] == _url(SlurmSettings, "change", 1)
    assert admin_client.get(_url(SlurmSettings, "add")).status_code == 403
    assert admin_client.post(_url(SlurmSettings, "delete", 1), {"post": "yes"}).status_code == 403
    assert SlurmSettings.objects.count() == 1


def _settings_form(**overrides: Any) -> dict[str, Any]:
    data = {
        "enabled": "on",
        "slurmrestd_url": "http://127.0.0.1:6820",
        "api_version": "",
        "user": "obleth",
        "new_jwt": "",
        "cache_dir": "",
        "images_dir": "",
        "log_dir": "",
        "setup": "",
        "images": "{}",
        "node_addresses": "{}",
        "new_hf_token": "",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_the_jwt_never_appears_in_the_settings_page(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    token = make_jwt(exp=timezone.now() + dt.timedelta(hours=2), marker=JWT_MARK)
    url = _url(SlurmSettings, "change", 1)
    response = admin_client.post(
        url, _settings_form(new_jwt=token, new_hf_token="hf_adminsecret_4321")
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    stored = SlurmSettings.load()
    assert stored.jwt == token
    html = admin_client.get(url).content.decode()
    assert token not in html
    assert token[:-4] not in html
    for segment in token.split("."):
        assert segment not in html
    assert "hf_adminsecret_4321" not in html
    assert f"…{token[-4:]}" in html  # the masked view is there
    assert "expires" in html


def test_a_blank_secret_keeps_the_stored_one_and_clear_removes_it(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    token = make_jwt(exp=None)
    services.update_slurm_settings({}, jwt=token, hf_token="hf_keep_me_0000")
    url = _url(SlurmSettings, "change", 1)
    assert admin_client.post(url, _settings_form(cache_dir="/shared")).status_code == 302
    stored = SlurmSettings.load()
    assert (stored.jwt, stored.hf_token, stored.cache_dir) == (token, "hf_keep_me_0000", "/shared")
    assert admin_client.post(url, _settings_form(clear_jwt="on")).status_code == 302
    stored = SlurmSettings.load()
    assert (stored.jwt, stored.hf_token) == ("", "hf_keep_me_0000")


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"node_addresses": '{"gpu7": "gpu7.cluster"}'}, "gpu7"),
        ({"slurmrestd_url": ""}, "slurmrestd URL"),
        ({"api_version": "../x"}, "letters, digits and dots"),
        ({"images": '{"vllm": ""}'}, "vllm"),
    ],
)
def test_settings_form_validation(
    admin_client: Any, objects: dict[type, Any], overrides: dict[str, Any], needle: str
) -> None:
    response = admin_client.post(_url(SlurmSettings, "change", 1), _settings_form(**overrides))
    assert response.status_code == 200  # the form again, with the error
    assert "errorlist" in response.content.decode()
    assert needle in response.content.decode()
    assert SlurmSettings.load().enabled is False


def test_settings_page_shows_the_provisioner_status(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    url = _url(SlurmSettings, "change", 1)
    assert "not running" in admin_client.get(url).content.decode()
    status = ProvisionerStatus.load()
    status.heartbeat_at = timezone.now()
    status.last_pass_status = "ok"
    status.save()
    html = admin_client.get(url).content.decode()
    assert "not running" not in html
    assert ">running<" in html


def test_test_connection_button_without_a_url(admin_client: Any, objects: dict[type, Any]) -> None:
    response = admin_client.post(reverse("admin:core_slurmsettings_test"), follow=True)
    assert response.status_code == 200
    assert "No slurmrestd URL is configured" in response.content.decode()


def test_endpoint_api_key_is_write_only(admin_client: Any, objects: dict[type, Any]) -> None:
    endpoint = objects[Endpoint]
    url = _url(Endpoint, "change", endpoint.pk)
    html = admin_client.get(url).content.decode()
    assert "sk-admin-secret-key-5678" not in html
    assert "…5678" in html
    form = {
        "model": str(endpoint.model_id),
        "name": endpoint.name,
        "api_base": endpoint.api_base,
        "priority": "7",
        "weight": "100",
        "enabled": "on",
        "new_api_key": "",
    }
    assert admin_client.post(url, form).status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.api_key, endpoint.priority) == ("sk-admin-secret-key-5678", 7)
    assert admin_client.post(url, {**form, "clear_api_key": "on"}).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.api_key == ""


def test_endpoint_restart_action_flags_the_replica_behind_it(
    admin_client: Any, objects: dict[type, Any]
) -> None:
    replica = objects[Replica]
    slurm_endpoint = make_endpoint(Model.objects.get(pk=replica.model_id), replica_id=replica.pk)
    static_endpoint = objects[Endpoint]
    response = admin_client.post(
        _url(Endpoint, "changelist"),
        {
            "action": "restart_replica",
            "_selected_action": [str(slurm_endpoint.pk), str(static_endpoint.pk)],
        },
        follow=True,
    )
    assert "1 static endpoint(s) skipped" in response.content.decode()
    replica.refresh_from_db()
    assert replica.cancel_requested is True


def test_launch_history_is_view_only(admin_client: Any, objects: dict[type, Any]) -> None:
    launch = objects[Launch]
    assert admin_client.post(_url(Launch, "delete", launch.pk), {"post": "yes"}).status_code == 403
    admin_client.post(_url(Launch, "change", launch.pk), {"job_id": "1"})
    launch.refresh_from_db()
    assert launch.job_id == "77"
    assert Launch.objects.filter(pk=launch.pk).exists()


def test_recipe_form_checks_the_body(admin_client: Any, objects: dict[type, Any]) -> None:
    response = admin_client.post(
        _url(Recipe, "add"), {"name": "bad", "author": "", "body": "no header"}
    )
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    assert not Recipe.objects.filter(name="bad").exists()
