"""Production settings from documented environment variables: ``manage.py check
--deploy --fail-level WARNING`` passes with them and reports the HTTPS warnings
without them (a fresh install on its own SQLite file, in a subprocess, as an
operator would run it); the settings parse and refuse what they should."""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

pytestmark = pytest.mark.standalone

ROOT = Path(__file__).resolve().parents[2]
# Every variable these tests set or rely on being unset.
CONTROLLED = (
    "DATABASE_URL",
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "OXIDE_BATCH_HTTPS",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER",
    "CSRF_TRUSTED_ORIGINS",
    "OXIDE_BATCH_OPERATOR_THROTTLE_RATE",
)
STRONG_KEY = secrets.token_urlsafe(50)
PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": STRONG_KEY,
    "ALLOWED_HOSTS": "batch.example.com",
    "OXIDE_BATCH_HTTPS": "1",
}
HTTPS_WARNINGS = {
    "security.W004",  # SECURE_HSTS_SECONDS
    "security.W008",  # SECURE_SSL_REDIRECT
    "security.W009",  # SECRET_KEY (the placeholder)
    "security.W012",  # SESSION_COOKIE_SECURE
    "security.W016",  # CSRF_COOKIE_SECURE
}


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``manage.py migrate`` on an empty SQLite file; the environment that uses it."""
    base = {key: value for key, value in os.environ.items() if key not in CONTROLLED}
    base["DJANGO_SETTINGS_MODULE"] = "project.settings"
    base["SQLITE_PATH"] = str(tmp_path_factory.mktemp("fresh") / "db.sqlite3")
    done = manage(base, "migrate", "--noinput", "-v", "0")
    assert done.returncode == 0, done.stderr
    return base


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def deploy_check(env: dict[str, str]) -> tuple[int, str, set[str]]:
    done = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    output = done.stdout + done.stderr
    return done.returncode, output, set(re.findall(r"\((\w+\.[WE]\d+)\)", output))


def test_a_fresh_install_has_every_cache_table(fresh_install: dict[str, str]) -> None:
    with sqlite3.connect(fresh_install["SQLITE_PATH"]) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "ob_throttle_cache" in tables
    # createcachetable (Django's own step) has nothing left to create.
    done = manage(fresh_install, "createcachetable", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "CREATE TABLE" not in done.stdout, done.stdout


def test_the_migration_drops_and_creates_the_table(fresh_install: dict[str, str]) -> None:
    def tables() -> set[str]:
        with sqlite3.connect(fresh_install["SQLITE_PATH"]) as db:
            return {row[0] for row in db.execute("SELECT name FROM sqlite_master")}

    try:
        assert manage(fresh_install, "migrate", "oxide_batch", "0009", "-v", "0").returncode == 0
        assert "ob_throttle_cache" not in tables()
    finally:
        done = manage(fresh_install, "migrate", "-v", "0")
    assert done.returncode == 0, done.stderr
    assert "ob_throttle_cache" in tables()


def test_production_settings_pass_the_deploy_check(fresh_install: dict[str, str]) -> None:
    status, output, found = deploy_check({**fresh_install, **PRODUCTION})
    assert (status, found) == (0, set()), output
    assert "System check identified no issues" in output


def test_the_defaults_report_the_https_warnings(fresh_install: dict[str, str]) -> None:
    status, output, found = deploy_check(fresh_install)
    assert status != 0, output
    assert found == HTTPS_WARNINGS, output


def test_each_https_setting_can_be_overridden(fresh_install: dict[str, str]) -> None:
    overrides = {"SECURE_HSTS_SECONDS": "0", "SESSION_COOKIE_SECURE": "false"}
    status, output, found = deploy_check({**fresh_install, **PRODUCTION, **overrides})
    assert status != 0, output
    assert found == {"security.W004", "security.W012"}, output


@pytest.mark.parametrize("key", [None, "", "insecure-local-only-oxide-batch-key-change-me"])
def test_the_https_switch_refuses_the_placeholder_key(
    fresh_install: dict[str, str], key: str | None
) -> None:
    env = {**fresh_install, **PRODUCTION}
    if key is None:
        del env["SECRET_KEY"]
    else:
        env["SECRET_KEY"] = key
    done = manage(env, "check")
    assert done.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY" in done.stderr, done.stderr


# ----------------------------------------------- the settings module, loaded afresh


def load_settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    """project/settings.py executed again under ``env`` (the real one stays loaded)."""
    for key in CONTROLLED:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("fresh_settings", ROOT / "project/settings.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_local_demo_needs_nothing_set(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_settings(monkeypatch)
    assert (loaded.DEBUG, loaded.SECURE_SSL_REDIRECT, loaded.SECURE_HSTS_SECONDS) == (
        False,
        False,
        0,
    )
    assert (loaded.SESSION_COOKIE_SECURE, loaded.CSRF_COOKIE_SECURE) == (False, False)
    assert loaded.SECRET_KEY == loaded.PLACEHOLDER_SECRET_KEY
    assert loaded.SECURE_PROXY_SSL_HEADER is None
    # The app's default applies (oxide_batch/conf.py, tests/test_conf.py).
    assert not hasattr(loaded, "OXIDE_BATCH_OPERATOR_THROTTLE_RATE")


def test_the_https_switch_and_its_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_settings(monkeypatch, **PRODUCTION)
    values: dict[str, Any] = {
        name: getattr(loaded, name)
        for name in (
            "SECURE_SSL_REDIRECT",
            "SECURE_HSTS_SECONDS",
            "SECURE_HSTS_INCLUDE_SUBDOMAINS",
            "SECURE_HSTS_PRELOAD",
            "SESSION_COOKIE_SECURE",
            "CSRF_COOKIE_SECURE",
        )
    }
    assert values == {
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
    }
    loaded = load_settings(
        monkeypatch,
        **PRODUCTION,
        SECURE_HSTS_SECONDS="3600",
        SECURE_HSTS_PRELOAD="0",
        CSRF_TRUSTED_ORIGINS="https://batch.example.com, https://ops.example.com",
    )
    assert (loaded.SECURE_HSTS_SECONDS, loaded.SECURE_HSTS_PRELOAD) == (3600, False)
    assert loaded.CSRF_TRUSTED_ORIGINS == ["https://batch.example.com", "https://ops.example.com"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("X-Forwarded-Proto", ("HTTP_X_FORWARDED_PROTO", "https")),
        ("x-forwarded-proto=https", ("HTTP_X_FORWARDED_PROTO", "https")),
        ("X-Forwarded-SSL=on", ("HTTP_X_FORWARDED_SSL", "on")),
        ("HTTP_X_FORWARDED_PROTO", ("HTTP_X_FORWARDED_PROTO", "https")),
    ],
)
def test_the_proxy_ssl_header(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: tuple[str, str]
) -> None:
    header = load_settings(monkeypatch, SECURE_PROXY_SSL_HEADER=text).SECURE_PROXY_SSL_HEADER
    assert header == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SECURE_PROXY_SSL_HEADER", "X Forwarded: https"),
        ("SECURE_HSTS_SECONDS", "a year"),
    ],
)
def test_a_bad_value_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings(monkeypatch, **{name: value})


@pytest.mark.parametrize("text", ["10/s", "off", "", "60/fortnight"])
def test_the_throttle_rate_reaches_the_app_as_written(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """The app parses it, and refuses a bad one (tests/test_conf.py)."""
    loaded = load_settings(monkeypatch, OXIDE_BATCH_OPERATOR_THROTTLE_RATE=text)
    rate = loaded.OXIDE_BATCH_OPERATOR_THROTTLE_RATE
    assert rate == text


@pytest.mark.django_db
def test_the_https_redirect_spares_the_probes(settings: Any) -> None:
    """Probes and the scraper may call the process over plain HTTP; the rest redirects."""
    settings.SECURE_SSL_REDIRECT = True
    settings.OXIDE_BATCH_METRICS_ALLOWED_IPS = ["*"]
    client = Client()  # a new handler: the middleware reads the settings again
    for path in ("/healthz", "/readyz", "/metrics"):
        assert client.get(path).status_code != 301, path
    for path in ("/api/v1/descriptor", "/admin/"):
        response = client.get(path)
        assert response.status_code == 301, path
        assert response["Location"] == f"https://testserver{path}"
