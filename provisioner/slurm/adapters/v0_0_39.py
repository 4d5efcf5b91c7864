"""slurmrestd API v0.0.39 (Slurm 23.02). NO OpenAPI document for it is in the reference folder.

Derived from its neighbours and from Slurm 23.02's ``src/plugins/openapi/v0.0.39/jobs.c``
plus a client generated from the v0.0.39 document (mever-team/slurm-rest-py docs):

* like v0.0.40: the data_parser shapes -- ``environment`` a list of ``NAME=value``,
  ``time_limit``/``memory_per_node`` ``{set, infinite, number}`` structs, ``nodes`` a string,
  ``excluded_nodes`` a list, ``tres_per_node``; partitions with ``nodes.configured``,
  ``defaults.time``, ``maximums.time``, ``accounts.allowed/deny``; ping ``pinged``.
* like v0.0.38: ``job_state`` is a STRING, ``exit_code`` the raw wait status (a number
  struct), paths without a trailing slash, and 23.02 still answers an unknown job with
  HTTP 500 + error 2017 (its router maps only a few REST errors to 4xx). A 23.11 server
  serving v0.0.39 answers 404 + 2017, so both statuses are accepted -- always with 2017.
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_40 import DataParserAdapter


class V0039Adapter(DataParserAdapter):
    version: ClassVar[str] = "v0.0.39"
    not_found_statuses: ClassVar[frozenset[int]] = frozenset({404, 500})
