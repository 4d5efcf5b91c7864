"""An in-process fake slurmrestd (API v0.0.38 shapes, as recorded from Slurm 22.05.8).

For fault injection and scale only -- never instead of the real server: every behaviour here
copies an answer seen from the real slurmrestd (see the lab report), and the live contract
tests run the same checks against both.

Routes: ``GET /openapi/v3`` (and ``/openapi``), ``GET /slurm/v0.0.38/ping``, ``POST
/slurm/v0.0.38/job/submit``, ``GET|DELETE /slurm/v0.0.38/job/{id}``, ``GET
/slurm/v0.0.38/jobs``, ``GET /slurm/v0.0.38/nodes``, ``GET /slurm/v0.0.38/partitions``.

Jobs live in memory: PENDING, then RUNNING ``start_delay`` seconds after submit (or after a
requeue, ``requeue_delay``), TIMEOUT once ``time_limit`` minutes times ``time_scale`` have run,
purged ``purge_after`` seconds after they end (None: never).

Fault switches (attributes, flip them any time): ``down`` (via :meth:`set_down`: connection
refused), ``slow_seconds`` (delay before every answer), ``auth_failure`` (answers as for a bad
or expired token: 500 with -1/5005), ``controller_down`` (slurmctld stopped: 500 with -1 and
1800, after ``controller_delay`` seconds), ``html_502`` (a proxy's HTML error page),
``raw_answer`` (status, content type, body: every request gets exactly that, e.g. a bare 500 or
a login portal's HTML with 200).

Parts: ``state`` (nodes, jobs and their state machine), ``answers`` (the wire format and the
fault answers), ``routes`` (request handling), ``server`` (HTTP server and handler) and
``slurmrestd`` (:class:`FakeSlurmrestd`, which joins them). Import from this package.
"""

from __future__ import annotations

from provisioner.slurm.fake.answers import API as API
from provisioner.slurm.fake.answers import PREFIX as PREFIX
from provisioner.slurm.fake.answers import V0038_JOB_KEYS as V0038_JOB_KEYS
from provisioner.slurm.fake.slurmrestd import FakeSlurmrestd
from provisioner.slurm.fake.state import FakeJob, FakeNode

__all__ = ["FakeJob", "FakeNode", "FakeSlurmrestd"]
