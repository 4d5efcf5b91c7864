"""What every slurmrestd API version has in common, and the hooks a version overrides.

An adapter knows one API version's paths, how to write a submit body for it and how to read
its answers into the version-neutral types of ``provisioner.slurm.types``. It does no I/O: the
client sends the requests and hands the answers to the adapter.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from provisioner.slurm.classify import Answer, Operation, classify
from provisioner.slurm.convert import expand_nodelist
from provisioner.slurm.errors import SlurmConfigError, SlurmUncertain
from provisioner.slurm.types import JobInfo, JobPhase, JobSubmission, NodeInfo, PartitionInfo

__all__ = [
    "DEFAULT_PATH",
    "AssociationInfo",
    "SlurmAdapter",
    "job_phase",
    "number",
]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Base states and state flags as Slurm prints them (job_state_string / JOB_STATE flags).
_PENDING_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
        "POWER_UP_NODE",
    }
)
_RUNNING_STATES = frozenset(
    {"RUNNING", "COMPLETING", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT", "UPDATE_DB"}
)
_GONE_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "LAUNCH_FAILED",
    }
)
KNOWN_JOB_STATES = _PENDING_STATES | _RUNNING_STATES | _GONE_STATES

# Slurm's "no value" / "infinite" markers as they leak through older APIs.
_NO_VAL32 = {0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOB_ID = re.compile(r"[0-9]+")


@dataclasses.dataclass(frozen=True, slots=True)
class AssociationInfo:
    """One slurmdbd association: who may run under which account, partition and QoS."""

    account: str
    partition: str | None = None  # None = every partition
    qos: tuple[str, ...] = ()
    user: str = ""


def job_phase(state: str) -> JobPhase:
    """Coarse phase of a raw Slurm job state; an unknown state raises ``SlurmUncertain``."""
    upper = state.strip().upper()
    if upper in _PENDING_STATES:
        return JobPhase.PENDING
    if upper in _RUNNING_STATES:
        return JobPhase.RUNNING
    if upper in _GONE_STATES:
        return JobPhase.GONE
    raise SlurmUncertain(f"unknown Slurm job state {state!r}; not treating the job as gone")


def number(value: object) -> int | None:
    """An integer from a bare number, a numeric string or a ``{set, infinite, number}`` struct.

    ``None`` for unset, infinite, null and Slurm's NO_VAL markers; use :func:`is_infinite` to
    tell "infinite" apart.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, Mapping):
        if value.get("infinite"):
            return None
        if value.get("set") is False:
            return None
        return number(value.get("number"))
    if isinstance(value, float):
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"-?[0-9]+", text):
            return None
        value = int(text)
    if isinstance(value, int):
        if value in _NO_VAL32:
            return None
        return value
    return None


def is_infinite(value: object) -> bool:
    if isinstance(value, Mapping):
        return bool(value.get("infinite"))
    if isinstance(value, str):
        return value.strip().upper() in {"INFINITE", "UNLIMITED"}
    if isinstance(value, int) and not isinstance(value, bool):
        return value == -1 or value == 0xFFFFFFFF
    return False


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value if v is not None)
    return str(value)


def _names(value: object) -> tuple[str, ...]:
    """A list of names from a CSV string or a list of strings, empties dropped."""
    if value is None:
        return ()
    items: Iterable[object] = value if isinstance(value, list) else str(value).split(",")
    return tuple(s for s in (str(i).strip() for i in items) if s)


