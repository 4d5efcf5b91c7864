"""Management API serializers: input validation and the shape of answers.

Secrets are write-only everywhere: answers say ``*_set`` and ``*_last4``, never the value.

One module per resource, every name re-exported here (``from obleth.api.serializers import X``):
:mod:`~obleth.api.serializers.fields` (strictness, secrets, shared fields),
:mod:`~obleth.api.serializers.models` (models, endpoints, managed specs),
:mod:`~obleth.api.serializers.replicas` (replicas, launches),
:mod:`~obleth.api.serializers.recipes`,
:mod:`~obleth.api.serializers.provisioner` (its status, alerts) and
:mod:`~obleth.api.serializers.settings` (the Slurm settings, the connection test, resources).
"""

from obleth.api.serializers.fields import (
    KEEP_SECRET_HELP,
    StrictFieldsMixin,
    StringMapField,
    may_keep_secret,
    refuse_any_body_field,
    unique_name,
    unknown_field_errors,
)
from obleth.api.serializers.models import (
    EndpointSerializer,
    ManagedSpecSerializer,
    ModelSerializer,
    ProvisionErrorSerializer,
)
from obleth.api.serializers.provisioner import AlertSerializer, ProvisionerStatusSerializer
from obleth.api.serializers.recipes import LibraryRecipeSerializer, RecipeSerializer
from obleth.api.serializers.replicas import (
    ClearLostSerializer,
    LaunchSerializer,
    ReplicaSerializer,
)
from obleth.api.serializers.settings import (
    JwtStatusSerializer,
    SlurmResourcesSerializer,
    SlurmSettingsSerializer,
    SlurmTestResultSerializer,
)

__all__ = [
    "KEEP_SECRET_HELP",
    "AlertSerializer",
    "ClearLostSerializer",
    "EndpointSerializer",
    "JwtStatusSerializer",
    "LaunchSerializer",
    "LibraryRecipeSerializer",
    "ManagedSpecSerializer",
    "ModelSerializer",
    "ProvisionErrorSerializer",
    "ProvisionerStatusSerializer",
    "RecipeSerializer",
    "ReplicaSerializer",
    "SlurmResourcesSerializer",
    "SlurmSettingsSerializer",
    "SlurmTestResultSerializer",
    "StrictFieldsMixin",
    "StringMapField",
    "may_keep_secret",
    "refuse_any_body_field",
    "unique_name",
    "unknown_field_errors",
]
