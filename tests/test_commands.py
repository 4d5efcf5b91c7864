"""Management commands for scripts and demos: ensure_admin, configure_slurm, deploy_recipe.

Real commands through ``call_command`` on the test database; nothing is faked. (manage.py
reconcile is covered in tests/provisioner/test_reconcile.py, where a slurmrestd is at hand.)
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from obleth.core.choices import HostingMode
from obleth.core.models import ManagedSpec, Model, SlurmSettings

RECIPES = Path(django_settings.BASE_DIR) / "recipes" / "library"
DEMO = RECIPES / "test-engine.recipe"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJvYmxldGgifQ.c2VjcmV0LXNpZ25hdHVyZS1mb3ItdGVzdHM"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------- ensure_admin


def test_ensure_admin_creates_the_superuser_once(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBLETH_ADMIN_PASSWORD", "first-password-123")
    _, err = run("ensure_admin")
    assert "created superuser 'admin'" in err
    users = get_user_model()
    admin = users.objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    assert admin.check_password("first-password-123")

    # Run again with another password: nothing is reset, nothing is created.
    monkeypatch.setenv("OBLETH_ADMIN_PASSWORD", "second-password-456")
    out, err = run("ensure_admin")
    assert out == "" and err == ""
    admin.refresh_from_db()
    assert admin.check_password("first-password-123")
    assert not admin.check_password("second-password-456")
    assert users.objects.filter(username="admin").count() == 1


def test_ensure_admin_existing_user_needs_no_password(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_user_model().objects.create_user("ops", password="kept-password-1")
    monkeypatch.delenv("OBLETH_ADMIN_PASSWORD", raising=False)
    run("ensure_admin", "--username", "ops")
    user = get_user_model().objects.get(username="ops")
    assert user.check_password("kept-password-1") and not user.is_superuser


@pytest.mark.parametrize("password", ["", "short", "1234567"])
def test_ensure_admin_refuses_a_short_password(
    db: Any, monkeypatch: pytest.MonkeyPatch, password: str
) -> None:
    monkeypatch.setenv("OBLETH_ADMIN_PASSWORD", password)
    with pytest.raises(CommandError, match="Set OBLETH_ADMIN_PASSWORD to a password of 8"):
        run("ensure_admin")
    assert not get_user_model().objects.filter(username="admin").exists()


def test_ensure_admin_reads_the_named_env_variable(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OBLETH_ADMIN_PASSWORD", "x")  # would be refused
    monkeypatch.setenv("MY_ADMIN_SECRET", "named-env-password")
    _, err = run("ensure_admin", "--username", "root2", "--password-env", "MY_ADMIN_SECRET")
    assert "named-env-password" not in err
    assert get_user_model().objects.get(username="root2").check_password("named-env-password")
    monkeypatch.delenv("MY_ADMIN_SECRET")
    with pytest.raises(CommandError, match="Set MY_ADMIN_SECRET"):
        run("ensure_admin", "--username", "root3", "--password-env", "MY_ADMIN_SECRET")


# ---------------------------------------------------------------------------- configure_slurm


def test_configure_slurm_saves_the_connection_and_reads_the_jwt_from_env(
    db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OBLETH_SLURM_JWT", f"  {JWT}\n")
    caplog.set_level(logging.DEBUG)
    out, err = run(
        "configure_slurm",
        "--url",
        "http://127.0.0.1:6820/",
        "--user",
        " slurm ",
        "--api-version",
        "v0.0.38",
        "--log-dir",
        "/var/log/obleth",
        "--enable",
    )
    slurm = SlurmSettings.load()
    assert slurm.slurmrestd_url == "http://127.0.0.1:6820"  # cleaned by full_clean
    assert slurm.user == "slurm"
    assert slurm.api_version == "v0.0.38"
    assert slurm.jwt == JWT
    assert slurm.log_dir == "/var/log/obleth"
    assert slurm.enabled is True
    assert "jwt=set" in err and "enabled=True" in err
    for text in (out, err, caplog.text):
        assert JWT not in text
        assert JWT.split(".")[2] not in text


def test_configure_slurm_keeps_the_stored_jwt_when_the_env_is_empty(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OBLETH_SLURM_JWT", JWT)
    run("configure_slurm", "--url", "http://127.0.0.1:6820", "--user", "slurm")
    monkeypatch.delenv("OBLETH_SLURM_JWT")
    _, err = run("configure_slurm", "--url", "http://127.0.0.1:6820/", "--user", "slurm")
    slurm = SlurmSettings.load()
    assert slurm.jwt == JWT and slurm.slurmrestd_url == "http://127.0.0.1:6820"
    assert "jwt=set" in err and "version=detect" in err
    assert slurm.enabled is False  # only --enable switches it on


def test_configure_slurm_drops_the_stored_jwt_for_a_new_url_unless_kept(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JWT was given for one host: a new --url without a token does not carry it along."""
    monkeypatch.setenv("OBLETH_SLURM_JWT", JWT)
    run("configure_slurm", "--url", "http://127.0.0.1:6820", "--user", "slurm")
    monkeypatch.delenv("OBLETH_SLURM_JWT")
    _, err = run("configure_slurm", "--url", "http://127.0.0.1:6821", "--user", "slurm")
    assert SlurmSettings.load().jwt == "" and "jwt=not set" in err
    monkeypatch.setenv("OBLETH_SLURM_JWT", JWT)
    run("configure_slurm", "--url", "http://127.0.0.1:6821", "--user", "slurm")
    monkeypatch.delenv("OBLETH_SLURM_JWT")
    run("configure_slurm", "--url", "http://127.0.0.1:6822", "--user", "slurm", "--keep-secret")
    assert SlurmSettings.load().jwt == JWT


