"""Which model fields hold secrets: one list for every place that must not show them in clear.

A field is secret when it is

* encrypted at rest (``django_cryptography``'s ``encrypt(...)``: the Slurm JWT, the Hugging Face
  token, endpoint API keys, and any encrypted field added later), or
* named in :data:`DECLARED` (``"app_label.model_name.field_name"``, lower case), or
* named in its model's ``obleth_secret_fields`` attribute, a tuple of field names a model can
  declare for itself, e.g. ``obleth_secret_fields = ("token_hash",)`` on a token model.

Hashed tokens and keys are secrets too: a hash in a dump lets anyone who reads the dump try
guesses offline, and a restored hash is a working credential.

Used by ``manage.py dumpdata`` (masked unless ``--include-secrets``); ``tests/security`` fails
when a model gains a field whose name looks like a secret and that is not declared here or in
its ``NOT_SECRET`` list.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.apps import apps
from django.db import models
from django_cryptography.fields import EncryptedMixin

#: What a masked secret is written as.
MASK = "********"

#: Secret fields that are not encrypted (hashes, one-way values), "app_label.model_name.field".
DECLARED: set[str] = {
    "auth.user.password",  # a password hash: a restored hash logs in
    "accounts.apitoken.token_hash",  # personal API tokens (SHA-256 of the token)
    "gateway.gatewaykey.digest",  # gateway keys (SHA-256 of the key)
}


#: Models whose rows are credentials as a whole (the primary key is one): left out of a masked
#: dump altogether. "app_label.model_name".
SECRET_MODELS: set[str] = {
    "sessions.session",  # a session key is a login (a staff session has full API rights)
}


def secret_models() -> list[str]:
    """The installed ones among :data:`SECRET_MODELS`."""
    found = []
    for name in sorted(SECRET_MODELS):
        app_label, model_name = name.split(".")
        try:
            apps.get_model(app_label, model_name)
        except LookupError:
            continue
        found.append(name)
    return found


def declare(*labels: str) -> None:
    """Add ``"app_label.model_name.field_name"`` entries to :data:`DECLARED`."""
    DECLARED.update(label.lower() for label in labels)


def label(field: models.Field) -> str:
    meta = field.model._meta
    return f"{meta.app_label}.{meta.model_name}.{field.name}".lower()


def is_secret(field: models.Field) -> bool:
    if isinstance(field, EncryptedMixin):
        return True
    if label(field) in DECLARED:
        return True
    own = getattr(field.model, "obleth_secret_fields", ())
    return field.name in own


def secret_fields() -> Iterator[models.Field]:
    """Every secret field of every installed model."""
    for model in apps.get_models(include_auto_created=True):
        for field in model._meta.concrete_fields:
            if is_secret(field):
                yield field
