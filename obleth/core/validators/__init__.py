"""Field validators: one per field, used by every write path (API, admin, management commands,
recipe deploy), because the model fields carry them and every path ends in ``full_clean``.

Each message names the field and says how to fix the value. Secrets are never echoed back.
The older generic names (``validate_slurm_name``, ``validate_http_url``, ...) stay because past
migrations import them.

One module per field family, every name re-exported here, so ``from obleth.core import
validators as v`` then ``v.validate_gres`` keeps working, and so do the dotted paths past
migrations reference (``obleth.core.validators.validate_gres``: the autodetector compares the
function objects, and these are the same objects):

- :mod:`.bounds`: the shared bounds (``MAX_NODES``, ``MAX_REPLICAS``, ...)
- :mod:`.text`: one-line text, names, author, upstream model
- :mod:`.spec_numbers`: the serving port and the autoscaling numbers
- :mod:`.slurm`: Slurm names, GRES, node lists, constraints, time limits, memory, nodes
- :mod:`.paths`: paths and shell-bound values, the cluster defaults of the Slurm connection
- :mod:`.json_fields`: JSON values (the NUL rule), node address overrides, a recipe body
- ``obleth.core.http_validators``: URLs, API keys, tokens and the Slurm user (next door)
"""

from __future__ import annotations

# The HTTP validators live next door and are re-exported: every field's validator is here.
from obleth.core.http_validators import (
    LINK_LOCAL_NETS,
    MAX_API_KEY_CHARS,
    MAX_HF_TOKEN_CHARS,
    MAX_JWT_CHARS,
    MAX_URL_CHARS,
    MAX_USER_CHARS,
    METADATA_HOSTS,
    validate_api_base,
    validate_api_key,
    validate_hf_token,
    validate_http_url,
    validate_jwt,
    validate_slurm_user,
    validate_slurmrestd_url,
)
from obleth.core.validators.bounds import (
    MAX_CPUS_PER_TASK,
    MAX_GRES_COUNT,
    MAX_HANDOVER_SECS,
    MAX_JOB_FAILURES,
    MAX_MEMORY_MB,
    MAX_NODES,
    MAX_PATH_CHARS,
    MAX_REPLICAS,
    MAX_SCALE_DELAY_SECS,
    MAX_TARGET_IN_FLIGHT,
    MAX_TIME_LIMIT_DAYS,
)
from obleth.core.validators.json_fields import (
    nul_path,
    validate_images,
    validate_ip_literal,
    validate_launcher_spec,
    validate_node_addresses,
    validate_recipe_body,
)
from obleth.core.validators.paths import (
    MAX_SETUP_CHARS,
    PATH_CHARS_RE,
    validate_absolute_dir,
    validate_cache_dir,
    validate_cluster_dir,
    validate_cluster_images,
    validate_cluster_setup,
    validate_health_path,
    validate_image,
    validate_images_dir,
    validate_log_dir,
    validate_log_output_dir,
)
from obleth.core.validators.slurm import (
    API_VERSION_RE,
    CONSTRAINT_FORMS,
    CONSTRAINT_TOKEN_RE,
    GRES_FORMS,
    GRES_NAME_RE,
    GRES_TYPE_RE,
    HOSTNAME_RE,
    SLURM_NAME_RE,
    validate_account,
    validate_api_version,
    validate_constraints,
    validate_exclude,
    validate_gres,
    validate_hostlist,
    validate_memory,
    validate_nodes,
    validate_partition,
    validate_qos,
    validate_slurm_name,
    validate_time_limit,
)
from obleth.core.validators.spec_numbers import (
    validate_max_replicas,
    validate_port,
    validate_scale_down_delay_secs,
    validate_scale_to_zero_after_secs,
    validate_scale_up_delay_secs,
    validate_target_in_flight,
)
from obleth.core.validators.text import (
    validate_author,
    validate_name_text,
    validate_one_line,
    validate_upstream_model,
)

__all__ = [
    # obleth.core.http_validators
    "LINK_LOCAL_NETS",
    "MAX_API_KEY_CHARS",
    "MAX_HF_TOKEN_CHARS",
    "MAX_JWT_CHARS",
    "MAX_URL_CHARS",
    "MAX_USER_CHARS",
    "METADATA_HOSTS",
    "validate_api_base",
    "validate_api_key",
    "validate_hf_token",
    "validate_http_url",
    "validate_jwt",
    "validate_slurm_user",
    "validate_slurmrestd_url",
    # bounds
    "MAX_CPUS_PER_TASK",
    "MAX_GRES_COUNT",
    "MAX_HANDOVER_SECS",
    "MAX_JOB_FAILURES",
    "MAX_MEMORY_MB",
    "MAX_NODES",
    "MAX_PATH_CHARS",
    "MAX_REPLICAS",
    "MAX_SCALE_DELAY_SECS",
    "MAX_TARGET_IN_FLIGHT",
    "MAX_TIME_LIMIT_DAYS",
    # text
    "validate_author",
    "validate_name_text",
    "validate_one_line",
    "validate_upstream_model",
    # spec numbers
    "validate_max_replicas",
    "validate_port",
    "validate_scale_down_delay_secs",
    "validate_scale_to_zero_after_secs",
    "validate_scale_up_delay_secs",
    "validate_target_in_flight",
    # Slurm values
    "API_VERSION_RE",
    "CONSTRAINT_FORMS",
    "CONSTRAINT_TOKEN_RE",
    "GRES_FORMS",
    "GRES_NAME_RE",
    "GRES_TYPE_RE",
    "HOSTNAME_RE",
    "SLURM_NAME_RE",
    "validate_account",
    "validate_api_version",
    "validate_constraints",
    "validate_exclude",
    "validate_gres",
    "validate_hostlist",
    "validate_memory",
    "validate_nodes",
    "validate_partition",
    "validate_qos",
    "validate_slurm_name",
    "validate_time_limit",
    # paths and cluster defaults
    "MAX_SETUP_CHARS",
    "PATH_CHARS_RE",
    "validate_absolute_dir",
    "validate_cache_dir",
    "validate_cluster_dir",
    "validate_cluster_images",
    "validate_cluster_setup",
    "validate_health_path",
    "validate_image",
    "validate_images_dir",
    "validate_log_dir",
    "validate_log_output_dir",
    # JSON values and documents
    "nul_path",
    "validate_images",
    "validate_ip_literal",
    "validate_launcher_spec",
    "validate_node_addresses",
    "validate_recipe_body",
]
