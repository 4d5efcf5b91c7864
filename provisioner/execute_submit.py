"""The executor's submit path: write the replica row and its launch record, submit the job, record
its id (or Slurm's refusal); and adopt a job found by name whose submit answer was lost.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from obleth.core.choices import ReplicaState
from obleth.core.models import Launch, ManagedSpec, Replica
from provisioner.domain import Adopt, Submit
from provisioner.execute_common import ExecutorParts, fault_point, log
from provisioner.identity import identity_check_for, new_replica_key
from provisioner.refusals import record_refusal
from provisioner.slurm.errors import SlurmConfigError, SlurmRejected
from provisioner.spec_fingerprint import spec_fingerprint
from provisioner.submission import build_submission, submission_record


class SubmitActions(ExecutorParts):
    """Submit and Adopt."""

    def submit(self, action: Submit) -> str:
        spec = self.specs.get(action.model_id)
        if spec is None:
            raise RuntimeError("no managed spec for this model; nothing to submit")
        model_name = spec.model.name
        excluded = ",".join(action.excluded_nodes)
        # The replica's key: kept from its row on a resubmit (a job of the first submit may
        # still come up with it), fresh for a new row. It reaches the job's environment only.
        stored = (
            Replica.objects.filter(pk=action.replica_id).values_list("api_key", flat=True).first()
            if action.existing
            else None
        )
        api_key = stored or new_replica_key()
        fingerprint = spec_fingerprint(
            spec
        )  # what this job is submitted with (rollout compares it)
        identity_check = identity_check_for(spec.launcher_spec)
        submission = build_submission(
            spec=spec,
            slurm=self.slurm,
            job_name=action.job_name,
            port_base=action.port_base,
            port_span=self.knobs.port_span,
            excluded_nodes=action.excluded_nodes,
            client=self.client,
            replica_api_key=api_key,
            replica_id=str(action.replica_id),
        )
        launch_defaults: dict[str, Any] = {
            "model_id": action.model_id,
            "model_name": model_name,
            "recipe_id": spec.recipe_id or _recipe_id(spec.launcher_spec),
            "job_name": action.job_name,
            "partition": spec.partition,
            "account": spec.account,
            "qos": spec.qos,
            "time_limit": spec.time_limit,
            "gres": spec.gres,
            "nodes_requested": spec.nodes,
            "cpus_per_task": spec.cpus_per_task,
            "mem": spec.mem,
            "exclude": submission.excluded_nodes,
            "constraints": spec.constraints,
            "submission": submission_record(submission),
            "stdout_path": submission.standard_output,
            "stderr_path": submission.standard_error,
        }
        # The row (with the job name that identifies the job) and its launch record are written
        # together, before the submit: a job whose answer is lost is adopted with its history.
        with transaction.atomic():
            if action.existing:
                updated = Replica.objects.filter(pk=action.replica_id, job_id="").update(
                    submitted_at=self.now(),
                    last_message="submitting",
                    updated_at=self.now(),
                    spec_fingerprint=fingerprint,
                    **({} if stored else {"api_key": api_key, "identity_check": identity_check}),
                )
                if not updated:
                    return "row already has a job; nothing to do"
            else:
                Replica.objects.create(
                    id=action.replica_id,
                    model_id=action.model_id,
                    model_name=model_name,
                    state=ReplicaState.PENDING,
                    job_name=action.job_name,
                    port_base=action.port_base,
                    excluded_nodes=excluded,
                    submitted_at=self.now(),
                    last_message="submitting",
                    api_key=api_key,
                    identity_check=identity_check,
                    spec_fingerprint=fingerprint,
                    successor_of=action.successor_of,
                )
                Launch.objects.create(id=action.replica_id, **launch_defaults)
            if action.existing:
                Launch.objects.update_or_create(id=action.replica_id, defaults=launch_defaults)
        fault_point("after_row_before_submit")
        try:
            job_id = self.client.submit(submission)
        except (SlurmRejected, SlurmConfigError) as exc:
            # Refused (by Slurm, or by the adapter before sending): no job exists. Keep the reason
            # where the operator looks first; the next pass tries again.
            reason = exc.reason if isinstance(exc, SlurmRejected) else exc.message
            Replica.objects.filter(pk=action.replica_id, job_id="").delete()
            Launch.objects.update_or_create(
                id=action.replica_id,
                defaults={
                    **launch_defaults,
                    "end_state": "rejected",
                    "end_reason": reason[:500],
                    "ended_at": self.now(),
                },
            )
            record_refusal(self.client, action.replica_id, exc, spec.partition)  # whole answer
            spec.last_provision_error = f"Slurm refused the job: {reason}"
            ManagedSpec.objects.filter(pk=action.model_id).update(
                last_provision_error=spec.last_provision_error,
                last_provision_error_at=self.now(),
            )
            raise
        # An uncertain answer (SlurmUncertain) propagates with the row kept: the next pass adopts
        # the job by its name if Slurm created it, or submits again if it did not.
        fault_point("after_submit_before_record")
        Replica.objects.filter(pk=action.replica_id, job_id="").update(
            job_id=job_id, last_message="submitted", updated_at=self.now()
        )
        Launch.objects.filter(pk=action.replica_id).update(job_id=job_id)
        if spec.last_provision_error:
            ManagedSpec.objects.filter(pk=action.model_id).update(
                last_provision_error="", last_provision_error_at=None
            )
            spec.last_provision_error = ""
        log.debug("submitted job %s for %s (replica %s)", job_id, model_name, action.replica_id)
        return f"job {job_id}"

    def adopt(self, action: Adopt) -> str:
        Replica.objects.filter(pk=action.replica_id, job_id="").update(
            job_id=action.job_id, last_message="adopted job found by name", updated_at=self.now()
        )
        Launch.objects.filter(pk=action.replica_id, job_id="").update(job_id=action.job_id)
        return f"adopted job {action.job_id}"


def _recipe_id(launcher_spec: Any) -> uuid.UUID | None:
    if not isinstance(launcher_spec, dict):
        return None
    recipe = launcher_spec.get("recipe")
    value = recipe.get("id") if isinstance(recipe, dict) else launcher_spec.get("recipe_id")
    if not value:
        return None
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
