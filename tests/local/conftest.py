"""Fixtures of the local runtime's tests: the records' table and a runtime user."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from oxide_batch.roles import RUNTIME, ensure_roles
from tests.local.records import Record, table


@pytest.fixture
def records(transactional_db: None) -> Iterator[type[Record]]:
    with table() as model:
        yield model


@pytest.fixture
def importer(transactional_db: None) -> str:
    """A runtime user (the ``batch-runtime`` group), committed."""
    ensure_roles()  # transactional tests flush the groups
    user = get_user_model().objects.create_user("importer")
    user.groups.add(Group.objects.get(name=RUNTIME))
    return "importer"
