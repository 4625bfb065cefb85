"""The tests run with the settings they pin, never with the caller's: a pytest
plugin (``-p tests.environment`` in pyproject.toml) that removes from
``os.environ`` every variable the application reads its settings from.

``project.settings`` reads the environment once, when pytest-django imports it
in its ``pytest_load_initial_conftests`` hook — before any conftest is
imported, so a conftest is too late. A plugin named on the command line is
registered earlier, and its ``tryfirst`` hook runs before pytest-django's.
Cleaning ``os.environ`` itself (not a copy) means the subprocesses the tests
start (gunicorn, ``manage.py``, pytest) inherit the clean environment too; a
test that needs a setting passes it explicitly (``override_settings``, the
``settings`` fixture, ``gunicorn(environment=…)``).

Kept: the variables by which the harness (``scripts/``) talks to the tests.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

import pytest

APP_PREFIX = "OXIDE_BATCH_"

HARNESS = frozenset(
    {
        "DATABASE_URL",  # scripts/with-postgres (absent: the SQLite pass)
        "OXIDE_BATCH_PG_BINDIR",  # scripts/with-postgres: the cluster (tests/faults)
        "OXIDE_BATCH_PG_DATA",
        "OXIDE_BATCH_PG_DURABLE",  # scripts/with-postgres: keep fsync (benchmarks)
        "OXIDE_BATCH_SCREENSHOTS",  # scripts/test: where tests/browser keeps screenshots
        "OXIDE_BATCH_CHROMIUM",  # tests/browser: the browser and its driver
        "OXIDE_BATCH_CHROMEDRIVER",
        "OXIDE_BATCH_SOAK",  # tests/soak: "full" for the long run
        "OXIDE_BATCH_SOAK_SECONDS",
        "OXIDE_BATCH_HYPOTHESIS_EXAMPLES",  # tests/repository/test_stateful.py
    }
)

# What the application reads without the OXIDE_BATCH_ prefix (project/settings.py,
# manage.py / wsgi.py, oxide_batch/observability/metrics.py, gunicorn.conf.py).
UNPREFIXED = frozenset(
    {
        "DJANGO_SETTINGS_MODULE",  # the ini's (or --ds), not the caller's
        "DEBUG",
        "ALLOWED_HOSTS",
        "SECRET_KEY",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_PROXY_SSL_HEADER",
        "CSRF_TRUSTED_ORIGINS",
        "DATA_UPLOAD_MAX_MEMORY_SIZE",
        "SQLITE_PATH",
        "DATABASE_REPLICA_URL",  # project/settings.py: the console's read replica
        "STATIC_ROOT",
        "LOG_LEVEL",
        "PROMETHEUS_MULTIPROC_DIR",
        "ADDRESS",  # gunicorn.conf.py (and scripts/run)
        "WEB_CONCURRENCY",
        "AXES_FAILURE_LIMIT",  # project/settings.py: the console's login throttle
        "AXES_COOLOFF_TIME",
    }
)

IGNORED = pytest.StashKey[list[str]]()


def is_app_setting(name: str) -> bool:
    """Whether the application reads a setting from ``name`` (and the harness does not)."""
    if name in HARNESS:
        return False
    return name.startswith(APP_PREFIX) or name in UNPREFIXED


def drop_app_settings(environ: MutableMapping[str, str]) -> list[str]:
    """Remove the application's setting variables from ``environ``; their names."""
    names = sorted(name for name in environ if is_app_setting(name))
    for name in names:
        del environ[name]
    return names


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    early_config.stash[IGNORED] = drop_app_settings(os.environ)


def pytest_report_header(config: pytest.Config) -> str | None:
    ignored = config.stash.get(IGNORED, [])
    return f"environment: ignored {', '.join(ignored)}" if ignored else None
