"""The app's settings, each defined once: its Django setting name, its default
and what it accepts (docs/settings.md).

Read them as ``batch_settings.RECOVERY_STALE_AFTER`` (``from oxide_batch.conf
import batch_settings``), never as ``django.conf.settings.OXIDE_BATCH_…``: a
setting the host project does not define takes its default, a value is parsed
once and kept until Django's ``setting_changed`` signal (``override_settings``)
names it, and an invalid value raises ``ImproperlyConfigured`` naming the
setting. The system check ``app_settings_check`` reports every invalid value
(``oxide_batch.E101``…) before a command or the server runs.

Each setting accepts the Python value a host project writes (a ``timedelta``,
an ``int``, a list of strings, a string) and the text an environment variable
gives (``15m``, ``65536``, ``a,b``), so the standalone service's settings pass
its variables through unparsed.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast, overload
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.conf import settings as django_settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from oxide_batch.domain.durations import parse_duration
from oxide_batch.domain.evidence import DEFAULT_LEASE_TTL, validate_lease_ttl, validate_stale_after
from oxide_batch.domain.failure_detail import DetailLevel
from oxide_batch.domain.failures import validate_failure_url_template
from oxide_batch.domain.scrub import compile_redact_patterns
from oxide_batch.domain.state import (
    CEILING_MAX_BYTES,
    CEILING_MAX_DEPTH,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
)

T = TypeVar("T")
_ABSENT: Any = object()

# -- parsers: the Python value or its text → the value; ValueError says what is wrong.


def _integer(low: int, high: int | None = None) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, str):
            try:
                number = int(value)
            except ValueError:
                raise ValueError(f"not an integer: {value!r}") from None
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            raise ValueError(f"not an integer: {value!r}")
        if number < low or (high is not None and number > high):
            bounds = f"{low}..{high}" if high is not None else f"at least {low}"
            raise ValueError(f"must be {bounds}, got {number}")
        return number

    return parse


def _duration(value: object) -> timedelta:
    """A ``timedelta`` (not negative) or its text, ``90s``, ``15m``, ``1h``, ``30d``."""
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError(f"a negative duration: {value}")
        return value
    # A bare number has no unit: seconds for one reader, minutes for another.
    raise ValueError(
        f"expected a timedelta or a duration such as 90s, 15m, 1h or 30d, got {value!r}"
    )


def _stale_after(value: object) -> timedelta:
    return validate_stale_after(_duration(value))


def _lease_ttl(value: object) -> timedelta:
    return validate_lease_ttl(_duration(value))


def _text(value: object) -> str:
    """A string; ``None`` is the empty string (unset)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _failure_url_template(value: object) -> str:
    return validate_failure_url_template(_text(value))


def _names(value: object) -> tuple[str, ...]:
    """Comma-separated text or a list, tuple or set of strings; items are
    stripped and empty ones dropped, in their order."""
    if isinstance(value, str):
        items: Sequence[object] = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    elif isinstance(value, set | frozenset):
        items = sorted(value, key=str)
    else:
        raise ValueError(f"expected a list of strings or comma-separated text, got {value!r}")
    names = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"expected strings, got {item!r}")
        if item.strip():
            names.append(item.strip())
    return tuple(names)


def _fernet_keys(value: object) -> tuple[str, ...]:
    """Fernet keys: each 32 bytes in URL-safe base64 (``Fernet.generate_key()``)."""
    keys = _names(value)
    for key in keys:
        try:
            raw = base64.urlsafe_b64decode(key.encode())
        except (ValueError, binascii.Error):
            raw = b""
        if len(raw) != 32:
            raise ValueError("each key must be a Fernet key (32 bytes, URL-safe base64)")
    return keys


def _base_url(value: object) -> str:
    """Empty, or an absolute http(s) URL (the console's base, without a query)."""
    text = _text(value).strip()
    parts = urlsplit(text)
    if text and (parts.scheme not in {"http", "https"} or not parts.netloc or parts.query):
        raise ValueError(
            f"expected an absolute http(s) URL such as https://batch.example.com, got {text!r}"
        )
    return text


def _positive_duration(value: object) -> timedelta:
    duration = _duration(value)
    if duration <= timedelta(0):
        raise ValueError("must be more than 0s")
    return duration


