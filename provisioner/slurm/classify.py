"""Sort one slurmrestd HTTP answer into exactly one of three kinds (plus plain success).

* ``OK``        -- a JSON object carrying the data the operation asked for.
* ``NOT_FOUND`` -- Slurm said the job id is unknown: error 2017 (``ESLURM_INVALID_JOB_ID``) or
  the text "invalid job id" (v0.0.36: "_handle_job_get: unknown job"), with the HTTP status that
  API version uses for it. Only job reads and cancels can be NOT_FOUND.
* ``REJECTED``  -- Slurm understood a request and refused it (a submit with a bad partition, a
  cancel without permission); ``sentence`` is Slurm's own words.
* ``UNCERTAIN`` -- everything else: HTML or plain-text bodies, JSON without the expected key,
  404 without error 2017, 401, errors -1/5005 (a bad or expired token; in 22.05 also what a
  stopped slurmctld looks like), controller communication errors such as 1800, timeouts.
  ``auth`` is set when the cause is most likely the token.

Nothing UNCERTAIN may ever be read as "the job is gone".
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = [
    "AUTH_ERROR_NUMBERS",
    "Answer",
    "AnswerKind",
    "ErrorEntry",
    "Operation",
    "classify",
    "classify_transport_error",
    "parse_errors",
]

JOB_NOT_FOUND = 2017  # ESLURM_INVALID_JOB_ID
ALREADY_DONE = 2021  # ESLURM_ALREADY_DONE: "Job/step already completing or completed"
REST_PARSING_FAILED = 9001  # ESLURM_REST_FAIL_PARSING: follows the real reason in the list

# A token Slurm does not accept shows up as 500 with these numbers in 22.05 (see the lab report):
# -1 "Unspecified error" on reads, 5005 "Zero Bytes were transmitted or received" on writes.
# 1007 is SLURM_PROTOCOL_AUTHENTICATION_ERROR; 6000-6099 are the ESLURM_AUTH_* errors.
AUTH_ERROR_NUMBERS = frozenset({-1, 1007, 5005})
_AUTH_RANGES = ((6000, 6099),)

# Communication with slurmctld/slurmdbd failed: protocol (1000-1099), slurmctld communication
# (1800-1899, e.g. 1800 "Unable to contact slurm controller"), sockets (5000-5099), slurmdbd
# connection (7000-7099). The request may or may not have reached the controller.
_TRANSIENT_RANGES = ((1000, 1099), (1800, 1899), (5000, 5099), (7000, 7099))

_GENERIC_SENTENCES = frozenset({"", "unspecified error", "failure during parsing"})
_BODY_SNIPPET = 300


class AnswerKind(enum.StrEnum):
    OK = "ok"
    NOT_FOUND = "job-not-found"
    REJECTED = "rejected"
    UNCERTAIN = "uncertain"


class Operation(enum.StrEnum):
    PING = "ping"
    SUBMIT = "submit"
    JOB = "job"
    JOBS = "jobs"
    CANCEL = "cancel"
    NODES = "nodes"
    PARTITIONS = "partitions"
    SLURMDB = "slurmdb"
    OPENAPI = "openapi"


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorEntry:
    """One entry of a slurmrestd ``errors`` list, whichever of the three key sets it used."""

    number: int | None
    error: str = ""
    description: str = ""
    source: str = ""

    @property
    def sentence(self) -> str:
        """Slurm's most specific words for this entry."""
        if self.error.strip().lower() not in _GENERIC_SENTENCES:
            return self.error.strip()
        if self.description.strip():
            return self.description.strip()
        return self.error.strip()

    def summary(self) -> str:
        words = self.sentence
        if self.description and self.description.strip() != words:
            words = f"{words} ({self.description.strip()})"
        return f"error {self.number}: {words}" if self.number is not None else words


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    kind: AnswerKind
    status: int | None
    body: dict[str, Any] | None = None
    errors: tuple[ErrorEntry, ...] = ()
    message: str = ""  # why it is not OK, in words; never contains request headers
    sentence: str = ""  # REJECTED: Slurm's own sentence
    auth: bool = False  # UNCERTAIN because the token was most likely refused

    @property
    def error_numbers(self) -> tuple[int, ...]:
        return tuple(e.number for e in self.errors if e.number is not None)


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def parse_errors(body: Mapping[str, Any]) -> tuple[ErrorEntry, ...] | None:
    """Normalise ``body["errors"]``; ``None`` when the key holds something that is not a list.

    Key sets seen from slurmrestd: ``{error_code, error}``, ``{description, error_number,
    error, source}``, ``{error, errno}`` and ``{description, source}``.
    """
    raw = body.get("errors", [])
    if raw is None:
        return ()
    if not isinstance(raw, list):
        return None
    entries = []
    for item in raw:
        if isinstance(item, str):
            entries.append(ErrorEntry(number=None, error=item))
            continue
        if not isinstance(item, Mapping):
            return None
        number = None
        for key in ("error_number", "error_code", "errno"):
            if key in item:
                number = _as_int(item.get(key))
                if number is not None:
                    break
        # v0.0.36 uses error_code 0 for "no number" ({"error": "...unknown job 1", "error_code": 0})
        if number == 0:
            number = None
        entries.append(
            ErrorEntry(
                number=number,
                error=str(item.get("error") or ""),
                description=str(item.get("description") or ""),
                source=str(item.get("source") or ""),
            )
        )
    return tuple(entries)


