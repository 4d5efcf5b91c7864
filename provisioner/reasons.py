"""Slurm's reasons and the probe's outcomes in operators' words, each with what to change.

Pure: no database, no network. Three tables:

* :func:`explain_pending` - a job's pending reason (``squeue``'s NODELIST(REASON), slurmrestd's
  ``state_reason``) -> a sentence, the fix, and Slurm's expected start when it gave one. The
  reason codes are Slurm's (``man squeue``, JOB REASON CODES; the ``Assoc*``/``QOS*`` limit
  family is read by its parts so every limit Slurm names gets a sentence).
* :func:`explain_probe` - the probe's outcome text (``provisioner.probe``) -> a kind, a sentence
  and the fix.
* :func:`explain_refusal` - Slurm's sentence for a refused submit -> a cause-specific hint (for an
  unknown partition, the partitions the cluster has).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True, slots=True)
class Explanation:
    """``code``: the raw reason or kind; ``sentence``: what is happening; ``fix``: what to do
    (blank when nothing needs doing); ``expected_start``: Slurm's estimate, when it gave one."""

    code: str
    sentence: str
    fix: str = ""
    expected_start: dt.datetime | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "code": self.code,
            "sentence": self.sentence,
            "fix": self.fix,
            "expected_start": self.expected_start.isoformat() if self.expected_start else None,
        }


# ------------------------------------------------------------------------------ pending reasons

_WAIT = "Nothing to change: it starts when its turn comes."

