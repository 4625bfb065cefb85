"""The API's content negotiation answers as DRF's, with a short path for the
plain cases every runtime sends (no ``Accept``, ``*/*``, ``application/json``)."""

from __future__ import annotations

import pytest
from django.http import Http404
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from oxide_batch.api.contract import API_SETTINGS, ApiContentNegotiation, ApiJSONRenderer

ACCEPTS = [
    None,
    "",
    "*/*",
    " application/json ",
    "application/json",
    "application/json; indent=4",
    "application/*",
    "*/*;q=0.8, text/html",
    "text/html",
    "application/xml",
]


class DrfNegotiation(DefaultContentNegotiation):
    settings = API_SETTINGS  # type: ignore[assignment]


def chosen(negotiation: DefaultContentNegotiation, accept: str | None, query: str = "") -> object:
    raw = APIRequestFactory().get("/api/v1/descriptor" + query)
    raw.META.pop("HTTP_ACCEPT", None)
    if accept is not None:
        raw.META["HTTP_ACCEPT"] = accept
    request = Request(raw)
    try:
        renderer, media_type = negotiation.select_renderer(request, [ApiJSONRenderer()])
    except exceptions.NotAcceptable:
        return "406"
    except Http404:
        return "404"
    return type(renderer), media_type


@pytest.mark.parametrize("query", ["", "?format=json", "?format=xml"])
@pytest.mark.parametrize("accept", ACCEPTS)
def test_the_short_path_answers_as_drf(accept: str | None, query: str) -> None:
    assert chosen(ApiContentNegotiation(), accept, query) == chosen(DrfNegotiation(), accept, query)


def test_an_unacceptable_accept_is_still_406(rt) -> None:
    answer = rt.client.get("/api/v1/descriptor", HTTP_ACCEPT="text/html")
    assert answer.status_code == 406
