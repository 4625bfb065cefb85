"""Audited recovery requests and their effect on an execution
(contract §2.5.5; contract scenarios 5.1-5.3, 5.12)."""

from __future__ import annotations

import pytest

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    FailureCategory,
    FailureSummary,
    RecoveryDecision,
    RecoveryDisposition,
    RecoveryRequest,
    recovered_execution,
)
from oxide_batch.domain.errors import (
    InvalidCharacters,
    InvalidTransitionTime,
    RecoveryFieldControlCharacter,
    RecoveryFieldEmpty,
    RecoveryFieldSurroundingWhitespace,
    RecoveryFieldTooLong,
    RecoveryNotAllowed,
    StaleVersion,
    VersionExhausted,
)
from tests.domain.builders import FINISHED, MAX_I64, UNRESOLVED, at, metadata_in
from tests.domain.builders import job_execution as _job_execution

S = BatchStatus
D = RecoveryDisposition
EVIDENCE = bytes([0xA5]) * 32
MARK_FAILED_FAILURE = FailureSummary(FailureCategory.PERMANENT_INFRASTRUCTURE, 900)


def _request(
    disposition: RecoveryDisposition = D.ABANDON,
    *,
    expected_version: int = 1,
    reason_code: str = "ORPHAN_CONFIRMED",
    operator_reference: str = "operator-correlation-42",
    evidence_digest: bytes = EVIDENCE,
) -> RecoveryRequest:
    failure = MARK_FAILED_FAILURE if disposition is D.MARK_FAILED else None
    return RecoveryRequest(
        expected_version, disposition, reason_code, operator_reference, evidence_digest, failure
    )


def _execution(status, *, version=1, counts=None, failure_summary=None, exit_code="PRIORITY"):
    metadata = metadata_in(
        status, exit_code=exit_code, counts=counts, failure_summary=failure_summary
    )
    return _job_execution(status, version=version, metadata=metadata)


# ------------------------------------------------------------ request validation

FIELD_CASES = [
    # field, value, error
    ("reason_code", "", RecoveryFieldEmpty),
    ("reason_code", "R" * 65, RecoveryFieldTooLong),
    ("reason_code", " PADDED ", RecoveryFieldSurroundingWhitespace),
    ("reason_code", "PADDED\t", RecoveryFieldSurroundingWhitespace),
    ("reason_code", "WORKER\nLOST", RecoveryFieldControlCharacter),
    ("reason_code", "WORKER\x00LOST", RecoveryFieldControlCharacter),
    ("reason_code", "orphan_confirmed", InvalidCharacters),
    ("reason_code", "ORPHAN-CONFIRMED", InvalidCharacters),
    ("reason_code", "ORPHAN CONFIRMED", InvalidCharacters),
    ("operator_reference", "", RecoveryFieldEmpty),
    ("operator_reference", "o" * 129, RecoveryFieldTooLong),
    ("operator_reference", "é" * 65, RecoveryFieldTooLong),
    ("operator_reference", " operator-7", RecoveryFieldSurroundingWhitespace),
    ("operator_reference", "operator\x1b7", RecoveryFieldControlCharacter),
    ("operator_reference", "operator\x7f7", RecoveryFieldControlCharacter),
    ("operator_reference", "operator 7", InvalidCharacters),
    ("operator_reference", "opérateur", InvalidCharacters),
    ("operator_reference", "user/7", InvalidCharacters),
]
FIELD_LABELS = {"reason_code": "reason_code", "operator_reference": "operator_reference"}


@pytest.mark.parametrize(
    ("field", "value", "error"),
    FIELD_CASES,
    ids=[f"{field}-{error.__name__}-{value[:8]!r}" for field, value, error in FIELD_CASES],
)
def test_recovery_text_fields_are_bounded_and_validated(field, value, error):
    with pytest.raises(error) as caught:
        _request(**{field: value})
    label = caught.value.kind if error is InvalidCharacters else caught.value.field
    assert label == FIELD_LABELS[field]