def _detail_level(value: object) -> DetailLevel:
    """``off``, ``message`` or ``traceback``."""
    text = _text(value).strip().lower()
    try:
        return DetailLevel(text)
    except ValueError:
        raise ValueError(f"expected off, message or traceback, got {value!r}") from None


def _redact_patterns(value: object) -> tuple[re.Pattern[str], ...]:
    """A list of regular expressions, or text with one per line (not commas:
    a comma may be part of a regular expression)."""
    if isinstance(value, str):
        patterns: list[object] = [line for line in value.splitlines() if line.strip()]
    elif isinstance(value, list | tuple):
        patterns = list(value)
    else:
        raise ValueError(f"expected a list of regular expressions, got {value!r}")
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise ValueError(f"expected strings, got {pattern!r}")
    return compile_redact_patterns(cast(list[str], patterns))


def _visible_parameters(value: object) -> frozenset[str]:
    return frozenset(_names(value))


def _allowed_ips(value: object) -> tuple[str, ...]:
    allowed = _names(value)
    for network in allowed:
        if network != "*":
            ipaddress.ip_network(network, strict=False)  # ValueError names the bad one
    return allowed


_RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")


def _replica_alias(value: object) -> str:
    """The ``DATABASES`` alias of a read replica; empty (``None``): no replica."""
    alias = _text(value).strip()
    if alias and alias == "default":
        raise ValueError("names the primary ('default'), not a replica")
    if alias and alias not in getattr(django_settings, "DATABASES", {}):
        raise ValueError(f"{alias!r} is not an alias of DATABASES")
    return alias


def _throttle_rate(value: object) -> str | None:
    """DRF's ``N/s``, ``N/min``, ``N/hour``, ``N/day``; ``None``, ``off`` or empty: no throttle."""
    text = _text(value).strip()
    if text.lower() in {"", "off", "none"}:
        return None
    if _RATE.fullmatch(text) is None:
        raise ValueError(f"expected N/min (or N/s, N/hour, N/day, off), got {text!r}")
    return text


# -- the settings


@dataclass(frozen=True, eq=False)
class AppSetting(Generic[T]):
    """One app setting: ``batch_settings.<attribute>`` reads it (a descriptor)."""

    name: str
    default: T
    parse: Callable[[object], T]
    check_id: str

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> AppSetting[T]: ...
    @overload
    def __get__(self, instance: BatchSettings, owner: type[Any]) -> T: ...
    def __get__(self, instance: BatchSettings | None, owner: type[Any]) -> AppSetting[T] | T:
        if instance is None:
            return self
        return instance.value(self)

    def read(self) -> T:
        """The current value of django.conf.settings, parsed (not cached).

        Raises ``ImproperlyConfigured`` ("NAME: what is wrong") for an invalid value.
        """
        raw = getattr(django_settings, self.name, _ABSENT)
        if raw is _ABSENT:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as error:
            raise ImproperlyConfigured(f"{self.name}: {error}") from None


