"""``manage.py dumpdata`` that writes secrets masked unless ``--include-secrets`` is given.

Django's dumpdata, unchanged but for the serializer: every field that
:mod:`obleth.core.secret_fields` calls secret (the Slurm JWT, the Hugging Face token, endpoint
API keys, password and token hashes, ...) is written as ``********`` when it is set (an empty
secret stays empty, so a dump shows which ones are configured), and models whose rows are
credentials as a whole (sessions) are left out. The dump of an instance is then safe to attach
to a bug report.

A backup needs the real values: ``--include-secrets`` writes them in clear, and says so on
stderr. Treat such a file like the database itself (and remember that the encrypted secrets
in the database are unreadable without ``OBLETH_ENCRYPTION_KEY``, which the dump does not need).
Loading a masked dump stores ``********`` as each secret: re-enter them afterwards.
"""

from __future__ import annotations

import getpass
import logging
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core import serializers
from django.core.management.base import CommandParser
from django.core.management.commands import dumpdata
from django.db import models

from obleth.core.secret_fields import MASK, is_secret, secret_models

logger = logging.getLogger("obleth.audit")


def masking_serializer(base: Any) -> type[Any]:
    """A subclass of the serializer ``base`` that writes secret fields as :data:`MASK`."""

    class MaskingSerializer(base):
        def handle_field(self, obj: models.Model, field: models.Field) -> None:
            if not is_secret(field):
                super().handle_field(obj, field)
                return
            real = getattr(obj, field.attname)
            if real not in (None, "", b""):
                setattr(obj, field.attname, MASK)
            try:
                super().handle_field(obj, field)
            finally:
                setattr(obj, field.attname, real)

    MaskingSerializer.__name__ = MaskingSerializer.__qualname__ = f"Masking{base.__name__}"
    return MaskingSerializer


@contextmanager
def masked_format(fmt: str) -> Iterator[None]:
    """Within the block, ``serializers.serialize(fmt, ...)`` masks secrets (this process only)."""
    try:
        original = serializers.get_serializer(fmt)
    except serializers.SerializerDoesNotExist:
        yield  # dumpdata itself reports the unknown format
        return
    configured = getattr(settings, "SERIALIZATION_MODULES", None) or {}
    original_module = (
        configured.get(fmt) or serializers.BUILTIN_SERIALIZERS.get(fmt) or original.__module__
    )
    name = f"obleth.core._masked_serializer_{fmt}"
    module = types.ModuleType(name)
    module.Serializer = masking_serializer(original)  # type: ignore[attr-defined]
    module.Deserializer = serializers.get_deserializer(fmt)  # type: ignore[attr-defined]
    sys.modules[name] = module
    serializers.register_serializer(fmt, name)
    try:
        yield
    finally:
        serializers.register_serializer(fmt, original_module)
        sys.modules.pop(name, None)


class Command(dumpdata.Command):
    help = (
        dumpdata.Command.help
        + " Secrets (Slurm JWT, Hugging Face token, endpoint API keys, password and token"
        " hashes) are written as ******** unless --include-secrets is given."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--include-secrets",
            action="store_true",
            help=(
                "Write secrets in clear (for a backup that must restore them). Keep the output "
                "as safe as the database."
            ),
        )

    def handle(self, *app_labels: str, **options: Any) -> None:
        if options.get("include_secrets"):
            logger.warning(
                "dumpdata --include-secrets run by OS user %r: secrets written in clear",
                getpass.getuser(),
            )
            self.stderr.write(
                "dumpdata: --include-secrets: secrets are written IN CLEAR; keep this output as "
                "safe as the database."
            )
            super().handle(*app_labels, **options)
            return
        left_out = secret_models()
        options["exclude"] = [*(options.get("exclude") or []), *left_out]
        with masked_format(options["format"]):
            super().handle(*app_labels, **options)
        if options.get("verbosity", 1) >= 1:
            self.stderr.write(
                f"dumpdata: secrets are masked as {MASK} and {', '.join(left_out) or 'no model'}"
                " left out; use --include-secrets for a backup that restores them."
            )
