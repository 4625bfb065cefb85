"""The problem document every error answers (its OpenAPI component)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from oxide_batch.api.serializers.base import Output


class ProblemErrorOutput(Output):
    code = serializers.CharField()
    message = serializers.CharField()


class ProblemOutput(Output):
    """An error: `application/problem+json` (RFC 9457) with a stable `code`
    and the error's own fields."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    code = serializers.CharField(help_text="The durable error code, or invalid_request.")
    detail = serializers.CharField()

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # ``errors`` would shadow Serializer.errors as a class attribute.
        fields["errors"] = serializers.DictField(
            child=ProblemErrorOutput(many=True),
            required=False,
            help_text="invalid_request only: field path → errors.",
        )
        fields["replayed"] = serializers.BooleanField(
            required=False,
            help_text="Operator endpoints: true when a recorded refusal is answered again.",
        )
        return fields