@pytest.mark.parametrize(("field", "limit"), [("reason_code", 64), ("operator_reference", 128)])
def test_a_too_long_recovery_field_names_its_byte_limit(field, limit):
    with pytest.raises(RecoveryFieldTooLong) as caught:
        _request(**{field: "A" * (limit + 1)})
    assert caught.value.max_bytes == limit


def test_recovery_fields_at_their_byte_limits_are_accepted():
    request = _request(reason_code="R" * 64, operator_reference="o" * 128)
    assert (len(request.reason_code), len(request.operator_reference)) == (64, 128)


@pytest.mark.parametrize(
    "reference", ["operator:contract", "user.name@host", "operator-secret-correlation"]
)
def test_an_operator_reference_uses_the_actor_character_set(reference):
    assert _request(operator_reference=reference).operator_reference == reference


@pytest.mark.parametrize("size", [0, 16, 31, 33, 64])
def test_an_evidence_digest_must_be_exactly_32_bytes(size):
    with pytest.raises(InvalidCharacters) as caught:
        _request(evidence_digest=b"\x01" * size)
    assert caught.value.kind == "evidence digest"


def test_an_evidence_digest_of_32_bytes_is_accepted():
    assert _request(evidence_digest=b"\x00" * 32).evidence_digest == b"\x00" * 32


def test_mark_failed_requires_a_failure_and_abandon_carries_none():
    with pytest.raises(ValueError, match="MARK_FAILED"):
        RecoveryRequest(1, D.MARK_FAILED, "R", "op", EVIDENCE, None)
    with pytest.raises(ValueError, match="ABANDON"):
        RecoveryRequest(1, D.ABANDON, "R", "op", EVIDENCE, MARK_FAILED_FAILURE)


def test_the_named_constructors_build_the_matching_disposition():
    failed = RecoveryRequest.mark_failed(
        expected_version=1,
        reason_code="R",
        operator_reference="op",
        evidence_digest=EVIDENCE,
        failure=MARK_FAILED_FAILURE,
    )
    abandoned = RecoveryRequest.abandon(
        expected_version=1, reason_code="R", operator_reference="op", evidence_digest=EVIDENCE
    )
    assert (failed.disposition, failed.failure) == (D.MARK_FAILED, MARK_FAILED_FAILURE)
    assert (abandoned.disposition, abandoned.failure) == (D.ABANDON, None)


@pytest.mark.parametrize(
    ("disposition", "status"), [(D.MARK_FAILED, S.FAILED), (D.ABANDON, S.ABANDONED)]
)
def test_a_disposition_names_its_resulting_status(disposition, status):
    assert disposition.resulting_status is status


# --------------------------------------------------------------- redaction (5.2)


@pytest.mark.parametrize("render", [repr, str], ids=["repr", "str"])
def test_a_recovery_request_renders_reason_and_reference_but_never_the_evidence(render):
    request = RecoveryRequest.abandon(
        expected_version=1,
        reason_code="ORPHAN_CONFIRMED",
        operator_reference="operator-secret-correlation",
        evidence_digest=bytes([0x5A]) * 32,
    )
    text = render(request)
    assert "5a5a5a" not in text.lower()
    assert "ZZZZ" not in text
    assert "ORPHAN_CONFIRMED" in text
    assert "operator-secret-correlation" in text
    assert "<redacted>" in text


@pytest.mark.parametrize("render", [repr, str], ids=["repr", "str"])
def test_a_recovery_decision_renders_its_reason_but_never_the_evidence(render):
    decision = RecoveryDecision(
        id=5,
        job_execution_id=31,
        execution_version=1,
        prior_status=S.STARTED,
        resulting_status=S.ABANDONED,
        reason_code="ORPHAN_CONFIRMED",
        operator_reference="operator-correlation-99",
        evidence_digest=bytes([0x99]) * 32,
        decided_at=at(102),
    )
    text = render(decision)
    assert "999999" not in text
    assert "\\x99" not in text
    assert "ORPHAN_CONFIRMED" in text
    assert "<redacted>" in text


