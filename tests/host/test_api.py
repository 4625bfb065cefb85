"""The API in a host project: the same contract under the host's prefix,
whatever the host's REST_FRAMEWORK and SPECTACULAR_SETTINGS say
(oxide_batch/api/contract.py), while the host's own DRF views keep them."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

import pytest
from django.core.cache import cache

from oxide_batch.api.docs import served_document
from oxide_batch.client import RuntimeClient
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from tests.host.conftest import API, Api

pytestmark = pytest.mark.django_db

RFC3339_MS = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")


def problem(response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM_CONTENT_TYPE
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"]) == (status, code), body
    return body


def test_the_descriptor_reports_the_installed_version(viewer: Api) -> None:
    response = viewer.get("descriptor")
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["version"] == importlib.metadata.version("oxide-batch")
    assert "step_partitions" in body["capabilities"]
    # The host's COMPACT_JSON = False would put spaces after the separators.
    assert b'{"version":' in response.content


def test_anonymous_is_401_with_the_token_challenge_and_never_throttled(anonymous: Api) -> None:
    """The host authenticates with Basic first, allows anyone and throttles
    anonymous callers at one a minute; none of that reaches the API."""
    cache.clear()
    for _ in range(3):
        response = anonymous.get("executions")
        problem(response, 401, "not_authenticated")
        assert response["WWW-Authenticate"] == "Token, Bearer"


def test_a_host_token_or_basic_login_is_not_an_api_login(db: None) -> None:
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user("host-user", password="pw-for-tests-1")
    host_token = Token.objects.create(user=user)
    problem(Api(host_token.key).get("executions"), 401, "authentication_failed")
    basic = Api(None)
    basic.client.defaults["HTTP_AUTHORIZATION"] = "Basic aG9zdC11c2VyOnB3LWZvci10ZXN0cy0x"
    problem(basic.get("executions"), 401, "not_authenticated")


def test_the_strict_parser_and_json_only_hold(runtime: Api) -> None:
    """The host parses forms and lax JSON; the API refuses both (contract §4.5)."""
    body = '{"job_name": "a", "job_name": "b", "identifying_parameters": {}}'
    refused = problem(runtime.post("instances", body), 400, "invalid_request")
    assert "body" in refused["errors"]
    problem(runtime.post("instances", '{"x": NaN}'), 400, "invalid_request")
    form = runtime.post("instances", "job_name=a", content_type="application/x-www-form-urlencoded")
    problem(form, 415, "unsupported_media_type")


def test_the_host_renderers_and_format_override_do_not_apply(viewer: Api) -> None:
    as_html = viewer.client.get(API + "descriptor", HTTP_ACCEPT="text/html")
    assert as_html.status_code == 406, as_html.content
    assert as_html["Content-Type"] == PROBLEM_CONTENT_TYPE
    # The host renames the format override to "fmt"; the API keeps DRF's "format".
    assert viewer.get("descriptor", fmt="api")["Content-Type"] == "application/json"


def test_a_runtime_records_a_run_and_a_reader_pages_it(runtime: Api, viewer: Api) -> None:
    instance = runtime.post(
        "instances", {"job_name": "host_job", "identifying_parameters": {"day": "2026-12-02"}}
    )
    assert instance.status_code == 201, instance.content
    created = runtime.post(f"instances/{instance.json()['id']}/executions", {})
    assert created.status_code == 201, created.content
    execution = created.json()
    assert RFC3339_MS.fullmatch(execution["created_at"]), execution  # not the host's format
    for number in range(3):
        runtime.post("instances", {"job_name": "host_job", "identifying_parameters": {"n": number}})
    page = viewer.get("instances", page_size=2)
    assert page.status_code == 200, page.content
    body = page.json()
    # Keyset pages (contract §4.4), not the host's page-number pages of two.
    assert set(body) == {"next", "previous", "results"}, body
    assert len(body["results"]) == 2
    assert "count" not in body
    everything = viewer.get("instances").json()["results"]
    assert len(everything) == 4


def test_validation_errors_name_fields_as_the_api_does(runtime: Api) -> None:
    """The host files an object's own errors under NON_FIELD_ERRORS_KEY
    "problems"; the API's problem never shows that key."""
    refused = problem(
        runtime.post("instances", {"job_name": "host_job", "identifying_parameters": {}, "x": 1}),
        400,
        "invalid_request",
    )
    assert "problems" not in refused["errors"]
    assert set(refused["errors"]) <= {"x", "non_field_errors"}, refused


@pytest.mark.parametrize(
    "path", ["nope", "executions/", "executions/1/nope", "v1/executions"], ids=str
)
def test_a_path_the_api_does_not_know_is_a_404_problem(viewer: Api, path: str) -> None:
    problem(viewer.get(path), 404, "not_found")
    problem(viewer.post(path, {}), 404, "not_found")  # no CSRF refusal first


