"""The served OpenAPI document speaks to the API's users only: no description
of an operation, a parameter, a response, a component or a member talks about
how the server is built (its modules, classes, database, framework or
performance). Those notes belong in the code's comments and in docs/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.standalone

IMPLEMENTATION = re.compile(
    r"\bCPU\b|\bperformance\b|docs/|\bcontract\b|§|(?<!manage)\.py\b|oxide_batch[./]"
    r"|\bqueryset|\bclass(es)?\b|\bORM\b|\bSQL\b|serializer|\bDRF\b|django|spectacular"
    r"|postgres|sqlite|\bthreads?\b|deep cop|docstring|\bmodule|__\w+__|:(func|class|meth):"
    r"|\block(s|ed)?\b|\brow write",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def document(served_document: dict[str, Any]) -> dict[str, Any]:
    return served_document


def descriptions(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every ``description`` and ``summary`` in the document, with its place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "summary") and isinstance(value, str):
                yield f"{where}/{key}", value
            else:
                yield from descriptions(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from descriptions(value, f"{where}[{index}]")


def test_the_walk_reaches_operations_members_and_components(document: dict[str, Any]) -> None:
    places = [where for where, _ in descriptions(document)]
    operations = [where for where in places if where.startswith("/paths/")]
    assert any(where.endswith("/post/description") for where in operations)
    assert "/components/schemas/Execution/description" in places
    assert "/components/schemas/CountsRequest/properties/committed/description" in places
    assert len(places) > 300


def test_no_description_speaks_of_the_implementation(document: dict[str, Any]) -> None:
    found = {
        where: match.group(0)
        for where, text in descriptions(document)
        if (match := IMPLEMENTATION.search(text))
    }
    assert found == {}


def test_no_component_inherits_a_base_class_description(document: dict[str, Any]) -> None:
    # A serializer without a docstring of its own is documented without one
    # (the bases' docstrings are for the code's readers).
    for name, component in document["components"]["schemas"].items():
        text = component.get("description", "")
        assert "Refuses members it does not declare" not in text, name
        assert "Read-only rendering" not in text, name


@pytest.mark.parametrize(
    "text",
    [
        "for a chunk commit that copy was a tenth of the request's CPU",
        "(docs/performance.md)",
        "see oxide_batch/api/schema.py",
        "Its fields are built once per class",
        "the owner's lease (contract §2.5.3)",
        "DRF gives every serializer instance a deep copy",
        "The proposal is recomputed under the execution lock",
    ],
)
def test_the_words_it_looks_for_are_found(text: str) -> None:
    assert IMPLEMENTATION.search(text)


def test_a_users_words_pass() -> None:
    text = "An API token made by `manage.py batch_token create`; RFC 3339 instants."
    assert IMPLEMENTATION.search(text) is None
