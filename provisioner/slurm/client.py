"""The one piece of obleth that speaks HTTP to slurmrestd.

Every answer goes through the version's adapter and ``classify`` and comes out as data,
``None`` (a recognised job-not-found, for ``get_job`` only), ``SlurmRejected`` (Slurm refused,
in its own words), ``SlurmAuthError`` (the token, with how to fix it) or ``SlurmUncertain``
(anything else -- never to be read as "the job is gone").

The JWT travels only in the ``X-SLURM-USER-TOKEN`` header: redirects are not followed, and the
token is scrubbed from every message, log line and ``repr``.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import jwt

from provisioner.slurm.adapters import ADAPTERS, SlurmAdapter, get_adapter, number, version_key
from provisioner.slurm.adapters.base import AssociationInfo
from provisioner.slurm.classify import Answer, AnswerKind, Operation, classify
from provisioner.slurm.classify import classify_transport_error as _transport_answer
from provisioner.slurm.errors import (
    SlurmAuthError,
    SlurmConfigError,
    SlurmError,
    SlurmRejected,
    SlurmUncertain,
)
from provisioner.slurm.results import ClusterResources, SlurmdbResult
from provisioner.slurm.types import JobInfo, JobSubmission, NodeInfo, PartitionInfo, PingResult

__all__ = ["SlurmClient", "token_expiry"]

logger = logging.getLogger("provisioner.slurm")

T = TypeVar("T")

_VERSION_IN_PATH = re.compile(r"^/slurm/(v0\.0\.[0-9]+)/")
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")
OPENAPI_PATHS = ("/openapi/v3", "/openapi")


def token_expiry(token: str) -> dt.datetime | None:
    """The ``exp`` of a JWT (not verified: only to explain an auth failure); ``None`` if unknown."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
    except jwt.PyJWTError:
        return None
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return dt.datetime.fromtimestamp(exp, tz=dt.UTC)
    return None


