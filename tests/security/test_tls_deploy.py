"""``manage.py check --deploy`` with the documented TLS settings, and the Helm chart's TLS switch.

``check --deploy`` runs for real in a subprocess with only the environment given here (no
database is needed: no check connects). The chart is rendered by Helm's own Go engine through
``helm-python-sdk`` (libhelm_c, Helm v4's SDK, bundled in the wheel; dev requirement): no
cluster is contacted, and ``lookup`` returns nothing, as in ``helm template``.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "obleth"
DOCS = ROOT / "docs" / "deploy.md"

#: The TLS settings docs/deploy.md documents for a production instance behind a TLS proxy.
DOCUMENTED_TLS = {
    "OBLETH_TLS": "1",
    "OBLETH_TRUST_X_FORWARDED_PROTO": "1",
    "OBLETH_HSTS_PRELOAD": "1",
}
PRODUCTION = {
    "OBLETH_SECRET_KEY": secrets.token_urlsafe(50),
    "OBLETH_ENCRYPTION_KEY": secrets.token_urlsafe(32),
    "OBLETH_ADMIN_TOKEN": secrets.token_urlsafe(32),
    "OBLETH_ALLOWED_HOSTS": "obleth.example.org",
    "OBLETH_CSRF_TRUSTED_ORIGINS": "https://obleth.example.org",
    "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
}


def check_deploy(env: dict[str, str]) -> tuple[int, list[str], str]:
    """Run ``manage.py check --deploy``; return its exit code and the check ids it reported,
    leaving out the gateway-open warning (a deliberate switch; see docs/gateway-keys.md)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OBLETH_", "DJANGO_"))}
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "obleth.settings", **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = proc.stdout + proc.stderr
    ids = []
    for match in re.finditer(r"^\S*: \(([\w.]+)\) (.*)$", output, flags=re.MULTILINE):
        check_id, text = match.groups()
        if "gateway" in check_id.lower() or "OBLETH_GATEWAY_OPEN" in text:
            continue
        ids.append(check_id)
    assert proc.returncode == 0 or ids, output
    return proc.returncode, ids, output


def test_check_deploy_is_clean_with_the_documented_tls_settings() -> None:
    code, ids, output = check_deploy({**PRODUCTION, **DOCUMENTED_TLS})
    assert ids == []
    assert code == 0
    assert "System check identified no issues" in output


def test_check_deploy_with_the_gateway_open_reports_only_that() -> None:
    code, ids, output = check_deploy({**PRODUCTION, **DOCUMENTED_TLS, "OBLETH_GATEWAY_OPEN": "1"})
    assert ids == [] and code == 0
    assert "(obleth.gateway.W001) OBLETH_GATEWAY_OPEN=1" in output


def test_check_deploy_without_preload_warns_only_about_preload() -> None:
    env = {**PRODUCTION, **DOCUMENTED_TLS}
    del env["OBLETH_HSTS_PRELOAD"]
    assert check_deploy(env)[1] == ["security.W021"]


def test_check_deploy_without_tls_names_what_is_missing() -> None:
    """The control: the same instance without the TLS switch is reported (the check can fail)."""
    ids = set(check_deploy(PRODUCTION)[1])
    assert {"security.W004", "security.W008", "security.W012", "security.W016"} <= ids


def test_the_docs_document_these_tls_settings() -> None:
    text = DOCS.read_text()
    section = text[text.index("## TLS") :]
    for name, value in DOCUMENTED_TLS.items():
        assert f"{name}={value}" in section, name
    assert "manage.py check --deploy" in section


# ----------------------------------------------------------------------------- helm

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (requirements/dev.txt)")

BASE_VALUES: dict[str, Any] = {
    "database": {"url": "postgres://obleth:pw@db:5432/obleth"},
    "redis": {"url": "redis://redis:6379/0"},
}
TLS_INGRESS: dict[str, Any] = {
    "enabled": True,
    "hosts": [{"host": "obleth.example.org", "paths": [{"path": "/", "pathType": "Prefix"}]}],
    "tls": [{"secretName": "obleth-tls", "hosts": ["obleth.example.org"]}],
}


