"""Scrubbing a failure's detail (contract §2, "Failure detail"; decisions 301-303):
whatever a runtime sends, the stored text never holds a secret of a known
shape, a deployment's pattern or a hidden parameter value — also when the
secret straddles the bound the text is cut at, by the server or by the sender."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxide_batch.domain.failure_detail import (
    MESSAGE_MAX_BYTES,
    TRACEBACK_MAX_BYTES,
    DetailLevel,
    FailureDetail,
    bounded_for_sending,
    hidden_values,
    kept_detail,
    sanitized,
    truncated,
)
from oxide_batch.domain.scrub import (
    MIN_HIDDEN_VALUE_CHARS,
    REDACTED,
    Scrubber,
    compile_redact_patterns,
)

HIDDEN = ("Zq9-hidden-account-77", "tenant_secret_value")
DEPLOYMENT = compile_redact_patterns([r"ACCT-[0-9]{6}"])
SCRUBBER = Scrubber(hidden_values=HIDDEN, patterns=DEPLOYMENT)

# (shape, the text a runtime sends, the secret that must not be stored)
SECRETS: list[tuple[str, str, str]] = [
    ("password pair", "bad row 17: password=hunter2", "hunter2"),
    ("passwd pair", "login failed passwd: Tr0ub4dor&3", "Tr0ub4dor"),
    ("pwd pair", "connect(pwd='s3cr3t!x')", "s3cr3t!x"),
    ("token pair", "GET /export?token=abcd1234efgh&page=2", "abcd1234efgh"),
    ("secret pair", "client_secret = 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    ("api_key pair", "api_key=AbC123xYz789", "AbC123xYz789"),
    ("JSON pair", '{"user": "ann", "password": "pa ss\\"word 42"}', "pa ss"),
    ("Python dict repr", "{'api-key': 'k-3141592653'}", "k-3141592653"),
    ("environment variable", "DB_PASSWORD=correct-horse-battery", "correct-horse-battery"),
    ("AWS secret pair", "aws_secret_access_key = wJalrXUtnFEMIK7MDENG", "wJalrXUtnFEMIK7MDENG"),
    ("Authorization header", "Authorization: Token 0123456789abcdef", "0123456789abcdef"),
    ("quoted Authorization", '{"Authorization": "Basic dXNlcjpwYXNz"}', "dXNlcjpwYXNz"),
    ("bearer token", "curl -H 'x: Bearer eyZ.abc-DEF_123'", "abc-DEF_123"),
    ("basic credentials", "sent basic QWxhZGRpbjpvcGVuIHNlc2FtZQ== to it", "QWxhZGRpbjpvcGVu"),
    ("connection string", "postgres://batch:Sup3r-S3cret@db:5432/x", "Sup3r-S3cret"),
    ("URL userinfo", "fetch https://bot:gh-pass-99@example.com/a failed", "gh-pass-99"),
    ("AWS access key id", "key AKIAIOSFODNN7EXAMPLE denied", "AKIAIOSFODNN7EXAMPLE"),
    (
        "AWS secret key alone",
        "got wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY back",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("GitHub token", "push: ghp_1234567890abcdefghijABCDEFGHIJ123456", "ghp_1234567890abcdef"),
    ("GitHub fine-grained", "github_pat_11ABCDEFG0123456789_abcdefXYZ", "11ABCDEFG0123456789"),
    ("Slack token", "slack xoxb-123456789012-abcdefghijkl said no", "xoxb-123456789012"),
    ("Slack webhook", "https://hooks.slack.com/services/T000/B000/XXXXXXXX", "T000/B000/XXXX"),
    ("Google API key", "maps AIzaSyA-1234567890abcdefghijklmnopqrs", "SyA-1234567890"),
    ("Stripe key", "charge sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "JWT",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ),
    (
        "private key block",
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7",
    ),
    (
        "private key cut short",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqh",
        "MIIEvQIBADANBgkqh",
    ),
    ("deployment pattern", "account ACCT-123456 overdrawn", "ACCT-123456"),
    ("hidden parameter", "no rows for Zq9-hidden-account-77 today", "Zq9-hidden-account-77"),
    ("hidden parameter twice", "tenant_secret_value/tenant_secret_value", "tenant_secret_value"),
]


def stored(text: str, level: DetailLevel = DetailLevel.TRACEBACK) -> list[str]:
    kept = kept_detail(FailureDetail("E", text, text), level, SCRUBBER)
    assert kept is not None
    return [member for member in (kept.message, kept.traceback) if member is not None]


@pytest.mark.parametrize(("shape", "text", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
def test_no_secret_shape_is_stored(shape: str, text: str, secret: str) -> None:
    for member in stored(text):
        assert secret not in member, (shape, member)
        assert REDACTED in member


@pytest.mark.parametrize(("shape", "text", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
def test_no_secret_survives_being_cut_at_the_bound(shape: str, text: str, secret: str) -> None:
    """The secret placed across the message's bound, at every offset around it:
    the server scrubs the whole text before it cuts."""
    start = text.index(secret[:4])
    for shift in range(0, len(text) - start + 1, 3):
        filler = "x" * (MESSAGE_MAX_BYTES - 30 - start + shift)
        for member in stored(filler + text, DetailLevel.MESSAGE):
            assert secret not in member
            assert secret[: max(len(secret) // 2, MIN_HIDDEN_VALUE_CHARS + 4)] not in member


@pytest.mark.parametrize("value", HIDDEN)
def test_a_hidden_value_the_sender_cut_in_half_is_taken_out(value: str) -> None:
    """A runtime bounds its text before sending: the half of a hidden value
    left before its marker is redacted too."""
    for keep in range(MIN_HIDDEN_VALUE_CHARS, len(value)):
        sent = f"prefix {value[:keep]}… [truncated 999 bytes]"
        (member, *_) = stored(sent, DetailLevel.MESSAGE)
        assert value[:keep] not in member
        assert member.endswith(f"{REDACTED}… [truncated 999 bytes]")


def test_short_and_boolean_hidden_values_are_not_replaced() -> None:
    parameters: list[dict[str, Any]] = [
        {"name": "region", "type": "string", "value": "EU"},
        {"name": "dry_run", "type": "bool", "value": True},
        {"name": "run", "type": "string", "value": "2026-11-30"},
        {"name": "shown", "type": "string", "value": "visible-value"},
    ]
    assert hidden_values(parameters, frozenset({"shown"})) == ("EU", "2026-11-30")
    scrubber = Scrubber(hidden_values=("EU", "2026-11-30"))
    assert scrubber.scrub("EU run 2026-11-30 True") == f"EU run {REDACTED} True"


def test_the_levels_keep_what_they_say() -> None:
    sent = FailureDetail("ValueError", "m", "tb")
    assert kept_detail(sent, DetailLevel.OFF, SCRUBBER) is None
    assert kept_detail(sent, DetailLevel.MESSAGE, SCRUBBER) == FailureDetail("ValueError", "m")
    assert kept_detail(sent, DetailLevel.TRACEBACK, SCRUBBER) == sent
    assert kept_detail(FailureDetail(), DetailLevel.TRACEBACK, SCRUBBER) is None


def test_cutting_marks_the_bytes_cut_at_a_character_boundary() -> None:
    text, cut = truncated("é" * 2000, MESSAGE_MAX_BYTES)
    assert cut
    assert len(text.encode()) <= MESSAGE_MAX_BYTES
    kept = text.removesuffix(re.search(r"… \[truncated \d+ bytes\]$", text).group())  # type: ignore[union-attr]
    assert set(kept) == {"é"}
    assert text.endswith(f"… [truncated {4000 - len(kept.encode())} bytes]")
    assert truncated("short", 10) == ("short", False)


def test_control_characters_become_replacement_characters() -> None:
    assert sanitized("a\r\nb\x00c\td\x1b\x85\ud800") == "a\nb\ufffdc\td\ufffd\ufffd\ufffd"
    assert sanitized("Type\nName\t", single_line=True) == "Type\ufffdName\ufffd"


def test_a_deployment_pattern_must_compile_and_match_something() -> None:
    with pytest.raises(ValueError, match="not a regular expression"):
        compile_redact_patterns(["(unclosed"])
    with pytest.raises(ValueError, match="matches the empty string"):
        compile_redact_patterns(["x*"])


def test_the_client_bounds_what_it_sends_to_the_servers_bounds() -> None:
    sent = bounded_for_sending(FailureDetail("T\n", "m" * 5000, "t" * 20000))
    assert sent.type == "T\ufffd"
    assert sent.message is not None
    assert len(sent.message.encode()) <= MESSAGE_MAX_BYTES
    assert sent.traceback is not None
    assert len(sent.traceback.encode()) <= TRACEBACK_MAX_BYTES
    assert (sent.message_truncated, sent.traceback_truncated) == (True, True)


SECRET_TEXTS = st.sampled_from([secret for _, _, secret in SECRETS if len(secret) >= 8])
NOISE = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=300)


@settings(max_examples=200, deadline=None)
@given(before=NOISE, after=NOISE, case=st.sampled_from(SECRETS), bound_shift=st.integers(0, 60))
def test_a_secret_in_any_surrounding_text_is_never_stored(
    before: str, after: str, case: tuple[str, str, str], bound_shift: int
) -> None:
    """Property: a secret shape (with its key, as it is written) anywhere in
    arbitrary text, the whole cut anywhere around the bound: never stored."""
    _, text, secret = case
    filler = "y" * max(0, MESSAGE_MAX_BYTES - len((before + text).encode()) - bound_shift)
    sent = f"{before} {filler}{text} {after}"
    kept = kept_detail(FailureDetail("E", sent), DetailLevel.MESSAGE, SCRUBBER)
    assert kept is not None
    assert kept.message is not None
    assert secret not in kept.message
    assert len(kept.message.encode()) <= MESSAGE_MAX_BYTES


@settings(max_examples=100, deadline=None)
@given(value=st.text(min_size=MIN_HIDDEN_VALUE_CHARS, max_size=40), noise=NOISE)
def test_any_hidden_value_is_never_stored(value: str, noise: str) -> None:
    clean = sanitized(value)
    scrubber = Scrubber(hidden_values=(clean,))
    kept = kept_detail(
        FailureDetail(message=f"{noise}{value}{noise}"), DetailLevel.MESSAGE, scrubber
    )
    assert kept is not None
    assert kept.message is not None
    assert clean not in kept.message or REDACTED.find(clean) >= 0


def test_a_huge_member_is_read_up_to_four_times_its_bound_and_scrubbed_fast() -> None:
    """A 2 MiB message (the body limit) costs what 8 KiB cost: only that much
    can ever be stored; a hidden value cut there is taken out too."""
    huge = "password=p " + "a" * (2 * 1024 * 1024)
    kept = kept_detail(FailureDetail(message=huge), DetailLevel.MESSAGE, SCRUBBER)
    assert kept is not None
    assert kept.message is not None
    assert kept.message_truncated
    assert kept.message.startswith(f"password={REDACTED} a")
    shrinking = "-----BEGIN PRIVATE KEY-----" + "k" * 8200 + "Zq9-hidden-account-77"
    kept = kept_detail(FailureDetail(message=shrinking), DetailLevel.MESSAGE, SCRUBBER)
    assert kept is not None
    assert kept.message is not None
    assert kept.message.startswith(REDACTED)
    assert "Zq9-hid" not in kept.message
