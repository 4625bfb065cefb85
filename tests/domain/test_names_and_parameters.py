"""Names, operator strings, identifiers, job parameters and the instance key
(contract §2; contract scenarios 1.1-1.6, 1.9)."""

from __future__ import annotations

import hashlib
import itertools
import struct
import unicodedata
from datetime import timedelta

import pytest

from oxide_batch.domain import (
    IdentifierKind,
    JobInstance,
    JobInstanceKey,
    JobParameter,
    NameKind,
    OperatorStringKind,
    ParameterType,
    validate_identifier,
    validate_name,
)
from oxide_batch.domain.durations import parse_duration
from oxide_batch.domain.errors import (
    DuplicateParameter,
    EmptyName,
    IdentifierOutOfRange,
    InvalidCharacters,
    InvalidParameterValue,
    NameContainsControl,
    NameHasSurroundingWhitespace,
    NameTooLong,
    ParameterStringTooLong,
    ZeroIdentifier,
)
from oxide_batch.domain.names import parse_owner_token, validate_operator_string
from tests.domain.builders import MAX_I64, at

T = ParameterType
MAX_U64 = 2**64 - 1
MIN_I64 = -(2**63)
GOLDEN_DIGEST = "71f12db9e3887de2cf92e93bb63fd4e9e7c536df8fa202212445d18bf2e43604"
SENTINEL_NAME = "sensitive_parameter_name"
SENTINEL_VALUE = "sentinel-secret-42"


# ------------------------------------------------------------------- scenario 1.1


def test_an_empty_job_name_is_empty_name():
    with pytest.raises(EmptyName) as caught:
        validate_name("", NameKind.JOB)
    assert caught.value.kind == "job name"


def test_a_step_name_with_a_leading_space_has_surrounding_whitespace():
    with pytest.raises(NameHasSurroundingWhitespace) as caught:
        validate_name(" import", NameKind.STEP)
    assert caught.value.kind == "step name"


def test_a_parameter_name_with_a_newline_names_the_control_character_index():
    with pytest.raises(NameContainsControl) as caught:
        validate_name("input\npath", NameKind.PARAMETER)
    assert (caught.value.kind, caught.value.character_index) == ("parameter name", 5)
    assert "input" not in str(caught.value)


def test_a_job_execution_id_of_zero_is_zero_identifier():
    with pytest.raises(ZeroIdentifier) as caught:
        validate_identifier(IdentifierKind.JOB_EXECUTION, 0)
    assert caught.value.kind == "job execution"


def test_a_string_parameter_of_65537_bytes_is_too_long():
    with pytest.raises(ParameterStringTooLong) as caught:
        JobParameter("input_path", T.STRING, "x" * 65_537)
    assert caught.value.max_bytes == 65_536


def test_a_string_parameter_of_exactly_65536_bytes_is_accepted():
    assert len(JobParameter("input_path", T.STRING, "x" * 65_536).value) == 65_536


def test_a_string_parameter_limit_counts_utf8_bytes_not_characters():
    # 21,846 three-byte characters = 65,538 bytes.
    with pytest.raises(ParameterStringTooLong):
        JobParameter("input_path", T.STRING, "서" * 21_846)


def test_identifiers_of_different_kinds_are_independent_namespaces():
    kinds = [IdentifierKind.JOB_INSTANCE, IdentifierKind.JOB_EXECUTION]
    assert [validate_identifier(kind, 7) for kind in kinds] == [7, 7]
    assert validate_identifier(IdentifierKind.STEP_EXECUTION, 7) == 7


# -------------------------------------------------------------------------- names


@pytest.mark.parametrize("kind", list(NameKind), ids=lambda kind: kind.name)
def test_a_name_at_its_byte_limit_is_accepted_and_one_byte_more_is_too_long(kind):
    assert validate_name("a" * kind.max_bytes, kind) == "a" * kind.max_bytes
    with pytest.raises(NameTooLong) as caught:
        validate_name("a" * (kind.max_bytes + 1), kind)
    assert caught.value.max_bytes == kind.max_bytes


