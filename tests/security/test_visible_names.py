"""Names cannot disguise themselves (contract §2 "Names", decision 201): job,
step and parameter names, exit codes, reason codes and token names refuse
Unicode format characters (Cf: bidi controls, zero-width characters, the BOM)
and line/paragraph separators (Zl, Zp) on every input path — a step beyond the
seed's ``is_control`` rule. Partition keys keep contract §2.4.1's rule."""

from __future__ import annotations

import io
import json
import sys
import unicodedata
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from oxide_batch import models
from oxide_batch.domain.errors import NameContainsInvisible
from oxide_batch.domain.names import (
    INVISIBLE_RANGES,
    NameKind,
    escape_invisible,
    validate_name,
    validate_new_name,
)
from oxide_batch.domain.partitions import validate_partition_key
from oxide_batch.management.commands import _cli
from tests.api.support import Runtime

# RIGHT-TO-LEFT OVERRIDE, ZERO WIDTH SPACE, BOM, LINE and PARAGRAPH SEPARATOR,
# SOFT HYPHEN, an astral format character (LANGUAGE TAG).
INVISIBLE = ["\u202e", "\u200b", "\ufeff", "\u2028", "\u2029", "\u00ad", "\U000e0001"]


def test_the_invisible_ranges_are_the_categories_cf_zl_zp() -> None:
    ranges: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)) in {"Cf", "Zl", "Zp"}:
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    assert tuple(ranges) == INVISIBLE_RANGES


@pytest.mark.parametrize("kind", list(NameKind))
@pytest.mark.parametrize("character", INVISIBLE)
def test_every_name_kind_refuses_an_invisible_character(kind: NameKind, character: str) -> None:
    with pytest.raises(NameContainsInvisible) as caught:
        validate_new_name(f"job{character}evil", kind)
    assert caught.value.code == "name_contains_invisible"
    assert caught.value.character_index == 3
    assert "invisible character at index 3" in caught.value.message


def test_visible_non_ascii_names_stay_valid() -> None:
    for name in ("서울_import", "café-load", "nächtlich", "job 1"):
        assert validate_new_name(name, NameKind.JOB) == name


def test_a_name_read_back_from_a_row_is_held_to_the_seed_rule_only() -> None:
    assert validate_name("job\u202eevil", NameKind.JOB) == "job\u202eevil"


def test_a_partition_key_keeps_its_own_rule() -> None:
    assert validate_partition_key("eu\u202ewest") == "eu\u202ewest"


def test_escape_invisible_writes_each_character_as_its_escape() -> None:
    assert escape_invisible("job\u202eevil\u200b\U000e0001") == "job\\u202eevil\\u200b\\U000e0001"
    assert escape_invisible("서울 café") == "서울 café"


def refused(response: Any, field: str, code: str) -> None:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_request", body
    assert field in json.dumps(body["errors"]), body
    assert code in json.dumps(body), body


@pytest.mark.parametrize("character", ["\u202e", "\u200b", "\u2028"])
def test_the_api_refuses_invisible_names_on_every_runtime_path(rt: Runtime, character: str) -> None:
    bad = f"job{character}evil"
    refused(rt.post("instances", {"job_name": bad}), "job_name", "name_contains_invisible")
    refused(
        rt.post("instances", {"job_name": "billing", "identifying_parameters": {bad: 1}}),
        "identifying_parameters",
        "name_contains_invisible",
    )
    refused(
        rt.post("launches", {"job_name": bad, "owner_token": "ab" * 16}),
        "job_name",
        "name_contains_invisible",
    )
    refused(
        rt.post(
            "definitions",
            {"job_name": bad, "revision": "1", "manifest": {"format": 1, "job": bad}},
        ),
        "job_name",
        "name_contains_invisible",
    )
    execution = rt.started("billing")
    refused(
        rt.post(f"executions/{execution['id']}/steps", {"step_name": bad}),
        "step_name",
        "name_contains_invisible",
    )
    step = rt.started_step(execution)
    refused(
        rt.post(
            f"steps/{step['id']}/exit-status",
            {"expected_version": step["version"], "exit_code": f"DO{character}NE"},
        ),
        "exit_code",
        "name_contains_invisible",
    )


def test_the_api_refuses_an_invisible_reason_code(rt: Runtime, operator: Runtime) -> None:
    instance, _ = rt.launch("billing")
    response = operator.put(
        f"instances/{instance['id']}/hold",
        {"reason_code": "LEGAL\u202eHOLD", "operation_id": "hold-1"},
    )
    refused(response, "reason_code", "invalid_characters")


@pytest.fixture
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: False)


@pytest.mark.django_db
@pytest.mark.usefixtures("no_terminal")
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--name", "nightly\u202eruntime"], "token name may only contain"),
        (["--name", "nightly", "--job", "billing\u200b*"], "invisible character at index 7"),
    ],
)
def test_commands_refuse_invisible_names(args: list[str], says: str) -> None:
    with pytest.raises(CommandError) as raised:
        call_command(
            "batch_token",
            "create",
            "--user",
            "robot",
            "--create-user",
            *args,
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    assert says in str(raised.value)


def test_rows_stored_before_the_rule_still_read_and_move(rt: Runtime, viewer: Runtime) -> None:
    """The rule is for what is written: an instance, execution and step whose
    names were stored before it are still answered and still move."""
    instance, execution = rt.launch("billing", {"run": "x"})
    execution = rt.move(execution, "STARTED")
    step = rt.started_step(execution)
    disguised = [{"name": "ru\u200bn", "type": "string", "value": "x"}]
    models.JobInstance.objects.filter(pk=instance["id"]).update(
        job_name="job\u202eevil", identifying_parameters=disguised
    )
    models.JobExecution.objects.filter(pk=execution["id"]).update(
        job_name="job\u202eevil", exit_code="EX\u202eIT"
    )
    models.StepExecution.objects.filter(pk=step["id"]).update(
        step_name="lo\u2028ad", exit_code="EX\u202eIT"
    )
    for path in (
        f"instances/{instance['id']}",
        "instances",
        f"executions/{execution['id']}",
        "executions",
        f"steps/{step['id']}",
        f"executions/{execution['id']}/steps",
    ):
        viewer.get(path)
    assert viewer.get(f"executions/{execution['id']}")["exit_code"] == "EX\u202eIT"
    moved = rt.move(execution, "STOPPING")
    assert moved["status"] == "STOPPING"
