"""Fixtures the repository's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oxide_batch.repository import hooks


@pytest.fixture
def seen() -> Iterator[list[hooks.OperationEvent]]:
    """What the repository's observers are told while the test runs, in order."""
    observed: list[hooks.OperationEvent] = []

    def observe(event: hooks.OperationEvent) -> None:
        observed.append(event)

    hooks.register(observe)
    yield observed
    hooks.unregister(observe)
