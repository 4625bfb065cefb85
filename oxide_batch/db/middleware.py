"""Where the console's read replica is chosen: per request, by the page.

List :class:`ReplicaReadsMiddleware` in ``MIDDLEWARE`` (after the
authentication and message middleware) and :class:`oxide_batch.db.router.ReplicaRouter`
in ``DATABASE_ROUTERS``. Without ``OXIDE_BATCH_REPLICA_DATABASE`` it does
nothing: no query, no cookie.

With it, a GET (or HEAD) of a console read page of the app on any admin site —
a list (``…_changelist``), a detail page (``…_change``, its case file
included, and ``…_history``) or the dashboard (its timeline and grid) — reads
the app's tables on the replica, unless:

- the browser is pinned to the primary: a successful POST in the console
  (an action, a confirmation, a form) sets a signed cookie for
  ``OXIDE_BATCH_REPLICA_PIN``, so the page the action redirects to shows
  what was just done;
- the replica failed in the last :data:`~oxide_batch.db.replica.RETRY_AFTER`
  seconds, or fails the lag query now: the page reads the primary and says so.

A page whose reads fail on the replica is called again with every read on the
primary (a GET page only reads), and says so; an error that is not the
replica's fails the second call as well and is answered as it would be.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponseBase

from oxide_batch.conf import batch_settings
from oxide_batch.db.replica import (
    FAILED,
    UNREACHABLE,
    PageReads,
    current,
    is_down,
    mark_down,
    measure_lag,
    page_reads,
)

# The app_name of every admin site's URLs (AdminSite.urls), whatever its namespace.
ADMIN_APP = "admin"
# The console's read pages by URL name: lists, details, histories, the dashboard.
# Never a confirmation (…_act), an add, change or delete form, or another app's page.
READ_PAGE = re.compile(r"oxide_batch_(?:dashboard|[a-z0-9]+_(?:changelist|change|history))")
READ_METHODS = frozenset({"GET", "HEAD"})

PIN_COOKIE = "oxide_batch_primary"
PIN_SALT = "oxide_batch.db.middleware.pin"


def in_console(request: HttpRequest) -> bool:
    match = request.resolver_match
    return match is not None and ADMIN_APP in match.app_names


def is_read_page(request: HttpRequest) -> bool:
    """Whether ``request`` asks for a console page that may read the replica."""
    match = request.resolver_match
    return (
        request.method in READ_METHODS
        and in_console(request)
        and match is not None
        and READ_PAGE.fullmatch(match.url_name or "") is not None
    )


def is_pinned(request: HttpRequest) -> bool:
    """Whether the browser made a successful console POST less than
    ``OXIDE_BATCH_REPLICA_PIN`` ago (the cookie is signed and dated)."""
    seconds = batch_settings.REPLICA_PIN
    if not seconds or PIN_COOKIE not in request.COOKIES:
        return False
    return (
        request.get_signed_cookie(PIN_COOKIE, default=None, salt=PIN_SALT, max_age=seconds)
        is not None
    )


def pin(request: HttpRequest, response: HttpResponseBase) -> None:
    """Send the browser's next console reads to the primary for ``OXIDE_BATCH_REPLICA_PIN``."""
    seconds = batch_settings.REPLICA_PIN
    if seconds:
        response.set_signed_cookie(
            PIN_COOKIE,
            "primary",
            salt=PIN_SALT,
            max_age=seconds,
            secure=request.is_secure(),
            httponly=True,
            samesite="Lax",
        )


class ReplicaReadsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not batch_settings.REPLICA_DATABASE:
            return self.get_response(request)
        with page_reads(PageReads()):
            response = self.get_response(request)
        if request.method == "POST" and response.status_code < 400 and in_console(request):
            pin(request, response)
        return response

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponseBase],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> None:
        reads = current()
        if reads is None or not is_read_page(request) or is_pinned(request):
            return
        alias = batch_settings.REPLICA_DATABASE
        if is_down(alias):
            reads.read_primary(UNREACHABLE)
            return
        try:
            reads.lag = measure_lag(alias)
        except DatabaseError:
            mark_down(alias)
            reads.read_primary(UNREACHABLE)
            return
        reads.replica = alias
        reads.again = partial(view_func, request, *view_args, **view_kwargs)

    def process_exception(
        self, request: HttpRequest, exception: Exception
    ) -> HttpResponseBase | None:
        """A read page that failed on the replica, read again on the primary."""
        reads = current()
        if reads is None or reads.replica is None or reads.again is None:
            return None
        if not isinstance(exception, DatabaseError):
            return None
        mark_down(reads.replica)
        reads.read_primary(FAILED)
        response: Any = reads.again()
        # The handler renders a response before its exception reaches here, never after.
        if callable(getattr(response, "render", None)):
            response = response.render()
        return cast(HttpResponseBase, response)
