"""The three kinds of answer the Slurm client can give besides success.

* job not found  -> ``get_job`` returns ``None``; only a recognised "invalid job id" counts.
* ``SlurmRejected`` -> Slurm refused a submit (bad partition, account, QoS...). ``reason`` is
  Slurm's own sentence, ``detail`` the whole answer.
* ``SlurmUncertain`` -> everything else (transport errors, timeouts, HTML bodies, 404 without
  error 2017, auth failures -1/5005, controller down). The caller must never read it as "gone".
"""

from __future__ import annotations


class SlurmError(Exception):
    """Base class of every error the Slurm client raises."""

    def __init__(self, message: str, *, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.detail = detail


class SlurmUncertain(SlurmError):
    """The answer cannot be trusted: hold, do nothing destructive."""


class SlurmAuthError(SlurmUncertain):
    """Token missing, bad or expired (Slurm answers 401, or 500 with error -1/5005)."""


class SlurmRejected(SlurmError):
    """Slurm understood the request and refused it (a submit with a bad partition, say)."""

    def __init__(self, reason: str, *, status: int | None = None, detail: str = "") -> None:
        super().__init__(reason, status=status, detail=detail)
        self.reason = reason


class SlurmConfigError(SlurmError):
    """The client is not configured (no URL, unsupported API version, bad input value)."""
