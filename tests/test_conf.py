"""The app's settings (oxide_batch/conf.py): each has its default when the host
project leaves it out, takes the Python value or the text of an environment
variable alike, is re-read after ``override_settings``, and an invalid value
is a system check error with the setting's name and id and an
``ImproperlyConfigured`` naming it where it is read. Nothing in the app reads
``django.conf.settings.OXIDE_BATCH_…`` itself."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from oxide_batch.conf import (
    SETTING_NAMES,
    SETTINGS,
    AppSetting,
    BatchSettings,
    app_settings_check,
    batch_settings,
)
from oxide_batch.domain.failure_detail import DetailLevel
from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "OXIDE_BATCH_"

DEFAULTS: dict[str, Any] = {
    "STATE_MAX_BYTES": 64 * 1024,
    "STATE_MAX_DEPTH": 16,
    "RECOVERY_STALE_AFTER": timedelta(minutes=15),
    "PURGE_MIN_AGE": timedelta(hours=1),
    "FAILURE_URL_TEMPLATE": "",
    "VISIBLE_PARAMETERS": frozenset(),
    "OPERATOR_THROTTLE_RATE": "60/min",
    "METRICS_ALLOWED_IPS": ("127.0.0.1", "::1"),
    "METRICS_TOKEN": "",
    "METRICS_GAUGE_TTL": timedelta(seconds=15),
    "METRICS_STATUS_COUNT_CAP": 10_000,
    "METRICS_DB_TIMEOUT": timedelta(seconds=2),
    "LEASE_TTL": timedelta(seconds=60),
    "REPLICA_DATABASE": "",
    "REPLICA_LAG_NOTICE": timedelta(seconds=5),
    "REPLICA_PIN": timedelta(seconds=15),
    "NOTIFY_KEYS": (),
    "WEBHOOK_HTTP_HOSTS": (),
    "CONSOLE_URL": "",
    "NOTIFY_ATTEMPTS": 8,
    "NOTIFY_BACKOFF": timedelta(seconds=2),
    "NOTIFY_BACKOFF_MAX": timedelta(minutes=10),
    "NOTIFY_TIMEOUT": timedelta(seconds=10),
    "FAILURE_DETAIL": DetailLevel.MESSAGE,
    "FAILURE_REDACT": (),
    "PARTITION_RETRY_LIMIT": 3,
}
FERNET_KEY = "x" * 43 + "="
LINK = "https://logs.example.com/search?q=failure_id:{failure_id}&job={job_name}"
# (attribute, the value a host project writes, the text a variable gives, the value read)
FORMS: list[tuple[str, Any, str, Any]] = [
    ("STATE_MAX_BYTES", 100, " 100 ", 100),
    ("STATE_MAX_BYTES", 1024 * 1024, "1048576", 1024 * 1024),
    ("STATE_MAX_DEPTH", 64, "64", 64),
    ("RECOVERY_STALE_AFTER", timedelta(minutes=1), "1m", timedelta(minutes=1)),
    ("RECOVERY_STALE_AFTER", timedelta(hours=24), "1d", timedelta(hours=24)),
    ("PURGE_MIN_AGE", timedelta(0), "0s", timedelta(0)),
    ("PURGE_MIN_AGE", timedelta(days=30), "30d", timedelta(days=30)),
    ("FAILURE_URL_TEMPLATE", LINK, LINK, LINK),
    ("FAILURE_URL_TEMPLATE", None, "", ""),
    ("VISIBLE_PARAMETERS", ["region", "day"], "region, day,", frozenset({"region", "day"})),
    ("VISIBLE_PARAMETERS", {"region"}, "region", frozenset({"region"})),
    ("VISIBLE_PARAMETERS", (), "", frozenset()),
    ("OPERATOR_THROTTLE_RATE", "10/s", "10/s", "10/s"),
    ("OPERATOR_THROTTLE_RATE", "5/hour", " 5/hour ", "5/hour"),
    ("OPERATOR_THROTTLE_RATE", None, "off", None),
    ("OPERATOR_THROTTLE_RATE", "none", "", None),
    ("METRICS_ALLOWED_IPS", ["10.0.0.0/8", "::1"], "10.0.0.0/8,::1", ("10.0.0.0/8", "::1")),
    ("METRICS_ALLOWED_IPS", ("*",), "*", ("*",)),
    ("METRICS_TOKEN", "s3cret-token", "s3cret-token", "s3cret-token"),
    ("METRICS_GAUGE_TTL", timedelta(0), "0s", timedelta(0)),
    ("METRICS_STATUS_COUNT_CAP", 2, "2", 2),
    ("METRICS_DB_TIMEOUT", timedelta(milliseconds=300), "300ms", timedelta(milliseconds=300)),
    ("LEASE_TTL", timedelta(seconds=5), "5s", timedelta(seconds=5)),
    ("LEASE_TTL", timedelta(hours=24), "1d", timedelta(hours=24)),
    ("REPLICA_DATABASE", None, " ", ""),
    ("REPLICA_LAG_NOTICE", timedelta(seconds=30), "30s", timedelta(seconds=30)),
    ("REPLICA_PIN", timedelta(0), "0s", timedelta(0)),
    ("NOTIFY_KEYS", [FERNET_KEY], f"{FERNET_KEY}, ", (FERNET_KEY,)),
    ("WEBHOOK_HTTP_HOSTS", ["127.0.0.1"], "127.0.0.1", ("127.0.0.1",)),
    (
        "CONSOLE_URL",
        "https://batch.example.com",
        "https://batch.example.com",
        "https://batch.example.com",
    ),
    ("NOTIFY_ATTEMPTS", 3, "3", 3),
    ("NOTIFY_BACKOFF", timedelta(milliseconds=100), "100ms", timedelta(milliseconds=100)),
    ("NOTIFY_BACKOFF_MAX", timedelta(minutes=1), "1m", timedelta(minutes=1)),
    ("NOTIFY_TIMEOUT", timedelta(seconds=5), "5s", timedelta(seconds=5)),
    ("FAILURE_DETAIL", "traceback", " Traceback ", DetailLevel.TRACEBACK),
    (
        "FAILURE_REDACT",
        [r"acct-[0-9]+", r"pin=\d{4}"],
        "acct-[0-9]+\npin=\\d{4}\n",
        (re.compile(r"acct-[0-9]+"), re.compile(r"pin=\d{4}")),
    ),
    ("PARTITION_RETRY_LIMIT", 5, "5", 5),
]
# (attribute, an invalid value, what the message says after "NAME: ")
INVALID: list[tuple[str, Any, str]] = [
    ("STATE_MAX_BYTES", 0, "must be 1..1048576, got 0"),
    ("STATE_MAX_BYTES", "1048577", "must be 1..1048576, got 1048577"),
    ("STATE_MAX_BYTES", "64k", "not an integer: '64k'"),
    ("STATE_MAX_BYTES", True, "not an integer: True"),
    ("STATE_MAX_DEPTH", 65, "must be 1..64, got 65"),
    ("STATE_MAX_DEPTH", 1.5, "not an integer: 1.5"),
    ("RECOVERY_STALE_AFTER", "59s", "between 1 minute and 24 hours"),
    ("RECOVERY_STALE_AFTER", timedelta(hours=25), "between 1 minute and 24 hours"),
    ("RECOVERY_STALE_AFTER", "soon", "invalid duration 'soon'"),
    ("RECOVERY_STALE_AFTER", 900, "expected a timedelta or a duration"),
    ("PURGE_MIN_AGE", "an hour", "invalid duration 'an hour'"),
    ("PURGE_MIN_AGE", timedelta(seconds=-1), "a negative duration"),
    ("FAILURE_URL_TEMPLATE", "https://x.example/{oops}", "unknown placeholder(s) {oops}"),
    ("FAILURE_URL_TEMPLATE", 42, "expected a string, got 42"),
    ("VISIBLE_PARAMETERS", 42, "expected a list of strings"),
    ("VISIBLE_PARAMETERS", ["region", 1], "expected strings, got 1"),
    ("OPERATOR_THROTTLE_RATE", "60", "expected N/min (or N/s, N/hour, N/day, off), got '60'"),
    ("OPERATOR_THROTTLE_RATE", "0/min", "got '0/min'"),
    ("OPERATOR_THROTTLE_RATE", "60/fortnight", "got '60/fortnight'"),
    ("METRICS_ALLOWED_IPS", "10.0.0.0/33", "'10.0.0.0/33' does not appear to be an IPv4"),
    ("METRICS_ALLOWED_IPS", ["localhost"], "'localhost' does not appear to be an IPv4"),
    ("METRICS_TOKEN", b"s3cret", "expected a string"),
    ("METRICS_GAUGE_TTL", 15, "expected a timedelta or a duration"),
    ("METRICS_STATUS_COUNT_CAP", "0", "must be at least 1, got 0"),
    ("METRICS_DB_TIMEOUT", 0.3, "expected a timedelta or a duration"),
    ("LEASE_TTL", "4s", "between 5 seconds and 24 hours"),
    ("LEASE_TTL", timedelta(hours=25), "between 5 seconds and 24 hours"),
    ("LEASE_TTL", 60, "expected a timedelta or a duration"),
    ("REPLICA_DATABASE", "nowhere", "'nowhere' is not an alias of DATABASES"),
    ("REPLICA_DATABASE", "default", "names the primary ('default'), not a replica"),
    ("REPLICA_LAG_NOTICE", 5, "expected a timedelta or a duration"),
    ("REPLICA_PIN", "soon", "invalid duration 'soon'"),
    ("NOTIFY_KEYS", "not-a-key", "each key must be a Fernet key"),
    ("WEBHOOK_HTTP_HOSTS", 42, "expected a list of strings"),
    ("CONSOLE_URL", "batch.example.com", "expected an absolute http(s) URL"),
    ("NOTIFY_ATTEMPTS", "0", "must be 1..100, got 0"),
    ("NOTIFY_BACKOFF", 2, "expected a timedelta or a duration"),
    ("NOTIFY_BACKOFF_MAX", "forever", "invalid duration 'forever'"),
    ("NOTIFY_TIMEOUT", "0s", "must be more than 0s"),
    ("FAILURE_DETAIL", "full", "expected off, message or traceback, got 'full'"),
    ("FAILURE_REDACT", ["ok", "(unclosed"], "'(unclosed' is not a regular expression"),
    ("FAILURE_REDACT", ["a*"], "'a*' matches the empty string"),
    ("PARTITION_RETRY_LIMIT", "101", "must be 0..100, got 101"),
]


def setting(attribute: str) -> AppSetting[Any]:
    found: AppSetting[Any] = getattr(BatchSettings, attribute)
    return found


def test_every_setting_is_in_the_tables_once_with_its_own_check_id():
    attributes = [name for name, value in vars(BatchSettings).items() if value in SETTINGS]
    assert sorted(attributes) == sorted(DEFAULTS)
    assert {attribute for attribute, *_ in FORMS} == set(DEFAULTS)
    assert {attribute for attribute, *_ in INVALID} == set(DEFAULTS)
    assert [PREFIX + attribute for attribute in attributes] == [s.name for s in SETTINGS]
    ids = [s.check_id for s in SETTINGS]
    assert ids == [f"oxide_batch.E{101 + index}" for index in range(len(SETTINGS))]
    assert {PREFIX + attribute for attribute in DEFAULTS} == SETTING_NAMES


@pytest.mark.parametrize(("attribute", "default"), DEFAULTS.items())
def test_an_absent_setting_takes_its_default(settings, attribute, default):
    if hasattr(settings, PREFIX + attribute):
        delattr(settings, PREFIX + attribute)
    assert getattr(batch_settings, attribute) == default
    assert app_settings_check() == []


@pytest.mark.parametrize(("attribute", "typed", "text", "expected"), FORMS)
def test_the_python_value_and_the_environment_text_read_alike(
    settings, attribute, typed, text, expected
):
    setattr(settings, PREFIX + attribute, typed)
    assert getattr(batch_settings, attribute) == expected
    setattr(settings, PREFIX + attribute, text)
    assert getattr(batch_settings, attribute) == expected
    assert app_settings_check() == []


@pytest.mark.parametrize(("attribute", "value", "says"), INVALID)
def test_an_invalid_value_is_a_check_error_and_refused_where_it_is_read(
    settings, attribute, value, says
):
    name = PREFIX + attribute
    setattr(settings, name, value)
    (error,) = app_settings_check()
    assert error.id == setting(attribute).check_id
    assert error.level >= 40  # checks.ERROR: manage.py check and migrate stop
    assert error.msg.startswith(f"{name}: ")
    assert says in error.msg
    with pytest.raises(ImproperlyConfigured) as raised:
        getattr(batch_settings, attribute)
    assert str(raised.value) == error.msg


def test_override_settings_replaces_the_cached_value():
    assert timedelta(minutes=15) == batch_settings.RECOVERY_STALE_AFTER
    with override_settings(OXIDE_BATCH_RECOVERY_STALE_AFTER="1h"):
        assert timedelta(hours=1) == batch_settings.RECOVERY_STALE_AFTER
        with override_settings(OXIDE_BATCH_RECOVERY_STALE_AFTER=timedelta(minutes=2)):
            assert timedelta(minutes=2) == batch_settings.RECOVERY_STALE_AFTER
        assert timedelta(hours=1) == batch_settings.RECOVERY_STALE_AFTER
    assert timedelta(minutes=15) == batch_settings.RECOVERY_STALE_AFTER


def test_the_settings_fixture_replaces_the_cached_value_and_restores_it(settings):
    assert batch_settings.METRICS_STATUS_COUNT_CAP == 10_000
    settings.OXIDE_BATCH_METRICS_STATUS_COUNT_CAP = "7"
    assert batch_settings.METRICS_STATUS_COUNT_CAP == 7
    settings.OXIDE_BATCH_METRICS_STATUS_COUNT_CAP = 8
    assert batch_settings.METRICS_STATUS_COUNT_CAP == 8


def test_a_value_is_parsed_once_until_it_changes(monkeypatch):
    calls: list[str] = []
    read = AppSetting.read

    def counted(self: AppSetting[Any]) -> Any:
        calls.append(self.name)
        return read(self)

    monkeypatch.setattr(AppSetting, "read", counted)
    fresh = BatchSettings()
    assert fresh.PURGE_MIN_AGE == fresh.PURGE_MIN_AGE == timedelta(hours=1)
    assert calls == ["OXIDE_BATCH_PURGE_MIN_AGE"]
    fresh.forget("OXIDE_BATCH_PURGE_MIN_AGE")
    assert timedelta(hours=1) == fresh.PURGE_MIN_AGE
    assert calls == ["OXIDE_BATCH_PURGE_MIN_AGE"] * 2


# ------------------------------------------------------- no direct reads in the app

DIRECT_READ = re.compile(
    r"""settings\s*\.\s*OXIDE_BATCH_"""
    r"""|getattr\(\s*\w*settings\s*,\s*["']OXIDE_BATCH_"""
    r"""|settings\.__dict__\[\s*["']OXIDE_BATCH_"""
)


@pytest.mark.parametrize(
    "line",
    [
        "x = settings.OXIDE_BATCH_PURGE_MIN_AGE",
        'x = getattr(settings, "OXIDE_BATCH_METRICS_TOKEN", "")',
        "x = getattr(django_settings, 'OXIDE_BATCH_METRICS_TOKEN')",
    ],
)
def test_the_guard_sees_a_direct_read(line):
    assert DIRECT_READ.search(line)


def test_the_app_reads_its_settings_only_through_oxide_batch_conf():
    package = ROOT / "oxide_batch"
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path != package / "conf.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if DIRECT_READ.search(line)
    ]
    assert found == [], "read these through oxide_batch.conf.batch_settings"