class SlurmClient:
    """A slurmrestd client bound to one URL, user and token.

    ``api_version`` pins the API version; without it the newest version that both the server
    and obleth know is detected from the OpenAPI document on first use and cached.
    ``request_count`` counts every HTTP request sent (answered or not).
    """

    def __init__(
        self,
        url: str,
        user: str,
        token: str,
        api_version: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SlurmConfigError(
                f"url {url!r} is not a slurmrestd URL; use http://host:port (e.g. "
                "http://127.0.0.1:6820)"
            )
        if not user.strip() or not _HEADER_SAFE.fullmatch(user.strip()):
            raise SlurmConfigError(
                "user must be the Slurm user name the token was issued for (no spaces)"
            )
        if not token.strip() or not _HEADER_SAFE.fullmatch(token.strip()):
            raise SlurmConfigError(
                "token is empty or not a JWT; issue one on the Slurm controller with "
                f"`scontrol token username={user.strip()} lifespan=<seconds>`"
            )
        if timeout <= 0 or connect_timeout <= 0:
            raise SlurmConfigError("timeout and connect_timeout must be positive seconds")
        self.url = url.strip().rstrip("/")
        self.user = user.strip()
        self._token = token.strip()
        self._pinned = get_adapter(api_version) if api_version else None
        self._adapter: SlurmAdapter | None = self._pinned
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.request_count = 0
        self._lock = threading.Lock()
        self._http = httpx.Client(
            base_url=self.url,
            headers={
                "X-SLURM-USER-NAME": self.user,
                "X-SLURM-USER-TOKEN": self._token,
                "Accept": "application/json",
            },
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            follow_redirects=False,
            transport=transport,
            trust_env=False,
        )

    # ---- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SlurmClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        version = self._adapter.version if self._adapter else "auto"
        return f"<SlurmClient {self.url} user={self.user} api={version}>"

    # ---- plumbing ------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        # Real JWTs are long; scrubbing a 3-letter test token would mangle ordinary words.
        return text.replace(self._token, "***") if len(self._token) >= 8 else text

    def _send(
        self,
        method: str,
        path: str,
        operation: Operation,
        classify_answer: Callable[[int, bytes], Answer],
        *,
        body: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        with self._lock:
            self.request_count += 1
        started = time.monotonic()
        try:
            response = self._http.request(
                method,
                path,
                json=body,
                timeout=httpx.Timeout(timeout, connect=min(timeout, self.connect_timeout))
                if timeout is not None
                else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TimeoutException as exc:
            limit = timeout if timeout is not None else self.timeout
            answer = _transport_answer(exc, operation=operation)
            answer = Answer(
                kind=AnswerKind.UNCERTAIN,
                status=None,
                message=f"{method} {path} timed out after {limit:g} s ({answer.message})",
            )
        except httpx.HTTPError as exc:
            answer = _transport_answer(exc, operation=operation)
            answer = Answer(
                kind=AnswerKind.UNCERTAIN, status=None, message=f"{method} {path}: {answer.message}"
            )
        else:
            answer = classify_answer(response.status_code, response.content)
        elapsed_ms = (time.monotonic() - started) * 1000.0
        logger.debug(
            "slurmrestd %s %s -> %s %s in %.0f ms",
            method,
            path,
            answer.status,
            answer.kind,
            elapsed_ms,
        )
        return answer

    def _request(
        self,
        adapter: SlurmAdapter,
        method: str,
        path: str,
        operation: Operation,
        *,
        body: dict[str, Any] | None = None,
        result_key: str | None = None,
        timeout: float | None = None,
    ) -> Answer:
        def classify_answer(status: int, content: bytes) -> Answer:
            return adapter.classify(status, content, operation, result_key)

        return self._send(method, path, operation, classify_answer, body=body, timeout=timeout)

    def _auth_message(self, answer: Answer) -> str:
        expiry = token_expiry(self._token)
        now = dt.datetime.now(tz=dt.UTC)
        if expiry is not None and expiry <= now:
            why = f"the token expired at {expiry:%Y-%m-%d %H:%M:%S} UTC"
        elif expiry is not None:
            why = (
                f"the token (valid until {expiry:%Y-%m-%d %H:%M:%S} UTC) was refused: it may be "
                f"for another user than {self.user!r}, signed with another key, or slurmctld "
                "may be unreachable"
            )
        else:
            why = "the token is bad or expired, or slurmctld is unreachable"
        return (
            f"Slurm did not accept the JWT of user {self.user!r}: {why} "
            f"[HTTP {answer.status}: {answer.message}]. Fix: issue a fresh token on the Slurm "
            f"controller with `scontrol token username={self.user} lifespan=<seconds>` and save "
            "it in the Slurm settings."
        )

    def _error(self, answer: Answer, what: str) -> SlurmError:
        detail = self._scrub(answer.message)
        if answer.auth:
            return SlurmAuthError(
                self._scrub(self._auth_message(answer)), status=answer.status, detail=detail
            )
        if answer.kind is AnswerKind.REJECTED:
            return SlurmRejected(
                self._scrub(answer.sentence), status=answer.status, detail=f"{what}: {detail}"
            )
        message = f"{what}: {answer.message}"
        if answer.status == 404 and "Unable find requested URL" in answer.message:
            # slurmrestd's answer for a path of an API version none of its plugins serves
            version = self._adapter.version if self._adapter else "?"
            message = (
                f"{what}: slurmrestd does not serve API {version} [HTTP 404: {answer.message}]. "
                "Fix: set a version it serves in the Slurm settings, or leave the version "
                "empty to detect it."
            )
        return SlurmUncertain(self._scrub(message), status=answer.status, detail=detail)

    # ---- version -------------------------------------------------------------------------

    @property
    def api_version(self) -> str | None:
        """The pinned or detected version; ``None`` until detected."""
        return self._adapter.version if self._adapter else None

    @property
    def adapter(self) -> SlurmAdapter:
        """The adapter in use (detects the version on first use)."""
        if self._adapter is None:
            self.detect_version()
        assert self._adapter is not None
        return self._adapter

    def detect_version(self) -> str:
        """Newest ``/slurm/v0.0.NN/`` API served that obleth has an adapter for (cached).

        An explicit ``api_version`` wins without any request. Raises ``SlurmConfigError`` when
        the server serves none of the supported versions, ``SlurmAuthError``/``SlurmUncertain``
        when the document cannot be read.
        """
        if self._adapter is not None:
            return self._adapter.version
        failures = []
        for path in OPENAPI_PATHS:

            def classify_doc(status: int, content: bytes) -> Answer:
                return classify(status, content, operation=Operation.OPENAPI, result_key="paths")

            answer = self._send("GET", path, Operation.OPENAPI, classify_doc)
            if answer.kind is AnswerKind.OK and answer.body is not None:
                paths = answer.body.get("paths")
                served = sorted(
                    {m.group(1) for p in paths for m in [_VERSION_IN_PATH.match(str(p))] if m}
                    if isinstance(paths, dict)
                    else set(),
                    key=version_key,
                )
                # v0.0.39 (Slurm 23.02) has no OpenAPI document here and a derived adapter: it is
                # used when pinned in the settings, never picked over a documented version.
                known = [v for v in served if v in ADAPTERS and v != "v0.0.39"] or [
                    v for v in served if v in ADAPTERS
                ]
                if known:
                    self._adapter = get_adapter(known[-1])
                    logger.info("slurmrestd at %s: using API %s", self.url, known[-1])
                    return known[-1]
                raise SlurmConfigError(
                    f"slurmrestd at {self.url} serves API versions {served or 'none'}; obleth "
                    f"supports {sorted(ADAPTERS, key=version_key)}. Load a supported openapi "
                    "plugin (slurmrestd -s) or set api_version."
                )
            if answer.auth:
                raise self._error(answer, f"reading {path}")
            failures.append(f"{path}: {answer.message}")
        raise SlurmUncertain(
            self._scrub(
                "could not read the slurmrestd OpenAPI document to pick an API version ("
                + "; ".join(failures)
                + ")"
            )
        )

    # ---- operations ----------------------------------------------------------------------

    def ping(self, *, timeout: float | None = None) -> PingResult:
        """Is slurmctld reachable through slurmrestd? Never raises for transport errors."""
        started = time.monotonic()
        try:
            adapter = self.adapter
        except SlurmError as exc:
            return PingResult(
                ok=False,
                latency_ms=(time.monotonic() - started) * 1000.0,
                api_version="",
                detail=self._scrub(str(exc)),
            )
        started = time.monotonic()
        answer = self._request(adapter, "GET", adapter.ping_path(), Operation.PING, timeout=timeout)
        latency_ms = (time.monotonic() - started) * 1000.0
        if answer.kind is AnswerKind.OK and answer.body is not None:
            ok, words = adapter.parse_ping(answer.body)
            return PingResult(
                ok=ok,
                latency_ms=latency_ms,
                api_version=adapter.version,
                slurm_release=adapter.slurm_release(answer.body),
                detail=self._scrub(words),
            )
        detail = self._auth_message(answer) if answer.auth else answer.message
        release = adapter.slurm_release(answer.body) if answer.body else ""
        return PingResult(
            ok=False,
            latency_ms=latency_ms,
            api_version=adapter.version,
            slurm_release=release,
            detail=self._scrub(detail),
        )

    def submit(self, submission: JobSubmission) -> str:
        """Submit a batch job; returns its job id.

        ``SlurmRejected`` carries Slurm's sentence ("Invalid partition name specified");
        ``SlurmUncertain`` means the job may or may not exist (look it up by name).
        """
        adapter = self.adapter
        body = adapter.build_submit_body(submission)
        answer = self._request(adapter, "POST", adapter.submit_path(), Operation.SUBMIT, body=body)
        if answer.kind is AnswerKind.OK and answer.body is not None:
            job_id = adapter.parse_submit(answer.body)
            logger.info("submitted Slurm job %s (%s)", job_id, submission.name)
            return job_id
        raise self._error(answer, f"submit of {submission.name!r}")

    def cancel(self, job_id: str) -> bool:
        """Cancel a job: ``True`` once Slurm accepted it, ``False`` if Slurm says the job does
        not exist (error 2017). Refusals raise ``SlurmRejected`` with Slurm's words."""
        adapter = self.adapter
        answer = self._request(adapter, "DELETE", adapter.job_path(job_id), Operation.CANCEL)
        if answer.kind is AnswerKind.OK:
            return True
        if answer.kind is AnswerKind.NOT_FOUND:
            return False
        raise self._error(answer, f"cancel of job {job_id}")

    def get_job(self, job_id: str) -> JobInfo | None:
        """One job; ``None`` only when Slurm says this job id is unknown (never for doubt)."""
        adapter = self.adapter
        job_id = str(job_id).strip()
        answer = self._request(adapter, "GET", adapter.job_path(job_id), Operation.JOB)
        if answer.kind is AnswerKind.NOT_FOUND:
            return None
        if answer.kind is not AnswerKind.OK or answer.body is None:
            raise self._error(answer, f"reading job {job_id}")
        records = adapter.job_records(answer.body)
        if not records:
            raise SlurmUncertain(
                f"reading job {job_id}: Slurm answered with no job record and no job-not-found "
                "error; not treating the job as gone",
                status=answer.status,
            )
        for record in records:
            if number(record.get("job_id")) is None:
                raise SlurmUncertain(
                    f"reading job {job_id}: a job record without a job id", status=answer.status
                )
        for record in records:
            if str(number(record.get("job_id"))) == job_id:
                return adapter.parse_job(record)
        raise SlurmUncertain(
            f"reading job {job_id}: Slurm answered with other jobs only", status=answer.status
        )

    def list_jobs(self, name_prefix: str = "") -> list[JobInfo]:
        """All jobs whose name starts with ``name_prefix``, in ONE request (GET jobs)."""
        adapter = self.adapter
        answer = self._request(adapter, "GET", adapter.jobs_path(), Operation.JOBS)
        if answer.kind is not AnswerKind.OK or answer.body is None:
            raise self._error(answer, "listing jobs")
        jobs = []
        for record in adapter.job_records(answer.body):
            if not str(record.get("name") or "").startswith(name_prefix):
                continue
            jobs.append(adapter.parse_job(record))
        return jobs

    def nodes(self) -> list[NodeInfo]:
        adapter = self.adapter
        answer = self._request(adapter, "GET", adapter.nodes_path(), Operation.NODES)
        if answer.kind is not AnswerKind.OK or answer.body is None:
            raise self._error(answer, "listing nodes")
        return adapter.parse_nodes(answer.body)

    def partitions(self) -> list[PartitionInfo]:
        adapter = self.adapter
        answer = self._request(adapter, "GET", adapter.partitions_path(), Operation.PARTITIONS)
        if answer.kind is not AnswerKind.OK or answer.body is None:
            raise self._error(answer, "listing partitions")
        return adapter.parse_partitions(answer.body)

    def whole_node_memory_mb(self, partition: str) -> int | None:
        """Smallest ``real_memory - MemSpecLimit`` (MB) over the partition's nodes.

        What to send instead of ``--mem=0`` (some submit plugins read 0 as "unset"). ``None``
        when the partition is blank or no node of it reports memory; read errors raise.
        """
        if not partition.strip():
            return None
        cache: dict[str, int | None] = self.__dict__.setdefault("_whole_node_memory", {})
        if partition in cache:  # one node listing per partition for this client's lifetime
            return cache[partition]
        sizes = [
            node.real_memory_mb - (node.specialized_memory_mb or 0)
            for node in self.nodes()
            if partition in node.partitions and node.real_memory_mb
        ]
        sizes = [s for s in sizes if s > 0]
        cache[partition] = min(sizes) if sizes else None
        return cache[partition]

    def _slurmdb(
        self,
        what: str,
        path: str,
        result_key: str,
        parse: Callable[[dict[str, Any]], tuple[T, ...]],
    ) -> SlurmdbResult[T]:
        adapter = self.adapter
        answer = self._request(adapter, "GET", path, Operation.SLURMDB, result_key=result_key)
        if answer.kind is AnswerKind.OK and answer.body is not None:
            return SlurmdbResult(items=parse(answer.body))
        if answer.auth:
            raise self._error(answer, f"reading {what}")
        unserved = (
            answer.status == 404
            or any(7000 <= n <= 7099 for n in answer.error_numbers)
            or "slurmdbd" in answer.message.lower()
        )
        if unserved and answer.status is not None:
            return SlurmdbResult(
                unavailable_reason=self._scrub(
                    f"slurmdbd data is not served by this slurmrestd ({adapter.version}): "
                    f"{answer.message}"
                )
            )
        raise self._error(answer, f"reading {what}")

    def accounts(self) -> SlurmdbResult[str]:
        adapter = self.adapter
        return self._slurmdb(
            "accounts", adapter.accounts_path(), "accounts", adapter.parse_accounts
        )

    def qos(self) -> SlurmdbResult[str]:
        adapter = self.adapter
        return self._slurmdb("QoS", adapter.qos_path(), "qos", adapter.parse_qos)

    def qos_limits(self) -> SlurmdbResult[tuple[str, int | None]]:
        """Each QoS with its MaxWall per job in minutes (None: no limit)."""
        adapter = self.adapter
        return self._slurmdb("QoS", adapter.qos_path(), "qos", adapter.parse_qos_limits)

    def associations(self) -> SlurmdbResult[AssociationInfo]:
        adapter = self.adapter
        return self._slurmdb(
            "associations",
            adapter.associations_path(),
            "associations",
            adapter.parse_associations,
        )

    def discover(self) -> ClusterResources:
        """Partitions, nodes, accounts, QoS and associations, best effort: a part that fails
        is empty and its reason is in ``errors``."""
        errors: dict[str, str] = {}
        try:
            version = self.detect_version()
        except SlurmError as exc:
            reason = self._scrub(str(exc))
            return ClusterResources(
                errors={
                    k: reason for k in ("partitions", "nodes", "accounts", "qos", "associations")
                }
            )

        def part(name: str, read: Callable[[], T], empty: T) -> T:
            try:
                return read()
            except SlurmError as exc:
                errors[name] = self._scrub(str(exc))
                return empty

        no_partitions: list[PartitionInfo] = []
        no_nodes: list[NodeInfo] = []
        partitions = part("partitions", self.partitions, no_partitions)
        nodes = part("nodes", self.nodes, no_nodes)
        empty_names: SlurmdbResult[str] = SlurmdbResult()
        accounts = part("accounts", self.accounts, empty_names)
        empty_limits: SlurmdbResult[tuple[str, int | None]] = SlurmdbResult()
        limits = part("qos", self.qos_limits, empty_limits)
        qos = SlurmdbResult(
            items=tuple(name for name, _ in limits.items),
            unavailable_reason=limits.unavailable_reason,
        )
        empty_associations: SlurmdbResult[AssociationInfo] = SlurmdbResult()
        associations = part("associations", self.associations, empty_associations)
        for name, result in (("accounts", accounts), ("qos", qos), ("associations", associations)):
            if result.unavailable_reason:
                errors[name] = result.unavailable_reason
        account_names = set(accounts.items) | {a.account for a in associations.items}
        qos_names = set(qos.items) | {q for a in associations.items for q in a.qos}
        return ClusterResources(
            api_version=version,
            partitions=tuple(partitions),
            nodes=tuple(nodes),
            accounts=tuple(sorted(account_names)),
            qos=tuple(sorted(qos_names)),
            qos_limits=limits.items if limits.available and "qos" not in errors else None,
            associations=associations.items,
            errors=errors,
        )