#: Reason code -> (sentence, fix).
PENDING_REASONS: dict[str, tuple[str, str]] = {
    "Resources": (
        "Waiting for resources: no node in the partition has the requested CPUs, memory or "
        "GPUs free right now.",
        "Wait for running jobs to end, or ask for less (GRES, memory, CPUs, nodes) or another "
        "partition in the managed spec.",
    ),
    "Priority": (
        "Waiting behind jobs with a higher priority in the queue.",
        "Wait, or use a QoS or account with a higher priority (ask the cluster admins).",
    ),
    "Dependency": (
        "Waiting for a job it depends on to finish.",
        "Wait for that job; remove the dependency if it is not needed.",
    ),
    "DependencyNeverSatisfied": (
        "The job it depends on ended in a way that can never satisfy the dependency.",
        "Restart the replica: this job will never start.",
    ),
    "BeginTime": (
        "Held until its earliest start time (a --begin time, or a requeue delay after a "
        "failure or preemption).",
        "Wait: Slurm starts it at that time by itself.",
    ),
    "JobHeldUser": (
        "Held by its owner (scontrol hold).",
        "Release it with `scontrol release <job id>`, or Restart the replica.",
    ),
    "JobHeldAdmin": (
        "Held by a cluster administrator.",
        "Ask the cluster admins to release it (`scontrol release <job id>`), or Restart the "
        "replica.",
    ),
    "ReqNodeNotAvail": (
        "A node the job needs is unavailable (down, drained, reserved or in maintenance).",
        "Wait for the node to return, or remove it from the nodes or exclude list; check "
        "`sinfo -R` for why it is out.",
    ),
    "PartitionTimeLimit": (
        "The job's time limit is longer than the partition allows: it will never start.",
        "Lower the time limit in the managed spec to at most the partition's MaxTime "
        "(`sinfo -o '%P %l'`), then Restart the replica.",
    ),
    "PartitionNodeLimit": (
        "The job asks for more nodes than the partition allows per job.",
        "Lower the node count in the managed spec, or use another partition.",
    ),
    "PartitionDown": (
        "The partition is down: no job starts in it.",
        "Wait for the cluster admins to bring it up, or use another partition.",
    ),
    "PartitionInactive": (
        "The partition is inactive: it accepts jobs but starts none.",
        "Ask the cluster admins, or use another partition.",
    ),
    "PartitionConfig": (
        "The request does not fit the partition's configuration (nodes, CPUs or memory).",
        "Ask for less in the managed spec, or use another partition.",
    ),
    "NodeDown": (
        "A node the job needs is down.",
        "Wait for the node to return, or exclude it in the managed spec.",
    ),
    "BadConstraints": (
        "No node matches the job's constraints (features, GRES or memory): it will never start.",
        "Fix the constraints, GRES or memory in the managed spec, then Restart the replica.",
    ),
    "Licenses": (
        "Waiting for a license the job requests.",
        "Wait, or drop the license request.",
    ),
    "Reservation": (
        "Waiting for its advanced reservation to become usable.",
        "Wait for the reservation to start, or submit outside it.",
    ),
    "InvalidAccount": (
        "The job's account is not valid (or no longer exists): it will never start.",
        "Set an account you belong to in the managed spec (`sacctmgr show assoc user=$USER`).",
    ),
    "InvalidQOS": (
        "The job's QoS is not valid: it will never start.",
        "Set a QoS your account may use in the managed spec.",
    ),
    "AccountNotAllowed": (
        "The account is not allowed in this partition.",
        "Use another account or partition in the managed spec.",
    ),
    "QOSNotAllowed": (
        "The QoS is not allowed in this partition.",
        "Use another QoS or partition in the managed spec.",
    ),
    "WaitingForScheduling": (
        "Not yet looked at by the scheduler.",
        "Nothing to change: the scheduler gets to it within a few seconds.",
    ),
    "None": ("Just submitted: the scheduler has not looked at it yet.", _WAIT),
    "Prolog": (
        "Its node is running the prolog script before the job starts.",
        "Nothing to change: it starts when the prolog ends.",
    ),
    "PowerUpNode": (
        "Its node is powering up.",
        "Nothing to change: it starts when the node is up.",
    ),
    "Cleaning": (
        "Its node is cleaning up after a previous job (or this job is being requeued).",
        "Nothing to change.",
    ),
    "launch failed requeued held": (
        "Slurm failed to launch it on a node, requeued it and held it.",
        "Check the node (`sinfo -R`) and the job log, then Restart the replica.",
    ),
    "JobLaunchFailure": (
        "Slurm could not launch the job (a file system problem, or a bad program path).",
        "Read the job log and check the script's paths, then Restart the replica.",
    ),
    "NonZeroExitCode": (
        "The job ended with a non-zero exit code.",
        "Read the job log to see why the server exited.",
    ),
    "SystemFailure": (
        "A Slurm, file system or network failure stopped the job.",
        "Ask the cluster admins; Restart the replica when it is fixed.",
    ),
    "InactiveLimit": (
        "The job reached the system's inactivity limit.",
        "Nothing in the spec: ask the cluster admins about InactiveLimit.",
    ),
    "DeadLine": (
        "The job cannot finish before its deadline.",
        "Remove the deadline or shorten the time limit.",
    ),
    "BurstBufferResources": (
        "Waiting for burst buffer space.",
        "Wait, or ask for less burst buffer.",
    ),
    "BurstBufferStageIn": (
        "Its burst buffer is staging data in.",
        "Nothing to change.",
    ),
    "FrontEndDown": (
        "No front-end node is available to run it.",
        "Ask the cluster admins.",
    ),
    "SchedDefer": (
        "Scheduling is deferred until the next scheduler pass (SchedulerParameters=defer).",
        "Nothing to change.",
    ),
    "MaxRequeue": (
        "The job was requeued too many times and is held.",
        "Read the job log for why it keeps failing, then Restart the replica.",
    ),
    "OutOfMemory": (
        "The job ran out of memory.",
        "Raise the memory in the managed spec.",
    ),
    "TimeLimit": (
        "The job reached its time limit.",
        "Raise the time limit in the managed spec (within the partition's MaxTime).",
    ),
    "NodeFail": ("A node the job ran on failed.", "Nothing to change: a new job is launched."),
    "Preempted": ("The job was preempted by a job with a higher priority.", _WAIT),
    "AssocGrpGRES": (
        "The account's group limit on GRES (GPUs) is reached: other jobs of the account use "
        "them all.",
        "Wait for the account's other jobs to end, lower the GRES per replica or the replica "
        "count, or ask the cluster admins to raise GrpTRES for the account.",
    ),
    "QOSUsageThreshold": (
        "The QoS's usage threshold is reached: its fair-share use is too high for now.",
        "Wait for the usage to decay, or use another QoS.",
    ),
    "QOSJobLimit": (
        "The QoS's job limit is reached.",
        "Lower the replica count, use another QoS, or ask the cluster admins.",
    ),
    "QOSResourceLimit": (
        "The QoS's resource limit is reached.",
        "Ask for less per replica, use another QoS, or ask the cluster admins.",
    ),
    "QOSTimeLimit": (
        "The job's time limit is above what the QoS allows.",
        "Lower the time limit in the managed spec, or use another QoS.",
    ),
    "AssociationJobLimit": (
        "The account's job limit is reached.",
        "Lower the replica count, or wait for the account's other jobs to end.",
    ),
    "AssociationResourceLimit": (
        "The account's resource limit is reached.",
        "Ask for less per replica, or wait for the account's other jobs to end.",
    ),
    "AssociationTimeLimit": (
        "The job's time limit is above what the account allows.",
        "Lower the time limit in the managed spec.",
    ),
    "QOSMaxJobsPerUserLimit": (
        "The QoS allows no more running jobs for this user: the limit is reached.",
        "Lower the replica count, use another QoS, or ask the cluster admins to raise the "
        "QoS's MaxJobsPerUser.",
    ),
}

