"""``OperatorService.propose_many``: the proposals of many executions from one
read, each exactly what ``propose`` gives for that id (eligibility, reason,
inactivity, digest) — so a confirmation page of N rows can post back digests
an audited recovery accepts.

On the Django adapter (``repo``, a database): the rows mix stored checkpoints,
a corrupt one among them, and the read is counted in statements."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.domain import RecoveryDisposition
from oxide_batch.domain.evidence import propose_recovery
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import operator_service
from tests.conftest import give_accounts
from tests.helpers import key, launch
from tests.repository.test_recovery_evidence_many import mixed_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(repo):
    return operator_service(repo, stale_after=timedelta(minutes=15))


def test_propose_many_equals_propose_for_each_id(service, repo, clock):
    rows = mixed_rows(repo, clock)
    # The active rows are stale by now; one launched just before is not.
    clock.advance(timedelta(minutes=20))
    ids = [row.id for row in rows] + [launch(repo, key(run="young")).id]
    many = service.propose_many([*reversed(ids), 10**12])
    assert list(many) == sorted(ids)
    assert [many[pk] for pk in ids] == [service.propose(pk) for pk in ids]
    reasons = {p.reason_code for p in many.values()}
    assert reasons == {None, "execution_not_stale", "recovery_not_allowed"}


def test_propose_many_reads_in_a_bounded_number_of_statements(service, repo, clock):
    ids = [launch(repo, key(run=f"run-{n}")).id for n in range(30)]

    def statements(wanted: list[int]) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            service.propose_many(wanted)
        # The unit of work is a savepoint inside the test's transaction.
        return [q["sql"] for q in captured.captured_queries if "SAVEPOINT" not in q["sql"]]

    assert len(statements(ids[:1])) == len(statements(ids)) == 1


def test_a_digest_from_propose_many_is_accepted_by_recover(service, repo, clock):
    rows = mixed_rows(repo, clock)
    unknown = next(r for r in rows if r.status.value == "UNKNOWN")
    proposal = service.propose_many([unknown.id])[unknown.id]
    assert proposal == propose_recovery(
        proposal.evidence, now=clock.now(), stale_after=timedelta(minutes=15)
    )
    give_accounts(Actor("alice", 7))
    result = service.recover(
        unknown.id,
        expected_version=proposal.version,
        disposition=RecoveryDisposition.ABANDON,
        reason_code="STALE_WORKER",
        evidence_digest=proposal.evidence_digest,
        actor=Actor("alice", 7),
        operation_id="recover-many-1",
    )
    assert result.outcome is Outcome.APPLIED
