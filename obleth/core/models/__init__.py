"""obleth's data model: models and their endpoints, the Slurm connection, managed specs,
replicas, launches, recipes, and the provisioner's status and alerts.

One module per responsibility; every name is re-exported here, so ``from obleth.core.models
import X`` works as it did when this was one file. The imports run in the order the classes
were defined in that file, so Django registers the models in the same order.
"""

# The order here is the registration order (see above), not the alphabet.
# isort: off
from obleth.core.models.base import TimestampedModel, mask_secret
from obleth.core.models.catalogue import Endpoint, Model
from obleth.core.models.slurm import ManagedSpec, Recipe, SlurmSettings
from obleth.core.models.runtime import Launch, Replica
from obleth.core.models.status import Alert, Lease, ProvisionerStatus
from obleth.core.models.events import AuthFailureWindow, HealthEvent
# isort: on

__all__ = [
    "Alert",
    "AuthFailureWindow",
    "Endpoint",
    "HealthEvent",
    "Launch",
    "Lease",
    "ManagedSpec",
    "Model",
    "ProvisionerStatus",
    "Recipe",
    "Replica",
    "SlurmSettings",
    "TimestampedModel",
    "mask_secret",
]
