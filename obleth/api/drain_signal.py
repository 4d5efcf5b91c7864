"""``POST /api/v1/replicas/{id}/drain-signal``: a replica's job reports Slurm's warning signal.

Authenticated by the replica's own key (``Authorization: Bearer <OBLETH_REPLICA_API_KEY>``), not
by a user's session or token: the caller is the job itself (obleth_serve in its script). Without
that key every method answers 401, like every other route. The logic is in
:mod:`obleth.core.drain_signals`.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from obleth.core import drain_signals
from obleth.core.limits import client_address
from obleth.core.models import Replica

REALM = 'Bearer realm="replica"'


class ReplicaKeyAuthentication(BaseAuthentication):
    """The request's bearer key must be the key of the replica named in the URL."""

    def authenticate(self, request: Request) -> tuple[Any, Replica]:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        key = presented.strip() if scheme.lower() == "bearer" else ""
        kwargs = (request.parser_context or {}).get("kwargs", {})
        try:
            row = drain_signals.authenticate(
                str(kwargs.get("pk", "")), key, client_address(request._request)
            )
        except drain_signals.Refused as refused:
            if refused.retry_after:
                raise exceptions.Throttled(
                    wait=refused.retry_after, detail=refused.detail
                ) from None
            raise exceptions.AuthenticationFailed(refused.detail) from None
        return AnonymousUser(), row

    def authenticate_header(self, request: Request) -> str:
        return REALM


class IsTheReplica(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Replica)


class DrainSignalView(APIView):
    authentication_classes = [ReplicaKeyAuthentication]
    permission_classes = [IsTheReplica]

    @extend_schema(
        summary="A replica's job reports Slurm's warning signal (its end or a preemption nears)",
        request=None,
        auth=[],
        responses={
            202: OpenApiResponse(description="Recorded; a successor starts on the next pass."),
            401: OpenApiResponse(description="Not this replica's key."),
            409: OpenApiResponse(description="The replica is not live."),
            429: OpenApiResponse(description="Too many wrong keys from this address."),
        },
    )
    def post(self, request: Request, pk: str) -> Response:
        replica = request.auth
        assert isinstance(replica, Replica)  # IsTheReplica let only a replica's key in
        recorded, detail = drain_signals.record(replica)
        if not recorded:
            return Response({"error": detail}, status=409)  # the API's one error shape
        return Response({"detail": detail}, status=202)
