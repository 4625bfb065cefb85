"""The repository capability descriptor (contract scenario 17.1)."""

from __future__ import annotations

import pytest

from oxide_batch.domain import RepositoryCapability, RepositoryDescriptor
from oxide_batch.domain.errors import UnsupportedCapability

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
def test_a_descriptor_declaring_all_six_satisfies_every_requirement(capability):
    descriptor = RepositoryDescriptor.of(3, ALL_CAPABILITIES)
    assert descriptor.declares(capability) is True
    assert descriptor.require(capability) is None


@pytest.mark.parametrize("omitted", ALL_CAPABILITIES, ids=str)
def test_omitting_one_capability_fails_only_its_requirement(omitted):
    descriptor = RepositoryDescriptor.of(3, [c for c in ALL_CAPABILITIES if c is not omitted])
    assert descriptor.declares(omitted) is False
    with pytest.raises(UnsupportedCapability) as caught:
        descriptor.require(omitted)
    assert caught.value.capability is omitted
    assert omitted.value in str(caught.value)
    for other in ALL_CAPABILITIES:
        if other is not omitted:
            assert descriptor.declares(other) is True
            descriptor.require(other)


@pytest.mark.parametrize("capability", ALL_CAPABILITIES, ids=str)
def test_an_empty_descriptor_fails_every_requirement(capability):
    descriptor = RepositoryDescriptor(schema_version=3)
    assert descriptor.declares(capability) is False
    with pytest.raises(UnsupportedCapability) as caught:
        descriptor.require(capability)
    assert caught.value.capability is capability
