"""Tokens limited to job names (contract §4.1; ``issue_api_token(job_patterns=…)``,
``oxide_batch/domain/jobscope.py``): such a token is 403 ``job_not_permitted``
(naming the job and its patterns) on every object of another job — before the
view reads anything, so nothing is written — while an unknown id stays 404;
the lists show only its jobs, page after page; definitions of another job are
refused; its own jobs work as for any token; the operator endpoints are bound
by no scope. The database's filter of the lists agrees with the Python match
for any name and pattern (Hypothesis, both databases)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.domain.jobscope import in_scope, pattern_regex
from oxide_batch.domain.names import NameKind, validate_name
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.repository import DjangoJobRepository, FixedClock, SystemClock
from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION
from oxide_batch.repository.tokens import issue_api_token
from oxide_batch.roles import OPERATOR, RUNTIME, ensure_roles
from tests.api.support import Runtime, problem
from tests.api.test_claimant import database_rows
from tests.api.test_flow import FLOW
from tests.api.test_permissions import ENDPOINTS, N

User = get_user_model()

PATTERNS = ["nightly_*"]
OWN_JOB = "nightly_import"
FOREIGN_JOB = "weekly_report"
OWNER_TOKEN = "c3" * 16
UNKNOWN = N  # an id that exists nowhere
DIGEST_HEX = "ab" * 32


def token_of(username: str, group: str, patterns: list[str] | None = None) -> str:
    user = User.objects.create_user(username)
    user.groups.add(Group.objects.get(name=group))
    issued = issue_api_token(
        user=user, name="scoped", now=SystemClock().now(), job_patterns=patterns
    )
    return issued.token


def runtime_for(token: str, keyword: str = "Token") -> Runtime:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{keyword} {token}")
    return Runtime(client)


# ----------------------------------------------------------------- the world


@dataclass(frozen=True)
class Objects:
    """One job's rows, one of each kind a path can name."""

    job: str
    instance: int
    execution: int
    step: int
    partition: int

    def ids(self) -> dict[str, int]:
        return {
            "instance": self.instance,
            "execution": self.execution,
            "step": self.step,
            "partition": self.partition,
        }


@dataclass(frozen=True)
class ScopeWorld:
    full: str  # an unlimited runtime's token
    scoped: str  # a runtime's token limited to ``nightly_*``
    own: Objects
    foreign: Objects
    # Every (job name, instance id, execution id), in creation order.
    runs: list[tuple[str, int, int]]


def objects_of(rt: Runtime, job: str) -> Objects:
    """A STARTED execution of ``job`` with a STARTED parent step whose plan
    has one partition."""
    instance, execution = rt.launch(job, {"run": "objects"})
    execution = rt.move(execution, "STARTED")
    parent = rt.started_step(execution, "load")
    plan = rt.post(f"steps/{parent['id']}/partitions", {"entries": [{"key": "east"}]}, 201)
    return Objects(job, instance["id"], execution["id"], parent["id"], plan["partitions"][0]["id"])


# Created in this order (the lists are newest first): names that match
# ``nightly_*`` and names that nearly do (case, anchoring, the underscore).
RUN_JOBS = [
    "nightly_export",
    "nightlyX",
    "nightly_",
    "NIGHTLY_caps",
    "xnightly_a",
    "nightly_%",
    "nightly",
    "nightly_export",
]


