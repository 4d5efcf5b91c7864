"""The exact slurmrestd submit a launch would send, for a review: built with the provisioner's
own calls for the connection's API version, secrets in its environment masked, and the full
job script (port block included).

Part of the deploy service (:mod:`recipes.deploy.service`, ``Review.slurm``)."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings

from obleth.core.models import ManagedSpec, SlurmSettings
from recipes.deploy import checks, reads

_MASK = "[masked]"


def _submit_body(
    spec: ManagedSpec,
    slurm: SlurmSettings,
    model_name: str,
    discovered_version: str,
    cluster: checks.Cluster,
    refusals: dict[str, list[str]],
) -> tuple[dict[str, Any], str, list[str]]:
    """(the slurmrestd submit for the connection's API version, the job script, notes).

    Built by :func:`provisioner.submission.build_submission` and the version's adapter, the
    same calls the provisioner makes; a body the adapter refuses adds a refusal."""
    from provisioner.plan import job_name_for
    from provisioner.slurm.adapters import get_adapter
    from provisioner.slurm.errors import SlurmConfigError
    from provisioner.submission import SECRET_ENV_NAMES, build_submission

    # The exact submit body, for the API version the connection uses.
    version = slurm.effective_api_version or discovered_version
    job_name = job_name_for(settings.OBLETH_PROVISIONER_JOB_PREFIX, model_name, uuid.UUID(int=0))
    notes = [
        "The job name ends with the replica's id (shown as zeros), chosen when it is submitted.",
        f"The port window shown is the first one ({spec.serving_port}-"
        f"{spec.serving_port + settings.OBLETH_PORT_SPAN - 1}); each replica gets the first "
        "free window from serving_port.",
    ]
    slurm_answer: dict[str, Any]
    script = ""
    if not version:
        slurm_answer = {
            "api_version": "",
            "path": "",
            "body": None,
            "reason": "The slurmrestd API version is not known yet: test the Slurm connection "
            "(or set api_version) to see the exact body.",
        }
    else:
        adapter = get_adapter(version)
        submission = build_submission(
            spec=spec,
            slurm=slurm,
            job_name=job_name,
            port_base=spec.serving_port,
            port_span=settings.OBLETH_PORT_SPAN,
            client=reads.DiscoveryClient(adapter, cluster),  # type: ignore[arg-type]
        )
        script = submission.script
        try:
            body = adapter.build_submit_body(submission)
        except SlurmConfigError as exc:
            field = "overrides.exclude" if "exclude" in str(exc) else "overrides"
            refusals.setdefault(field, []).append(f"Slurm will refuse this job: {exc}.")
            body = None
        if body is not None:
            body = _masked(body, SECRET_ENV_NAMES)
        slurm_answer = {
            "api_version": adapter.version,
            "path": adapter.submit_path(),
            "body": body,
            "reason": "",
        }
    if not script:
        from provisioner.script import render_batch_script

        script = render_batch_script(
            script_body=spec.script_body,
            image="",
            preamble="",
            launch_command="",
            port_base=spec.serving_port,
            port_span=settings.OBLETH_PORT_SPAN,
        )
    return slurm_answer, script, notes


def _masked(body: Any, secret_names: frozenset[str]) -> Any:
    if isinstance(body, dict):
        out = {}
        for key, value in body.items():
            if key == "environment":
                out[key] = _masked_env(value, secret_names)
            else:
                out[key] = _masked(value, secret_names)
        return out
    if isinstance(body, list):
        return [_masked(v, secret_names) for v in body]
    return body


def _masked_env(value: Any, secret_names: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: (_MASK if k in secret_names else v) for k, v in value.items()}
    if isinstance(value, list):  # ["NAME=value", ...]
        out = []
        for item in value:
            name = str(item).split("=", 1)[0]
            out.append(f"{name}={_MASK}" if name in secret_names else item)
        return out
    return value
