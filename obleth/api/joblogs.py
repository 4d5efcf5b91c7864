"""``GET /api/v1/replicas/{id}/log?stream=stdout|stderr&tail=N[&download=1]``: a replica's job log.

The id is the replica's (its launch keeps the same id, so the log of a replica that is gone
can still be read). Needs ``core.read_job_log`` (operators and admins): logs may hold secrets,
which are masked (``obleth.logging.redact``) in every answer. When obleth cannot read the file
the answer says where it is and why (``readable: false``, ``why``).
"""

from __future__ import annotations

from typing import Any

from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from obleth.api.permissions import requires
from obleth.core import joblogs
from obleth.core.admin_cockpit import download_response, parse_stream, parse_tail
from obleth.core.models import Launch

ReadJobLog = requires("core.read_job_log")


class JobLogSerializer(serializers.Serializer[Any]):
    replica_id = serializers.UUIDField()
    job_id = serializers.CharField()
    stream = serializers.ChoiceField(choices=joblogs.STREAMS)
    path = serializers.CharField(help_text="The file as the job sees it.")
    readable = serializers.BooleanField()
    why = serializers.CharField(help_text="Why it cannot be shown (blank when readable).")
    text = serializers.CharField(help_text="The tail, secrets masked.")
    size = serializers.IntegerField(allow_null=True)
    truncated = serializers.BooleanField()
    modified_at = serializers.DateTimeField(allow_null=True)


class ReplicaLogView(GenericAPIView[Launch]):
    permission_classes = [ReadJobLog]
    serializer_class = JobLogSerializer
    queryset = Launch.objects.all()

    @extend_schema(
        summary="Read a replica's job log (tail, or the whole file with download=1)",
        parameters=[
            OpenApiParameter("stream", OpenApiTypes.STR, enum=list(joblogs.STREAMS)),
            OpenApiParameter("tail", OpenApiTypes.INT, description="Lines (1-5000, default 200)."),
            OpenApiParameter("download", OpenApiTypes.BOOL, description="The whole file."),
        ],
        responses={200: JobLogSerializer},
    )
    def get(self, request: Request, pk: str) -> HttpResponseBase:
        # A ValidationError becomes the API's one error shape, naming the field (errors.py).
        stream = parse_stream(request.query_params.get("stream"))
        tail = parse_tail(request.query_params.get("tail"))
        launch = Launch.objects.filter(pk=pk).first()
        if launch is None:
            return Response(
                {"error": f"No launch for replica {pk}: it was never submitted, or no such id."},
                status=status.HTTP_404_NOT_FOUND,
            )
        if request.query_params.get("download") in {"1", "true", "yes"}:
            response = download_response(launch, stream)
            if response is not None:
                return response
        view = joblogs.read_tail(launch, stream, tail)
        return Response({"replica_id": str(launch.pk), "job_id": launch.job_id, **view.as_dict()})
