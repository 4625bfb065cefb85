"""Schemathesis over the OpenAPI schema against a live server (PostgreSQL pass
only, bounded), with every check it has: generated requests — valid and
invalid — to every operation never get a 5xx, every answer conforms to the
schema (documented status, content type and body), a schema-valid request is
never refused as invalid input, and a schema-invalid one is never accepted;
and, a check of the API's own, every problem's code is one the operation
lists under its status.
Run once with a runtime token and once with an operator token (both roles
the API has): each reaches its own operations past authorization and meets the
other's as a documented 403.

A JSON Schema states each member on its own. What it cannot state, the
operation's description says in words, and :func:`satisfy_cross_member_rules`
makes hold in the positive (schema-valid) cases before they are sent — it only
ever edits a generated value into one that the same schema still admits:

- a ``cursor`` and a purge ``plan`` are values only the server issues (an
  arbitrary string is not a cursor this API issued, and a plan is the survey's
  answer, digest included): positive cases page without a cursor, and apply a
  plan the survey answered;
- OpenAPI 3.0 has no ``propertyNames``, and the document stays 3.0 (decision
  165: under 3.1 schemathesis sends ``1.0`` for an integer, which the API
  refuses): the keys of a parameter map and of an upgrade's step mapping are
  names, a rule their descriptions state in words, and positive cases have
  keys that are;
- a manifest's ``job`` equals the body's ``job_name``; a flow graph's node ids
  are unique and its ``entry`` and transitions name declared nodes;
- an upgrade edge leads to another digest, and no two source steps map onto
  one target step;
- a parameter name is in one of the two parameter maps, not both;
- partition keys are unique within a plan;
- a purge cutoff is at least ``OXIDE_BATCH_PURGE_MIN_AGE`` in the past;
- a notification rule has a name not taken yet, one destination (``webhook``
  or ``email``) that the service accepts (an https URL, addresses, a
  ``whsec_`` secret only for a standard webhook); a job deadline names
  ``max_duration`` or ``expect_every`` (1s to ten years), ``by`` (a time of
  day) only with a whole number of days and ``tz`` (a known zone) only with
  ``by``.

Negative cases are sent as generated.
"""

from __future__ import annotations

import itertools
import json
import re
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import CHECKS, load_all_checks

from oxide_batch import models
from oxide_batch.api.docs import schema_document
from oxide_batch.domain.errors import DomainError
from oxide_batch.domain.names import NameKind, validate_name
from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.helpers import refuse_parallel_workers
from tests.live import token_for

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(autouse=True)
def _one_process() -> None:
    # Under pytest-xdist schemathesis runs one operation of the 42 and passes.
    refuse_parallel_workers("schemathesis makes its cases at run time")


API = "/api/v1"
MAX_EXAMPLES = 25
# Older than any OXIDE_BATCH_PURGE_MIN_AGE the tests run with.
PURGE_CUTOFF_AGE = timedelta(days=30)


def api_document() -> dict[str, Any]:
    """The schema the API serves (generated in process, as ``GET schema/`` does)."""
    document: dict[str, Any] = schema_document()
    return document


CONFIG = schemathesis.Config.from_dict(
    {
        "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
        "generation": {"max-examples": MAX_EXAMPLES},
        "checks": {"enabled": True},
    }
)
DOCUMENT = api_document()
schema = schemathesis.openapi.from_dict(DOCUMENT, config=CONFIG)


def problem_code_is_listed(ctx: Any, response: Any, case: schemathesis.Case[Any]) -> None:
    """A check of this API's own: a problem's ``code`` is one the operation
    lists under the status it answered (``codes: `a`, `b```)."""
    if response.status_code < 400 or response.status_code >= 500:
        return
    code = json.loads(response.content).get("code")
    operation = DOCUMENT["paths"][case.operation.path][case.method.lower()]
    listed = operation["responses"].get(str(response.status_code), {}).get("description", "")
    assert f"`{code}`" in listed, (
        f"{case.method} {case.operation.path} answered {response.status_code} `{code}`, "
        f"which it does not list ({listed or 'no such response'})"
    )


def test_every_check_schemathesis_has_is_run() -> None:
    # ``call_and_validate`` without ``checks`` runs every check the config enables.
    load_all_checks()
    checks = CONFIG.projects.get_default().checks
    assert len(CHECKS.get_all_names()) >= 14
    disabled = [name for name in CHECKS.get_all_names() if not getattr(checks, name).enabled]
    assert disabled == []


def _unique(values: list[str], taken: set[str]) -> str:
    """``values``' first member not in ``taken``; else a fresh one made from it."""
    for value in values:
        if value not in taken:
            return value
    base = values[0] if values else "n"
    index = 0
    while f"{base[:100]}{index}" in taken:
        index += 1
    return f"{base[:100]}{index}"


def _named_keys(mapping: dict[str, Any], kind: NameKind) -> dict[str, Any]:
    """``mapping`` with each key that is not a name of ``kind`` replaced by one."""
    named: dict[str, Any] = {}
    for key, value in mapping.items():
        try:
            validate_name(key, kind)
        except DomainError:
            key = _unique(["k"], set(mapping) | set(named))
        named[key] = value
    return named


def _flow_graph(manifest: dict[str, Any]) -> None:
    ids: list[str] = []
    for node in manifest["nodes"]:
        node["id"] = _unique([node["id"]], set(ids))
        ids.append(node["id"])
    manifest["entry"] = manifest["entry"] if manifest["entry"] in ids else ids[0]
    for transition in manifest["transitions"]:
        if transition["source"] not in ids:
            transition["source"] = ids[0]
        target = transition["target"]
        if "node" in target and target["node"] not in ids:
            target["node"] = ids[0]