# ------------------------------------------- the standalone service, from its environment

BAD_ENVIRONMENT = {
    "OXIDE_BATCH_STATE_MAX_BYTES": "0",
    "OXIDE_BATCH_STATE_MAX_DEPTH": "deep",
    "OXIDE_BATCH_RECOVERY_STALE_AFTER": "2d",
    "OXIDE_BATCH_PURGE_MIN_AGE": "an hour",
    "OXIDE_BATCH_FAILURE_URL_TEMPLATE": "https://x.example/{oops}",
    "OXIDE_BATCH_VISIBLE_PARAMETERS": "region",  # text is always a valid list
    "OXIDE_BATCH_OPERATOR_THROTTLE_RATE": "60",
    "OXIDE_BATCH_METRICS_ALLOWED_IPS": "127.0.0.1,intranet",
    "OXIDE_BATCH_METRICS_TOKEN": "any text",  # as is any token
    "OXIDE_BATCH_METRICS_GAUGE_TTL": "15",
    "OXIDE_BATCH_METRICS_STATUS_COUNT_CAP": "-1",
    "OXIDE_BATCH_METRICS_DB_TIMEOUT": "2 s",
    "OXIDE_BATCH_LEASE_TTL": "1s",
    "OXIDE_BATCH_REPLICA_DATABASE": "replica",  # no DATABASE_REPLICA_URL: no such alias
    "OXIDE_BATCH_REPLICA_LAG_NOTICE": "5",
    "OXIDE_BATCH_REPLICA_PIN": "15 s",
    "OXIDE_BATCH_NOTIFY_KEYS": "short",
    "OXIDE_BATCH_WEBHOOK_HTTP_HOSTS": "127.0.0.1",  # text is always a valid list
    "OXIDE_BATCH_CONSOLE_URL": "ftp://x",
    "OXIDE_BATCH_NOTIFY_ATTEMPTS": "many",
    "OXIDE_BATCH_NOTIFY_BACKOFF": "2",
    "OXIDE_BATCH_NOTIFY_BACKOFF_MAX": "10 m",
    "OXIDE_BATCH_NOTIFY_TIMEOUT": "0ms",
    "OXIDE_BATCH_FAILURE_DETAIL": "everything",
    "OXIDE_BATCH_FAILURE_REDACT": "[z-a]",
    "OXIDE_BATCH_PARTITION_RETRY_LIMIT": "-1",
}
ALWAYS_VALID = {
    "OXIDE_BATCH_VISIBLE_PARAMETERS",
    "OXIDE_BATCH_METRICS_TOKEN",
    "OXIDE_BATCH_WEBHOOK_HTTP_HOSTS",
}


