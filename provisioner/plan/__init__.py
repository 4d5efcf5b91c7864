"""The planner: one pass's ``Snapshot`` in, an ordered list of actions out.

Pure: no clock (``snapshot.now`` is the time), no database, no network, no Django. The same
snapshot always gives the same actions in the same order.

Output order. Models are planned one at a time: enabled specs in ``snapshot.specs`` order, then
the drain groups (models with replicas or provisioner-made endpoints but no enabled spec) in order
of first appearance. Each model's actions come in this order::

    DeleteEndpoint, Retire, Cancel, MarkLost, DeleteReplica, Adopt, Promote, UpdateMessage,
    SetGuard, SetTransition, SetAutoscale, Submit

so that routing stops before jobs are touched, ended jobs are recorded before their replacements
are submitted, and submits (the slowest and most likely to fail) come last. ``CancelOrphan``
actions for jobs no replica owns come after every model. Within one kind, actions follow the
replicas sorted by ``(created_at, id)``.

Replica rules per model (reference section 2.4, plus crash safety and repairs):

* ``lost``: ``DeleteReplica`` once its job ended (``lost_at``) ``lost_retention_secs`` ago; never
  alive. The kept ones
  that were failed launches (``is_failed_launch``) count toward the failed-launch breaker; churn
  (a replica that served, then was preempted, requeued, cancelled by someone else or reached its
  time limit) is replaced at once and never counted.
* Replacement storm: more than ``storm_losses`` losses of serving replicas of one model within
  ``storm_window_secs`` slow its new submits down (``storm_backoff_secs`` since its latest submit)
  and raise an alert (``SetGuard``); they never stop.
* ``draining``: ``DeleteReplica`` when its job is absent or ended; otherwise wait.
* ``job_id == ""`` (row written, submit answer lost or never sent): a job carrying the row's
  ``job_name`` in the listing is adopted; otherwise, if the submit was never sent or was sent
  before the listing was taken, the row is submitted again (``existing=True``, same id, name and
  port window). If it was sent after the listing, wait.
* A job missing from the listing is "gone" unless the submit happened after the listing was taken.
* Operator restart, zombie self-heal (at most one per model per pass), promotion, annotation,
  the failed-launch breaker, scale-up with distinct port windows and placement away from nodes
  where the model recently failed, scale-down by rank (queued, loading, serving) then age.
* Provisioner-made endpoints whose replica is not serving are deleted; hand-made ones never.
* Autoscaling (``provisioner/autoscale.py``): a spec with ``autoscale`` set gets its count from
  the gateways' in-flight requests (``snapshot.load``), which replaces ``target_replicas`` for
  the rest of the model's plan; what it decided is recorded with ``SetAutoscale``. Its
  scale-down retires serving replicas (out of routing, ``drain_secs`` for in-flight requests,
  then cancelled) instead of cancelling them at once.

Modules (each pure; each imports its siblings, never names from this ``__init__``):

* ``compose``: ``plan`` and ``promotions_while_held``, the entry points.
* ``replicas``: one model's replicas read against their jobs, then the counts and the steps below.
* ``losses``: failed launch or churn, ``MarkLost``, COMPLETING, lost retention, mass vanish.
* ``guard``: the failed-launch breaker and the replacement-storm backoff (``SetGuard``).
* ``handover``: walltime handover and rollouts (``provisioner/transitions.py`` applied).
* ``scaling``: autoscaling's target (``SetAutoscale``) and the scale-down by rank.
* ``submits``: resubmits, new replicas, successors; placement away from failed nodes.
* ``serving``: promotion, endpoint address migration, zombie self-heal.
* ``sweep``: endpoint deletion and orphan-job cancels across models.
* ``record``: row messages and the shared ends (``Cancel``, ``Retire``) of a replica.
* ``naming``: job and endpoint names, replica ids, port windows.
* ``state``: the pass's working state (``_Pass``, ``_Group``, ``_Alive``).
"""

from __future__ import annotations

from provisioner.plan.compose import plan, promotions_while_held
from provisioner.plan.guard import RESUME_HINT, breaker_message, storm_backoff_secs
from provisioner.plan.losses import (
    CHURN_STATES,
    EXTERNAL_END_STATES,
    FAILURE_STATES,
    is_failed_launch,
    lost_message,
    lost_since,
    mass_vanish,
)
from provisioner.plan.naming import (
    endpoint_name_for,
    job_name_for,
    new_replica_id,
    next_free_window,
    window_wait_message,
)
from provisioner.plan.record import (
    CANCEL_MESSAGES,
    HEALTHY_MESSAGE,
    SCALED_DOWN_CANCELLED,
    SCALED_DOWN_DRAINING,
    SCALED_DOWN_PREFIX,
    status_message,
)

__all__ = [
    "FAILURE_STATES",
    "HEALTHY_MESSAGE",
    "RESUME_HINT",
    "breaker_message",
    "is_failed_launch",
    "storm_backoff_secs",
    "endpoint_name_for",
    "job_name_for",
    "lost_message",
    "lost_since",
    "mass_vanish",
    "new_replica_id",
    "next_free_window",
    "plan",
    "promotions_while_held",
    "status_message",
    # public since the planner was one module; the tests import them from here
    "CANCEL_MESSAGES",
    "CHURN_STATES",
    "EXTERNAL_END_STATES",
    "SCALED_DOWN_CANCELLED",
    "SCALED_DOWN_DRAINING",
    "SCALED_DOWN_PREFIX",
    "window_wait_message",
]
