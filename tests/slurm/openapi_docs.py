"""The slurmrestd OpenAPI documents (gzipped copies of /work/shared/reference/slurmrestd-openapi)
and schema validators built from them, for the contract tests.

v0.0.39 has no document. Its validator is DERIVED from v0.0.40 with the differences known from
Slurm 23.02 (job_state a string, exit_code a plain number struct, times plain integers, no
required last_update/last_backfill); see provisioner/slurm/adapters/v0_0_39.py.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path
from typing import Any

from openapi_schema_validator import OAS30Validator

DOC_DIR = Path(__file__).resolve().parent / "fixtures" / "openapi"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

_FILES = {
    "v0.0.36": "v0.0.36-38-slurm-22.05.json.gz",
    "v0.0.37": "v0.0.36-38-slurm-22.05.json.gz",
    "v0.0.38": "v0.0.36-38-slurm-22.05.json.gz",
    **{f"v0.0.{n}": f"v0.0.{n}.json.gz" for n in range(40, 46)},
}
OLD_API = ("v0.0.36", "v0.0.37", "v0.0.38")


@functools.cache
def _load(name: str) -> dict[str, Any]:
    with gzip.open(DOC_DIR / name, "rt") as handle:
        doc: dict[str, Any] = json.load(handle)
    return doc


def _derived_v0039() -> dict[str, Any]:
    doc = copy.deepcopy(_load(_FILES["v0.0.40"]))
    schemas = doc["components"]["schemas"]
    renamed = {}
    text = json.dumps(schemas).replace("v0.0.40_", "v0.0.39_")
    renamed = json.loads(text)
    job = renamed["v0.0.39_job_info"]["properties"]
    job["job_state"] = {"type": "string"}
    job["exit_code"] = {"$ref": "#/components/schemas/v0.0.39_uint32_no_val"}
    for key in ("submit_time", "start_time", "end_time", "eligible_time"):
        job[key] = {"type": "integer"}
    for name in ("openapi_job_info_resp", "openapi_nodes_resp", "openapi_partition_resp"):
        renamed[f"v0.0.39_{name}"]["required"] = [
            k
            for k in renamed[f"v0.0.39_{name}"]["required"]
            if k not in ("last_update", "last_backfill")
        ]
    doc["components"]["schemas"] = renamed
    return doc


@functools.cache
def document(version: str) -> dict[str, Any]:
    if version == "v0.0.39":
        return _derived_v0039()
    return _load(_FILES[version])


def schema(version: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = document(version)["components"]["schemas"][f"{version}_{name}"]
    return found


def validator(version: str, name: str) -> OAS30Validator:
    doc = document(version)
    return OAS30Validator(
        {"components": doc["components"], "$ref": f"#/components/schemas/{version}_{name}"}
    )


def request_schema_name(version: str) -> str:
    return "job_submission" if version in OLD_API else "job_submit_req"


def job_schema_name(version: str) -> str:
    return "job_properties" if version in OLD_API else "job_desc_msg"


def response_schema_name(version: str, kind: str) -> str | None:
    """Schema of the answer to an operation (``job``, ``jobs``, ``submit``, ``ping``...)."""
    old = {
        "job": "jobs_response",
        "jobs": "jobs_response",
        "submit": "job_submission_response",
        "ping": "pings",
        "nodes": "nodes_response",
        "partitions": "partitions_response",
        "cancel": None,
    }
    new = {
        "job": "openapi_job_info_resp",
        "jobs": "openapi_job_info_resp",
        "submit": "openapi_job_submit_response",
        "ping": "openapi_ping_array_resp",
        "nodes": "openapi_nodes_resp",
        "partitions": "openapi_partition_resp",
        "cancel": "openapi_resp" if version in ("v0.0.39", "v0.0.40") else "openapi_kill_job_resp",
        "slurmdb_associations": "openapi_assocs_resp",
        "slurmdb_accounts": "openapi_accounts_resp",
        "slurmdb_qos": "openapi_slurmdbd_qos_resp",
    }
    table = old if version in OLD_API else new
    found = table.get(kind)
    if found is not None and f"{version}_{found}" not in document(version)["components"]["schemas"]:
        return "openapi_resp"
    return found


def schema_errors(version: str, name: str, body: Any, *, recorded_22_05: bool = False) -> list[str]:
    """Validation errors of ``body`` against ``{version}_{name}``.

    ``recorded_22_05``: tolerate the two ways real Slurm 22.05 answers break its own
    document -- ``null`` in fields not declared nullable, and ``meta.Slurm.version`` numbers
    the document declares as strings. Every other mismatch is still reported.

    Always tolerated: ``required`` names containing ``/`` (``"error/string"`` in the v0.0.42+
    ``kill_jobs_resp_job``): a bug of Slurm's document generator that no object can satisfy.
    """
    out = []
    for err in validator(version, name).iter_errors(body):
        path = list(err.absolute_path)
        if err.validator == "required" and "/" in str(err.message.split("'")[1:2]):
            continue
        if recorded_22_05 and (err.instance is None or path[:3] == ["meta", "Slurm", "version"]):
            continue
        out.append(f"{'/'.join(str(p) for p in path) or '<root>'}: {err.message}")
    return out


def fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("v0.0.*/*.json"))


def load_fixture(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def fixture_body_bytes(record: dict[str, Any]) -> bytes:
    body = record["body"]
    text = json.dumps(body) if record["body_is_json"] else str(body)
    return text.encode()