class BatchSettings:
    """The app settings, parsed, by their name without ``OXIDE_BATCH_``."""

    # Checkpoint and context envelopes: canonical bytes and JSON depth.
    STATE_MAX_BYTES = AppSetting(
        "OXIDE_BATCH_STATE_MAX_BYTES",
        DEFAULT_MAX_BYTES,
        _integer(1, CEILING_MAX_BYTES),
        "oxide_batch.E101",
    )
    STATE_MAX_DEPTH = AppSetting(
        "OXIDE_BATCH_STATE_MAX_DEPTH",
        DEFAULT_MAX_DEPTH,
        _integer(1, CEILING_MAX_DEPTH),
        "oxide_batch.E102",
    )
    # Inactivity before recovery may be proposed (contract §2.5.3), 1 min – 24 h.
    RECOVERY_STALE_AFTER = AppSetting(
        "OXIDE_BATCH_RECOVERY_STALE_AFTER", timedelta(minutes=15), _stale_after, "oxide_batch.E103"
    )
    # How far in the past a purge cutoff must be at least (contract §2.5.11).
    PURGE_MIN_AGE = AppSetting(
        "OXIDE_BATCH_PURGE_MIN_AGE", timedelta(hours=1), _duration, "oxide_batch.E104"
    )
    # A failure id's link to the team's log search (contract §5.5); empty: no links.
    FAILURE_URL_TEMPLATE = AppSetting(
        "OXIDE_BATCH_FAILURE_URL_TEMPLATE", "", _failure_url_template, "oxide_batch.E105"
    )
    # Parameter names whose values are shown; others are sensitive (contract §4.3).
    VISIBLE_PARAMETERS = AppSetting(
        "OXIDE_BATCH_VISIBLE_PARAMETERS", frozenset[str](), _visible_parameters, "oxide_batch.E106"
    )
    # Operator actions per user (oxide_batch.api.throttling); None: no throttle.
    OPERATOR_THROTTLE_RATE = AppSetting[str | None](
        "OXIDE_BATCH_OPERATOR_THROTTLE_RATE", "60/min", _throttle_rate, "oxide_batch.E107"
    )
    # /metrics: client addresses or networks ("*": any), then the bearer token.
    METRICS_ALLOWED_IPS = AppSetting[tuple[str, ...]](
        "OXIDE_BATCH_METRICS_ALLOWED_IPS", ("127.0.0.1", "::1"), _allowed_ips, "oxide_batch.E108"
    )
    METRICS_TOKEN = AppSetting("OXIDE_BATCH_METRICS_TOKEN", "", _text, "oxide_batch.E109")
    # Gauges are computed at most once per TTL, each status count reads at most CAP rows.
    METRICS_GAUGE_TTL = AppSetting(
        "OXIDE_BATCH_METRICS_GAUGE_TTL", timedelta(seconds=15), _duration, "oxide_batch.E110"
    )
    METRICS_STATUS_COUNT_CAP = AppSetting(
        "OXIDE_BATCH_METRICS_STATUS_COUNT_CAP", 10_000, _integer(1), "oxide_batch.E111"
    )
    # The statement timeout of /readyz and the gauge queries (PostgreSQL).
    METRICS_DB_TIMEOUT = AppSetting(
        "OXIDE_BATCH_METRICS_DB_TIMEOUT", timedelta(seconds=2), _duration, "oxide_batch.E112"
    )

    # An owner's lease (contract §2.5.3): it expires this long after the owner's latest
    # activity, and the execution may then be recovered (the watchdog does), 5 s – 24 h.
    LEASE_TTL = AppSetting(
        "OXIDE_BATCH_LEASE_TTL", DEFAULT_LEASE_TTL, _lease_ttl, "oxide_batch.E113"
    )

    # The console's read replica (oxide_batch/db/replica.py, docs/scale-out.md):
    # the DATABASES alias its list, detail and dashboard pages read; empty: none.
    REPLICA_DATABASE = AppSetting(
        "OXIDE_BATCH_REPLICA_DATABASE", "", _replica_alias, "oxide_batch.E114"
    )
    # A page read from the replica says how far behind it is above this lag.
    REPLICA_LAG_NOTICE = AppSetting(
        "OXIDE_BATCH_REPLICA_LAG_NOTICE", timedelta(seconds=5), _duration, "oxide_batch.E115"
    )
    # After a successful POST in the console, that browser reads the primary this long.
    REPLICA_PIN = AppSetting(
        "OXIDE_BATCH_REPLICA_PIN", timedelta(seconds=15), _duration, "oxide_batch.E116"
    )

    # Notifications (issue 41, docs/notifications.md): the Fernet keys that seal
    # destinations (the first encrypts; empty: one derived from SECRET_KEY), the
    # hosts a webhook may reach over plain http, the console's base URL a
    # payload links to, and the delivery's retries.
    NOTIFY_KEYS = AppSetting[tuple[str, ...]](
        "OXIDE_BATCH_NOTIFY_KEYS", (), _fernet_keys, "oxide_batch.E117"
    )
    WEBHOOK_HTTP_HOSTS = AppSetting[tuple[str, ...]](
        "OXIDE_BATCH_WEBHOOK_HTTP_HOSTS", (), _names, "oxide_batch.E118"
    )
    CONSOLE_URL = AppSetting("OXIDE_BATCH_CONSOLE_URL", "", _base_url, "oxide_batch.E119")
    NOTIFY_ATTEMPTS = AppSetting(
        "OXIDE_BATCH_NOTIFY_ATTEMPTS", 8, _integer(1, 100), "oxide_batch.E120"
    )
    NOTIFY_BACKOFF = AppSetting(
        "OXIDE_BATCH_NOTIFY_BACKOFF", timedelta(seconds=2), _duration, "oxide_batch.E121"
    )
    NOTIFY_BACKOFF_MAX = AppSetting(
        "OXIDE_BATCH_NOTIFY_BACKOFF_MAX", timedelta(minutes=10), _duration, "oxide_batch.E122"
    )
    NOTIFY_TIMEOUT = AppSetting(
        "OXIDE_BATCH_NOTIFY_TIMEOUT", timedelta(seconds=10), _positive_duration, "oxide_batch.E123"
    )

    # How much of a failure's detail is kept (contract §2, decision 300), and the
    # patterns scrubbed from it besides the built-in secret shapes (decision 301).
    FAILURE_DETAIL = AppSetting(
        "OXIDE_BATCH_FAILURE_DETAIL", DetailLevel.MESSAGE, _detail_level, "oxide_batch.E124"
    )
    FAILURE_REDACT = AppSetting[tuple[re.Pattern[str], ...]](
        "OXIDE_BATCH_FAILURE_REDACT", (), _redact_patterns, "oxide_batch.E125"
    )
    # Issue 43 (decision 464): how many times a partition may be given to a new
    # worker after a failed one in one attempt; one more failure fails the parent step.
    PARTITION_RETRY_LIMIT = AppSetting(
        "OXIDE_BATCH_PARTITION_RETRY_LIMIT", 3, _integer(0, 100), "oxide_batch.E126"
    )

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def value(self, setting: AppSetting[T]) -> T:
        """``setting``'s parsed value, cached until the setting changes."""
        try:
            return cast(T, self._cache[setting.name])
        except KeyError:
            value = self._cache[setting.name] = setting.read()
            return value

    def forget(self, name: str | None = None) -> None:
        """Drop the cached value of ``name`` (every value without it)."""
        if name is None:
            self._cache.clear()
        else:
            self._cache.pop(name, None)