@pytest.mark.parametrize(
    ("kind", "limit"),
    [
        (NameKind.JOB, 128),
        (NameKind.STEP, 128),
        (NameKind.PARAMETER, 128),
        (NameKind.EXIT_CODE, 64),
        (NameKind.NODE, 128),
        (NameKind.REVISION, 128),
    ],
)
def test_name_byte_limits_follow_the_spec(kind, limit):
    assert kind.max_bytes == limit


@pytest.mark.parametrize(
    "name",
    ["é" * 64 + "a", "서" * 43],
    ids=["two-byte-65-chars", "three-byte-43-chars"],
)
def test_a_name_of_129_utf8_bytes_is_too_long_even_with_fewer_characters(name):
    assert len(name.encode("utf-8")) == 129
    with pytest.raises(NameTooLong):
        validate_name(name, NameKind.JOB)


def test_a_name_of_128_bytes_of_multibyte_characters_is_accepted():
    assert validate_name("é" * 64, NameKind.JOB) == "é" * 64


def test_an_exit_code_is_limited_to_64_bytes():
    assert validate_name("E" * 64, NameKind.EXIT_CODE) == "E" * 64
    with pytest.raises(NameTooLong):
        validate_name("E" * 65, NameKind.EXIT_CODE)


@pytest.mark.parametrize(
    "name",
    ["import ", "\timport", "import\n", "\u00a0import", "import\u3000"],
    ids=["trailing-space", "leading-tab", "trailing-newline", "leading-nbsp", "ideographic"],
)
def test_a_name_with_surrounding_whitespace_is_refused(name):
    with pytest.raises(NameHasSurroundingWhitespace):
        validate_name(name, NameKind.STEP)


@pytest.mark.parametrize(
    ("name", "index"),
    [("a\x00b", 1), ("ab\x1bc", 2), ("abc\x7fd", 3), ("é\x85x", 1), ("서울\x9f울", 2)],
    ids=["nul", "escape", "delete", "c1-next-line", "c1-after-multibyte"],
)
def test_a_control_character_inside_a_name_is_reported_by_character_index(name, index):
    with pytest.raises(NameContainsControl) as caught:
        validate_name(name, NameKind.JOB)
    assert caught.value.character_index == index


@pytest.mark.parametrize("name", ["import step", "a\u200bb", "서울", "job-1.v2"])
def test_inner_spaces_and_non_control_characters_are_valid_in_names(name):
    assert validate_name(name, NameKind.STEP) == name


@pytest.mark.parametrize("name", ["abc\x1f", "\x1cabc"], ids=["trailing-us", "leading-fs"])
def test_separator_controls_at_the_edges_are_controls_not_whitespace(name):
    """U+001C–U+001F are not Unicode White_Space (Python's str.strip would strip them)."""
    with pytest.raises(NameContainsControl):
        validate_name(name, NameKind.STEP)


def test_name_checks_run_empty_then_length_then_whitespace_then_control():
    with pytest.raises(NameTooLong):
        validate_name(" " + "a" * 128, NameKind.JOB)
    with pytest.raises(NameHasSurroundingWhitespace):
        validate_name(" a\x00b", NameKind.JOB)


def test_names_are_compared_byte_for_byte_without_unicode_normalisation():
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    assert validate_name(nfc, NameKind.JOB) == nfc
    assert validate_name(nfd, NameKind.JOB) == nfd
    nfc_key, nfd_key = JobInstanceKey.of(nfc), JobInstanceKey.of(nfd)
    assert nfc_key != nfd_key
    assert nfc_key.digest != nfd_key.digest
    assert nfd_key.job_name == nfd


def test_parameter_values_are_not_unicode_normalised():
    nfc, nfd = (unicodedata.normalize(form, "Ångström") for form in ("NFC", "NFD"))
    keys = [
        JobInstanceKey.of("job", [JobParameter("unit", T.STRING, value)]) for value in (nfc, nfd)
    ]
    assert keys[0].digest != keys[1].digest


# --------------------------------------------------------------- operator strings

