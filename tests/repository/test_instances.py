"""Selecting and finding job instances (contract scenarios 1.10–1.13): the port's
behavioural contract, on the Django adapter and the in-memory fake (``contract``)."""

from __future__ import annotations

import pytest

from oxide_batch.domain import JobInstanceKey, JobParameter, ParameterType
from oxide_batch.domain.errors import IdentifierOutOfRange, JobInstanceNotFound, ZeroIdentifier
from tests.helpers import key

pytestmark = pytest.mark.contract


def test_first_selection_creates_and_committed_instance_is_findable_by_key(repo):
    with repo.begin() as uow:
        selection = uow.select_or_create_job_instance(key())
        uow.commit()
    with repo.begin() as uow:
        found = uow.find_job_instance(key())
    assert selection.created is True
    assert found is not None
    assert found.id == selection.instance.id
    assert found.key == key()


def test_reselecting_an_existing_key_returns_the_original_instance(repo):
    with repo.begin() as uow:
        first = uow.select_or_create_job_instance(key())
        uow.commit()
    with repo.begin() as uow:
        second = uow.select_or_create_job_instance(key())
        uow.commit()
    assert second.created is False
    assert second.instance == first.instance


def test_rolled_back_instance_is_never_visible(repo):
    with repo.begin() as uow:
        uow.select_or_create_job_instance(key())
        uow.rollback()
    with repo.begin() as uow:
        assert uow.find_job_instance(key()) is None


def test_leaving_the_block_without_commit_rolls_back(repo):
    with repo.begin() as uow:
        uow.select_or_create_job_instance(key())
    with repo.begin() as uow:
        assert uow.find_job_instance(key()) is None


def test_an_exception_inside_the_block_rolls_back(repo):
    def fail_inside_a_unit_of_work():
        with repo.begin() as uow:
            uow.select_or_create_job_instance(key())
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_inside_a_unit_of_work()
    with repo.begin() as uow:
        assert uow.find_job_instance(key()) is None


def test_typed_parameters_round_trip_including_u64_and_unicode(repo, clock):
    golden = JobInstanceKey.of(
        "golden_job",
        [
            JobParameter("region", ParameterType.STRING, "서울"),
            JobParameter("limit", ParameterType.U64, 2**64 - 1),
            JobParameter("count", ParameterType.I64, -(2**63)),
            JobParameter("active", ParameterType.BOOL, True),
        ],
    )
    with repo.begin() as uow:
        created = uow.select_or_create_job_instance(golden).instance
        uow.commit()
    with repo.begin() as uow:
        loaded = uow.get_job_instance(created.id)
    assert loaded.key == golden
    assert loaded.key.digest == golden.digest
    assert loaded.created_at == clock.now()


def test_a_key_without_identifying_parameters_is_a_valid_instance(repo):
    bare = JobInstanceKey.of("nightly")
    with repo.begin() as uow:
        selection = uow.select_or_create_job_instance(bare)
        uow.commit()
    assert selection.created
    assert selection.instance.key.parameters == ()


def test_non_identifying_parameters_select_the_same_instance(repo):
    noisy = JobInstanceKey.of(
        "import_job",
        [
            JobParameter("business_date", ParameterType.STRING, "2026-07-29"),
            JobParameter("request_id", ParameterType.STRING, "r-1", identifying=False),
        ],
    )
    with repo.begin() as uow:
        first = uow.select_or_create_job_instance(key())
        second = uow.select_or_create_job_instance(noisy)
        uow.commit()
    assert second.created is False
    assert second.instance.id == first.instance.id


def test_get_job_instance_of_a_missing_id_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobInstanceNotFound) as error:
        uow.get_job_instance(987654)
    assert error.value.id == 987654


@pytest.mark.adapter
@pytest.mark.parametrize(
    ("value", "error"), [(0, ZeroIdentifier), (-3, ZeroIdentifier), (2**63, IdentifierOutOfRange)]
)
def test_identifiers_outside_one_to_bigint_are_refused_before_any_query(
    repo, value, error, django_assert_num_queries
):
    with repo.begin() as uow, django_assert_num_queries(0), pytest.raises(error):
        uow.get_job_instance(value)
