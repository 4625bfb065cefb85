"""The in-memory fake (tests/fakes/) implements every Protocol of the repository
port, so a method added to the port without a fake implementation fails here —
and the contract tests cannot silently run on the Django adapter alone (issue 38)."""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import pytest

from oxide_batch.repository import port
from oxide_batch.repository.adapter import DjangoJobRepository, DjangoUnitOfWork
from oxide_batch.repository.clock import FixedClock
from tests.conftest import EPOCH
from tests.fakes import FakeJobRepository, FakeUnitOfWork

# The dunder methods of the port (the rest typing's Protocol machinery adds).
PORT_DUNDERS = frozenset({"__enter__", "__exit__"})


def port_protocols() -> list[type[Any]]:
    """Every Protocol class ``oxide_batch.repository.port`` defines (not imports)."""
    return [
        value
        for value in vars(port).values()
        if inspect.isclass(value)
        and value.__module__ == port.__name__
        and getattr(value, "_is_protocol", False)
    ]


def own_methods(protocol: type[Any]) -> dict[str, Any]:
    """The methods (and properties) a Protocol declares itself."""
    return {
        name: member
        for name, member in vars(protocol).items()
        if (callable(member) or isinstance(member, property))
        and (not name.startswith("_") or name in PORT_DUNDERS)
    }


# The fake's class for each Protocol that a unit of work does not implement.
IMPLEMENTERS: dict[str, type[Any]] = {
    "UnitOfWorkFactory": FakeJobRepository,
    "JobRepository": FakeJobRepository,
}
ADAPTER: dict[str, type[Any]] = {
    "UnitOfWorkFactory": DjangoJobRepository,
    "JobRepository": DjangoJobRepository,
}

CASES = [
    (protocol, name, member)
    for protocol in port_protocols()
    for name, member in own_methods(protocol).items()
]


def shape(function: Any) -> list[tuple[str, inspect._ParameterKind, bool]]:
    """A signature's parameters as a caller sees them: name, kind, has a default."""
    return [
        (p.name, p.kind, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
    ]


def incompatibilities(implementation: Any, declared: Any) -> list[str]:
    """How ``implementation`` fails to accept every call ``declared`` allows: the
    same positional parameters in order, every keyword one, a default wherever
    the port has one, and a default on any parameter of its own."""
    wanted, have = shape(declared), shape(implementation)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    wanted_positional = [p for p in wanted if p[1] in positional]
    have_positional = [p for p in have if p[1] in positional]
    problems = []
    for index, (name, kind, default) in enumerate(wanted_positional):
        found = have_positional[index] if index < len(have_positional) else None
        if found is None or found[:2] != (name, kind) or (default and not found[2]):
            problems.append(f"positional {name}: {found}")
    keywords = {p[0]: p for p in have if p[1] is inspect.Parameter.KEYWORD_ONLY}
    for name, _, default in (p for p in wanted if p[1] is inspect.Parameter.KEYWORD_ONLY):
        found = keywords.get(name)
        if found is None or (default and not found[2]):
            problems.append(f"keyword {name}: {found}")
    declared_names = {p[0] for p in wanted}
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    problems += [
        f"own parameter {name} without a default"
        for name, kind, default in have
        if name not in declared_names and kind not in variadic and not default
    ]
    return problems


def check(implementer: type[Any], protocol: type[Any], name: str, member: Any) -> None:
    implementation = inspect.getattr_static(implementer, name, None)
    if isinstance(member, property):
        # An attribute the instance sets (``self.clock``) or a property.
        assert implementation is not None or name in vars(make(implementer)), (
            f"{implementer.__name__} lacks {protocol.__name__}.{name}"
        )
        return
    assert implementation is not None, f"{implementer.__name__} lacks {protocol.__name__}.{name}"
    assert incompatibilities(implementation, member) == [], f"{protocol.__name__}.{name}"


def make(implementer: type[Any]) -> Any:
    if implementer is FakeJobRepository:
        return FakeJobRepository(FixedClock(EPOCH))
    return DjangoJobRepository(FixedClock(EPOCH))


def test_the_port_has_the_protocols_its_docstring_names() -> None:
    names = {protocol.__name__ for protocol in port_protocols()}
    assert {
        "Transaction",
        "Executions",
        "Control",
        "OperatorAudit",
        "AdminHistory",
        "Steps",
        "Definitions",
        "Flow",
        "Partitions",
        "Holds",
        "Purge",
        "UnitOfWork",
        "UnitOfWorkFactory",
        "JobRepository",
    } <= names
    # The whole port is the aggregates and nothing of its own: each method is
    # compared on the aggregate that declares it.
    aggregates = [base for base in port.UnitOfWork.__bases__ if base.__name__ != "Protocol"]
    assert {base.__name__ for base in aggregates} <= names
    assert own_methods(port.UnitOfWork) == {}


@pytest.mark.parametrize(
    ("protocol", "name", "member"),
    CASES,
    ids=[f"{protocol.__name__}.{name}" for protocol, name, _ in CASES],
)
def test_the_fake_implements_every_method_of_the_port(
    protocol: type[Any], name: str, member: Any
) -> None:
    """Each method of each Protocol exists on the fake with the same parameters
    (names, kinds, which have defaults) — what a caller typed against the port may pass."""
    check(IMPLEMENTERS.get(protocol.__name__, FakeUnitOfWork), protocol, name, member)


@pytest.mark.parametrize(
    ("protocol", "name", "member"),
    CASES,
    ids=[f"{protocol.__name__}.{name}" for protocol, name, _ in CASES],
)
def test_the_adapter_implements_every_method_of_the_port(
    protocol: type[Any], name: str, member: Any
) -> None:
    """The same comparison on the Django adapter, so both sides of every contract
    test answer the one port."""
    check(ADAPTER.get(protocol.__name__, DjangoUnitOfWork), protocol, name, member)


def test_a_method_missing_from_the_fake_is_found() -> None:
    """The comparison itself: a Protocol method the fake lacks, or one whose
    parameters it does not accept, fails the check."""

    class Extra(Protocol):
        def not_in_the_fake(self, job_execution_id: int) -> None: ...
        def commit(self, *, force: bool) -> None: ...
        def get_job_execution(self, job_execution_id: int, *, lock: bool = False) -> None: ...

    for name, member in own_methods(Extra).items():
        with pytest.raises(AssertionError):
            check(FakeUnitOfWork, Extra, name, member)


def test_the_fake_runs_as_each_protocol() -> None:
    """The fake's unit of work is usable where the port is (mypy checks the
    assignments typed as each Protocol in tests/fakes/__init__.py)."""
    repo = FakeJobRepository(FixedClock(EPOCH))
    factory: port.UnitOfWorkFactory[port.UnitOfWork] = repo
    whole: port.JobRepository = repo
    with factory.begin() as uow:
        as_definitions: port.Definitions = uow
        as_flow: port.Flow = uow
        as_partitions: port.Partitions = uow
        assert as_definitions.get_definition(repo.tables.definitions[1].definition.digest).id == 1
        assert as_flow.flow_decisions(1) == []
        with pytest.raises(Exception, match="step execution"):
            as_partitions.step_partition_plan(1)
    assert whole.descriptor().schema_version >= 1
