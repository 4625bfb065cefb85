"""The tests do not depend on the environment they run in: the application's
setting variables of the caller never reach the settings, the tests or the
processes the tests start (tests/environment.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from django.conf import settings

from oxide_batch.conf import SETTING_NAMES, batch_settings

ROOT = Path(__file__).resolve().parents[1]
# Each would change what some test observes if it reached the settings.
EXPORTED = {
    "OXIDE_BATCH_PURGE_MIN_AGE": "0s",
    "OXIDE_BATCH_RECOVERY_STALE_AFTER": "1m",
    "OXIDE_BATCH_OPERATOR_THROTTLE_RATE": "1/day",
    "OXIDE_BATCH_STATE_MAX_BYTES": "16",
    "OXIDE_BATCH_VISIBLE_PARAMETERS": "region",
    "DEBUG": "1",
    "LOG_LEVEL": "CRITICAL",
}
RELYING_ON_DEFAULTS = (
    "tests/api/test_retention_api.py::test_survey_input_errors",
    "tests/api/test_retention_api.py::test_apply_input_errors",
    "tests/test_environment.py::test_no_application_setting_reaches_the_tests",
)
# Where the application reads a variable: os.environ.get("X"…), os.environ["X"],
# os.getenv("X"…), setdefault("X"…) and the settings' _env_*("X"…) helpers.
READ = re.compile(
    r"""(?:environ\.get|environ\.setdefault|getenv|_env_\w+)\(\s*["']([A-Z][A-Z0-9_]*)["']"""
    r"""|environ\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\]"""
)


def test_no_application_setting_reaches_the_tests():
    from tests.environment import is_app_setting

    # pytest-django sets DJANGO_SETTINGS_MODULE again, from the ini.
    assert [name for name in os.environ if is_app_setting(name)] == ["DJANGO_SETTINGS_MODULE"]
    assert os.environ["DJANGO_SETTINGS_MODULE"] == "project.settings"
    assert settings.DEBUG is False
    # project/settings.py defines an app setting only when its variable is set.
    assert [name for name in SETTING_NAMES if hasattr(settings, name)] == []
    assert (timedelta(hours=1), timedelta(minutes=15), "60/min", 64 * 1024, frozenset()) == (
        batch_settings.PURGE_MIN_AGE,
        batch_settings.RECOVERY_STALE_AFTER,
        batch_settings.OPERATOR_THROTTLE_RATE,
        batch_settings.STATE_MAX_BYTES,
        batch_settings.VISIBLE_PARAMETERS,
    )


def test_tests_pass_with_application_settings_exported():
    """A pytest run (on SQLite: a second PostgreSQL test database would clash
    with this run's) with settings exported that those tests rely on not being set."""
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *RELYING_ON_DEFAULTS],
        cwd=ROOT,
        env={**env, **EXPORTED},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{len(RELYING_ON_DEFAULTS)} passed" in result.stdout
    (header,) = re.findall(r"^environment: ignored (.*)$", result.stdout, re.MULTILINE)
    assert set(EXPORTED) <= set(header.split(", "))


def test_every_variable_the_application_reads_is_dropped():
    """A new setting variable without the OXIDE_BATCH_ prefix must be added to
    tests.environment.UNPREFIXED, or it would leak from the caller into the tests.
    project/settings.py reads every app setting (oxide_batch/conf.py) by its name."""
    from tests.environment import is_app_setting

    sources = [ROOT / "manage.py", ROOT / "gunicorn.conf.py", *(ROOT / "project").glob("*.py")]
    sources += (ROOT / "oxide_batch").rglob("*.py")
    read = {
        name
        for path in sources
        for match in READ.finditer(path.read_text())
        for name in match.groups()
        if name
    } | SETTING_NAMES
    assert {"OXIDE_BATCH_PURGE_MIN_AGE", "SECRET_KEY", "WEB_CONCURRENCY"} <= read
    assert sorted(name for name in read if not is_app_setting(name)) == ["DATABASE_URL"]