def render(values: dict[str, Any]) -> dict[str, Any]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render({**BASE_VALUES, **values}, name="demo", namespace="prod")
    docs = {}
    for path, text in manifests.items():
        if path.endswith(".yaml") and text.strip():
            docs[Path(path).name] = yaml.safe_load(text)
    return docs


def configmap(values: dict[str, Any]) -> dict[str, str]:
    data: dict[str, str] = render(values)["configmap.yaml"]["data"]
    return data


TLS_VARS = ("OBLETH_TLS", "OBLETH_SECURE_COOKIES", "OBLETH_TRUST_X_FORWARDED_PROTO")


def test_chart_lints() -> None:
    result = helm.lint(str(CHART), values=BASE_VALUES)
    assert result["errors"] == [], result
    assert not [m for m in result["messages"] if m["severity"] > 1], result


def test_ingress_with_tls_turns_the_tls_switches_on() -> None:
    data = configmap({"ingress": TLS_INGRESS})
    assert {name: data[name] for name in TLS_VARS} == dict.fromkeys(TLS_VARS, "1")
    assert data["OBLETH_CSRF_TRUSTED_ORIGINS"] == "https://obleth.example.org"
    assert "OBLETH_HSTS_SECONDS" not in data  # empty: the application's one year


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"ingress": {**TLS_INGRESS, "tls": []}},
        {"ingress": {**TLS_INGRESS, "enabled": False}},
        {"ingress": TLS_INGRESS, "config": {"tls": False}},
    ],
    ids=["no-ingress", "ingress-without-tls", "ingress-disabled", "forced-off"],
)
def test_no_tls_leaves_the_switches_off(values: dict[str, Any]) -> None:
    data = configmap(values)
    assert {name: data[name] for name in TLS_VARS} == dict.fromkeys(TLS_VARS, "0")


def test_tls_can_be_forced_on_for_a_load_balancer_outside_the_chart() -> None:
    data = configmap({"config": {"tls": True, "hstsSeconds": 600, "hstsPreload": True}})
    assert {name: data[name] for name in TLS_VARS} == dict.fromkeys(TLS_VARS, "1")
    assert data["OBLETH_HSTS_SECONDS"] == "600" and data["OBLETH_HSTS_PRELOAD"] == "1"


def test_config_env_still_overrides_the_tls_switch() -> None:
    data = configmap({"ingress": TLS_INGRESS, "config": {"env": {"OBLETH_SSL_REDIRECT": "0"}}})
    assert data["OBLETH_TLS"] == "1" and data["OBLETH_SSL_REDIRECT"] == "0"


def test_trusted_proxy_count_follows_the_ingress() -> None:
    assert configmap({})["OBLETH_TRUSTED_PROXY_COUNT"] == "0"
    assert configmap({"ingress": TLS_INGRESS})["OBLETH_TRUSTED_PROXY_COUNT"] == "1"
    forced = configmap({"ingress": TLS_INGRESS, "config": {"trustedProxyCount": 2}})
    assert forced["OBLETH_TRUSTED_PROXY_COUNT"] == "2"


def test_a_bad_tls_value_fails_the_render_naming_it() -> None:
    with pytest.raises(helm.HelmError, match=r"config\.tls=\"maybe\""):
        render({"config": {"tls": "maybe"}})


def test_the_chart_with_tls_passes_check_deploy() -> None:
    """The ConfigMap the chart renders for a TLS Ingress, plus the Secret's keys, given to
    ``check --deploy``: no warning but the preload one, which hstsPreload answers."""
    for preload, expected in ((False, ["security.W021"]), (True, [])):
        docs = render({"ingress": TLS_INGRESS, "config": {"hstsPreload": preload}})
        env = {
            **docs["configmap.yaml"]["data"],
            **{k: v for k, v in PRODUCTION.items() if k != "OBLETH_ALLOWED_HOSTS"},
        }
        assert "obleth.example.org" in env["OBLETH_ALLOWED_HOSTS"].split(",")
        assert check_deploy(env)[1] == expected, preload


def test_probes_use_healthz_which_the_redirect_spares() -> None:
    web = render({"ingress": TLS_INGRESS})["deployment-web.yaml"]
    [container] = web["spec"]["template"]["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    settings_text = (ROOT / "obleth" / "settings.py").read_text()
    assert 'SECURE_REDIRECT_EXEMPT = [r"^healthz$"]' in settings_text