# ------------------------------------------------------------ recovered execution


@pytest.mark.parametrize("status", list(BatchStatus))
def test_a_stale_version_is_reported_before_anything_else_even_when_finished(status):
    with pytest.raises(StaleVersion) as caught:
        recovered_execution(_execution(status, version=2), _request(expected_version=1), at(150))
    assert (caught.value.expected, caught.value.actual) == (1, 2)


@pytest.mark.parametrize("disposition", list(RecoveryDisposition))
@pytest.mark.parametrize("status", sorted(FINISHED))
def test_recovery_of_a_finished_execution_is_not_allowed(status, disposition):
    with pytest.raises(RecoveryNotAllowed) as caught:
        recovered_execution(_execution(status), _request(disposition), at(150))
    assert (caught.value.id, caught.value.status) == (31, status)


@pytest.mark.parametrize("disposition", list(RecoveryDisposition))
@pytest.mark.parametrize("status", sorted(UNRESOLVED))
def test_recovery_of_an_active_or_unknown_execution_applies_the_disposition(status, disposition):
    counts = ExecutionCounts(4, 4, 4, 0, 2, 0)
    prior = _execution(status, counts=counts)
    recovered = recovered_execution(prior, _request(disposition), at(150))
    assert recovered.status is disposition.resulting_status
    assert recovered.version == prior.version + 1
    assert recovered.exit_code == "PRIORITY"
    assert recovered.counts == counts
    assert recovered.created_at == prior.created_at
    assert recovered.started_at == prior.started_at
    assert recovered.ended_at == at(150)
    assert recovered.updated_at == at(150)
    assert (recovered.id, recovered.job_instance_id, recovered.attempt) == (
        prior.id,
        prior.job_instance_id,
        prior.attempt,
    )
    assert prior.status is status


@pytest.mark.parametrize("status", sorted(UNRESOLVED))
def test_mark_failed_records_the_requests_failure(status):
    prior = _execution(status, failure_summary=FailureSummary(FailureCategory.UNKNOWN_COMMIT, 7))
    recovered = recovered_execution(prior, _request(D.MARK_FAILED), at(150))
    assert recovered.failure == MARK_FAILED_FAILURE


def test_abandon_keeps_a_failure_already_recorded():
    existing = FailureSummary(FailureCategory.UNKNOWN_COMMIT, 7)
    prior = _execution(S.UNKNOWN, failure_summary=existing)
    recovered = recovered_execution(prior, _request(D.ABANDON), at(150))
    assert recovered.failure == existing


def test_abandon_without_a_prior_failure_records_none():
    recovered = recovered_execution(_execution(S.STARTED), _request(D.ABANDON), at(150))
    assert recovered.failure is None


@pytest.mark.parametrize("status", [S.STARTED, S.STOPPING, S.UNKNOWN])
def test_a_decision_before_the_execution_started_is_an_invalid_transition_time(status):
    with pytest.raises(InvalidTransitionTime):
        recovered_execution(_execution(status), _request(), at(100.5))


def test_a_decision_before_a_starting_execution_was_created_is_invalid():
    with pytest.raises(InvalidTransitionTime):
        recovered_execution(_execution(S.STARTING), _request(), at(99))


@pytest.mark.parametrize(("status", "seconds"), [(S.STARTING, 100), (S.STARTED, 101)])
def test_a_decision_at_exactly_the_floor_instant_is_accepted(status, seconds):
    recovered = recovered_execution(_execution(status), _request(), at(seconds))
    assert recovered.ended_at == at(seconds)


def test_recovery_at_the_last_version_is_version_exhausted():
    prior = _execution(S.STARTED, version=MAX_I64)
    with pytest.raises(VersionExhausted):
        recovered_execution(prior, _request(expected_version=MAX_I64), at(150))
