"""Build the Slurm submission for one replica from its managed spec and the Slurm settings."""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from provisioner.identity import KEY_ENV
from provisioner.script import render_batch_script
from provisioner.slurm.convert import expand_nodelist, parse_memory_mb, parse_time_limit
from provisioner.slurm.types import JobSubmission

if TYPE_CHECKING:
    from obleth.core.models import ManagedSpec, SlurmSettings
    from provisioner.slurm.client import SlurmClient

log = logging.getLogger(__name__)

DEFAULT_PATH = (
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:"
    "/opt/apptainer/bin:/opt/singularity/bin"
)
SECRET_ENV_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", KEY_ENV})
DRAIN_ENV = "OBLETH_DRAIN_SECS"  # read by obleth_serve (provisioner/script.py)
SIGNAL_URL_ENV = "OBLETH_SIGNAL_URL"  # obleth_serve posts Slurm's warning signal there
WARNING_SIGNAL = "USR1"
_MAX_WARNING_SECS = 65535  # Slurm keeps the warning time in 16 bits


def build_submission(
    *,
    spec: ManagedSpec,
    slurm: SlurmSettings,
    job_name: str,
    port_base: int,
    port_span: int,
    excluded_nodes: tuple[str, ...] = (),
    client: SlurmClient | None = None,
    replica_api_key: str = "",
    replica_id: str = "",
) -> JobSubmission:
    """Everything one submit sends. Values were validated when the spec was saved; a value that
    no longer parses is left out with a warning rather than blocking every launch.

    ``replica_api_key`` goes to the job's environment as ``OBLETH_REPLICA_API_KEY`` (the script
    text and the job name never carry it; :func:`submission_record` masks it)."""
    _refresh_installed_test_engine(spec.script_body)
    script = render_batch_script(
        script_body=spec.script_body,
        image=spec.image,
        preamble=spec.preamble,
        launch_command=spec.launch_command,
        port_base=port_base,
        port_span=port_span,
    )
    env: list[tuple[str, str]] = [("PATH", DEFAULT_PATH), ("HOME", "/tmp")]
    hf_token = (slurm.hf_token or "").strip()
    if hf_token:
        env += [("HF_TOKEN", hf_token), ("HUGGING_FACE_HUB_TOKEN", hf_token)]
    if replica_api_key:
        env.append((KEY_ENV, replica_api_key))
    env.append((DRAIN_ENV, str(settings.OBLETH_REPLICA_DRAIN_SECS)))
    warning_secs = 0
    signal_url = signal_url_for(replica_id) if replica_api_key else ""
    if signal_url:
        # The job reports Slurm's warning signal back (obleth_serve), authenticated with the
        # replica's key; the next pass starts a successor (transitions.handover_due).
        env.append((SIGNAL_URL_ENV, signal_url))
        warning_secs = min(settings.OBLETH_PROVISIONER_WARNING_SIGNAL_SECS, _MAX_WARNING_SECS)

    time_limit: int | None = None
    if spec.time_limit.strip():
        try:
            time_limit = parse_time_limit(spec.time_limit)
        except ValueError as exc:
            log.warning("model %s: time_limit left out of the submit: %s", spec.model_id, exc)
    memory: int | None = None
    if spec.mem.strip():
        try:
            memory = parse_memory_mb(spec.mem)
        except ValueError as exc:
            log.warning("model %s: mem left out of the submit: %s", spec.model_id, exc)
    if memory == 0 and client is not None and spec.partition:
        # Some sites' submit plugins treat 0 as "unset": send the smallest node's usable memory.
        try:
            whole = client.whole_node_memory_mb(spec.partition)
        except Exception as exc:  # noqa: BLE001 - best effort, 0 is still a valid request
            log.warning(
                "model %s: could not read node memory, sending mem 0: %s", spec.model_id, exc
            )
            whole = None
        if whole:
            memory = whole

    operator_exclude = "".join(spec.exclude.split())  # "gpu01, gpu[03-05]" -> one hostlist
    excluded = list(expand_nodelist(operator_exclude)) if operator_exclude else []
    can_exclude = client is None or getattr(client.adapter, "supports_exclude", True)
    if excluded_nodes and not can_exclude:
        # Slurm 22.05's REST API (v0.0.38) has no exclude field: place anywhere rather than fail.
        log.info(
            "model %s: slurmrestd %s cannot exclude nodes; not avoiding %s",
            spec.model_id,
            client.api_version if client else "?",
            ",".join(excluded_nodes),
        )
        excluded_nodes = ()
    for node in excluded_nodes:
        if node not in excluded:
            excluded.append(node)

    log_dir = spec.log_output_dir.strip().rstrip("/") or (slurm.log_dir or "").strip().rstrip("/")
    return JobSubmission(
        name=job_name,
        script=script,
        partition=spec.partition.strip(),
        nodes=max(1, spec.nodes),
        current_working_directory="/tmp",
        environment=tuple(env),
        time_limit_minutes=time_limit,
        memory_per_node_mb=memory,
        cpus_per_task=spec.cpus_per_task or None,
        gres=spec.gres.strip(),
        account=spec.account.strip(),
        qos=spec.qos.strip(),
        constraints=spec.constraints.strip(),
        excluded_nodes=collect_nodelist(excluded),
        standard_output=f"{log_dir}/{job_name}-%j.out" if log_dir else "",
        standard_error=f"{log_dir}/{job_name}-%j.err" if log_dir else "",
        warning_signal=WARNING_SIGNAL if warning_secs else "",
        warning_secs=warning_secs,
    )


def signal_url_for(replica_id: str) -> str:
    """Where a replica's job reports Slurm's warning signal; "" without ``OBLETH_PUBLIC_URL``
    or with the warning turned off (``OBLETH_PROVISIONER_WARNING_SIGNAL_SECS=0``)."""
    public = settings.OBLETH_PUBLIC_URL
    if not (public and replica_id and settings.OBLETH_PROVISIONER_WARNING_SIGNAL_SECS > 0):
        return ""
    return f"{public}/api/v1/replicas/{replica_id}/drain-signal"


def _refresh_installed_test_engine(script: str) -> None:
    """A spec rendered before an upgrade runs the installed copy of the test engine; an old copy
    would not demand the replica key and its replicas would never be promoted. Bring the copy up
    to date before such a submit (checked once per process; a no-op when it is current)."""
    if "testengine/server.py" not in script:
        return
    from django.conf import settings

    engines_dir = Path(settings.OBLETH_ENGINES_DIR)
    if str(engines_dir / "testengine" / "server.py") in script:
        _install_once(engines_dir)


@functools.cache
def _install_once(engines_dir: Path) -> None:
    from provisioner.testengine import install_copy

    try:
        install_copy(engines_dir)
    except OSError as exc:  # the job reports it if the copy is really unusable
        log.warning("could not refresh the test engine under %s: %s", engines_dir, exc)


def collect_nodelist(nodes: list[str]) -> str:
    """Nodes as one Slurm hostlist expression (gpu01,gpu[03-05]), as --exclude takes it."""
    if not nodes:
        return ""
    import hostlist

    return str(hostlist.collect_hostlist(nodes))


def submission_record(submission: JobSubmission) -> dict[str, Any]:
    """What the launch history keeps of a submit: everything but secret values."""
    data = dataclasses.asdict(submission)
    data["environment"] = {
        name: ("[set]" if name in SECRET_ENV_NAMES else value)
        for name, value in submission.environment
    }
    return data
