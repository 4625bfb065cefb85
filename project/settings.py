"""Settings for oxide_batch, read from the environment (12-factor).

``DATABASE_URL`` selects PostgreSQL (psycopg 3); without it the embedded
default is an SQLite file in the project directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured
from whitenoise.compress import Compressor

from oxide_batch.api.openapi import SPECTACULAR
from oxide_batch.conf import REPLICA_MIDDLEWARE, REPLICA_ROUTER, SETTING_NAMES
from oxide_batch.db.url import parse_database_url
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


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: not an integer: {value!r}") from None


DEBUG = _env_bool("DEBUG", False)
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

# -- Production (README "Production settings"). One switch says the site is
# served over HTTPS only, to others: it turns every HTTPS setting on (each can
# still be overridden by its own variable) and refuses the placeholder key, so
# `manage.py check --deploy --fail-level WARNING` passes. Without it, the local
# demo (scripts/run, plain HTTP) works with nothing set.
_HTTPS = _env_bool("OXIDE_BATCH_HTTPS", False)
PLACEHOLDER_SECRET_KEY = "insecure-local-only-oxide-batch-key-change-me"  # nosec B105 # refused with OXIDE_BATCH_HTTPS


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY", "").strip()
    if key and key != PLACEHOLDER_SECRET_KEY:
        return key
    if _HTTPS:
        raise ImproperlyConfigured(
            "SECRET_KEY: set a long random value (OXIDE_BATCH_HTTPS is on, so the "
            "local-only placeholder is refused)"
        )
    return PLACEHOLDER_SECRET_KEY


def _proxy_ssl_header() -> tuple[str, str] | None:
    """``X-Forwarded-Proto`` (meaning ``X-Forwarded-Proto: https``) or
    ``Header=value``: the header the TLS-terminating proxy sets (and strips from
    clients) on a request that reached it over HTTPS."""
    text = os.environ.get("SECURE_PROXY_SSL_HEADER", "").strip()
    if not text:
        return None
    name, _, value = text.partition("=")
    name, value = name.strip(), value.strip() or "https"
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ImproperlyConfigured(f"SECURE_PROXY_SSL_HEADER: not a header name: {name!r}")
    meta = name.upper().replace("-", "_")
    return (meta if meta.startswith("HTTP_") else f"HTTP_{meta}", value)


SECRET_KEY = _secret_key()
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", _HTTPS)
# Probes and the scraper may call the process directly over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = _env_int("SECURE_HSTS_SECONDS", 31_536_000 if _HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _HTTPS)
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", _HTTPS)
SESSION_COOKIE_SECURE = _env_bool("SESSION_COOKIE_SECURE", _HTTPS)
CSRF_COOKIE_SECURE = _env_bool("CSRF_COOKIE_SECURE", _HTTPS)
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header()
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # django.contrib.admin with the console's site (oxide_batch/admin_site.py).
    "oxide_batch.admin_site.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Throttles the console's logins (below; docs/settings.md, "Console logins").
    "axes",
    "oxide_batch",
]

MIDDLEWARE = [
    # First: X-Request-ID on every response and API request metrics.
    "oxide_batch.observability.middleware.RequestObservabilityMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files from STATIC_ROOT (collectstatic), before sessions and the
    # database: a stylesheet costs no query.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Answers a login axes refused with the lockout page (after the view ran).
    "axes.middleware.AxesMiddleware",
    # The read replica's middleware comes last when a replica is named (below).
]

ROOT_URLCONF = "project.urls"

# Console logins (decision 202, docs/settings.md "Console logins"): django-axes
# refuses the login of an account, and of a client address, after
# AXES_FAILURE_LIMIT failures, for AXES_COOLOFF_TIME (or until
# `manage.py axes_reset_username NAME` / `axes_reset_ip ADDRESS`).
# Its backend comes first: it refuses before any password is checked. API tokens
# never pass through authenticate(), so they are never refused for this.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = parse_duration(os.environ.get("AXES_COOLOFF_TIME", "15m"))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "admin/oxide_batch/login_locked.html"
# The lockouts are read and cleared with axes' commands, not in the console.
AXES_ENABLE_ADMIN = False
# No "AXES: BEGIN …" line on every start (a command's output stays its own);
# each failure and lockout is still an event line of the app's.
AXES_VERBOSE = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The service's own overrides of Django's admin frame (the app's pages
        # are in oxide_batch/templates, found through APP_DIRS).
        "DIRS": [BASE_DIR / "project" / "templates"],
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

# The app's settings (oxide_batch/conf.py, docs/settings.md): each is the
# variable of the same name, when set, as its text. The app parses it; an
# invalid one fails the system check oxide_batch.E101… (manage.py check, the
# migrate of scripts/serve) and stops project/wsgi.py, naming the variable.
globals().update({name: os.environ[name] for name in sorted(SETTING_NAMES) if name in os.environ})

# The largest request body (bytes) the API reads; larger → 413 problem+json.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("DATA_UPLOAD_MAX_MEMORY_SIZE", 2 * 1024 * 1024))

# The API's views carry their own DRF classes (oxide_batch/api/contract.py,
# decision 117), so nothing here shapes its contract; this is for the tests.
REST_FRAMEWORK = {"TEST_REQUEST_DEFAULT_FORMAT": "json"}


# "throttle" is a table of the database (created by a migration), so every
# gunicorn worker and every host on the same database shares one count; a
# per-process cache would multiply the allowance by the number of processes.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "ob_throttle_cache",
        # Expired entries are culled first; above this, a third of the rest.
        "OPTIONS": {"MAX_ENTRIES": 10_000},
    },
}

# The app's OpenAPI settings, which its schema and docs views apply themselves;
# named here for `manage.py spectacular` and the tests' SchemaGenerator.
SPECTACULAR_SETTINGS = SPECTACULAR


def _pg_pooler() -> str:
    value = os.environ.get("OXIDE_BATCH_PG_POOLER", "").strip().lower()
    if value not in {"", "session", "transaction"}:
        raise ImproperlyConfigured(
            f"OXIDE_BATCH_PG_POOLER: 'transaction', 'session' or empty, not {value!r}"
        )
    return value


# What sits between the app and PostgreSQL: nothing (or a session pooler, which
# changes nothing here) or a transaction pooler such as PgBouncer with
# `pool_mode = transaction` (docs/scale-out.md).
PG_POOLER = _pg_pooler()


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
    # Several hosts as libpq reads them (h1:5432,h2:5433 with
    # ?target_session_attrs=read-write): the primary wherever it is.
    return _postgresql(url)


def _postgresql(url: str) -> dict[str, Any]:
    """The ``DATABASES`` entry of a PostgreSQL URL: the primary's or the replica's."""
    config = parse_database_url(url, conn_max_age=600, conn_health_checks=True)
    if config["ENGINE"] == "django.db.backends.postgresql":
        # Django's backend with a health check that costs no round trip.
        config["ENGINE"] = "oxide_batch.db.postgresql"
    config.setdefault("OPTIONS", {})
    pooled = PG_POOLER == "transaction"
    if not pooled:
        # Startup parameters: a transaction pooler (PgBouncer 1.18) refuses the
        # `options` parameter, and a session SET would leak to whichever client
        # gets the server connection next; behind one the pooler sets them on its
        # server connections (connect_query) or the role does (docs/scale-out.md).
        statement_ms = int(STATEMENT_TIMEOUT.total_seconds() * 1000)
        lock_ms = int(LOCK_TIMEOUT.total_seconds() * 1000)
        config["OPTIONS"]["options"] = (
            f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
        )
    config["OPTIONS"].setdefault("connect_timeout", 5)
    # Parameters bound by the server, and each connection prepares a statement
    # it has run 5 times (psycopg's default; Django's is never): the hot CAS
    # statements are then neither quoted client-side nor parsed and planned
    # again (docs/performance.md). OXIDE_BATCH_PG_PREPARE=false turns preparing
    # off, for a transaction-mode pooler that cannot carry prepared statements;
    # OXIDE_BATCH_PG_POOLER=transaction implies it. Server-side binding itself
    # (unnamed statements) works through one.
    config["OPTIONS"].setdefault("server_side_binding", True)
    if _env_bool("OXIDE_BATCH_PG_PREPARE", not pooled):
        config["OPTIONS"].setdefault("prepare_threshold", 5)
    # A named cursor (QuerySet.iterator()) lives in a session; behind a
    # transaction pooler its FETCH may reach another server connection.
    config["DISABLE_SERVER_SIDE_CURSORS"] = pooled
    return config


DATABASES = {"default": _database()}


def _replica(url: str) -> dict[str, Any]:
    """``DATABASES["replica"]``: a streaming replica of the primary (hot standby)."""
    config = _postgresql(url)
    if DATABASES["default"]["ENGINE"] != "oxide_batch.db.postgresql" or config["ENGINE"] != (
        "oxide_batch.db.postgresql"
    ):
        raise ImproperlyConfigured(
            "DATABASE_REPLICA_URL: a PostgreSQL replica of a PostgreSQL DATABASE_URL"
        )
    # The tests read the primary's test database through it; none is created.
    config["TEST"] = {"MIRROR": "default"}
    return config


# A streaming replica the console's lists, detail pages and dashboard read
# (docs/scale-out.md); everything else reads and writes the primary.
_REPLICA_URL = os.environ.get("DATABASE_REPLICA_URL", "").strip()
if _REPLICA_URL:
    DATABASES["replica"] = _replica(_REPLICA_URL)
    if "OXIDE_BATCH_REPLICA_DATABASE" not in os.environ:
        OXIDE_BATCH_REPLICA_DATABASE = "replica"
# The replica's router and middleware are installed only when a replica is
# named: without one, no request and no query passes through them (they would
# answer "no opinion" each time; decision 176).
DATABASE_ROUTERS: list[str] = []
if globals().get("OXIDE_BATCH_REPLICA_DATABASE"):
    DATABASE_ROUTERS.append(REPLICA_ROUTER)
    MIDDLEWARE.append(REPLICA_MIDDLEWARE)

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
# whitenoise serves what collectstatic put in STATIC_ROOT, compressed (docs/deployment.md).
# With OXIDE_BATCH_STATIC_MANIFEST (scripts/serve turns it on) the pages name the
# hashed copies collectstatic wrote, which browsers may keep for a year; that needs
# the manifest, so it is off where nothing is collected: the tests, and scripts/run,
# whose runserver serves the apps' own files by their plain names.
_STATIC_MANIFEST = _env_bool("OXIDE_BATCH_STATIC_MANIFEST", False)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if _STATIC_MANIFEST
            else "whitenoise.storage.CompressedStaticFilesStorage"
        )
    },
}
# Source maps are fetched by a developer's browser tools only; compressing them
# (several MB for Swagger UI and Redoc) was most of collectstatic's time.
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = (*Compressor.SKIP_COMPRESS_EXTENSIONS, "map")

# Structured events (docs/observability.md): one JSON line per event on the
# logger ``oxide_batch.events`` (not propagated, so each event is logged once).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "oxide_batch.observability.events.JsonFormatter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler"},
        "events": {"class": "logging.StreamHandler", "formatter": "json"},
    },
    "loggers": {
        "oxide_batch.events": {
            "handlers": ["events"],
            "level": os.environ.get("OXIDE_BATCH_EVENTS_LEVEL", "INFO"),
            "propagate": False,
        },
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
