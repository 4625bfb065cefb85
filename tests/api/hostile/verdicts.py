"""The verdict on each hostile request: a problem+json with a ``code`` and an
expected status, and nothing written (a fingerprint of every batch table before
and after); then the valid request itself must succeed."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, cast

from django.apps import apps
from django.db import connection, models
from rest_framework.test import APIClient

from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from tests.api.hostile.recipes import valid_request
from tests.api.hostile.schema import Operation
from tests.api.hostile.world import Target, World
from tests.api.support import url


@cache
def _fingerprint_sql() -> str:
    """One statement: per batch table its row count, sum of versions, latest of
    every instant and count of every nullable column (a write moves one of them)."""
    quote_name = connection.ops.quote_name
    parts = []
    for model in apps.get_app_config("oxide_batch").get_models():
        table = quote_name(model._meta.db_table)
        aggregates = ["COUNT(*)"]
        for column in model._meta.concrete_fields:
            name = quote_name(column.column)
            if column.name == "version":
                aggregates.append(f"SUM({name})")
            elif isinstance(column, models.DateTimeField):
                aggregates.append(f"MAX({name})")
            elif column.null:
                aggregates.append(f"COUNT({name})")
        parts += [f"(SELECT {aggregate} FROM {table})" for aggregate in aggregates]
    return "SELECT " + ", ".join(parts)


def fingerprint() -> tuple[Any, ...]:
    with connection.cursor() as cursor:
        cursor.execute(_fingerprint_sql())
        return tuple(cursor.fetchone())


def snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every batch table (the deep check, once per operation)."""
    return {
        model._meta.db_table: list(model._default_manager.order_by("pk").values_list())
        for model in apps.get_app_config("oxide_batch").get_models()
    }


@dataclass
class Attack:
    """One hostile request and the statuses its answer may have."""

    label: str
    method: str
    path: str
    data: bytes = b""
    content_type: str = "application/json"
    expect: tuple[int, ...] = (400,)


@dataclass
class Verdicts:
    """Bad answers collected over one operation, reported together."""

    client: APIClient
    bad: list[str] = field(default_factory=list)
    sent: int = 0
    last: Any = None

    def send(self, attack: Attack) -> Any:
        before = fingerprint()
        response = self.client.generic(
            attack.method,
            url(attack.path) if not attack.path.startswith("/") else attack.path,
            cast(Any, attack.data),
            content_type=attack.content_type,
        )
        self.sent += 1
        self.last = response
        problem = self._problem(response)
        success = response.status_code < 300
        if response.status_code not in attack.expect or (problem is None and not success):
            shown = problem if problem is not None else response.content[:300]
            self.bad.append(
                f"{attack.label}: {response.status_code} (expected {attack.expect}) {shown!r}"
            )
        elif fingerprint() != before:
            self.bad.append(f"{attack.label}: {response.status_code} but something was written")
        return response

    @staticmethod
    def _problem(response: Any) -> dict[str, Any] | None:
        if not response.get("Content-Type", "").startswith(PROBLEM_CONTENT_TYPE):
            return None
        try:
            body = json.loads(response.content)
        except ValueError:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            return None
        if body.get("status") != response.status_code:
            return None
        return body

    def assert_none(self) -> None:
        assert not self.bad, "\n".join(self.bad[:40]) + f"\n({len(self.bad)} of {self.sent})"


def encode(value: Any) -> bytes:
    # ensure_ascii: a lone surrogate travels as its \\uXXXX escape (it has no UTF-8).
    return json.dumps(value, ensure_ascii=True).encode("ascii")


def send(world: World, op: Operation, target: Target, body: Any) -> Any:
    """``body`` as JSON, by the operation's method, to the target's path."""
    return world.client.generic(
        op.method, url(target.path), cast(Any, encode(body)), content_type="application/json"
    )


def attack_then_succeed(world: World, op: Operation, attacks: Callable[[Target], Any]) -> Verdicts:
    """Send every attack on the operation's valid request, check that nothing was
    written at all, then send the valid request: it must succeed (so each refusal
    was the hostile part's doing)."""
    target = valid_request(world, op)
    verdicts = Verdicts(world.client)
    before = snapshot()
    for attack in attacks(target):
        verdicts.send(attack)
    verdicts.assert_none()
    assert snapshot() == before
    if target.ok:
        response = send(world, op, target, target.body)
        assert response.status_code in target.ok, (response.status_code, response.content[:500])
    return verdicts
