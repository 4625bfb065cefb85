"""Schemathesis over the OpenAPI schema against a live server (PostgreSQL pass
only, bounded): generated requests — valid and invalid — to every operation
never get a 5xx, and every answer conforms to the schema (documented status,
content type and body). Authenticated as a superuser, so every operation is
reached past authorization."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from oxide_batch import models
from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MAX_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def api_document() -> dict[str, Any]:
    """The schema the API serves (generated in process, as ``GET schema/`` does)."""
    document: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return document


schema = schemathesis.openapi.from_dict(
    api_document(),
    config=schemathesis.Config.from_dict(
        {
            "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
            "generation": {"max-examples": MAX_EXAMPLES},
        }
    ),
)


@pytest.fixture
def authorization() -> dict[str, str]:
    # A transactional test's flush empties the one-row schema version table too.
    models.SchemaVersion.objects.update_or_create(
        id=1, defaults={"version": SUPPORTED_SCHEMA_VERSION}
    )
    user = User.objects.create_superuser("fuzzer", password=None)
    return {"Authorization": f"Token {Token.objects.create(user=user).key}"}


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_answers_every_request_as_documented(
    case: schemathesis.Case[Any], live_server: Any, authorization: dict[str, str]
) -> None:
    case.call_and_validate(base_url=live_server.url, headers=authorization, checks=CHECKS)