def test_a_defect_is_a_500_problem_not_the_host_page(viewer: Api, monkeypatch, caplog) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("a defect")

    monkeypatch.setattr("oxide_batch.api.views.definitions.DescriptorView.repository", broken)
    with caplog.at_level("ERROR", logger="django.request"):
        body = problem(viewer.get("descriptor"), 500, "internal_error")
    assert "a defect" not in str(body)
    # Logged once, with its traceback, as Django logs an uncaught exception.
    (record,) = [r for r in caplog.records if r.name == "django.request"]
    assert record.getMessage() == "Internal Server Error: /batch/api/v1/descriptor"
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "a defect"


def test_the_schema_documents_this_api_alone_with_its_own_settings(anonymous: Api) -> None:
    response = anonymous.get("schema/", format="json")
    assert response.status_code == 200, response.content
    document = response.json()
    assert document["info"]["title"] == "oxide_batch API"
    paths = list(document["paths"])
    assert paths, document
    assert all(path.startswith("/batch/api/v1/") for path in paths), paths
    assert "/batch/api/v1/descriptor" in paths
    # Split request components (the app's setting, the host's is False).
    assert any(name.endswith("Request") for name in document["components"]["schemas"])
    # Neither the schema view itself (the host's SERVE_INCLUDE_SCHEMA) nor the
    # host's format override and languages as parameters.
    assert "/batch/api/v1/schema/" not in paths
    names = {
        parameter["name"]
        for operations in document["paths"].values()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
    }
    assert not names & {"fmt", "lang", "format", "version"}, names
    # The site's root is the server (the paths carry the host's prefix); the
    # rest is what the generator gives, served once per process.
    assert document.pop("servers") == [{"url": "http://testserver/", "description": "this server"}]
    assert document == served_document()


def test_the_docs_pages_serve_their_bundles_from_this_host(anonymous: Api) -> None:
    for page in ("docs/", "redoc/"):
        response = anonymous.get(page)
        assert response.status_code == 200, (page, response.content[:300])
        text = response.content.decode()
        assert "cdn.example.invalid" not in text  # the host's SWAGGER_UI_DIST
        assert "/assets/drf_spectacular_sidecar/" in text
        assert "/batch/api/v1/schema/" in text
        assert response["Content-Security-Policy"].startswith("default-src 'self'")


def test_the_probes_answer_under_the_prefix(anonymous: Api) -> None:
    assert anonymous.client.get("/batch/healthz").status_code == 200
    ready = anonymous.client.get("/batch/readyz")
    assert ready.status_code == 200, ready.content
    assert anonymous.client.get("/batch/metrics").status_code == 200  # from 127.0.0.1


def test_the_host_api_keeps_the_host_settings(anonymous: Api) -> None:
    cache.clear()
    items = anonymous.client.get("/shop/api/items/", HTTP_ACCEPT="application/json")
    assert items.status_code == 200, items.content
    assert items.json()["count"] == 3  # page-number pages of two
    assert len(items.json()["results"]) == 2
    cache.clear()  # the host's anonymous throttle: one a minute
    missing = Api(None).client.get("/shop/api/missing/", HTTP_ACCEPT="application/json")
    assert missing.status_code == 404
    assert missing["Content-Type"] == "application/json"
    assert "shop_error" in missing.json()  # the host's exception handler


@pytest.mark.django_db(transaction=True)
def test_a_runtime_written_with_the_client_runs_against_the_host(live_server) -> None:
    """The README's runtime helper, pointed at the host's prefix."""
    from tests.host.conftest import token_for

    client = RuntimeClient(live_server.url + "/batch", token_for("host-worker", "batch-runtime"))
    with (
        client.job_run("host_import", {"business_date": "2026-12-02"}) as run,
        run.step("load") as step,
    ):
        for offset in (100, 200):
            step.commit(read=100, written=100, checkpoint={"offset": offset})
    reader = Api(token_for("host-reader", "batch-viewer"))
    executions = reader.get("executions").json()["results"]
    assert [(e["status"], e["exit_code"]) for e in executions] == [("COMPLETED", "COMPLETED")]
    steps = reader.get(f"executions/{executions[0]['id']}/steps").json()["results"]
    assert [(s["step_name"], s["status"], s["counts"]["written"]) for s in steps] == [
        ("load", "COMPLETED", 200)
    ]


def test_the_hosts_spectacular_settings_are_left_as_they_were(anonymous: Api) -> None:
    """drf-spectacular's settings are one object for the process: the app's are
    applied for a generation only, one generation at a time (threads here)."""
    from concurrent.futures import ThreadPoolExecutor

    from drf_spectacular.settings import spectacular_settings

    from oxide_batch.api.docs import schema_document

    before = (spectacular_settings.TITLE, list(spectacular_settings.PREPROCESSING_HOOKS))
    with ThreadPoolExecutor(4) as pool:
        documents = list(pool.map(lambda _: schema_document(), range(4)))
    assert all(document["info"]["title"] == "oxide_batch API" for document in documents)
    assert anonymous.get("docs/").status_code == 200
    assert (spectacular_settings.TITLE, list(spectacular_settings.PREPROCESSING_HOOKS)) == before
    assert before[0] == "Host shop API"