OPERATOR_CASES = [
    # kind, value, error (None = valid)
    (OperatorStringKind.ACTOR, "operator:contract", None),
    (OperatorStringKind.ACTOR, "user.name@example-host_1", None),
    (OperatorStringKind.ACTOR, "a" * 128, None),
    (OperatorStringKind.ACTOR, "a" * 129, NameTooLong),
    (OperatorStringKind.ACTOR, "", EmptyName),
    (OperatorStringKind.ACTOR, "has space", InvalidCharacters),
    (OperatorStringKind.ACTOR, "user/1", InvalidCharacters),
    (OperatorStringKind.ACTOR, "josé", InvalidCharacters),
    (OperatorStringKind.ACTOR, "actor\n", InvalidCharacters),
    (OperatorStringKind.REASON_CODE, "WORKER_LOST", None),
    (OperatorStringKind.REASON_CODE, "LEGAL_HOLD_2", None),
    (OperatorStringKind.REASON_CODE, "R" * 64, None),
    (OperatorStringKind.REASON_CODE, "R" * 65, NameTooLong),
    (OperatorStringKind.REASON_CODE, "", EmptyName),
    (OperatorStringKind.REASON_CODE, "worker_lost", InvalidCharacters),
    (OperatorStringKind.REASON_CODE, "WORKER-LOST", InvalidCharacters),
    (OperatorStringKind.REASON_CODE, "WORKER LOST", InvalidCharacters),
    (OperatorStringKind.REASON_CODE, "WORKER.LOST", InvalidCharacters),
    (OperatorStringKind.OPERATION_ID, "recover-1", None),
    (OperatorStringKind.OPERATION_ID, "purge:2026.01_a", None),
    (OperatorStringKind.OPERATION_ID, "o" * 64, None),
    (OperatorStringKind.OPERATION_ID, "o" * 65, NameTooLong),
    (OperatorStringKind.OPERATION_ID, "", EmptyName),
    (OperatorStringKind.OPERATION_ID, "op@host", InvalidCharacters),
    (OperatorStringKind.OPERATION_ID, "op id", InvalidCharacters),
]


@pytest.mark.parametrize(
    ("kind", "value", "error"),
    OPERATOR_CASES,
    ids=[f"{kind.name}-{value[:12]!r}-{len(value)}" for kind, value, _ in OPERATOR_CASES],
)
def test_operator_strings_follow_their_character_set_and_byte_limit(kind, value, error):
    if error is None:
        assert validate_operator_string(value, kind) == value
    else:
        with pytest.raises(error) as caught:
            validate_operator_string(value, kind)
        assert caught.value.kind == kind.label


@pytest.mark.parametrize(
    ("kind", "limit"),
    [
        (OperatorStringKind.ACTOR, 128),
        (OperatorStringKind.REASON_CODE, 64),
        (OperatorStringKind.OPERATION_ID, 64),
    ],
)
def test_operator_string_limits_follow_the_spec(kind, limit):
    assert kind.max_bytes == limit


def test_owner_token_of_32_lowercase_hex_characters_is_16_bytes():
    assert parse_owner_token("0123456789abcdef" * 2) == bytes.fromhex("0123456789abcdef" * 2)


@pytest.mark.parametrize(
    "text",
    [
        "0123456789ABCDEF" * 2,
        "0123456789abcdef" * 2 + "0",
        ("0123456789abcdef" * 2)[:31],
        "g" * 32,
        " " + "a" * 31,
        "a" * 32 + "\n",
        "",
    ],
    ids=["uppercase", "33-chars", "31-chars", "non-hex", "padded", "trailing-newline", "empty"],
)
def test_an_owner_token_that_is_not_32_lowercase_hex_characters_is_refused(text):
    with pytest.raises(InvalidCharacters):
        parse_owner_token(text)


# -------------------------------------------------------------------- identifiers


@pytest.mark.parametrize("kind", list(IdentifierKind), ids=lambda kind: kind.name)
def test_identifier_bounds_are_one_to_the_bigint_limit(kind):
    assert validate_identifier(kind, 1) == 1
    assert validate_identifier(kind, MAX_I64) == MAX_I64
    with pytest.raises(ZeroIdentifier):
        validate_identifier(kind, 0)
    with pytest.raises(IdentifierOutOfRange) as caught:
        validate_identifier(kind, MAX_I64 + 1)
    assert (caught.value.kind, caught.value.value) == (kind.value, MAX_I64 + 1)


@pytest.mark.parametrize("value", [-1, MIN_I64])
def test_a_negative_identifier_is_refused_as_not_positive(value):
    with pytest.raises(ZeroIdentifier):
        validate_identifier(IdentifierKind.JOB_INSTANCE, value)


