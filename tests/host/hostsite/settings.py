"""The host project's settings: what a team that already has a Django project
would write, with oxide_batch added (README, "Add oxide_batch to your Django
project") and nothing else of ours."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = "host-project-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    # The host's own token scheme beside the app's (keyword "Token" both).
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "hostsite.accounts.apps.AccountsConfig",
    "hostsite.shop.apps.ShopConfig",
    "axes",
    "oxide_batch",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
]

# The console's login throttle, as the README's "Add oxide_batch to your Django
# project" says (django-axes; docs/settings.md, "Console logins").
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_LOCKOUT_TEMPLATE = "admin/oxide_batch/login_locked.html"
AXES_VERBOSE = False

ROOT_URLCONF = "hostsite.urls"
AUTH_USER_MODEL = "accounts.Member"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

# DATABASE_URL (PostgreSQL) with Django's own backend and its defaults, else
# an SQLite file with Django's defaults (no BEGIN IMMEDIATE: oxide_batch.W202).
DATABASES = {
    "default": (
        dj_database_url.parse(os.environ["DATABASE_URL"])
        if os.environ.get("DATABASE_URL")
        else {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("HOST_SQLITE_PATH", str(BASE_DIR / "host.sqlite3")),
        }
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

# No "throttle" cache: the app brings its own (oxide_batch.api.throttling).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Everything here differs from what the app's API answers with; none of it may
# reach the API's URLs (oxide_batch/api/contract.py).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.BasicAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 2,
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.BrowsableAPIRenderer",
        "rest_framework.renderers.JSONRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": [
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.JSONParser",
    ],
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.QueryParameterVersioning",
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": "1/minute"},
    "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "hostsite.shop.views.shop_exception_handler",
    "NON_FIELD_ERRORS_KEY": "problems",
    "DATETIME_FORMAT": "%d/%m/%Y %H:%M",
    "COMPACT_JSON": False,
    "UNICODE_JSON": False,
    "STRICT_JSON": False,
    "URL_FORMAT_OVERRIDE": "fmt",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Host shop API",
    "SCHEMA_PATH_PREFIX_TRIM": True,
    "COMPONENT_SPLIT_REQUEST": False,
    "SERVE_PUBLIC": False,
    "SWAGGER_UI_DIST": "https://cdn.example.invalid/swagger-ui",
    "REDOC_DIST": "https://cdn.example.invalid/redoc",
}

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "Europe/Paris"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/assets/"
STATIC_ROOT = os.environ.get("HOST_STATIC_ROOT", str(BASE_DIR / "collected-static"))