RULE_NAMES = itertools.count(1)


def _notification_rule(body: dict[str, Any]) -> None:
    name = str(body.get("name", ""))[:40]
    base = name if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) else "r"
    body["name"] = f"{base}-{next(RULE_NAMES)}"
    if "email" in body:
        body.pop("webhook", None)
        body.pop("secret", None)
        body["email"] = [f"oncall{n}@example.com" for n in range(len(body["email"]))]
    else:
        body["webhook"] = "https://hooks.example.com/oxide"
        if body.get("format") == "slack":
            body.pop("secret", None)
        elif "secret" in body:
            body["secret"] = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"


def _deadline(body: dict[str, Any]) -> None:
    for member in ("max_duration", "expect_every"):
        if body.get(member) is not None:
            amount = int(body[member].rstrip("mshd")) % 1000 or 1
            body[member] = f"{amount}{'d' if member == 'expect_every' else 'm'}"
    if body.get("max_duration") is None and body.get("expect_every") is None:
        body["max_duration"] = "2h"
    if body.get("by") is not None:
        body["by"] = "06:00"
        body["expect_every"] = body.get("expect_every") or "1d"
    if body.get("tz") is not None:
        body["tz"] = "Europe/Paris" if body.get("by") is not None else None


def _body(case: schemathesis.Case[Any], path: str) -> None:
    body: Any = case.body
    if not isinstance(body, dict):
        return
    if path == "/definitions" and isinstance(body.get("manifest"), dict):
        body["manifest"]["job"] = body["job_name"]
        if body["manifest"]["format"] != 1:
            _flow_graph(body["manifest"])
    elif path == "/definitions/upgrades":
        body["step_mapping"] = _named_keys(body["step_mapping"], NameKind.STEP)
        if body["to_digest"] == body["from_digest"]:
            last = "1" if body["from_digest"][-1] != "1" else "2"
            body["to_digest"] = body["from_digest"][:-1] + last
        targets: set[str] = set()
        for source, target in body["step_mapping"].items():
            body["step_mapping"][source] = _unique([target, source], targets)
            targets.add(body["step_mapping"][source])
    elif path in ("/instances", "/launches"):
        for member in ("identifying_parameters", "non_identifying_parameters"):
            if member in body:
                body[member] = _named_keys(body[member], NameKind.PARAMETER)
        identifying = body.get("identifying_parameters", {})
        for parameter in list(body.get("non_identifying_parameters", {})):
            if parameter in identifying:
                del body["non_identifying_parameters"][parameter]
    elif path.endswith("/partitions") and case.method == "POST":
        keys: set[str] = set()
        entries = []
        for entry in body["entries"]:
            if entry["key"] not in keys:
                keys.add(entry["key"])
                entries.append(entry)
        body["entries"] = entries
    elif path == "/notifications/rules" and case.method == "POST":
        _notification_rule(body)
    elif path == "/notifications/deadlines" and case.method == "PUT":
        _deadline(body)
    elif path == "/purge/survey":
        latest = datetime.now(UTC) - PURGE_CUTOFF_AGE
        if datetime.fromisoformat(body["ended_before"]) > latest:
            body["ended_before"] = latest.isoformat()


@schema.hook
def map_case(context: Any, case: schemathesis.Case[Any]) -> schemathesis.Case[Any]:
    """Make the rules across members hold in a positive case (module docstring)."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return case
    if isinstance(case.query, dict):
        case.query.pop("cursor", None)
    _body(case, case.operation.path.removeprefix(API))
    return case


def issued_plan(base_url: str, headers: dict[str, str]) -> dict[str, Any]:
    """A purge plan as the server issues it (the survey's answer)."""
    cutoff = (datetime.now(UTC) - PURGE_CUTOFF_AGE).isoformat()
    request = urllib.request.Request(
        f"{base_url}{API}/purge/survey",
        data=json.dumps({"ended_before": cutoff}).encode(),
        headers={**headers, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        plan: dict[str, Any] = json.loads(answer.read())
    return plan


ROLE_HEADER = "X-Fuzz-Role"  # which role a header set is (never sent: popped below)


@pytest.fixture(params=[RUNTIME, OPERATOR])
def authorization(request: pytest.FixtureRequest) -> dict[str, str]:
    """A token of each role: the runtime's and the operator's (each meets the
    other's operations as a 403 the operation lists)."""
    # A transactional test's flush empties the one-row schema version table too.
    models.SchemaVersion.objects.update_or_create(
        id=1, defaults={"version": SUPPORTED_SCHEMA_VERSION}
    )
    token = token_for(f"fuzz-{request.param}", request.param)
    return {"Authorization": f"Token {token}", ROLE_HEADER: request.param}


def operator_role(headers: dict[str, str]) -> bool:
    """Whether ``headers`` are the operator's (the runtime may not survey a purge:
    its purge/apply is the documented 403, whatever the plan)."""
    return headers.get(ROLE_HEADER) == OPERATOR


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
    headers = {name: value for name, value in authorization.items() if name != ROLE_HEADER}
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    purge = case.operation.path == f"{API}/purge/apply"
    if positive and purge and isinstance(case.body, dict) and operator_role(authorization):
        case.body["plan"] = issued_plan(live_server.url, headers)
    case.call_and_validate(
        base_url=live_server.url,
        headers=headers,
        additional_checks=[problem_code_is_listed],
    )