@pytest.mark.parametrize("value", [True, 1.0, "1"])
def test_an_identifier_must_be_a_plain_int(value):
    with pytest.raises(TypeError):
        validate_identifier(IdentifierKind.JOB_INSTANCE, value)  # type: ignore[arg-type]


# ---------------------------------------------------------------- JSON parameters

FROM_JSON_ACCEPTED = [
    ("text", T.STRING, "text"),
    ("", T.STRING, ""),
    (True, T.BOOL, True),
    (False, T.BOOL, False),
    (0, T.I64, 0),
    (-2, T.I64, -2),
    (MIN_I64, T.I64, MIN_I64),
    (MAX_I64, T.I64, MAX_I64),
    (MAX_I64 + 1, T.U64, MAX_I64 + 1),
    (MAX_U64, T.U64, MAX_U64),
    ({"type": "string", "value": "42"}, T.STRING, "42"),
    ({"type": "i64", "value": 42}, T.I64, 42),
    ({"type": "i64", "value": MIN_I64}, T.I64, MIN_I64),
    ({"type": "u64", "value": 42}, T.U64, 42),
    ({"type": "u64", "value": 0}, T.U64, 0),
    ({"type": "u64", "value": MAX_U64}, T.U64, MAX_U64),
    ({"type": "bool", "value": False}, T.BOOL, False),
]


@pytest.mark.parametrize(("raw", "type_", "value"), FROM_JSON_ACCEPTED, ids=repr)
def test_a_json_parameter_value_reads_as_its_type(raw, type_, value):
    parameter = JobParameter.from_json("p", raw)
    assert (parameter.type, parameter.value) == (type_, value)
    assert type(parameter.value) is type(value)


FROM_JSON_REFUSED = [
    pytest.param(MAX_U64 + 1, id="plain-above-u64"),
    pytest.param(MIN_I64 - 1, id="plain-below-i64"),
    pytest.param(1.5, id="float"),
    pytest.param(1.0, id="integral-float"),
    pytest.param(None, id="null"),
    pytest.param([1], id="list"),
    pytest.param({"value": 1}, id="object-without-type"),
    pytest.param({"type": "i64"}, id="object-without-value"),
    pytest.param({}, id="empty-object"),
    pytest.param({"type": "i64", "value": 1, "extra": 2}, id="extra-key"),
    pytest.param({"type": "float", "value": 1.5}, id="unknown-type"),
    pytest.param({"type": "I64", "value": 1}, id="type-is-case-sensitive"),
    pytest.param({"type": ["i64"], "value": 1}, id="type-not-a-string"),
    pytest.param({"type": "string", "value": 42}, id="string-with-int"),
    pytest.param({"type": "string", "value": None}, id="string-with-null"),
    pytest.param({"type": "i64", "value": "42"}, id="i64-with-string"),
    pytest.param({"type": "i64", "value": True}, id="i64-with-bool"),
    pytest.param({"type": "i64", "value": 1.0}, id="i64-with-float"),
    pytest.param({"type": "i64", "value": MAX_I64 + 1}, id="i64-above-range"),
    pytest.param({"type": "i64", "value": MIN_I64 - 1}, id="i64-below-range"),
    pytest.param({"type": "u64", "value": -1}, id="u64-negative"),
    pytest.param({"type": "u64", "value": MAX_U64 + 1}, id="u64-above-range"),
    pytest.param({"type": "u64", "value": False}, id="u64-with-bool"),
    pytest.param({"type": "bool", "value": 1}, id="bool-with-int"),
    pytest.param({"type": "bool", "value": "true"}, id="bool-with-string"),
    pytest.param({"type": "bool", "value": None}, id="bool-with-null"),
]


@pytest.mark.parametrize("raw", FROM_JSON_REFUSED)
def test_a_json_parameter_value_outside_the_four_types_is_refused(raw):
    with pytest.raises(InvalidParameterValue):
        JobParameter.from_json("p", raw)


def test_a_typed_json_string_over_the_limit_is_too_long():
    with pytest.raises(ParameterStringTooLong):
        JobParameter.from_json("p", {"type": "string", "value": "x" * 65_537})


def test_from_json_keeps_the_identifying_flag():
    assert JobParameter.from_json("p", "x", identifying=False).identifying is False
    assert JobParameter.from_json("p", "x").identifying is True


