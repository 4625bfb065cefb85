"""The repository capability descriptor (contract scenario 17.1)."""

from __future__ import annotations

import pytest

from oxide_batch.domain import RepositoryCapability, RepositoryDescriptor

C = RepositoryCapability
ALL_CAPABILITIES = list(RepositoryCapability)


def test_there_are_exactly_the_six_capabilities_of_the_seed():
    assert {capability.value for capability in ALL_CAPABILITIES} == {
        "operator_requests",
        "stop_requests",
        "execution_ownership",
        "instance_holds",
        "retention_purge",
        "step_partitions",
    }


def test_a_descriptor_is_version_one_and_carries_its_schema_version():
    descriptor = RepositoryDescriptor.of(3, ALL_CAPABILITIES)
    assert descriptor.descriptor_version == 1
    assert descriptor.schema_version == 3


@pytest.mark.parametrize("capability", ALL_CAPABILITIES, ids=str)
def test_a_descriptor_declaring_all_six_declares_each(capability):
    descriptor = RepositoryDescriptor.of(3, ALL_CAPABILITIES)
    assert descriptor.declares(capability) is True


@pytest.mark.parametrize("omitted", ALL_CAPABILITIES, ids=str)
def test_omitting_one_capability_undeclares_only_it(omitted):
    descriptor = RepositoryDescriptor.of(3, [c for c in ALL_CAPABILITIES if c is not omitted])
    assert descriptor.declares(omitted) is False
    assert all(descriptor.declares(other) for other in ALL_CAPABILITIES if other is not omitted)


@pytest.mark.parametrize("capability", ALL_CAPABILITIES, ids=str)
def test_an_empty_descriptor_declares_nothing(capability):
    """Declaring nothing is the safe claim: negotiation treats it as unavailable."""
    assert RepositoryDescriptor(schema_version=3).declares(capability) is False
