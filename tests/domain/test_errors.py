"""The typed error hierarchy: one stable snake_case code per seed variant (contract §4.6;
the contract scenarios' Appendix C)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing
from pathlib import Path

import pytest

from oxide_batch.domain import BatchStatus, RepositoryCapability
from oxide_batch.domain import errors as errors_module
from oxide_batch.domain.errors import (
    DomainError,
    LifecycleError,
    OxideBatchError,
    RepositoryError,
)
from tests.helpers import error_field_value

# The seeds are another project's source and stay out of this repository: they
# sit beside it, at ../shared/seeds from the repository's root, where CI has them.
SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
SEED_REPOSITORY = SEEDS / "000_81c76e746c10918c.txt"


def seeds_absent(what: Path) -> None:
    """Skip without the seeds — but fail in CI (``CI`` set), which has them."""
    message = f"{what} is absent (the seeds belong at ../shared/seeds beside the repository)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


WRAPPER_VARIANTS = {"Domain", "Identifier", "Lifecycle"}
# Seed variants of the injected identifier source (IdGenerator), which is not
# reproduced: the database assigns every identifier, so neither can happen.
NOT_REPRODUCED = {"DuplicateIdentifier", "AttemptIdentifierReused"}
SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")

LIFECYCLE_VARIANTS = [
    "StaleVersion",
    "IllegalTransition",
    "RestartRequiresNewAttempt",
    "NotRestartable",
    "FailedTransitionMissingFailure",
    "InvalidTransitionTime",
    "CountExhausted",
    "VersionExhausted",
]
DOMAIN_VARIANTS = [
    "EmptyName",
    "NameTooLong",
    "NameHasSurroundingWhitespace",
    "NameContainsControl",
    "ZeroIdentifier",
    "DuplicateParameter",
    "ParameterStringTooLong",
    "InvalidTimestampOrder",
    "ActiveExecutionHasEndTime",
    "FinishedExecutionMissingEndTime",
    "FailedExecutionMissingFailure",
]


def snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _all_subclasses(cls: type[OxideBatchError]) -> list[type[OxideBatchError]]:
    found: list[type[OxideBatchError]] = []
    for subclass in cls.__subclasses__():
        found.append(subclass)
        found.extend(_all_subclasses(subclass))
    return found


CONCRETE_ERRORS = sorted(
    {cls for cls in _all_subclasses(OxideBatchError) if "code" in vars(cls)},
    key=lambda cls: cls.__name__,
)
CLASSES_BY_CODE = {cls.code: cls for cls in CONCRETE_ERRORS}


def _dummy(hint: object) -> object:
    return error_field_value(hint)


def _instantiate(cls: type[OxideBatchError]) -> OxideBatchError:
    hints = typing.get_type_hints(cls, vars(errors_module))
    values = {field.name: _dummy(hints[field.name]) for field in dataclasses.fields(cls)}
    return cls(**values)


def _seed_repository_variants() -> list[str]:
    if not SEED_REPOSITORY.exists():
        seeds_absent(SEED_REPOSITORY)
    lines = SEED_REPOSITORY.read_text(encoding="utf-8").splitlines()
    start = lines.index("pub enum RepositoryError {")
    end = lines.index("}", start)
    variant = re.compile(r"^ {4}([A-Z][A-Za-z0-9]*)\b")
    names = [match[1] for line in lines[start + 1 : end] if (match := variant.match(line))]
    return [name for name in names if name not in WRAPPER_VARIANTS | NOT_REPRODUCED]


# ------------------------------------------------------------- every concrete class


def test_the_hierarchy_has_concrete_errors_to_check():
    assert len(CONCRETE_ERRORS) >= 60


def test_every_error_code_is_unique():
    codes = [cls.code for cls in CONCRETE_ERRORS]
    duplicates = sorted({code for code in codes if codes.count(code) > 1})
    assert duplicates == []


@pytest.mark.parametrize("cls", CONCRETE_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_code_is_snake_case(cls):
    assert SNAKE_CASE.fullmatch(cls.code), cls.code


@pytest.mark.parametrize("cls", CONCRETE_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_renders_its_message_and_json_ready_details(cls):
    error = _instantiate(cls)
    assert isinstance(error.message, str)
    assert error.message
    assert str(error) == error.message
    assert error.args == (error.message,)
    details = error.details()
    assert set(details) == {field.name for field in dataclasses.fields(cls)}
    assert json.loads(json.dumps(details)) == details


@pytest.mark.parametrize("cls", CONCRETE_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_belongs_to_one_family(cls):
    families = [
        family
        for family in (DomainError, LifecycleError, RepositoryError)
        if issubclass(cls, family)
    ]
    assert len(families) == 1


def test_details_carry_enums_as_their_durable_codes():
    error = errors_module.ExecutionAlreadyActive(
        instance_id=30, execution_id=31, status=BatchStatus.UNKNOWN
    )
    assert error.details() == {"instance_id": 30, "execution_id": 31, "status": "UNKNOWN"}
    capability = errors_module.UnsupportedCapability(
        capability=RepositoryCapability.STEP_PARTITIONS
    )
    assert capability.details() == {"capability": "step_partitions"}
    assert "step_partitions" in str(capability)


def test_a_stale_version_message_names_both_versions():
    error = errors_module.StaleVersion(expected=0, actual=1)
    assert (error.code, error.details()) == ("stale_version", {"expected": 0, "actual": 1})
    assert "0" in str(error)
    assert "1" in str(error)


# --------------------------------------------------------------- seed variant names


def test_the_seed_repository_error_block_parses_to_its_variants():
    variants = _seed_repository_variants()
    assert len(variants) >= 40
    assert {"SchemaUninitialized", "CompletedInstance", "Unavailable"} <= set(variants)
    assert not WRAPPER_VARIANTS & set(variants)


def test_every_seed_repository_error_variant_has_a_class_with_its_code():
    missing = [
        name for name in _seed_repository_variants() if snake_case(name) not in CLASSES_BY_CODE
    ]
    assert missing == []


def test_every_seed_repository_error_variant_is_a_repository_error():
    wrong = [
        name
        for name in _seed_repository_variants()
        if snake_case(name) in CLASSES_BY_CODE
        and not issubclass(CLASSES_BY_CODE[snake_case(name)], RepositoryError)
    ]
    assert wrong == []


@pytest.mark.parametrize("variant", sorted(NOT_REPRODUCED))
def test_the_identifier_source_variants_are_not_reproduced(variant):
    assert snake_case(variant) not in CLASSES_BY_CODE
    assert not hasattr(errors_module, variant)
    seeds = sorted(SEED_REPOSITORY.parent.glob("*.txt"))
    if not seeds:
        seeds_absent(SEEDS)
    assert any(variant in seed.read_text(encoding="utf-8") for seed in seeds)


@pytest.mark.parametrize("variant", LIFECYCLE_VARIANTS)
def test_every_lifecycle_error_variant_has_a_lifecycle_error_class(variant):
    cls = CLASSES_BY_CODE.get(snake_case(variant))
    assert cls is not None
    assert issubclass(cls, LifecycleError)


@pytest.mark.parametrize("variant", DOMAIN_VARIANTS)
def test_every_domain_error_variant_has_a_domain_error_class(variant):
    cls = CLASSES_BY_CODE.get(snake_case(variant))
    assert cls is not None
    assert issubclass(cls, DomainError)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("StaleVersion", "stale_version"),
        ("NewerSchema", "newer_schema"),
        ("UnsupportedManifestVersion", "unsupported_manifest_version"),
        ("Unavailable", "unavailable"),
    ],
)
def test_snake_case_turns_a_variant_name_into_its_code(name, expected):
    assert snake_case(name) == expected