def test_from_json_validates_the_parameter_name():
    with pytest.raises(NameContainsControl):
        JobParameter.from_json("input\npath", "x")


# ------------------------------------------------------------ instance key (1.2-1.6)


def _daily_import_parameters():
    return [
        JobParameter("business_date", T.STRING, "2026-07-29"),
        JobParameter("sequence", T.U64, 42),
        JobParameter("dry_run", T.BOOL, False, identifying=False),
    ]


def test_instance_identity_ignores_parameter_insertion_order():
    orders = list(itertools.permutations(_daily_import_parameters()))
    keys = [JobInstanceKey.of("daily_import", order) for order in orders]
    assert len(keys) == 6
    assert all(key == keys[0] for key in keys)
    assert len({key.digest for key in keys}) == 1
    assert keys[0].descriptors() == [("business_date", T.STRING), ("sequence", T.U64)]


def test_identifying_parameters_are_ordered_by_name_bytes():
    names = ["é", "z", "a", "B", "ab"]
    key = JobInstanceKey.of("job", [JobParameter(name, T.BOOL, True) for name in names])
    assert [name for name, _ in key.descriptors()] == ["B", "a", "ab", "z", "é"]


def test_instance_identity_uses_typed_values_not_display_text():
    as_string = JobInstanceKey.of("job", [JobParameter("sequence", T.STRING, "42")])
    as_i64 = JobInstanceKey.of("job", [JobParameter("sequence", T.I64, 42)])
    assert as_string != as_i64
    assert as_string.digest != as_i64.digest


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ((T.I64, 42), (T.U64, 42)),
        ((T.I64, 1), (T.BOOL, True)),
        ((T.U64, 0), (T.BOOL, False)),
    ],
    ids=["i64-vs-u64", "i64-1-vs-true", "u64-0-vs-false"],
)
def test_values_equal_in_python_but_of_different_types_are_different_identities(left, right):
    keys = [JobInstanceKey.of("job", [JobParameter("p", *typed)]) for typed in (left, right)]
    assert keys[0] != keys[1]
    assert keys[0].digest != keys[1].digest


def test_non_identifying_parameters_do_not_change_instance_identity():
    first = JobInstanceKey.of(
        "job",
        [
            JobParameter("business_date", T.STRING, "2026-07-29"),
            JobParameter("region", T.STRING, "eu"),
            JobParameter("request_id", T.STRING, "request-one", identifying=False),
        ],
    )
    second = JobInstanceKey.of(
        "job",
        [
            JobParameter("request_id", T.STRING, "request-two", identifying=False),
            JobParameter("region", T.STRING, "eu"),
            JobParameter("business_date", T.STRING, "2026-07-29"),
        ],
    )
    assert first == second
    assert first.digest == second.digest
    assert [name for name, _ in first.descriptors()] == ["business_date", "region"]


def test_duplicate_parameter_names_are_rejected_without_replacement():
    original = JobParameter("business_date", T.STRING, "2026-07-29")
    with pytest.raises(DuplicateParameter) as caught:
        JobInstanceKey.of("job", [original, JobParameter("business_date", T.STRING, "2026-07-30")])
    assert "business_date" not in str(caught.value)
    assert original.value == "2026-07-29"


def test_a_duplicate_name_is_rejected_even_when_one_is_non_identifying():
    with pytest.raises(DuplicateParameter):
        JobInstanceKey.of(
            "job",
            [
                JobParameter("run", T.STRING, "a"),
                JobParameter("run", T.STRING, "b", identifying=False),
            ],
        )


def test_an_instance_key_validates_its_job_name():
    with pytest.raises(EmptyName):
        JobInstanceKey.of("")


def _sentinel_renderings():
    parameter = JobParameter(SENTINEL_NAME, T.STRING, SENTINEL_VALUE)
    key = JobInstanceKey.of("job", [parameter])
    instance = JobInstance(id=10, key=key, created_at=at(100))
    return {
        "parameter": parameter,
        "parameters": key.parameters,
        "key": key,
        "instance": instance,
    }