SETTINGS: tuple[AppSetting[Any], ...] = tuple(
    value for value in vars(BatchSettings).values() if isinstance(value, AppSetting)
)
SETTING_NAMES: frozenset[str] = frozenset(setting.name for setting in SETTINGS)

batch_settings = BatchSettings()


def _forget_changed_setting(*, setting: str, **kwargs: Any) -> None:
    if setting in SETTING_NAMES:
        batch_settings.forget(setting)


setting_changed.connect(_forget_changed_setting, dispatch_uid="oxide_batch.conf")


def _invalid() -> list[tuple[AppSetting[Any], str]]:
    invalid = []
    for setting in SETTINGS:
        try:
            setting.read()
        except ImproperlyConfigured as error:
            invalid.append((setting, str(error)))
    return invalid


@checks.register()
def app_settings_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """One ``checks.Error`` per invalid app setting, its message the one reading
    it would raise ("NAME: what is wrong")."""
    return [
        checks.Error(message, hint="see docs/settings.md", id=setting.check_id)
        for setting, message in _invalid()
    ]


def validate_settings() -> None:
    """Raise ``ImproperlyConfigured`` naming every invalid app setting: for a
    start that runs no system check (the WSGI application)."""
    invalid = _invalid()
    if invalid:
        raise ImproperlyConfigured("; ".join(message for _, message in invalid))


# -- the read replica's wiring (docs/scale-out.md): the setting alone reads nothing there.

REPLICA_ROUTER = "oxide_batch.db.router.ReplicaRouter"
REPLICA_MIDDLEWARE = "oxide_batch.db.middleware.ReplicaReadsMiddleware"


@checks.register()
def replica_wiring_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """A warning when ``OXIDE_BATCH_REPLICA_DATABASE`` names a replica that the
    router or the middleware is missing for: the console would read the primary."""
    try:
        replica = BatchSettings.REPLICA_DATABASE.read()
    except ImproperlyConfigured:
        return []  # app_settings_check reports it
    if not replica:
        return []
    wanted = [
        (REPLICA_ROUTER, "DATABASE_ROUTERS", "oxide_batch.W203"),
        (REPLICA_MIDDLEWARE, "MIDDLEWARE", "oxide_batch.W204"),
    ]
    return [
        checks.Warning(
            f"OXIDE_BATCH_REPLICA_DATABASE names {replica!r} but {path} is not in "
            f"{setting}: the console reads the primary only",
            hint=f"add {path!r} to {setting} (docs/scale-out.md)",
            id=check_id,
        )
        for path, setting, check_id in wanted
        if path not in getattr(django_settings, setting, ())
    ]