_LIMIT_RE = re.compile(
    r"^(?P<who>Assoc|QOS)(?P<kind>Grp|Max|Min)?(?P<what>.*?)"
    r"(?P<scope>PerUser|PerJob|PerAccount|PerNode|PerMinute|PerTask)?"
    r"(?P<end>Limit|RunMinutes|Minutes|Wall)?$"
)

_RESOURCE_WORDS = {
    "Cpu": "CPUs",
    "CPU": "CPUs",
    "Mem": "memory",
    "Memory": "memory",
    "Node": "nodes",
    "Nodes": "nodes",
    "GRES": "GRES (GPUs)",
    "Gres": "GRES (GPUs)",
    "Jobs": "running jobs",
    "Job": "jobs",
    "SubmitJobs": "queued jobs",
    "SubmitJob": "queued jobs",
    "Wall": "wall time",
    "WallDuration": "wall time",
    "WallDurationPerJob": "wall time per job",
    "Energy": "energy",
    "License": "licenses",
    "BB": "burst buffer",
    "Billing": "billing units",
    "Fs": "file system",
    "Vmem": "virtual memory",
    "Pages": "pages",
    "Tres": "TRES",
    "TRES": "TRES",
    "UsageThreshold": "fair-share usage",
    "Unknown": "an unknown resource",
}

_SCOPE_WORDS = {
    "PerUser": "per user",
    "PerJob": "per job",
    "PerAccount": "per account",
    "PerNode": "per node",
    "PerMinute": "per minute",
    "PerTask": "per task",
}


def _limit_reason(code: str) -> tuple[str, str] | None:
    """``AssocGrpCpuLimit``, ``QOSMaxGRESPerUser``, ``AssocMaxWallDurationPerJobLimit``...:
    the account/QoS limit family, read by its parts."""
    match = _LIMIT_RE.match(code)
    if match is None or not (match["kind"] or match["end"] or match["scope"]):
        return None
    who = "account" if match["who"] == "Assoc" else "QoS"
    raw = match["what"] or ("Wall" if match["end"] == "Wall" else "")
    minutes = match["end"] in {"RunMinutes", "Minutes"} or raw.endswith("RunMinutes")
    raw = raw.removesuffix("RunMinutes")
    if minutes:
        unit = {"Cpu": "CPU", "CPU": "CPU", "Mem": "memory", "Node": "node"}.get(raw, raw)
        what = f"{unit or 'TRES'}-minutes of running jobs"
    else:
        what = _RESOURCE_WORDS.get(raw, raw or "jobs")
    kind = {"Grp": "group limit", "Max": "maximum", "Min": "minimum"}.get(
        match["kind"] or "", "limit"
    )
    scope = _SCOPE_WORDS.get(match["scope"] or "", "")
    which = f"{kind} on {what}" + (f" {scope}" if scope else "")
    if match["kind"] == "Min":
        return (
            f"The job asks for less than the {who}'s {which}.",
            f"Ask for more {what} in the managed spec, or use another {who}.",
        )
    if match["kind"] == "Max" and match["scope"] == "PerJob":
        return (
            f"The job asks for more than the {who}'s {which}: it will not start as it is.",
            f"Ask for less {what} in the managed spec, or use another {who}.",
        )
    return (
        f"The {who}'s {which} is reached: other jobs use the allowance.",
        f"Wait for other jobs of the {who} to end, lower the replica count or what each "
        f"replica asks for, use another {who}, or ask the cluster admins to raise the limit.",
    )


