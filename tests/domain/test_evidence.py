"""Stop, ownership and recovery-proposal rules with plain values, no database
(contract §2.5.1–§2.5.5; contract scenarios 5.7, 5.8, 6.1, 6.2)."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

import pytest

from oxide_batch.domain import BatchStatus, FailureCategory, RecoveryDisposition
from oxide_batch.domain.canonical import canonical_bytes, sha256_hex
from oxide_batch.domain.errors import (
    ExecutionNotStale,
    ExecutionOwned,
    ExecutionOwnershipNotAllowed,
    InvalidCharacters,
    InvalidState,
    RecoveryEvidenceStale,
    RecoveryNotAllowed,
    StaleVersion,
    UnresolvedRecoveryRequired,
)
from oxide_batch.domain.evidence import (
    DEFAULT_LEASE_TTL,
    DEFAULT_STALE_AFTER,
    EVIDENCE_DIGEST_VERSION,
    CheckpointEvidence,
    Eligibility,
    ExecutionView,
    LatestStep,
    RecoveryEvidence,
    check_recovery,
    claimed_by_another,
    default_failure_category,
    instant_text,
    observation_stops,
    owner_claim_needs_write,
    propose_recovery,
    same_token,
    stop_request_applies,
    validate_lease_ttl,
    validate_owner_token,
    validate_stale_after,
)
from oxide_batch.domain.state import StateEnvelope, StoredState
from tests.domain.builders import FINISHED, at, job_execution

S = BatchStatus
D = RecoveryDisposition
ACTIVE = (S.STARTING, S.STARTED, S.STOPPING)
OWNER = b"\x01" * 16
OTHER = b"\x02" * 16
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
NOW = at(10_000)


def evidence(status: BatchStatus = S.STARTED, **changes) -> RecoveryEvidence:
    base = RecoveryEvidence(
        job_execution_id=31,
        status=status,
        attempt=1,
        version=3,
        owner_recorded=True,
        failure_category=FailureCategory.USER_COMPONENT if status is S.FAILED else None,
        last_activity_at=NOW - 16 * MINUTE,
        last_observed_at=NOW - 16 * MINUTE,
        stop_requested_at=None,
        newest_step_write_at=NOW - 20 * MINUTE,
        latest_step=LatestStep(7, S.STARTED, 4, CheckpointEvidence("reader.position", 1, 80, True)),
        completed_partition=False,
        committed_flow_decision=False,
    )
    return dataclasses.replace(base, **changes)


def proposal(status: BatchStatus = S.STARTED, *, now=NOW, stale_after=DEFAULT_STALE_AFTER, **kw):
    return propose_recovery(evidence(status, **kw), now=now, stale_after=stale_after)


def check(
    prop, *, version=3, digest=None, disposition=D.MARK_FAILED, reason="WORKER_LOST", override=False
):
    return check_recovery(
        prop,
        expected_version=version,
        evidence_digest_hex=prop.evidence_digest if digest is None else digest,
        disposition=disposition,
        reason_code=reason,
        override=override,
    )


# ----------------------------------------------------------------- stop requests


@pytest.mark.parametrize("status", [S.STARTING, S.STARTED])
def test_a_stop_request_on_starting_or_started_records_under_a_version_check(status):
    execution = job_execution(status, version=2)
    assert stop_request_applies(execution, 2) is True
    with pytest.raises(StaleVersion) as raised:
        stop_request_applies(execution, 1)
    assert (raised.value.expected, raised.value.actual) == (1, 2)


@pytest.mark.parametrize("status", [S.STOPPING, *sorted(FINISHED)])
def test_a_stop_request_on_stopping_or_finished_is_a_no_op_without_a_version_check(status):
    assert stop_request_applies(job_execution(status, version=5), 0) is False


def test_a_stop_request_on_unknown_is_invalid_state():
    with pytest.raises(InvalidState) as raised:
        stop_request_applies(job_execution(S.UNKNOWN, version=1), 1)
    assert (raised.value.id, raised.value.status) == (31, S.UNKNOWN)


def test_a_stop_request_on_unknown_is_invalid_state_before_the_version_check():
    with pytest.raises(InvalidState):
        stop_request_applies(job_execution(S.UNKNOWN, version=1), 0)


# ------------------------------------------------------------ ownership evidence


def test_a_first_claim_on_starting_records_the_token():
    assert owner_claim_needs_write(job_execution(S.STARTING), 0, None, OWNER) is True


def test_the_same_token_again_is_idempotent():
    assert owner_claim_needs_write(job_execution(S.STARTING), 0, OWNER, OWNER) is False


def test_another_recorded_token_is_execution_owned():
    with pytest.raises(ExecutionOwned) as raised:
        owner_claim_needs_write(job_execution(S.STARTING), 0, OWNER, OTHER)
    assert raised.value.id == 31


@pytest.mark.parametrize("status", [s for s in S if s is not S.STARTING])
def test_a_claim_outside_starting_is_execution_ownership_not_allowed(status):
    with pytest.raises(ExecutionOwnershipNotAllowed) as raised:
        owner_claim_needs_write(job_execution(status), 0, None, OWNER)
    assert raised.value.status is status


def test_a_claim_checks_the_version_first():
    with pytest.raises(StaleVersion):
        owner_claim_needs_write(job_execution(S.STARTED, version=1), 0, OTHER, OWNER)


@pytest.mark.parametrize("token", [b"", b"\x01" * 15, b"\x01" * 17, "01" * 16])
def test_an_owner_token_is_exactly_16_bytes(token):
    with pytest.raises(InvalidCharacters):
        validate_owner_token(token)
    assert validate_owner_token(OWNER) == OWNER


def test_token_comparison_is_the_full_token_and_nothing_recorded_never_matches():
    assert same_token(OWNER, OWNER)
    assert not same_token(OWNER, b"\x01" * 15 + b"\x02")
    assert not same_token(None, OWNER)


@pytest.mark.parametrize(
    ("claimant", "runtime_user", "another"),
    [(7, 8, True), (7, 7, False), (None, 8, False), (7, None, False), (None, None, False)],
)
def test_only_a_claim_by_another_runtime_user_is_anothers(claimant, runtime_user, another):
    assert claimed_by_another(claimant, runtime_user) is another


@pytest.mark.parametrize("status", list(S))
@pytest.mark.parametrize("owner_matches", [True, False])
@pytest.mark.parametrize("stop_requested", [True, False])
def test_only_the_owner_seeing_a_stop_on_starting_or_started_moves_to_stopping(
    status, owner_matches, stop_requested
):
    expected = owner_matches and stop_requested and status in (S.STARTING, S.STARTED)
    stops = observation_stops(status, owner_matches=owner_matches, stop_requested=stop_requested)
    assert stops is expected


def test_an_execution_view_shows_whether_an_owner_is_recorded_never_the_token():
    view = ExecutionView(job_execution(S.STARTED), owner_recorded=True)
    assert "token" not in {field.name for field in dataclasses.fields(view)}
    assert (view.id, view.status, view.version, view.stop_requested) == (31, S.STARTED, 0, False)
    assert ExecutionView(job_execution(S.STARTED), stop_requested_at=NOW).stop_requested


# ---------------------------------------------------------------------- evidence


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, False),
        ({"status": S.UNKNOWN}, True),
        ({"failure_category": FailureCategory.UNKNOWN_COMMIT}, True),
        ({"latest_step": LatestStep(7, S.UNKNOWN, 4, None)}, True),
        ({"latest_step": None}, False),
        ({"failure_category": FailureCategory.TIMEOUT}, False),
    ],
)
def test_the_unknown_commit_marker(changes, expected):
    assert evidence(**changes).unknown_commit is expected


def test_inactivity_counts_from_the_latest_activity_or_step_write():
    assert evidence().inactivity(NOW) == 16 * MINUTE
    later_step = evidence(newest_step_write_at=NOW - 2 * MINUTE)
    assert later_step.inactivity(NOW) == 2 * MINUTE
    assert evidence(newest_step_write_at=None).inactivity(NOW) == 16 * MINUTE


def test_inactivity_is_never_negative():
    assert evidence().inactivity(NOW - 60 * MINUTE) == timedelta(0)


def test_a_checkpoint_is_described_by_schema_version_and_stored_size():
    stored = StoredState.of(StateEnvelope("reader.position", 2, {"offset": 4}))
    described = CheckpointEvidence.from_stored(stored.text, stored.checksum)
    assert described == CheckpointEvidence(
        "reader.position", 2, len(stored.text.encode("utf-8")), True
    )


@pytest.mark.parametrize(
    ("text", "checksum"),
    [
        ('{"payload":{},"schema":"s","schema_version":1}', "0" * 64),
        ("not json", sha256_hex(b"not json")),
        ("{}", None),
    ],
)
def test_a_checkpoint_that_does_not_verify_is_evidence_not_an_error(text, checksum):
    described = CheckpointEvidence.from_stored(text, checksum)
    assert described == CheckpointEvidence(None, None, len(text.encode()), False)


def test_instants_are_rfc3339_utc_with_milliseconds():
    assert instant_text(at(1.2345)) == "1970-01-01T00:00:01.234Z"
    assert instant_text(None) is None


# ------------------------------------------------------------------------ digest


def test_the_digest_is_sha256_of_the_documented_canonical_encoding():
    item = evidence(stop_requested_at=NOW - MINUTE)
    encoded = {
        "v": EVIDENCE_DIGEST_VERSION,
        "job_execution_id": 31,
        "status": "STARTED",
        "attempt": 1,
        "version": 3,
        "owner_recorded": True,
        "last_activity_at": "1970-01-01T02:30:40.000Z",
        "last_observed_at": "1970-01-01T02:30:40.000Z",
        "newest_step_write_at": "1970-01-01T02:26:40.000Z",
        "stop_requested_at": "1970-01-01T02:45:40.000Z",
        "latest_step": {
            "id": 7,
            "status": "STARTED",
            "version": 4,
            "checkpoint": {
                "schema": "reader.position",
                "schema_version": 1,
                "size": 80,
                "intact": True,
            },
        },
        "markers": {
            "unknown_commit": False,
            "completed_partition": False,
            "committed_flow_decision": False,
        },
    }
    assert item.encoded() == encoded
    assert item.digest() == sha256_hex(canonical_bytes(encoded))
    assert re.fullmatch(r"[0-9a-f]{64}", item.digest())


def test_the_digest_excludes_the_clock_and_the_inactivity():
    early = proposal(now=NOW)
    late = proposal(now=NOW + 60 * MINUTE)
    assert early.inactive_for != late.inactive_for
    assert early.evidence_digest == late.evidence_digest
    other_threshold = proposal(stale_after=MINUTE)
    assert other_threshold.evidence_digest == early.evidence_digest


@pytest.mark.parametrize(
    "changes",
    [
        {"job_execution_id": 32},
        {"status": S.STOPPING},
        {"attempt": 2},
        {"version": 4},
        {"owner_recorded": False},
        {"last_activity_at": NOW - 15 * MINUTE},
        {"last_observed_at": None},
        {"newest_step_write_at": NOW - 19 * MINUTE},
        {"stop_requested_at": NOW},
        {"latest_step": None},
        {"latest_step": LatestStep(8, S.STARTED, 4, None)},
        {"latest_step": LatestStep(7, S.COMPLETED, 4, None)},
        {"latest_step": LatestStep(7, S.STARTED, 5, None)},
        {"latest_step": LatestStep(7, S.STARTED, 4, CheckpointEvidence("other", 1, 80, True))},
        {
            "latest_step": LatestStep(
                7, S.STARTED, 4, CheckpointEvidence("reader.position", 1, 81, True)
            )
        },
        {"failure_category": FailureCategory.UNKNOWN_COMMIT},
        {"completed_partition": True},
        {"committed_flow_decision": True},
    ],
    ids=lambda changes: next(iter(changes)),
)
def test_any_change_of_durable_evidence_changes_the_digest(changes):
    assert evidence(**changes).digest() != evidence().digest()


# ---------------------------------------------------------------------- proposal


def test_unknown_is_always_eligible_and_flagged_unknown_commit():
    fresh = proposal(S.UNKNOWN, last_activity_at=NOW, newest_step_write_at=None)
    assert fresh.eligible
    assert fresh.reason_code is None
    assert fresh.unknown_commit
    assert default_failure_category(fresh) is FailureCategory.UNKNOWN_COMMIT


@pytest.mark.parametrize("status", ACTIVE)
def test_an_unowned_active_execution_inactive_longer_than_the_threshold_is_eligible(status):
    stale = proposal(status, owner_recorded=False)
    assert (stale.eligible, stale.reason_code) == (True, None)
    assert (stale.inactive_for, stale.threshold) == (16 * MINUTE, DEFAULT_STALE_AFTER)
    assert (stale.eligibility, stale.rule) == (Eligibility.INACTIVE, "inactivity")
    assert stale.lease_expires_at is None
    assert stale.version == 3
    assert stale.job_execution_id == 31
    assert default_failure_category(stale) is FailureCategory.STALE_RECOVERED


@pytest.mark.parametrize("status", ACTIVE)
@pytest.mark.parametrize("inactive", [MINUTE, 15 * MINUTE])
def test_an_unowned_active_execution_inactive_up_to_the_threshold_is_not_stale(status, inactive):
    fresh = proposal(
        status, owner_recorded=False, last_activity_at=NOW - inactive, newest_step_write_at=None
    )
    assert (fresh.eligible, fresh.reason_code) == (False, "execution_not_stale")
    assert fresh.eligibility is None


# ---------------------------------------------------- owner leases (contract §2.5.3)


@pytest.mark.parametrize("status", ACTIVE)
def test_an_owned_execution_is_eligible_as_soon_as_its_lease_expired(status):
    """The lease expires TTL after the owner's latest activity: a minute and a
    millisecond of silence with a 60 s TTL is enough, 15 minutes are not needed."""
    silent = NOW - MINUTE - timedelta(milliseconds=1)
    expired = proposal(status, last_activity_at=silent, newest_step_write_at=None)
    assert (expired.eligible, expired.reason_code) == (True, None)
    assert (expired.eligibility, expired.rule) == (Eligibility.LEASE_EXPIRED, "lease")
    assert (expired.threshold, expired.lease_ttl) == (DEFAULT_LEASE_TTL, DEFAULT_LEASE_TTL)
    assert expired.lease_expires_at == silent + DEFAULT_LEASE_TTL


@pytest.mark.parametrize("inactive", [timedelta(0), timedelta(seconds=59), MINUTE])
def test_an_owned_execution_within_its_lease_is_not_stale(inactive):
    held = proposal(S.STARTED, last_activity_at=NOW - inactive, newest_step_write_at=None)
    assert (held.eligible, held.reason_code, held.eligibility) == (
        False,
        "execution_not_stale",
        None,
    )
    assert held.lease_expires_at == NOW - inactive + DEFAULT_LEASE_TTL


def test_the_lease_counts_from_the_newest_step_write_too():
    held = proposal(
        S.STARTED, last_activity_at=NOW - 10 * MINUTE, newest_step_write_at=NOW - 30 * SECOND
    )
    assert held.reason_code == "execution_not_stale"
    assert held.lease_expires_at == NOW + 30 * SECOND


def test_the_lease_ttl_is_the_settings_not_the_stale_threshold():
    short = propose_recovery(
        evidence(S.STARTED, last_activity_at=NOW - 10 * SECOND, newest_step_write_at=None),
        now=NOW,
        stale_after=DEFAULT_STALE_AFTER,
        lease_ttl=5 * SECOND,
    )
    assert (short.eligibility, short.threshold) == (Eligibility.LEASE_EXPIRED, 5 * SECOND)


@pytest.mark.parametrize("status", [S.UNKNOWN, *sorted(FINISHED)])
def test_an_execution_that_is_not_active_holds_no_lease(status):
    assert proposal(status).lease_expires_at is None
    assert proposal(status).rule is None


def test_unknown_is_eligible_as_an_unknown_status_whatever_its_lease():
    unknown = proposal(S.UNKNOWN, last_activity_at=NOW, newest_step_write_at=None)
    assert unknown.eligibility is Eligibility.UNKNOWN_STATUS


@pytest.mark.parametrize(
    "ttl", [timedelta(seconds=4), timedelta(milliseconds=4999), timedelta(hours=24, seconds=1)]
)
def test_the_lease_ttl_is_bounded_to_five_seconds_through_24_hours(ttl):
    with pytest.raises(ValueError, match="between 5 seconds and 24 hours"):
        validate_lease_ttl(ttl)
    assert validate_lease_ttl(5 * SECOND) == 5 * SECOND
    assert validate_lease_ttl(timedelta(hours=24)) == timedelta(hours=24)


def test_a_view_derives_its_lease_from_its_activity():
    view = ExecutionView(
        execution=job_execution(S.STARTED),
        owner_recorded=True,
        last_activity_at=NOW - 10 * SECOND,
        newest_step_write_at=NOW - 5 * SECOND,
    )
    assert view.lease_expires_at(DEFAULT_LEASE_TTL) == NOW + 55 * SECOND
    unowned = dataclasses.replace(view, owner_recorded=False)
    assert unowned.lease_expires_at(DEFAULT_LEASE_TTL) is None


def test_a_recent_step_write_keeps_an_execution_fresh():
    fresh = proposal(S.STARTED, newest_step_write_at=NOW - MINUTE)
    assert fresh.reason_code == "execution_not_stale"


@pytest.mark.parametrize("status", sorted(FINISHED))
def test_a_finished_execution_is_not_recoverable(status):
    finished = proposal(status)
    assert (finished.eligible, finished.reason_code) == (False, "recovery_not_allowed")


@pytest.mark.parametrize("threshold", [timedelta(seconds=59), timedelta(hours=24, seconds=1)])
def test_the_threshold_is_bounded_to_one_minute_through_24_hours(threshold):
    with pytest.raises(ValueError, match="between 1 minute and 24 hours"):
        proposal(stale_after=threshold)
    assert validate_stale_after(MINUTE) == MINUTE
    assert validate_stale_after(timedelta(hours=24)) == timedelta(hours=24)


# ---------------------------------------------------------------- check order


def test_an_eligible_matching_recovery_passes_every_check():
    stale = proposal()
    check(stale)
    check(stale, digest=stale.evidence_digest.upper())
    check(stale, disposition=D.ABANDON)


def test_stale_version_is_checked_first():
    finished = proposal(S.COMPLETED)
    with pytest.raises(StaleVersion) as raised:
        check(finished, version=2, digest="0" * 64)
    assert (raised.value.expected, raised.value.actual) == (2, 3)


def test_recovery_not_allowed_comes_before_staleness_and_digest():
    with pytest.raises(RecoveryNotAllowed) as raised:
        check(proposal(S.COMPLETED), digest="0" * 64)
    assert (raised.value.id, raised.value.status) == (31, S.COMPLETED)


def test_execution_not_stale_comes_before_the_digest_and_carries_the_seconds():
    fresh = proposal(
        S.STARTED,
        owner_recorded=False,
        last_activity_at=NOW - 90 * SECOND,
        newest_step_write_at=None,
    )
    with pytest.raises(ExecutionNotStale) as raised:
        check(fresh, digest="0" * 64)
    assert (raised.value.id, raised.value.inactive_seconds, raised.value.threshold_seconds) == (
        31,
        90,
        900,
    )
    assert raised.value.lease_expires_at is None


def test_execution_not_stale_of_an_owned_execution_names_the_lease_expiry():
    held = proposal(S.STARTED, last_activity_at=NOW - 20 * SECOND, newest_step_write_at=None)
    with pytest.raises(ExecutionNotStale) as raised:
        check(held)
    assert (raised.value.inactive_seconds, raised.value.threshold_seconds) == (20, 60)
    assert raised.value.lease_expires_at == instant_text(NOW + 40 * SECOND)
    assert "lease runs until" in raised.value.message
    assert "override" in raised.value.message


def test_an_override_lets_an_operator_recover_before_the_lease_expires():
    held = proposal(S.STARTED, last_activity_at=NOW - 20 * SECOND, newest_step_write_at=None)
    assert check(held, override=True) is Eligibility.OPERATOR_OVERRIDE


def test_an_override_of_an_eligible_execution_records_the_rule_that_allowed_it():
    assert check(proposal(S.STARTED), override=True) is Eligibility.LEASE_EXPIRED
    assert check(proposal(S.STARTED, owner_recorded=False)) is Eligibility.INACTIVE


@pytest.mark.parametrize("status", sorted(FINISHED))
def test_an_override_never_recovers_a_finished_execution(status):
    with pytest.raises(RecoveryNotAllowed):
        check(proposal(status), override=True)


def test_an_override_still_needs_the_evidence_the_operator_saw():
    held = proposal(S.STARTED, last_activity_at=NOW - 20 * SECOND, newest_step_write_at=None)
    with pytest.raises(RecoveryEvidenceStale):
        check(held, digest="0" * 64, override=True)


def test_recovery_evidence_stale_when_the_digest_differs():
    stale = proposal(S.UNKNOWN)
    with pytest.raises(RecoveryEvidenceStale) as raised:
        check(stale, digest=evidence(S.UNKNOWN, version=2).digest(), reason="WORKER_LOST")
    assert raised.value.id == 31


def test_mark_failed_of_an_unknown_commit_needs_unknown_effect():
    unknown = proposal(S.UNKNOWN)
    with pytest.raises(UnresolvedRecoveryRequired) as raised:
        check(unknown, reason="COMMIT_INSPECTED_NOT_DURABLE")
    assert raised.value.id == 31
    check(unknown, reason="UNKNOWN_EFFECT")
    check(unknown, disposition=D.ABANDON, reason="ORPHAN_CONFIRMED")


def test_a_stale_step_marked_unknown_also_needs_unknown_effect():
    stale = proposal(S.STARTED, latest_step=LatestStep(7, S.UNKNOWN, 4, None))
    with pytest.raises(UnresolvedRecoveryRequired):
        check(stale, reason="PROCESS_KILL_INSPECTED")
    check(stale, reason="UNKNOWN_EFFECT")


def test_without_the_unknown_commit_marker_any_reason_marks_failed():
    check(proposal(S.STARTED), reason="PROCESS_KILL_INSPECTED")


@pytest.mark.parametrize(
    ("disposition", "unknown_commit", "reason", "required"),
    [
        (RecoveryDisposition.MARK_FAILED, True, "WORKER_LOST", True),
        (RecoveryDisposition.MARK_FAILED, True, "UNKNOWN_EFFECT", False),
        (RecoveryDisposition.MARK_FAILED, False, "WORKER_LOST", False),
        (RecoveryDisposition.ABANDON, True, "WORKER_LOST", False),
    ],
)
def test_the_unknown_effect_rule_is_one_predicate(disposition, unknown_commit, reason, required):
    """Issue 27: the service and the console's form read the same rule."""
    from oxide_batch.domain.evidence import requires_unknown_effect

    assert requires_unknown_effect(disposition, unknown_commit, reason) is required