def split_hostlist(text: str) -> list[str]:
    """Split ``a,gpu[01-03,07],b`` on the commas outside brackets."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            if current.strip():
                parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


class SlurmAdapter:
    """Base adapter. Subclasses set ``version`` and override what their API does differently."""

    version: ClassVar[str] = ""
    # HTTP statuses with which this version reports error 2017 for an unknown job.
    not_found_statuses: ClassVar[frozenset[int]] = frozenset({404})
    not_found_texts: ClassVar[tuple[str, ...]] = ("invalid job id",)
    # v0.0.40+ documents collection paths with a trailing slash.
    collection_suffix: ClassVar[str] = ""
    # Where a release string hides in ``meta``.
    meta_slurm_key: ClassVar[str] = "slurm"

    # ---- paths ---------------------------------------------------------------------------

    @property
    def slurm_base(self) -> str:
        return f"/slurm/{self.version}"

    @property
    def slurmdb_base(self) -> str:
        return f"/slurmdb/{self.version}"

    def ping_path(self) -> str:
        return f"{self.slurm_base}/ping{self.collection_suffix}"

    def submit_path(self) -> str:
        return f"{self.slurm_base}/job/submit"

    def job_path(self, job_id: str) -> str:
        job_id = str(job_id).strip()
        if not _JOB_ID.fullmatch(job_id):
            raise SlurmConfigError(f"job_id {job_id!r} is not a Slurm job id (digits only)")
        return f"{self.slurm_base}/job/{job_id}"

    def jobs_path(self) -> str:
        return f"{self.slurm_base}/jobs{self.collection_suffix}"

    def nodes_path(self) -> str:
        return f"{self.slurm_base}/nodes{self.collection_suffix}"

    def partitions_path(self) -> str:
        return f"{self.slurm_base}/partitions{self.collection_suffix}"

    def accounts_path(self) -> str:
        return f"{self.slurmdb_base}/accounts{self.collection_suffix}"

    def qos_path(self) -> str:
        return f"{self.slurmdb_base}/qos{self.collection_suffix}"

    def associations_path(self) -> str:
        return f"{self.slurmdb_base}/associations{self.collection_suffix}"

    # ---- classification ------------------------------------------------------------------

    _RESULT_KEYS: ClassVar[Mapping[Operation, str | None]] = {
        Operation.PING: "pings",
        Operation.SUBMIT: None,
        Operation.JOB: "jobs",
        Operation.JOBS: "jobs",
        Operation.CANCEL: None,
        Operation.NODES: "nodes",
        Operation.PARTITIONS: "partitions",
        Operation.OPENAPI: "paths",
    }

    def classify(
        self, status: int, content: bytes | str, operation: Operation, result_key: str | None = None
    ) -> Answer:
        key = result_key if result_key is not None else self._RESULT_KEYS.get(operation)
        return classify(
            status,
            content,
            operation=operation,
            result_key=key,
            not_found_statuses=self.not_found_statuses,
            not_found_texts=self.not_found_texts,
        )

    def classify_submit(self, status: int, content: bytes | str) -> Answer:
        return self.classify(status, content, Operation.SUBMIT)

    def classify_job(self, status: int, content: bytes | str) -> Answer:
        return self.classify(status, content, Operation.JOB)

    def classify_jobs(self, status: int, content: bytes | str) -> Answer:
        return self.classify(status, content, Operation.JOBS)

    def classify_cancel(self, status: int, content: bytes | str) -> Answer:
        return self.classify(status, content, Operation.CANCEL)

    # ---- submit --------------------------------------------------------------------------

    def environment(self, submission: JobSubmission) -> list[tuple[str, str]]:
        """The job's environment, PATH always present (jobs get nothing else from Slurm)."""
        items: dict[str, str] = {}
        for name, value in submission.environment:
            if not _ENV_NAME.fullmatch(name):
                raise SlurmConfigError(
                    f"environment variable name {name!r} is not valid: use letters, digits and "
                    "'_', not starting with a digit"
                )
            items[name] = str(value)
        items.setdefault("PATH", DEFAULT_PATH)
        return list(items.items())

    def gres_tres(self, gres: str) -> str:
        """``gpu:2`` -> ``gres/gpu:2`` (comma lists too) for ``tres_per_node``."""
        out = []
        for part in split_hostlist(gres):
            part = part.strip()
            if part.startswith("gres/"):
                out.append(part)
            elif part.startswith("gres:"):
                out.append("gres/" + part[len("gres:") :])
            else:
                out.append("gres/" + part)
        return ",".join(out)

    def build_submit_body(self, submission: JobSubmission) -> dict[str, Any]:
        raise NotImplementedError

    def _validate_submission(self, submission: JobSubmission) -> None:
        if not submission.script.strip():
            raise SlurmConfigError("script is empty: a batch job needs a script")
        if submission.nodes < 1:
            raise SlurmConfigError(f"nodes must be at least 1 (got {submission.nodes})")
        if submission.time_limit_minutes is not None and submission.time_limit_minutes <= 0:
            raise SlurmConfigError(
                f"time_limit must be a positive number of minutes "
                f"(got {submission.time_limit_minutes}); leave it unset for the partition default"
            )
        if submission.memory_per_node_mb is not None and submission.memory_per_node_mb < 0:
            raise SlurmConfigError(
                "mem must be 0 (whole node) or more megabytes "
                f"(got {submission.memory_per_node_mb})"
            )

    def parse_submit(self, body: Mapping[str, Any]) -> str:
        """The new job id from a successful submit answer."""
        raw = body.get("job_id")
        if raw is None and isinstance(body.get("result"), Mapping):
            raw = body["result"].get("job_id")
        job_id = number(raw)
        if job_id is None or job_id <= 0:
            raise SlurmUncertain(
                "submit was answered without a job id; a job may or may not have been created"
            )
        return str(job_id)

    # ---- jobs ----------------------------------------------------------------------------

    def job_state(self, record: Mapping[str, Any]) -> str:
        raw = record.get("job_state")
        if isinstance(raw, list):
            states = [str(s).strip().upper() for s in raw if str(s).strip()]
            return states[0] if states else ""
        return str(raw or "").strip().upper()

    def exit_code(self, record: Mapping[str, Any]) -> int | None:
        return number(record.get("exit_code"))

    def time_unlimited(self, value: object) -> bool:
        """UNLIMITED is ``{"infinite": true}`` from v0.0.40 and INFINITE (0xFFFFFFFF) before."""
        if is_infinite(value):
            return True
        raw = value.get("number") if isinstance(value, Mapping) else value
        return isinstance(raw, int) and not isinstance(raw, bool) and raw == 0xFFFFFFFF

    def _time(self, value: object) -> int | None:
        found = number(value)
        return found if found else None

    def parse_job(self, record: Mapping[str, Any]) -> JobInfo:
        job_id = number(record.get("job_id"))
        if job_id is None or job_id <= 0:
            raise SlurmUncertain("slurmrestd returned a job record without a job id")
        state = self.job_state(record)
        if not state:
            raise SlurmUncertain(f"job {job_id} has no job_state; not treating it as gone")
        phase = job_phase(state)
        reason = str(record.get("state_reason") or "").strip()
        if reason.lower() == "none":
            reason = ""
        try:
            nodes = expand_nodelist(_text(record.get("nodes")))
        except ValueError as exc:
            raise SlurmUncertain(f"job {job_id}: {exc}") from None
        batch_host = str(record.get("batch_host") or "").strip()
        if batch_host and batch_host in nodes and nodes[0] != batch_host:
            nodes = (batch_host, *tuple(n for n in nodes if n != batch_host))
        return JobInfo(
            job_id=str(job_id),
            name=str(record.get("name") or ""),
            state=state,
            phase=phase,
            reason=reason,
            nodes=nodes,
            user=str(record.get("user_name") or ""),
            partition=str(record.get("partition") or ""),
            submit_time=self._time(record.get("submit_time")),
            start_time=self._time(record.get("start_time")),
            end_time=self._time(record.get("end_time")),
            time_limit_minutes=number(record.get("time_limit")),
            time_unlimited=self.time_unlimited(record.get("time_limit")),
            restart_count=number(record.get("restart_cnt")) or 0,
            exit_code=self.exit_code(record),
        )

    def job_records(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        records = body.get("jobs")
        if not isinstance(records, list) or not all(isinstance(r, Mapping) for r in records):
            raise SlurmUncertain("slurmrestd answered without a usable 'jobs' list")
        return records

    def parse_jobs(self, body: Mapping[str, Any]) -> list[JobInfo]:
        return [self.parse_job(r) for r in self.job_records(body)]

    # ---- nodes and partitions ------------------------------------------------------------

    def node_state(self, record: Mapping[str, Any]) -> tuple[str, ...]:
        raw = record.get("state")
        states = list(_names(raw)) if isinstance(raw, list) else [str(raw or "").strip()]
        states += list(_names(record.get("state_flags")))
        seen: dict[str, None] = {}
        for state in states:
            if state:
                seen.setdefault(state.upper(), None)
        return tuple(seen)

    def parse_node(self, record: Mapping[str, Any]) -> NodeInfo:
        specialized = number(record.get("specialized_memory"))
        return NodeInfo(
            name=str(record.get("name") or ""),
            address=str(record.get("address") or ""),
            state=self.node_state(record),
            partitions=_names(record.get("partitions")),
            cpus=number(record.get("cpus")),
            alloc_cpus=number(record.get("alloc_cpus")),
            real_memory_mb=number(record.get("real_memory")),
            alloc_memory_mb=number(record.get("alloc_memory")),
            specialized_memory_mb=specialized if specialized and specialized > 0 else None,
            gres=_text(record.get("gres")),
            features=_names(record.get("features")),
        )

    def parse_nodes(self, body: Mapping[str, Any]) -> list[NodeInfo]:
        records = body.get("nodes")
        if not isinstance(records, list):
            raise SlurmUncertain("slurmrestd answered without a 'nodes' list")
        return [self.parse_node(r) for r in records if isinstance(r, Mapping) and r.get("name")]

    def partition_fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Version specific: nodes text, state, times, accounts, default flag."""
        raise NotImplementedError

    def parse_partition(self, record: Mapping[str, Any]) -> PartitionInfo:
        fields = self.partition_fields(record)
        try:
            nodes = expand_nodelist(fields.pop("nodes_text"))
        except ValueError:
            nodes = ()
        return PartitionInfo(name=str(record.get("name") or ""), nodes=nodes, **fields)

    def parse_partitions(self, body: Mapping[str, Any]) -> list[PartitionInfo]:
        records = body.get("partitions")
        if not isinstance(records, list):
            raise SlurmUncertain("slurmrestd answered without a 'partitions' list")
        return [
            self.parse_partition(r) for r in records if isinstance(r, Mapping) and r.get("name")
        ]

    @staticmethod
    def _minutes(value: object) -> int | None:
        """Partition time in minutes; ``None`` for unlimited/unset."""
        if is_infinite(value):
            return None
        found = number(value)
        return found if found is not None and found >= 0 else None

    @staticmethod
    def _accounts(value: object) -> tuple[str, ...]:
        return tuple(a for a in _names(value) if a.upper() != "ALL")

    # ---- ping ----------------------------------------------------------------------------

    def parse_ping(self, body: Mapping[str, Any]) -> tuple[bool, str]:
        """(controller answers, words) from a ping answer."""
        pings = body.get("pings")
        if not isinstance(pings, list) or not pings:
            return False, "ping answer lists no controller"
        words = []
        ok = False
        for ping in pings:
            if not isinstance(ping, Mapping):
                continue
            host = str(ping.get("hostname") or "?")
            if "responding" in ping:
                up = bool(ping.get("responding"))
            else:
                up = str(ping.get("pinged") or ping.get("ping") or "").strip().upper() == "UP"
            mode = str(ping.get("mode") or ("primary" if ping.get("primary") else "")).strip()
            ok = ok or up
            words.append(f"{host} {'UP' if up else 'DOWN'}" + (f" ({mode})" if mode else ""))
        return ok, ", ".join(words)

    def slurm_release(self, body: Mapping[str, Any]) -> str:
        meta = body.get("meta")
        if not isinstance(meta, Mapping):
            return ""
        slurm = meta.get(self.meta_slurm_key) or meta.get("Slurm") or meta.get("slurm")
        if not isinstance(slurm, Mapping):
            return ""
        release = slurm.get("release")
        if release:
            return str(release)
        version = slurm.get("version")
        if isinstance(version, Mapping):
            parts = [str(version.get(k, "")) for k in ("major", "minor", "micro")]
            if all(parts):
                return ".".join(parts)
        return ""

    # ---- slurmdb -------------------------------------------------------------------------

    def parse_accounts(self, body: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(
            sorted({str(a.get("name")) for a in _records(body, "accounts") if a.get("name")})
        )

    def parse_qos(self, body: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(sorted({str(q.get("name")) for q in _records(body, "qos") if q.get("name")}))

    def parse_qos_limits(self, body: Mapping[str, Any]) -> tuple[tuple[str, int | None], ...]:
        """(QoS, MaxWall per job in minutes or None for none) for every QoS of the answer.

        ``limits.max.wall_clock.per.job``: a bare integer (dbv0.0.38) or a
        ``{set, infinite, number}`` struct (v0.0.40 and later)."""
        out: dict[str, int | None] = {}
        for record in _records(body, "qos"):
            name = str(record.get("name") or "")
            if not name:
                continue
            found: object = record.get("limits")
            for key in ("max", "wall_clock", "per", "job"):
                found = found.get(key) if isinstance(found, Mapping) else None
            minutes = number(found)
            out[name] = minutes if minutes is not None and minutes > 0 else None
        return tuple(sorted(out.items()))

    def parse_associations(self, body: Mapping[str, Any]) -> tuple[AssociationInfo, ...]:
        seen: dict[AssociationInfo, None] = {}
        for record in _records(body, "associations"):
            account = str(record.get("account") or "").strip()
            if not account:
                continue
            partition = str(record.get("partition") or "").strip() or None
            qos = record.get("qos")
            if isinstance(qos, Mapping):  # dbv0.0.38 style {"qos": [...]} wrappers
                qos = qos.get("names") or qos.get("qos")
            info = AssociationInfo(
                account=account,
                partition=partition,
                qos=tuple(sorted(set(_names(qos)))),
                user=str(record.get("user") or ""),
            )
            seen.setdefault(info, None)
        return tuple(seen)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.version}>"


def _records(body: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]]:
    records = body.get(key)
    if not isinstance(records, list):
        raise SlurmUncertain(f"slurmdbd answered without a '{key}' list")
    return [r for r in records if isinstance(r, Mapping)]