def split_reason(raw: str) -> tuple[str, str]:
    """``"ReqNodeNotAvail, UnavailableNodes:n[1-2]"`` -> (``ReqNodeNotAvail``, the rest)."""
    text = (raw or "").strip().strip("()")
    for sep in (",", "(", ":"):
        if sep in text and text != "launch failed requeued held":
            head, _, rest = text.partition(sep)
            return head.strip(), rest.strip(" ,()")
    return text, ""


def explain_pending(
    raw_reason: str,
    *,
    expected_start: dt.datetime | None = None,
    now: dt.datetime | None = None,
    with_detail: bool = True,
) -> Explanation:
    """Slurm's pending reason in words, the fix, and the expected start (only a future one).

    ``with_detail=False`` leaves out what Slurm added after the code (node names, for
    ``ReqNodeNotAvail, UnavailableNodes:...``): the sentence the gateway's clients see."""
    code, extra = split_reason(raw_reason)
    if not code:
        code = "None"
    found = PENDING_REASONS.get(code) or _limit_reason(code)
    if found is None:
        found = (
            f"Slurm says {code!r}.",
            "Look it up in `man squeue` (JOB REASON CODES) or ask the cluster admins.",
        )
    sentence, fix = found
    if extra and with_detail:
        sentence = f"{sentence} (Slurm: {extra})"
    start = expected_start
    if start is not None and now is not None and start <= now:
        start = None
    if start is not None:
        sentence = f"{sentence} Slurm expects it to start at {start:%Y-%m-%d %H:%M %Z}."
    return Explanation(code=code, sentence=sentence, fix=fix, expected_start=start)


# ---------------------------------------------------------------------------- probe outcomes

_PROBE_KINDS: tuple[tuple[str, re.Pattern[str], str, str], ...] = (
    (
        "ready",
        re.compile(r"^ready on port \d+"),
        "The server answered its health check.",
        "",
    ),
    (
        "wrong_server",
        re.compile(r"wrong server", re.IGNORECASE),
        "Something answers on the port, but it is not this replica's server (another job's "
        "server, or a stale one).",
        "Check the job log: the server may have failed to bind its port. Restart the replica.",
    ),
    (
        "identity",
        re.compile(r"identity not proven", re.IGNORECASE),
        "The server answers its health check but could not prove it is this replica's server.",
        "Check the engine takes the replica's key ($OBLETH_REPLICA_API_KEY, as the recipe "
        "passes it) or serves the model name; read the job log.",
    ),
    (
        "no_http",
        re.compile(r"no HTTP answer", re.IGNORECASE),
        "Something accepts connections on the port but does not speak HTTP.",
        "Check the server listens on $OBLETH_SERVING_PORT with HTTP; read the job log.",
    ),
    (
        "loading",
        re.compile(r"\bloading\b", re.IGNORECASE),
        "The server is up and still loading the model.",
        "Nothing to change: large models take minutes. Read the job log if it lasts.",
    ),
    (
        "server_error",
        re.compile(r"HTTP 5\d\d"),
        "The server answers its health check with an error (HTTP 5xx).",
        "Read the job log (stderr) for the server's error.",
    ),
    (
        "http_error",
        re.compile(r"HTTP [1-4]\d\d"),
        "The server answers, but not with a 2xx on the health path.",
        "Check the health path in the managed spec matches the engine's (e.g. /health, /api/tags).",
    ),
    (
        "refused",
        re.compile(r"connection refused", re.IGNORECASE),
        "Nothing listens on the replica's ports yet (connection refused).",
        "If it lasts, read the job log: the server may not have started, or listens on "
        "another port than $OBLETH_SERVING_PORT.",
    ),
    (
        "timeout",
        re.compile(r"timed out|timeout", re.IGNORECASE),
        "The probe got no answer in time (the node drops packets, or the server is stuck).",
        "Check that the provisioner can reach the node (firewall, node address overrides); "
        "read the job log.",
    ),
    (
        "unreachable",
        re.compile(r"no address|name|resolve|unreachable|no route", re.IGNORECASE),
        "The provisioner cannot reach the node (name resolution or routing).",
        "Set a node address override in Settings -> Slurm, or fix DNS/routing to the node.",
    ),
    (
        "no_port",
        re.compile(r"no port to probe"),
        "The replica's port window holds no valid TCP port.",
        "Fix the serving port in the managed spec.",
    ),
)