def test_configure_slurm_reads_the_named_env_variable(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OBLETH_SLURM_JWT", raising=False)
    monkeypatch.setenv("SITE_TOKEN", JWT)
    out, err = run(
        "configure_slurm",
        "--url",
        "http://127.0.0.1:6820",
        "--user",
        "u",
        "--jwt-env",
        "SITE_TOKEN",
    )
    assert SlurmSettings.load().jwt == JWT
    assert JWT not in out + err


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--url", "not a url", "--user", "slurm"], "slurmrestd_url"),
        (["--url", "ftp://127.0.0.1:6820", "--user", "slurm"], "slurmrestd_url"),
        (["--url", "", "--user", "slurm", "--enable"], "slurmrestd_url"),
        (["--url", "http://127.0.0.1:6820", "--user", " ", "--enable"], "user"),
        (
            ["--url", "http://127.0.0.1:6820", "--user", "s", "--api-version", "v0.0.40 x"],
            "api_version",
        ),
    ],
    ids=["garbage-url", "ftp-url", "enable-without-url", "enable-without-user", "bad-version"],
)
def test_configure_slurm_validation_names_the_field(
    db: Any, monkeypatch: pytest.MonkeyPatch, args: list[str], field: str
) -> None:
    monkeypatch.setenv("OBLETH_SLURM_JWT", JWT)
    with pytest.raises(CommandError) as info:
        run("configure_slurm", *args)
    message = str(info.value)
    assert message.startswith(f"{field}: ") or f"; {field}: " in message, message
    assert JWT not in message
    slurm = SlurmSettings.load()
    assert slurm.jwt == "" and slurm.enabled is False  # nothing was saved


# ------------------------------------------------------------------------------ deploy_recipe


def test_deploy_recipe_creates_the_model_and_its_spec(db: Any) -> None:
    _, err = run("deploy_recipe", str(DEMO), "--name", "demo-chat")
    model = Model.objects.get(name="demo-chat")
    assert f"deployed test-engine.recipe as model 'demo-chat' ({model.pk})" in err
    assert model.hosting_mode == HostingMode.SLURM
    assert model.upstream_model in ("", "test-engine", "demo-chat")
    spec = ManagedSpec.objects.get(model=model)
    assert spec.partition == "debug"
    assert spec.serving_port == 18000
    assert spec.target_replicas == 2 and spec.max_job_failures == 3
    assert spec.mem == "256M" and spec.health_path == "/health"
    assert "testengine/server.py" in spec.script_body
    assert "{{" not in spec.script_body  # rendered, tokens resolved
    spec.full_clean()  # what was stored passes the model's own validation


def test_deploy_recipe_overrides(db: Any) -> None:
    run(
        "deploy_recipe",
        str(DEMO),
        "--name",
        "demo-small",
        "--replicas",
        "1",
        "--partition",
        "gpu",
        "--set",
        "time_limit=1:00:00",
        "--set",
        "mem=1G",
    )
    spec = ManagedSpec.objects.get(model__name="demo-small")
    assert (spec.target_replicas, spec.partition, spec.time_limit, spec.mem) == (
        1,
        "gpu",
        "1:00:00",
        "1G",
    )


def test_deploy_recipe_if_missing_leaves_an_existing_model_alone(db: Any) -> None:
    run("deploy_recipe", str(DEMO), "--name", "demo-once", "--replicas", "1")
    out, err = run(
        "deploy_recipe", str(DEMO), "--name", "demo-once", "--replicas", "5", "--if-missing"
    )
    assert out == "" and err == ""
    assert ManagedSpec.objects.get(model__name="demo-once").target_replicas == 1
    assert Model.objects.filter(name="demo-once").count() == 1

    with pytest.raises(CommandError, match="name: A model named 'demo-once' already exists"):
        run("deploy_recipe", str(DEMO), "--name", "demo-once")


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (["partition"], "--set 'partition': write FIELD=VALUE"),
        (["colour=blue"], "colour: `colour` is not a deploy setting"),
        (["serving_port=eighty"], "serving_port"),
        (["time_limit=4h"], "time_limit"),
    ],
    ids=["no-equals", "unknown-field", "not-a-number", "bad-time-limit"],
)
def test_deploy_recipe_refuses_a_bad_set(db: Any, sets: list[str], words: str) -> None:
    args = [str(DEMO), "--name", "demo-bad"]
    for item in sets:
        args += ["--set", item]
    with pytest.raises(CommandError) as info:
        run("deploy_recipe", *args)
    assert words in str(info.value), str(info.value)
    assert not Model.objects.filter(name="demo-bad").exists()
    assert not ManagedSpec.objects.exists()


def test_deploy_recipe_missing_file(db: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nope.recipe"
    with pytest.raises(CommandError, match="no such recipe file"):
        run("deploy_recipe", str(missing), "--name", "x")


def test_deploy_recipe_invalid_document_names_the_recipe(db: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.recipe"
    bad.write_text("just a script, no header\n")
    with pytest.raises(CommandError, match="recipe"):
        run("deploy_recipe", str(bad), "--name", "x")
    assert not Model.objects.filter(name="x").exists()


def test_configure_slurm_refuses_an_unsupported_api_version(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OBLETH_SLURM_JWT", JWT)
    with pytest.raises(CommandError, match="api_version: "):
        run(
            "configure_slurm",
            *("--url", "http://127.0.0.1:6820", "--user", "s", "--api-version", "v0.0.35"),
        )
    assert SlurmSettings.load().api_version == ""
