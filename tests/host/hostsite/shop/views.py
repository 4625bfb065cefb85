"""The host's own DRF API: it keeps the host's REST_FRAMEWORK (page-number
pages, its exception handler), whatever the app's views carry."""

from typing import Any

from rest_framework.exceptions import NotFound
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.serializers import CharField, Serializer
from rest_framework.views import APIView, exception_handler

ITEMS = [{"name": name} for name in ("apple", "pear", "plum")]


def shop_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is not None:
        response.data = {"shop_error": response.data}
    return response


class ItemSerializer(Serializer):
    name = CharField()


class ItemsView(ListAPIView):
    serializer_class = ItemSerializer

    def get_queryset(self) -> list[dict[str, str]]:
        return ITEMS


class MissingView(APIView):
    def get(self, request: Any) -> Response:
        raise NotFound("no such item")
