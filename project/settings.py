"""Settings for oxide_batch, read from the environment (12-factor).

``DATABASE_URL`` selects PostgreSQL (psycopg 3); without it the embedded
default is an SQLite file in the project directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext

from oxide_batch.domain.durations import parse_duration

# Lets generic classes such as ModelAdmin[...] be subscripted at run time.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = _env_bool("DEBUG", False)
# The fallback key only suits a local, DEBUG-free demo; production sets SECRET_KEY.
SECRET_KEY = os.environ.get("SECRET_KEY", "insecure-local-only-oxide-batch-key-change-me")
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "oxide_batch",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"

# Statement and lock timeouts are set once per connection (connection options),
# never per transaction, so they cost no round trip on the hot path.
STATEMENT_TIMEOUT = parse_duration(os.environ.get("OXIDE_BATCH_STATEMENT_TIMEOUT", "30s"))
LOCK_TIMEOUT = parse_duration(os.environ.get("OXIDE_BATCH_LOCK_TIMEOUT", "5s"))

# Checkpoint and context envelopes: canonical bytes and JSON depth (hard
# ceilings 1 MiB and 64, enforced by the domain).
OXIDE_BATCH_STATE_MAX_BYTES = int(os.environ.get("OXIDE_BATCH_STATE_MAX_BYTES", 64 * 1024))
OXIDE_BATCH_STATE_MAX_DEPTH = int(os.environ.get("OXIDE_BATCH_STATE_MAX_DEPTH", 16))


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
            # BEGIN IMMEDIATE: a unit of work takes the write lock up front, so
            # compare-and-swap stays correct without row locks.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": LOCK_TIMEOUT.total_seconds(),
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    config: dict[str, Any] = dict(
        dj_database_url.parse(url, conn_max_age=600, conn_health_checks=True)
    )
    statement_ms = int(STATEMENT_TIMEOUT.total_seconds() * 1000)
    lock_ms = int(LOCK_TIMEOUT.total_seconds() * 1000)
    config.setdefault("OPTIONS", {})
    config["OPTIONS"]["options"] = f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
    config["OPTIONS"].setdefault("connect_timeout", 5)
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", str(BASE_DIR / "var" / "static")))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
