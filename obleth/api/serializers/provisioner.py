"""Serializers of the provisioner's status (its heartbeat and last pass) and of its alerts,
read-only."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from obleth.core.models import Alert


class ProvisionerStatusSerializer(serializers.Serializer[Any]):
    state = serializers.ChoiceField(choices=["running", "failing", "not_running"])
    label = serializers.CharField(  # type: ignore[assignment]  # a field, not Field.label
        help_text="'running', 'running but failing since <time>' or 'not running'."
    )
    running = serializers.BooleanField(help_text="A heartbeat within the last 60 seconds.")
    failing = serializers.BooleanField(help_text="Running, but its passes fail: states frozen.")
    failing_since = serializers.DateTimeField(allow_null=True)
    held_secs = serializers.IntegerField(allow_null=True)
    last_seen_at = serializers.DateTimeField(allow_null=True)
    last_seen_secs = serializers.IntegerField(allow_null=True)
    version = serializers.CharField()
    host = serializers.CharField()
    last_pass_status = serializers.CharField()
    last_pass_detail = serializers.CharField()
    last_pass_at = serializers.DateTimeField(allow_null=True)
    last_pass_ms = serializers.IntegerField(allow_null=True)
    last_ok_at = serializers.DateTimeField(allow_null=True)
    held_alert_active = serializers.BooleanField()


class AlertSerializer(serializers.ModelSerializer[Alert]):
    class Meta:
        model = Alert
        fields = ["id", "key", "title", "detail", "severity", "channels", "created_at"]
        read_only_fields = fields
