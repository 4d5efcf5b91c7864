"""The audit trail of operator actions: the ``obleth.audit`` logger every service writes its
audit lines to, and the ``action_done`` signal obleth.accounts records in the audit log."""

from __future__ import annotations

import logging

from django.dispatch import Signal

logger = logging.getLogger("obleth.audit")

#: Sent after an operator action (restart, clear lost, dismiss) with ``action``, ``model``,
#: ``object_id``, ``object_repr`` and ``detail``; obleth.accounts records it in the audit log.
action_done = Signal()
