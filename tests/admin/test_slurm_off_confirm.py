"""Turning Slurm off in the Slurm settings page while replicas run asks first and says how many
there are and what happens to them (nothing drains them: the provisioner idles).

Real admin views and templates through Django's test client; the replica rows are written by
the test (standing in for the provisioner), no Slurm is called.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from obleth.core.models import Replica, SlurmSettings
from tests.plugins.factories import make_slurm_model

pytestmark = pytest.mark.django_db
SECRET = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJvYmxldGgifQ.c2VjcmV0LXNpZ25hdHVyZS0xMjM0"


@pytest.fixture
def admin_client() -> Client:
    user = get_user_model().objects.create_user("slurm-admin", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="admin"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def slurm() -> SlurmSettings:
    row = SlurmSettings.load()
    row.enabled = True
    row.slurmrestd_url = "http://slurm.invalid:6820"
    row.user = "obleth"
    row.log_dir = "/scratch/logs"
    row.save()
    return row


def change_url(slurm: SlurmSettings) -> str:
    return reverse("admin:core_slurmsettings_change", args=[slurm.pk])


def form_fields(page: Any) -> list[tuple[str, str]]:
    """What the browser posts from the settings form (or the confirmation page's form)."""
    body = page.content.decode()
    if 'id="slurmsettings_form"' in body:
        start = body.index('id="slurmsettings_form"')
    else:
        start = body.index('<form method="post"', body.index('id="content-main"'))
    form = body[start : body.index("</form>", start)]
    out: list[tuple[str, str]] = []
    for tag in re.finditer(r"<input\b[^>]*>", form):
        attrs = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag.group(0)))
        if "name" not in attrs or attrs.get("type") == "submit":
            continue
        if attrs.get("type") == "checkbox" and " checked" not in tag.group(0):
            continue
        default = "on" if attrs.get("type") == "checkbox" else ""
        out.append((attrs["name"], html.unescape(attrs.get("value", default))))
    for tag in re.finditer(r"<textarea\b([^>]*)>(.*?)</textarea>", form, re.S):
        name = re.search(r'name="([^"]+)"', tag.group(1))
        if name:
            out.append((name.group(1), html.unescape(tag.group(2)).removeprefix("\n")))
    for tag in re.finditer(r"<select\b([^>]*)>(.*?)</select>", form, re.S):
        name = re.search(r'name="([^"]+)"', tag.group(1))
        chosen = re.search(r'<option value="([^"]*)"[^>]*selected', tag.group(2))
        if name:
            out.append((name.group(1), html.unescape(chosen.group(1)) if chosen else ""))
    return out


def as_post(fields: list[tuple[str, str]]) -> dict[str, list[str]]:
    data: dict[str, list[str]] = {}
    for name, value in fields:
        data.setdefault(name, []).append(value)
    return data


def turned_off(page: Any) -> dict[str, list[str]]:
    data = as_post([(n, v) for n, v in form_fields(page) if n != "enabled"])
    data["_save"] = ["Save"]
    return data


def live(model_name: str, state: str, n: int) -> None:
    model = make_slurm_model(name=model_name)
    for i in range(n):
        Replica.objects.create(
            model_id=model.pk,
            model_name=model.name,
            job_name=f"{model_name}-{i}",
            job_id=str(500 + i),
            state=state,
        )


def test_turning_slurm_off_while_replicas_run_asks_and_counts_them(
    admin_client: Client, slurm: SlurmSettings
) -> None:
    live("llama", "healthy", 2)
    live("qwen", "pending", 1)
    Replica.objects.create(  # a lost replica's job is over: not counted
        model_id=Replica.objects.first().model_id, model_name="llama", job_name="x", state="lost"
    )
    page = admin_client.get(change_url(slurm))
    asked = admin_client.post(change_url(slurm), turned_off(page))
    assert asked.status_code == 200
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", asked.content.decode())))
    assert "3 replicas of 2 models have a Slurm job now." in text
    assert "none of these 3 replicas will be drained, cancelled or replaced" in text
    assert "llama healthy 2" in text and "qwen pending 1" in text
    assert SlurmSettings.load().enabled is True  # nothing saved yet
    # "Yes": the page re-posts the form as it was sent; now it is saved.
    confirmed = admin_client.post(change_url(slurm), as_post(form_fields(asked)))
    assert confirmed.status_code == 302, confirmed.content[:2000]
    row = SlurmSettings.load()
    assert row.enabled is False
    assert (row.slurmrestd_url, row.user, row.log_dir) == (
        "http://slurm.invalid:6820",
        "obleth",
        "/scratch/logs",
    )
    assert Replica.objects.filter(state="healthy").count() == 2  # nothing was drained


def test_no_question_without_live_replicas_or_when_slurm_stays_on(
    admin_client: Client, slurm: SlurmSettings
) -> None:
    page = admin_client.get(change_url(slurm))
    kept_on = as_post(form_fields(page))
    kept_on["_save"] = ["Save"]
    live("llama", "healthy", 1)
    assert admin_client.post(change_url(slurm), kept_on).status_code == 302
    assert SlurmSettings.load().enabled is True
    Replica.objects.update(state="lost")
    assert admin_client.post(change_url(slurm), turned_off(page)).status_code == 302
    assert SlurmSettings.load().enabled is False


def test_a_new_token_is_never_written_into_the_confirmation_page(
    admin_client: Client, slurm: SlurmSettings
) -> None:
    live("llama", "starting", 1)
    page = admin_client.get(change_url(slurm))
    data = turned_off(page)
    data["new_jwt"] = [SECRET]
    asked = admin_client.post(change_url(slurm), data)
    assert asked.status_code == 200
    assert SECRET not in asked.content.decode()
    assert "The new the JWT" not in asked.content.decode()
    assert "The new JWT you pasted is not carried over" in asked.content.decode()
    assert "new_jwt" not in dict(form_fields(asked))


def test_a_viewer_is_never_asked_and_changes_nothing(slurm: SlurmSettings) -> None:
    user = get_user_model().objects.create_user("slurm-viewer", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(user)
    live("llama", "healthy", 1)
    page = client.get(change_url(slurm))
    answer = client.post(change_url(slurm), {"_save": "Save"})
    assert answer.status_code == 403
    assert "Turn Slurm off" not in answer.content.decode()
    assert page.status_code == 200 and SlurmSettings.load().enabled is True
