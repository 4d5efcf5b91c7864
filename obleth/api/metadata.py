"""OPTIONS answers for every Management API route, including views without a serializer.

DRF's SimpleMetadata describes a view's POST/PUT body from its serializer and fails (a 500) on a
view that has none, such as ``/deployments`` or the Slurm test route. Those routes are described
without their body fields instead.
"""

from __future__ import annotations

from typing import Any

from rest_framework.metadata import SimpleMetadata
from rest_framework.request import Request


class SafeMetadata(SimpleMetadata):
    def determine_actions(self, request: Request, view: Any) -> dict[str, Any]:
        if not _has_serializer(view):
            return {}
        return dict(super().determine_actions(request, view))


def _has_serializer(view: Any) -> bool:
    try:
        return view.get_serializer_class() is not None
    except AssertionError:  # DRF's "should either include a serializer_class attribute"
        return False