def test_manage_py_check_refuses_each_bad_variable_by_name_and_id():
    """What stops scripts/serve (its migrate runs the checks) and manage.py check."""
    assert set(BAD_ENVIRONMENT) == SETTING_NAMES
    result = run_python(["manage.py", "check"], BAD_ENVIRONMENT)
    assert result.returncode != 0
    for item in SETTINGS:
        shown = f"({item.check_id}) {item.name}: " in result.stderr
        assert shown is (item.name not in ALWAYS_VALID), (item.name, result.stderr)


def test_the_wsgi_application_refuses_a_bad_variable_by_name():
    """gunicorn runs no check: project/wsgi.py stops each worker's start."""
    result = run_python(
        ["-c", "import project.wsgi"], {"OXIDE_BATCH_OPERATOR_THROTTLE_RATE": "60/fortnight"}
    )
    assert result.returncode != 0
    assert (
        "ImproperlyConfigured: OXIDE_BATCH_OPERATOR_THROTTLE_RATE: expected N/min" in result.stderr
    )


def test_good_variables_reach_the_app_parsed():
    program = (
        "import django; django.setup(); from oxide_batch.conf import batch_settings as s; "
        "print(s.STATE_MAX_BYTES, s.PURGE_MIN_AGE, sorted(s.VISIBLE_PARAMETERS), "
        "s.METRICS_ALLOWED_IPS, s.OPERATOR_THROTTLE_RATE)"
    )
    result = run_python(
        ["-c", program],
        {
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "OXIDE_BATCH_STATE_MAX_BYTES": "4096",
            "OXIDE_BATCH_PURGE_MIN_AGE": "0s",
            "OXIDE_BATCH_VISIBLE_PARAMETERS": "region,day",
            "OXIDE_BATCH_METRICS_ALLOWED_IPS": "10.0.0.0/8",
            "OXIDE_BATCH_OPERATOR_THROTTLE_RATE": "off",
        },
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "4096 0:00:00 ['day', 'region'] ('10.0.0.0/8',) None"