@pytest.mark.parametrize("subject", ["parameter", "parameters", "key", "instance"])
@pytest.mark.parametrize("render", [repr, str], ids=["repr", "str"])
def test_diagnostics_never_show_parameter_names_or_values(subject, render):
    text = render(_sentinel_renderings()[subject])
    assert SENTINEL_NAME not in text
    assert SENTINEL_VALUE not in text
    assert "<redacted>" in text


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "i64", "value": SENTINEL_VALUE},
        {"type": "bool", "value": SENTINEL_VALUE},
        {"type": "string", "value": SENTINEL_VALUE * 4000},
        {"type": SENTINEL_VALUE, "value": 1},
    ],
    ids=["i64", "bool", "too-long", "type"],
)
def test_parameter_errors_never_show_the_name_or_value(raw):
    with pytest.raises((InvalidParameterValue, ParameterStringTooLong)) as caught:
        JobParameter.from_json(SENTINEL_NAME, raw)
    rendered = f"{caught.value} {caught.value!r} {caught.value.details()}"
    assert SENTINEL_NAME not in rendered
    assert SENTINEL_VALUE not in rendered


# ----------------------------------------------------------------- digest (1.9)


def test_the_version_one_key_digest_matches_the_golden_vector():
    key = JobInstanceKey.of(
        "golden_job",
        [
            JobParameter("region", T.STRING, "서울"),
            JobParameter("limit", T.U64, 2**63),
            JobParameter("count", T.I64, -2),
            JobParameter("active", T.BOOL, True),
        ],
    )
    assert key.digest == GOLDEN_DIGEST


def test_the_golden_vector_is_independent_of_insertion_order_and_json_spelling():
    key = JobInstanceKey.of(
        "golden_job",
        [
            JobParameter.from_json("active", True),
            JobParameter.from_json("count", -2),
            JobParameter.from_json("limit", 2**63),
            JobParameter.from_json("region", {"type": "string", "value": "서울"}),
        ],
    )
    assert key.digest == GOLDEN_DIGEST


def _prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def test_a_key_with_no_identifying_parameters_is_valid_and_encodes_the_name_only():
    key = JobInstanceKey.of("job", [JobParameter("note", T.STRING, "x", identifying=False)])
    assert key.parameters == ()
    assert key.descriptors() == []
    assert key.encode() == b"\x01" + _prefixed(b"job")
    assert key.digest == hashlib.sha256(b"\x01" + _prefixed(b"job")).hexdigest()


@pytest.mark.parametrize(
    ("parameter", "encoded"),
    [
        (JobParameter("s", T.STRING, "서"), _prefixed(b"s") + b"\x01" + _prefixed("서".encode())),
        (JobParameter("i", T.I64, -2), _prefixed(b"i") + b"\x02" + b"\xff" * 7 + b"\xfe"),
        (JobParameter("u", T.U64, 2**63), _prefixed(b"u") + b"\x03\x80" + b"\x00" * 7),
        (JobParameter("b", T.BOOL, True), _prefixed(b"b") + b"\x04\x01"),
        (JobParameter("b", T.BOOL, False), _prefixed(b"b") + b"\x04\x00"),
    ],
    ids=["string", "i64", "u64", "bool-true", "bool-false"],
)
def test_each_parameter_type_has_its_version_one_encoding(parameter, encoded):
    assert parameter.encode() == encoded


# ---------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("1h", timedelta(hours=1)),
        ("30d", timedelta(days=30)),
        ("250ms", timedelta(milliseconds=250)),
        ("0s", timedelta(0)),
        (" 2h ", timedelta(hours=2)),
        ("999999999ms", timedelta(milliseconds=999_999_999)),
        ("999999999d", timedelta(days=999_999_999)),
    ],
)
def test_a_duration_is_an_integer_and_a_unit(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "90", "s", "1.5h", "-1s", "+1s", "1 h", "1H", "1w", "1hm", "1000000000s", "1h30m", "٣s"],
)
def test_a_duration_in_any_other_form_is_refused(text):
    with pytest.raises(ValueError, match=r"expected e\.g\. 90s"):
        parse_duration(text)


def test_a_string_parameter_may_not_contain_nul():
    with pytest.raises(InvalidParameterValue):
        JobParameter("path", ParameterType.STRING, "a\x00b")
    assert JobParameter("path", ParameterType.STRING, "a\tb").value == "a\tb"