def parse_kill_status(body: Mapping[str, Any]) -> tuple[ErrorEntry, ...] | None:
    """Per-job results of a v0.0.42+ cancel (``status: [{error: {code, string, message}}]``):
    the entries whose code is not 0; ``None`` when ``status`` is malformed."""
    raw = body.get("status")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        return None
    entries = []
    for item in raw:
        if not isinstance(item, Mapping):
            return None
        error = item.get("error")
        if error is None:
            continue
        if not isinstance(error, Mapping):
            return None
        code = _as_int(error.get("code"))
        if not code:
            continue
        entries.append(
            ErrorEntry(
                number=code,
                error=str(error.get("string") or ""),
                description=str(error.get("message") or ""),
                source="kill_jobs",
            )
        )
    return tuple(entries)


def _in_ranges(number: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(low <= number <= high for low, high in ranges)


def is_auth_number(number: int | None) -> bool:
    return number is not None and (number in AUTH_ERROR_NUMBERS or _in_ranges(number, _AUTH_RANGES))


def is_transient_number(number: int | None) -> bool:
    return (
        number is not None and not is_auth_number(number) and _in_ranges(number, _TRANSIENT_RANGES)
    )


def _is_not_found_entry(entry: ErrorEntry, texts: Collection[str]) -> bool:
    if entry.number == JOB_NOT_FOUND:
        return True
    words = f"{entry.error} {entry.description}".lower()
    return any(text in words for text in texts)


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _BODY_SNIPPET else text[:_BODY_SNIPPET] + "..."


def _errors_text(errors: Sequence[ErrorEntry]) -> str:
    return "; ".join(e.summary() for e in errors) or "no error entries"


def _uncertain(status: int | None, message: str, **kwargs: Any) -> Answer:
    return Answer(kind=AnswerKind.UNCERTAIN, status=status, message=message, **kwargs)


def classify_transport_error(exc: BaseException, *, operation: Operation) -> Answer:
    """A request that got no HTTP answer: always UNCERTAIN (the request may have been applied)."""
    kind = type(exc).__name__
    detail = str(exc).strip() or kind
    return _uncertain(None, f"{operation} got no answer from slurmrestd ({kind}: {detail})")


def classify(
    status: int,
    content: bytes | str,
    *,
    operation: Operation,
    result_key: str | None,
    not_found_statuses: Collection[int] = (),
    not_found_texts: Collection[str] = ("invalid job id",),
) -> Answer:
    """Classify one HTTP answer of ``operation``.

    ``result_key`` is the key a successful body must carry (``jobs``, ``pings``...; ``None`` for
    answers that carry no data, such as a cancel). ``not_found_statuses`` are the HTTP statuses
    the API version uses for an unknown job (500 up to v0.0.39, 404 from v0.0.40).
    """
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    if status in (401, 403):
        return _uncertain(
            status,
            f"slurmrestd refused the credentials (HTTP {status}: {_snippet(text) or 'no body'})",
            auth=True,
        )
    try:
        parsed = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        what = "an empty body" if not text.strip() else f"a non-JSON body: {_snippet(text)}"
        if parsed is not None:
            what = f"JSON that is not an object: {_snippet(text)}"
        return _uncertain(status, f"{operation}: HTTP {status} with {what}")
    body: dict[str, Any] = parsed
    errors = parse_errors(body)
    if errors is None:
        return _uncertain(status, f"{operation}: HTTP {status} with a malformed errors list")
    if operation is Operation.CANCEL:
        per_job = parse_kill_status(body)
        if per_job is None:
            return _uncertain(status, f"{operation}: HTTP {status} with a malformed status list")
        # A job that already ended counts as cancelled (Slurm itself treats it as success).
        errors = tuple(
            e
            for e in (*errors, *per_job)
            if e.number != ALREADY_DONE and "already completing or completed" not in e.error
        )
    numbers = [e.number for e in errors]
    auth = any(is_auth_number(n) for n in numbers)
    transient = any(is_transient_number(n) for n in numbers)
    ok_status = 200 <= status < 300

    if operation in (Operation.JOB, Operation.CANCEL):
        not_found = [e for e in errors if _is_not_found_entry(e, not_found_texts)]
        jobs = body.get("jobs")
        empty_result = operation is Operation.CANCEL or (isinstance(jobs, list) and not jobs)
        if jobs is None and operation is Operation.JOB:
            empty_result = True
        only_not_found = bool(not_found) and len(not_found) == len(errors)
        if only_not_found and not auth and not transient and empty_result:
            per_job_answer = operation is Operation.CANCEL and ok_status and "status" in body
            if status in not_found_statuses or per_job_answer:
                return Answer(
                    kind=AnswerKind.NOT_FOUND,
                    status=status,
                    body=body,
                    errors=errors,
                    message=_errors_text(errors),
                )
            return _uncertain(
                status,
                f"{operation}: Slurm said job-not-found with HTTP {status}, which this API version "
                f"does not use for that ({_errors_text(errors)})",
                body=body,
                errors=errors,
            )

    if ok_status and operation is Operation.CANCEL and errors:
        # v0.0.42+: HTTP 200 with per-job errors in "status" (or errors beside a 200).
        if auth or transient:
            return _uncertain(
                status, f"{operation}: {_errors_text(errors)}", body=body, errors=errors, auth=auth
            )
        primary = errors[0]
        return Answer(
            kind=AnswerKind.REJECTED,
            status=status,
            body=body,
            errors=errors,
            message=_errors_text(errors),
            sentence=primary.sentence or primary.summary(),
        )
    if ok_status:
        if result_key is None or isinstance(body.get(result_key), list | dict):
            if result_key is not None and (auth or transient) and not body.get(result_key):
                # An empty list next to an auth or controller error is no answer at all.
                return _uncertain(
                    status,
                    f"{operation}: {_errors_text(errors)}",
                    body=body,
                    errors=errors,
                    auth=auth,
                )
            return Answer(kind=AnswerKind.OK, status=status, body=body, errors=errors)
        return _uncertain(
            status,
            f"{operation}: HTTP {status} without '{result_key}' ({_errors_text(errors)})",
            body=body,
            errors=errors,
            auth=auth,
        )

    if status == 404:
        return _uncertain(
            status,
            f"{operation}: HTTP 404 without a job-not-found error, so the URL, API version or a "
            f"proxy is wrong ({_errors_text(errors)}; body: {_snippet(text)})",
            body=body,
            errors=errors,
        )
    if auth and status >= 500:
        return _uncertain(status, _errors_text(errors), body=body, errors=errors, auth=True)
    if transient or not errors:
        return _uncertain(
            status,
            f"{operation}: HTTP {status}, slurmctld could not be asked ({_errors_text(errors)})",
            body=body,
            errors=errors,
        )
    if operation in (Operation.SUBMIT, Operation.CANCEL):
        primary = next(
            (e for e in errors if e.number != REST_PARSING_FAILED and e.sentence),
            errors[0],
        )
        sentence = primary.sentence or primary.summary()
        return Answer(
            kind=AnswerKind.REJECTED,
            status=status,
            body=body,
            errors=errors,
            message=_errors_text(errors),
            sentence=sentence,
        )
    return _uncertain(
        status, f"{operation}: HTTP {status} ({_errors_text(errors)})", body=body, errors=errors
    )
