"""Actions to JSON and back (provisioner/codec.py): what a pass hands a per-model Celery task.

Pure: no database, no network. Every action type goes through ``json.dumps``/``json.loads`` in
between, as Celery's JSON serializer does, and must come back equal, with the same Python types
(UUIDs, tuples, enums, None).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import typing
import uuid
from typing import Any

import pytest

from provisioner import domain
from provisioner.codec import ACTION_TYPES, decode_action, encode_action
from provisioner.domain import (
    Adopt,
    Cancel,
    CancelOrphan,
    CancelReason,
    DeleteEndpoint,
    DeleteReplica,
    MarkLost,
    Promote,
    ReplicaState,
    Submit,
    UpdateMessage,
)

M = uuid.UUID("11111111-2222-3333-4444-555555555555")
R = uuid.UUID("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
E = uuid.UUID("99999999-8888-7777-6666-555555555555")

# At least one value per action type; several where optional fields take None / empty forms.
SAMPLES: list[domain.Action] = [
    Submit(M, R, "obleth-chat-aaaaaaaabbbb", 18000),
    Submit(M, R, "obleth-chat-aaaaaaaabbbb", 18008, excluded_nodes=("n1", "n2"), existing=True),
    Adopt(M, R, "4242"),
    Promote(M, R, "node1", "10.0.0.5", 18003, "http://10.0.0.5:18003/v1", "ep-name"),
    Promote(M, R, "node1", "::1", 18003, "http://[::1]:18003/v1", "ep", endpoint_id=E),
    MarkLost(M, R, "job gone"),
    MarkLost(
        M,
        R,
        "job ended: TIMEOUT (TimeLimit)",
        endpoint_id=E,
        end_state="TIMEOUT",
        end_reason="TimeLimit",
        nodes=("node1", "node2"),
        exit_code=15,
        failed_launch=False,
        served=True,
    ),
    domain.SettleLoss(
        M, R, "job ended: FAILED (NonZeroExitCode)", "FAILED", "NonZeroExitCode", 1, True
    ),
    domain.SettleLoss(M, R, "job ended: CANCELLED", "CANCELLED"),
    domain.SetGuard(M, "Stopped launching replicas after 3 failed launches.", "", tripped=True),
    domain.SetGuard(M, "", "Replacement storm: ...", storm_started=True),
    Submit(M, R, "obleth-chat-aaaaaaaabbbb", 18016, successor_of=E),
    domain.Retire(
        M,
        R,
        dt.datetime(2026, 12, 1, 10, 0, 30, tzinfo=dt.UTC),
        "handed over to replica 99999999",
        endpoint_id=E,
    ),
    domain.SetTransition(M, "successor still pending (Resources)", ""),
    domain.SetAutoscale(
        M,
        3,
        dt.datetime(2026, 12, 1, 10, 0, 0, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 1, 10, 1, 0, tzinfo=dt.UTC),
        None,
        None,
        None,
        "3 replicas: 41 requests in flight for 1 min, target 16 per replica",
        change="up",
    ),
    domain.SetAutoscale(M, None, None, None, None, None, None, ""),
    *[Cancel(M, R, "77", reason, f"cancel for {reason.value}") for reason in CancelReason],
    Cancel(M, R, "", CancelReason.DRAIN, "drain", endpoint_id=E),
    CancelOrphan("31337", "obleth-ghost-000000000000"),
    DeleteReplica(M, R, "lost replica past its retention"),
    DeleteEndpoint(M, E, "replica not serving"),
    UpdateMessage(M, R),
    UpdateMessage(M, R, message="PENDING \u2014 Priority", nodes=(), probe_failures=0),
    UpdateMessage(
        M, R, message="RUNNING", nodes=("n3",), probe_failures=4, state=ReplicaState.STARTING
    ),
]


def _roundtrip(action: domain.Action) -> domain.Action:
    wire = json.loads(json.dumps(encode_action(action)))
    return decode_action(wire)


def test_every_action_type_is_known_to_the_codec_and_sampled() -> None:
    union_members = {cls.__name__ for cls in typing.get_args(domain.Action)}
    assert set(ACTION_TYPES) == union_members
    assert {type(a).__name__ for a in SAMPLES} == union_members


@pytest.mark.parametrize("action", SAMPLES, ids=lambda a: type(a).__name__)
def test_round_trip_through_json_is_exact(action: domain.Action) -> None:
    back = _roundtrip(action)
    assert back == action
    assert type(back) is type(action)
    for field in dataclasses.fields(action):
        original, decoded = getattr(action, field.name), getattr(back, field.name)
        # Equal is not enough: a str where a UUID belongs, or a list where a tuple belongs,
        # compares unequal in some places and equal in others (enums compare equal to str).
        assert type(decoded) is type(original), (field.name, original, decoded)


def test_encoded_form_is_plain_json_with_a_type_tag() -> None:
    action = UpdateMessage(M, R, nodes=("a", "b"), state=ReplicaState.STARTING)
    data = encode_action(action)
    assert data["type"] == "UpdateMessage"
    assert data["model_id"] == str(M) and data["replica_id"] == str(R)
    assert data["nodes"] == ["a", "b"]
    assert data["state"] == "starting"
    assert data["message"] is None and data["probe_failures"] is None
    json.dumps(data)  # nothing that needs a custom encoder


def test_enum_values_decode_to_enum_members() -> None:
    cancel = _roundtrip(Cancel(M, R, "1", CancelReason.GATEWAY_UNHEALTHY, "zombie"))
    assert isinstance(cancel, Cancel)
    assert cancel.reason is CancelReason.GATEWAY_UNHEALTHY
    update = _roundtrip(UpdateMessage(M, R, state=ReplicaState.STARTING))
    assert isinstance(update, UpdateMessage)
    assert update.state is ReplicaState.STARTING


def test_none_and_empty_tuple_stay_distinct() -> None:
    none = _roundtrip(UpdateMessage(M, R, nodes=None))
    empty = _roundtrip(UpdateMessage(M, R, nodes=()))
    assert isinstance(none, UpdateMessage) and isinstance(empty, UpdateMessage)
    assert none.nodes is None
    assert empty.nodes == () and isinstance(empty.nodes, tuple)


def test_missing_optional_fields_take_their_defaults() -> None:
    data: dict[str, Any] = {
        "type": "Submit",
        "model_id": str(M),
        "replica_id": str(R),
        "job_name": "obleth-x",
        "port_base": 18000,
    }
    action = decode_action(data)
    assert action == Submit(M, R, "obleth-x", 18000)
    assert isinstance(action, Submit) and action.excluded_nodes == () and action.existing is False


def test_unknown_action_type_is_refused() -> None:
    with pytest.raises(KeyError):
        decode_action({"type": "LaunchMissiles", "model_id": str(M)})