def explain_probe(detail: str, *, with_detail: bool = True) -> Explanation:
    """The probe's outcome text (``refused on all 8 ports (8000-8007)``, ...) in words.

    ``with_detail=False`` leaves the probe's own text (ports, paths) out of the sentence."""
    text = (detail or "").strip()
    if not text:
        return Explanation(code="not_probed", sentence="Not probed yet.")
    for kind, pattern, sentence, fix in _PROBE_KINDS:
        if pattern.search(text):
            said = f"{sentence} (probe: {text})" if with_detail else sentence
            return Explanation(code=kind, sentence=said, fix=fix)
    return Explanation(
        code="other",
        sentence=f"The probe failed: {text}" if with_detail else "The probe failed.",
        fix="Read the job log; check the provisioner can reach the node.",
    )


# ------------------------------------------------------------------------------ refused submits

_REFUSALS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "policy",
        re.compile(r"policy", re.IGNORECASE),
        "The job breaks an account or QoS limit (jobs, size or time): ask for less, or ask "
        "the cluster admins.",
    ),
    (
        "account",
        re.compile(r"invalid account|\baccount\b.*(invalid|not (valid|allowed))", re.IGNORECASE),
        "Set an account the Slurm user belongs to (sacctmgr show assoc user=<user>), or leave "
        "it blank for the default.",
    ),
    (
        "partition",
        re.compile(r"partition", re.IGNORECASE),
        "Set the partition in the managed spec to one the cluster has.",
    ),
    (
        "account",
        re.compile(r"account", re.IGNORECASE),
        "Set an account the Slurm user belongs to (sacctmgr show assoc user=<user>), or leave "
        "it blank for the default.",
    ),
    (
        "qos",
        re.compile(r"\bqos\b", re.IGNORECASE),
        "Set a QoS the account may use, or leave it blank for the default.",
    ),
    (
        "time",
        re.compile(r"time limit", re.IGNORECASE),
        "Lower the time limit to at most the partition's MaxTime.",
    ),
    (
        "gres",
        re.compile(r"gres|generic resource|tres", re.IGNORECASE),
        "Fix the GRES (e.g. gpu:1); the partition's nodes must have that GRES.",
    ),
    (
        "memory",
        re.compile(r"memory", re.IGNORECASE),
        "Ask for less memory (or 0 for the whole node).",
    ),
    (
        "features",
        re.compile(r"feature|constraint", re.IGNORECASE),
        "Fix the constraints: name features the partition's nodes have (sinfo -o '%N %f').",
    ),
    (
        "nodes",
        re.compile(r"node configuration|node count|nodes? (is|are) not available", re.IGNORECASE),
        "Ask for fewer nodes, CPUs, memory or GPUs than the largest node of the partition has.",
    ),
    (
        "permission",
        re.compile(r"access|permission|denied|authenticat", re.IGNORECASE),
        "Check the Slurm user and its JWT in Settings -> Slurm.",
    ),
    (
        "limit",
        re.compile(r"limit", re.IGNORECASE),
        "The job breaks an account or QoS limit: ask for less, or ask the cluster admins.",
    ),
)


def explain_refusal(
    reason: str, *, partitions: Sequence[str] = (), requested_partition: str = ""
) -> Explanation:
    """A cause-specific hint for Slurm's sentence (for a partition: the valid ones)."""
    text = (reason or "").strip() or "Slurm refused the job without a reason"
    for cause, pattern, hint in _REFUSALS:
        if pattern.search(text):
            if cause == "partition" and partitions:
                names = ", ".join(sorted(partitions))
                asked = f" ({requested_partition!r} is not one)" if requested_partition else ""
                hint = f"{hint} The cluster has: {names}{asked}."
            return Explanation(code=cause, sentence=text, fix=hint)
    return Explanation(
        code="other",
        sentence=text,
        fix="Read Slurm's whole answer below; fix the managed spec and dismiss the error.",
    )
