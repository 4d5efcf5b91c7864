"""The admin console: models and endpoints, the Slurm connection, managed specs, replicas,
launches, recipes, the provisioner's status and the alert log.

Operator actions call ``obleth.core.services``. Replica rows belong to the provisioner: every
field is read-only here and the only actions are "Restart replica" and "Clear lost". Secrets
are write-only form fields: blank keeps the stored value and nothing renders it back.

One module per responsibility; importing this package (Django's admin autodiscovery does)
registers every ModelAdmin, in this order:

- :mod:`.helpers`: shared field groups, badges, action permissions, secret fields and mixins
- :mod:`.model`: the model page with its endpoint and managed-spec inlines
- :mod:`.endpoints`: endpoints
- :mod:`.specs`: managed specs
- :mod:`.replicas`: replicas and launches
- :mod:`.slurm_settings`: the Slurm settings singleton
- :mod:`.status`: the provisioner's heartbeat, alerts, leases, failed-authentication windows
- ``obleth.core.admin_health``: a model's Health page and the HealthEvent list

Saved recipes have their admin in ``recipes.admin``. Every name the old single module defined is
re-exported here, so ``from obleth.core.admin import SlurmSettingsForm`` keeps working.
"""

from __future__ import annotations

from django.contrib import admin

# Imported in the order the old single module registered its admins.
# isort: off
from obleth.core.admin.helpers import (
    AUTOSCALE_FIELDS,
    KEEP_SECRET_HELP,
    KEEP_SECRET_LABEL,
    PLACEMENT_FIELDS,
    SERVICE_FIELDS,
    ActionPermissions,
    KeepSecretAdminMixin,
    KeepSecretFormMixin,
    SecretInput,
    actor_of,
    badge,
    may_deploy,
    provisioner_badge,
    secret_field,
    secret_status,
    shell_readonly,
)
from obleth.core.admin.model import (
    EndpointInline,
    EndpointInlineForm,
    ManagedSpecInline,
    ModelAdmin,
)
from obleth.core.admin.endpoints import EndpointAdmin, EndpointAdminForm
from obleth.core.admin.specs import ManagedSpecAdmin, ManagedSpecAdminForm
from obleth.core.admin.replicas import REPLICA_FIELDS, LaunchAdmin, ReplicaAdmin
from obleth.core.admin.slurm_settings import SlurmSettingsAdmin, SlurmSettingsForm
from obleth.core.admin.status import (
    AlertAdmin,
    AuthFailureWindowAdmin,
    LeaseAdmin,
    ProvisionerStatusAdmin,
)

# The Health page of a model and the HealthEvent list (obleth/core/admin_health.py).
from obleth.core import admin_health  # noqa: F401
# isort: on

admin.site.site_header = "obleth administration"
admin.site.site_title = "obleth"
admin.site.index_title = "Models, Slurm replicas and launches"

__all__ = [
    "AUTOSCALE_FIELDS",
    "KEEP_SECRET_HELP",
    "KEEP_SECRET_LABEL",
    "PLACEMENT_FIELDS",
    "REPLICA_FIELDS",
    "SERVICE_FIELDS",
    "ActionPermissions",
    "AlertAdmin",
    "AuthFailureWindowAdmin",
    "EndpointAdmin",
    "EndpointAdminForm",
    "EndpointInline",
    "EndpointInlineForm",
    "KeepSecretAdminMixin",
    "KeepSecretFormMixin",
    "LaunchAdmin",
    "LeaseAdmin",
    "ManagedSpecAdmin",
    "ManagedSpecAdminForm",
    "ManagedSpecInline",
    "ModelAdmin",
    "ProvisionerStatusAdmin",
    "ReplicaAdmin",
    "SecretInput",
    "SlurmSettingsAdmin",
    "SlurmSettingsForm",
    "actor_of",
    "badge",
    "may_deploy",
    "provisioner_badge",
    "secret_field",
    "secret_status",
    "shell_readonly",
]
