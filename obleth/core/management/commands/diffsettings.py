"""``manage.py diffsettings`` with secret settings masked.

Django's command prints every setting's repr, ``SECRET_KEY``, ``OBLETH_ENCRYPTION_KEY``,
``OBLETH_ADMIN_TOKEN``, the database password and ``DATABASE_URL`` included. This one runs each
value through Django's own exception-report cleanser (names containing API, AUTH, TOKEN, KEY,
SECRET, PASS or SIGNATURE, nested dicts too) and masks the password of every URL with
credentials (``postgres://user:PASSWORD@host``, ``redis://:PASSWORD@host``) and the alert
webhook URL (:data:`EXTRA_SECRET_SETTINGS`), in the user's
settings and the defaults alike, so the diff still shows which settings differ.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.management.commands import diffsettings
from django.views.debug import SafeExceptionReporterFilter

MASK = SafeExceptionReporterFilter.cleansed_substitute
#: Secret settings whose names the cleanser does not recognise (a Slack webhook URL is a key).
EXTRA_SECRET_SETTINGS = frozenset({"OBLETH_ALERT_WEBHOOK_URL"})
# scheme://user:password@  (the password up to the last @ before the host)
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://[^/\s:@'\"]*:)(?P<password>[^\s'\"]+)@")


def mask_url_passwords(text: str) -> str:
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}@", text)


def cleansed(module: Any) -> dict[str, str]:
    """Like diffsettings' ``module_to_dict``: setting name -> repr, with secrets masked."""
    reporter = SafeExceptionReporterFilter()
    out = {}
    for name in dir(module):
        if not name.isupper():
            continue
        value = getattr(module, name)
        if value not in ("", None):  # an unset secret stays visible as unset
            value = MASK if name in EXTRA_SECRET_SETTINGS else reporter.cleanse_setting(name, value)
        out[name] = mask_url_passwords(repr(value))
    return out


class Command(diffsettings.Command):
    help = diffsettings.Command.help + " Secret values are masked."

    def output_hash(
        self, user_settings: dict[str, str], default_settings: dict[str, str], **options: Any
    ) -> list[str]:
        return list(super().output_hash(*self._clean(), **options))

    def output_unified(
        self, user_settings: dict[str, str], default_settings: dict[str, str], **options: Any
    ) -> list[str]:
        return list(super().output_unified(*self._clean(), **options))

    def _clean(self) -> tuple[dict[str, str], dict[str, str]]:
        from django.conf import Settings, global_settings, settings

        default = self._options.get("default")
        return cleansed(getattr(settings, "_wrapped")), cleansed(  # noqa: B009
            Settings(default) if default else global_settings
        )

    def handle(self, **options: Any) -> str:
        self._options = options
        result: str = super().handle(**options)
        return result
