"""Console logins as operators watch them (decision 202): every failed login
and every attempt refused by the lockout is an event line and a count.

The throttle itself is django-axes' (its backend, middleware and
``AccessAttempt`` table); this module only listens. ``user_login_failed`` is
Django's signal, sent for every failed ``authenticate`` — a wrong password and
an attempt axes refused alike; ``user_locked_out`` is axes', sent when an
account or an address reaches the limit and on each attempt refused while
locked. API tokens never reach either: they do not pass through
``authenticate``. No user name is logged (it is whatever was typed); the client
address is, as axes resolves it, so an operator can unlock it
(``manage.py axes_reset_ip``).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.signals import user_login_failed

from oxide_batch.observability import events, metrics


def on_login_failed(sender: Any, credentials: Any = None, request: Any = None, **_: Any) -> None:
    metrics.CONSOLE_LOGIN_FAILURES.inc()
    events.emit("console.login_failed", {"client_ip": _address(request), "outcome": "failed"})


def on_locked_out(sender: Any, request: Any = None, ip_address: Any = None, **_: Any) -> None:
    metrics.CONSOLE_LOCKOUTS.inc()
    address = ip_address if isinstance(ip_address, str) else _address(request)
    events.emit("console.login_locked_out", {"client_ip": address, "outcome": "refused"})


def _address(request: Any) -> str | None:
    found = getattr(request, "axes_ip_address", None) or getattr(request, "META", {}).get(
        "REMOTE_ADDR"
    )
    return found if isinstance(found, str) else None


def connect() -> None:
    """Listen to Django's failed logins and, when axes is installed, its lockouts."""
    user_login_failed.connect(on_login_failed, dispatch_uid="oxide_batch.login_failed")
    if apps.is_installed("axes"):
        from axes.signals import user_locked_out  # type: ignore[import-untyped]

        user_locked_out.connect(on_locked_out, dispatch_uid="oxide_batch.locked_out")