def build_world() -> ScopeWorld:
    ensure_roles()
    models.SchemaVersion.objects.get_or_create(id=1, defaults={"version": SUPPORTED_SCHEMA_VERSION})
    full = token_of("full-runtime", RUNTIME)
    scoped = token_of("scoped-runtime", RUNTIME, PATTERNS)
    rt = runtime_for(full)
    own = objects_of(rt, OWN_JOB)
    foreign = objects_of(rt, FOREIGN_JOB)
    runs = [(OWN_JOB, own.instance, own.execution), (FOREIGN_JOB, foreign.instance,
            foreign.execution)]  # fmt: skip
    for number, job in enumerate(RUN_JOBS):
        instance, execution = rt.launch(job, {"run": str(number)})
        runs.append((job, instance["id"], execution["id"]))
    return ScopeWorld(full, scoped, own, foreign, runs)


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[ScopeWorld]:
    """One world for the module's tests, which only read it: built in a
    transaction of its own that each test's transaction nests in (a savepoint,
    so what a test writes is undone) and that is rolled back at the end."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            built = build_world()
        except BaseException:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)
            raise
    try:
        yield built
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


@pytest.fixture
def scoped(world: ScopeWorld) -> Runtime:
    return runtime_for(world.scoped)


@pytest.fixture
def full(world: ScopeWorld) -> Runtime:
    return runtime_for(world.full)


# ------------------------------------------------- every path naming an object

FLOW_DECISION = {
    "source_node_id": "load",
    "source_step_execution_id": UNKNOWN,
    "kind": "STEP_EXIT",
    "observed_outcome": "COMPLETED",
    "target": {"node": "store"},
    "plan_fingerprint": DIGEST_HEX,
    "input_digest": DIGEST_HEX,
}
REUSABLE = {"node_id": "load", "plan_fingerprint": DIGEST_HEX, "input_digest": DIGEST_HEX,
            "kind": "STEP_EXIT"}  # fmt: skip
PARTITION_CAS = {"expected_version": 0, "worker_step_execution_id": UNKNOWN}


@dataclass(frozen=True)
class Route:
    """A job-scoped endpoint: ``template`` names its objects as ``{instance}``,
    ``{execution}``, ``{step}``, ``{partition}``; ``data``: a valid body (POST)
    or query (GET), so an unknown id reaches the repository."""

    method: str
    template: str
    data: dict[str, Any]

    def path(self, ids: dict[str, int]) -> str:
        return self.template.format(**ids)

    def send(self, runtime: Runtime, ids: dict[str, int]) -> Any:
        if self.method == "GET":
            return runtime.get(self.path(ids), expect=None, **self.data)
        return runtime.post(self.path(ids), self.data)

    def __str__(self) -> str:
        return f"{self.method} {self.template}"


ROUTES = [
    Route("GET", "instances/{instance}", {}),
    Route("GET", "instances/{instance}/executions", {}),
    Route("POST", "instances/{instance}/executions", {}),
    Route("GET", "instances/{instance}/flow-steps/load", {}),
    Route("GET", "instances/{instance}/flow-decisions/reusable", REUSABLE),
    Route("GET", "executions/{execution}", {}),
    Route("POST", "executions/{execution}/transition",
          {"expected_version": 0, "status": "STARTED"}),
    Route("POST", "executions/{execution}/exit-status", {"expected_version": 0, "exit_code": "X"}),
    Route("POST", "executions/{execution}/claim",
          {"expected_version": 0, "owner_token": OWNER_TOKEN}),
    Route("POST", "executions/{execution}/control", {"owner_token": OWNER_TOKEN}),
    Route("GET", "executions/{execution}/steps", {}),
    Route("POST", "executions/{execution}/steps", {"step_name": "probe"}),
    Route("GET", "executions/{execution}/flow-decisions", {}),
    Route("POST", "executions/{execution}/flow-decisions", FLOW_DECISION),
    Route("GET", "executions/{execution}/restart-plan", {}),
    Route("GET", "executions/{execution}/skips", {}),
    Route("GET", "steps/{step}", {}),
    Route("POST", "steps/{step}/transition", {"expected_version": 0, "status": "STARTED"}),
    Route("POST", "steps/{step}/exit-status", {"expected_version": 0, "exit_code": "X"}),
    Route("GET", "steps/{step}/checkpoint", {}),
    Route("POST", "steps/{step}/checkpoint", {"expected_version": 0}),
    Route("GET", "steps/{step}/skips", {}),
    Route("GET", "steps/{step}/partitions", {}),
    Route("POST", "steps/{step}/partitions", {"entries": [{"key": "probe"}]}),
    Route("POST", "steps/{step}/partitions/restart", {"source_step_execution_id": UNKNOWN}),
    Route("POST", "steps/{step}/partitions/claim", {"owner_token": OWNER_TOKEN}),
    Route("POST", "steps/{step}/aggregate", {"expected_version": 0}),
    Route("POST", "partitions/{partition}/assign", PARTITION_CAS),
    Route("POST", "partitions/{partition}/complete", PARTITION_CAS),
]  # fmt: skip
ROUTE_IDS = [str(route) for route in ROUTES]
GET_ROUTES = [route for route in ROUTES if route.method == "GET"]
UNKNOWN_IDS = {"instance": UNKNOWN, "execution": UNKNOWN, "step": UNKNOWN, "partition": UNKNOWN}
# The operator endpoints (and the operators' record) that name an object: no scope.
OPERATOR_ROUTES = {
    ("GET", f"executions/{N}/recovery-proposal"),
    ("POST", f"executions/{N}/recover"),
    ("POST", f"executions/{N}/stop"),
    ("POST", f"executions/{N}/abandon"),
    ("POST", f"executions/{N}/lost-write/resolve"),
    ("PUT", f"instances/{N}/hold"),
    ("DELETE", f"instances/{N}/hold"),
    ("POST", f"notifications/deliveries/{N}/redeliver"),
}


def test_the_table_holds_every_scoped_path_naming_an_object() -> None:
    naming = {(method, path) for method, path, _ in ENDPOINTS if str(N) in path}
    assert {(r.method, r.path(UNKNOWN_IDS)) for r in ROUTES} == naming - OPERATOR_ROUTES


def not_permitted(response: Any, job: str = FOREIGN_JOB) -> dict[str, Any]:
    body = problem(response, 403, "job_not_permitted")
    assert (body["job_name"], body["patterns"]) == (job, PATTERNS)
    assert repr(job) in body["detail"]
    assert repr(PATTERNS[0]) in body["detail"]
    return body


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_another_jobs_object_is_403_and_nothing_is_written(
    route: Route, scoped: Runtime, world: ScopeWorld
) -> None:
    before = database_rows()
    not_permitted(route.send(scoped, world.foreign.ids()))
    assert database_rows() == before


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_an_unknown_id_is_still_404(route: Route, scoped: Runtime) -> None:
    response = route.send(scoped, UNKNOWN_IDS)
    body = problem(response, 404)
    assert body["code"].endswith("_not_found"), body


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_its_own_jobs_objects_are_not_refused(
    route: Route, world: ScopeWorld, scoped: Runtime, full: Runtime
) -> None:
    """The scoped token is answered exactly as an unlimited one (a read: the
    same body; a write: whatever the rule says, never a 403)."""
    ids = world.own.ids()
    response = route.send(scoped, ids)
    assert response.status_code != 403, response.content
    if route.method == "GET":
        assert response.status_code == 200, response.content
        assert response.json() == route.send(full, ids).json()


def test_another_jobs_step_named_in_a_body_is_never_taken(
    world: ScopeWorld, scoped: Runtime
) -> None:
    """Ids in a body are checked against the path's own object (the worker of
    this partition, a source of this node and instance): another job's step
    is refused by those rules and nothing of it is written."""
    before = database_rows()
    assign = {"expected_version": 0, "worker_step_execution_id": world.foreign.step}
    problem(scoped.post(f"partitions/{world.own.partition}/assign", assign), 409,
            "partition_worker_mismatch")  # fmt: skip
    restart = {"source_step_execution_id": world.foreign.step}
    problem(scoped.post(f"steps/{world.own.step}/partitions/restart", restart), 400,
            "invalid_request")  # fmt: skip
    assert database_rows() == before


# -------------------------------------------------------------------- lists


def cursor_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["cursor"][0]


def pages(runtime: Runtime, path: str, **params: Any) -> list[list[dict[str, Any]]]:
    found = [runtime.get(path, page_size=2, **params)]
    while found[-1]["next"] is not None:
        cursor = cursor_of(found[-1]["next"])
        found.append(runtime.get(path, page_size=2, cursor=cursor, **params))
    return [page["results"] for page in found]


@pytest.mark.parametrize(("path", "position"), [("executions", 2), ("instances", 1)])
def test_the_lists_show_only_its_jobs_page_after_page(
    path: str, position: int, world: ScopeWorld, scoped: Runtime, full: Runtime
) -> None:
    matching = [run for run in world.runs if run[0].startswith("nightly_")]
    assert [run[0] for run in matching] == [
        OWN_JOB,
        "nightly_export",
        "nightly_",
        "nightly_%",
        "nightly_export",
    ]
    expected = [(run[0], run[position]) for run in reversed(matching)]  # newest first
    seen = pages(scoped, path)
    assert [len(page) for page in seen] == [2, 2, 1]
    assert [(item["job_name"], item["id"]) for page in seen for item in page] == expected
    # An unlimited token sees every job (the same traversal, more pages).
    everything = [item["id"] for page in pages(full, path) for item in page]
    assert everything == [run[position] for run in reversed(world.runs)]
    # A filter narrows within the scope; another job's filter finds nothing.
    assert pages(scoped, path, job_name=FOREIGN_JOB) == [[]]
    exports = [item["id"] for page in pages(scoped, path, job_name="nightly_export")
               for item in page]  # fmt: skip
    assert exports == [run[position] for run in reversed(world.runs) if run[0] == "nightly_export"]


# -------------------------------------------------------- creating and defining


def test_an_instance_of_another_job_is_refused_and_none_is_made(
    world: ScopeWorld, scoped: Runtime
) -> None:
    before = database_rows()
    for job in (FOREIGN_JOB, "NIGHTLY_import", "nightly", "a_nightly_import"):
        body = {"job_name": job, "identifying_parameters": {"run": "new"}}
        not_permitted(scoped.post("instances", body), job)
    assert database_rows() == before
    made = scoped.post("instances", {"job_name": "nightly_new", "identifying_parameters": {}}, 201)
    assert made["job_name"] == "nightly_new"
    # An existing instance of its own job: selected (200), as for any token.
    again = scoped.post("instances", {"job_name": OWN_JOB, "identifying_parameters":
                                      {"run": "objects"}}, 200)  # fmt: skip
    assert again["id"] == world.own.instance


def manifest_of(job: str) -> dict[str, Any]:
    return {**FLOW, "job": job}


def test_definitions_of_another_job_are_refused(world: ScopeWorld, scoped: Runtime) -> None:
    before = database_rows()
    body = {"job_name": FOREIGN_JOB, "revision": "v1", "manifest": manifest_of(FOREIGN_JOB)}
    not_permitted(scoped.post("definitions", body))
    edge = {"job_name": FOREIGN_JOB, "key": "v1-to-v2", "from_digest": "0" * 64,
            "to_digest": "1" * 64, "step_mapping": {"load": "load"}}  # fmt: skip
    not_permitted(scoped.post("definitions/upgrades", edge))
    assert database_rows() == before
    v1 = scoped.post(
        "definitions", {"job_name": OWN_JOB, "revision": "v1", "manifest": manifest_of(OWN_JOB)},
        201,
    )  # fmt: skip
    changed = {**manifest_of(OWN_JOB), "entry": "store"}
    v2 = scoped.post("definitions", {"job_name": OWN_JOB, "revision": "v2", "manifest": changed},
                     201)  # fmt: skip
    own_edge = {**edge, "job_name": OWN_JOB, "from_digest": v1["digest"],
                "to_digest": v2["digest"]}  # fmt: skip
    assert scoped.post("definitions/upgrades", own_edge, 201) == own_edge


def test_its_own_job_runs_end_to_end(world: ScopeWorld, scoped: Runtime) -> None:
    """Launch, claim, steps, a chunk, a partition and the end: every runtime
    write of its own job, through a limited token."""
    instance, execution = scoped.launch("nightly_run", {"run": "e2e"})
    execution = scoped.post(
        f"executions/{execution['id']}/claim",
        {"expected_version": execution["version"], "owner_token": OWNER_TOKEN},
        200,
    )
    execution = scoped.move(execution, "STARTED")
    parent = scoped.started_step(execution, "parent")
    plan = scoped.post(f"steps/{parent['id']}/partitions", {"entries": [{"key": "a"}]}, 201)
    worker = scoped.started_step(execution, "worker")
    partition = scoped.post(
        f"partitions/{plan['partitions'][0]['id']}/assign",
        {"expected_version": 0, "worker_step_execution_id": worker["id"]},
        200,
    )
    worker = scoped.post(
        f"steps/{worker['id']}/checkpoint",
        {"expected_version": worker["version"], "counts": {"read": 3, "written": 3}},
        200,
    )
    worker = scoped.move_step(worker, "COMPLETED")
    scoped.post(
        f"partitions/{partition['id']}/complete",
        {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]},
        200,
    )
    parent = scoped.post(
        f"steps/{parent['id']}/aggregate", {"expected_version": parent["version"]}, 200
    )
    assert (parent["status"], parent["counts"]["written"]) == ("COMPLETED", 3)
    control = scoped.post(
        f"executions/{execution['id']}/control", {"owner_token": OWNER_TOKEN}, 200
    )
    assert control["owner_matches"] is True
    done = scoped.move(control["execution"], "COMPLETED")
    assert scoped.get(f"instances/{instance['id']}/executions")["results"] == [done]


@pytest.mark.parametrize(
    ("patterns", "job", "allowed"),
    [
        (["report-??"], "report-01", True),
        (["report-??"], "report-1", False),
        (["report-??"], "report-001", False),
        (["a.b"], "a.b", True),
        (["a.b"], "aXb", False),
        (["[ab]*"], "[ab]c", True),
        (["[ab]*"], "a", False),
        (["100%"], "1000", False),
        (["a_c", "*_daily"], "abc", False),
        (["a_c", "*_daily"], "x_daily", True),
        (["été ?"], "été 1", True),
        (["été ?"], "ete 1", False),
    ],
)
def test_the_patterns_through_the_api(
    patterns: list[str], job: str, allowed: bool, world: ScopeWorld
) -> None:
    """``*`` any run, ``?`` one character, the rest literal (brackets, dots,
    SQL wildcards), case and accents as written — the same for a single object
    and for the lists."""
    runtime = runtime_for(token_of("patterned", RUNTIME, patterns))
    response = runtime.post("instances", {"job_name": job, "identifying_parameters": {}})
    if not allowed:
        body = problem(response, 403, "job_not_permitted")
        assert (body["job_name"], body["patterns"]) == (job, patterns)
        assert runtime.get("instances", job_name=job)["results"] == []
        return
    assert response.status_code == 201, response.content
    listed = runtime.get("instances", job_name=job)["results"]
    assert [item["id"] for item in listed] == [response.json()["id"]]


def test_an_empty_scope_permits_no_job(world: ScopeWorld) -> None:
    """A token row limited to no pattern at all (``[]``: written by hand, as
    ``issue_api_token`` refuses it) permits no job — it never widens to every
    job, as ``NULL`` (no limit) does."""
    token = token_of("empty-scope", RUNTIME, PATTERNS)
    models.ApiToken.objects.filter(user__username="empty-scope").update(job_patterns=[])
    runtime = runtime_for(token)
    body = problem(runtime.get(f"executions/{world.own.execution}", expect=None), 403,
                   "job_not_permitted")  # fmt: skip
    assert (body["job_name"], body["patterns"]) == (OWN_JOB, [])
    new = {"job_name": OWN_JOB, "identifying_parameters": {"run": "empty"}}
    problem(runtime.post("instances", new), 403, "job_not_permitted")
    assert runtime.get("executions")["results"] == []
    assert runtime.get("instances")["results"] == []


# ----------------------------------------------------------------- operators


def test_the_operator_endpoints_are_bound_by_no_scope(world: ScopeWorld, fixed: FixedClock) -> None:
    """A job-limited operator token recovers, stops, abandons, holds, surveys
    and purges another job's executions, and reads the audit of them."""
    operator = runtime_for(token_of("scoped-operator", OPERATOR, PATTERNS))
    rt = runtime_for(world.full)
    fixed.advance(timedelta(days=400))  # after the world's instants (the system clock)
    orphan = rt.started(FOREIGN_JOB, run="orphan")
    running = rt.started(FOREIGN_JOB, run="running")
    failed = rt.move(rt.started(FOREIGN_JOB, run="failed"), "FAILED")
    done = rt.move(rt.started(FOREIGN_JOB, run="done"), "COMPLETED")
    fixed.advance(timedelta(minutes=16))

    proposal = operator.get(f"executions/{orphan['id']}/recovery-proposal")
    assert proposal["eligible"] is True
    recovered = operator.post(
        f"executions/{orphan['id']}/recover",
        {
            "expected_version": proposal["version"],
            "disposition": "MARK_FAILED",
            "reason_code": "WORKER_LOST",
            "evidence_digest": proposal["evidence_digest"],
            "operation_id": "recover-1",
        },
        200,
    )
    assert recovered["execution"]["status"] == "FAILED"
    stopped = operator.post(
        f"executions/{running['id']}/stop", {"expected_version": 1, "operation_id": "stop-1"}, 200
    )
    assert stopped["execution"]["stop_requested"] is True
    abandoned = operator.post(
        f"executions/{failed['id']}/abandon",
        {"expected_version": failed["version"], "reason_code": "GIVE_UP", "operation_id": "ab-1"},
        200,
    )
    assert abandoned["execution"]["status"] == "ABANDONED"
    hold = f"instances/{running['job_instance_id']}/hold"
    operator.put(hold, {"reason_code": "LEGAL_HOLD", "operation_id": "hold-1"}, 200)
    operator.delete(hold, {"reason_code": "RELEASED", "operation_id": "hold-2"}, 200)
    fixed.advance(timedelta(hours=2))
    cutoff = (fixed.now() - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    survey = {"ended_before": cutoff, "job_name": FOREIGN_JOB, "statuses": ["COMPLETED"]}
    plan = operator.post("purge/survey", survey, 200)
    assert [c["instance_id"] for c in plan["candidates"]] == [done["job_instance_id"]]
    purged = operator.post("purge/apply", {"plan": plan, "operation_id": "purge-1"}, 200)
    assert purged["counts"]["job_executions"] == 1
    decisions = operator.get("audit/recovery-decisions")["results"]
    assert [d["job_execution_id"] for d in decisions] == [orphan["id"]]
    requests = operator.get("audit/operator-requests")["results"]
    assert {r["job_execution_id"] for r in requests} >= {orphan["id"], running["id"], failed["id"]}
    assert operator.get("audit/retention-records")["results"]


# ---------------------------------------- the database's match is the Python one

# Regular-expression and LIKE metacharacters, a space, letters with case pairs
# and a Unicode case-fold trap (K, KELVIN SIGN), and the two wildcards.
ALPHABET = [*"ab1.+()[]\\^$|%_ {}-#'\"", "é", "ß", "İ", "σ", "Σ", "k", "\u212a", "*", "?"]
TEXT = st.text(st.sampled_from(ALPHABET), min_size=1, max_size=8)


def valid_name(text: str) -> bool:
    try:
        validate_name(text, NameKind.JOB)
    except Exception:
        return False
    return True


NAME = TEXT.filter(valid_name)


@st.composite
def name_matching(draw: st.DrawFn, pattern: str) -> str:
    """A name made from ``pattern`` (each ``*`` some characters, each ``?`` one)."""
    parts = []
    for character in pattern:
        if character == "*":
            parts.append(draw(st.text(st.sampled_from(ALPHABET), max_size=3)))
        elif character == "?":
            parts.append(draw(st.sampled_from(ALPHABET)))
        else:
            parts.append(character)
    return "".join(parts)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_database_filter_agrees_with_in_scope(data: st.DataObject) -> None:
    """``job_name__regex=pattern_regex(patterns)`` (the lists' filter, SQLite's
    Python REGEXP or PostgreSQL's ``~``) selects exactly the names ``in_scope``
    lets through (a single object's check)."""
    patterns = data.draw(st.lists(NAME, min_size=1, max_size=3, unique=True), label="patterns")
    names = set(data.draw(st.lists(NAME, max_size=6), label="names"))
    for pattern in patterns:
        names.add(data.draw(name_matching(pattern), label=f"matching {pattern!r}"))
    names = {name for name in names if valid_name(name)}
    repo = DjangoJobRepository(FixedClock())
    with transaction.atomic():
        with repo.begin() as uow:
            for name in names:
                uow.select_or_create_job_instance(JobInstanceKey.of(name))
            uow.commit()
        found = set(
            models.JobInstance.objects.filter(
                job_name__in=names, job_name__regex=pattern_regex(patterns)
            ).values_list("job_name", flat=True)
        )
        transaction.set_rollback(True)
    expected = {name for name in names if in_scope(patterns, name)}
    event("a name in scope" if expected else "no name in scope")
    event("a name out of scope" if expected != names else "every name in scope")
    assert found == expected
