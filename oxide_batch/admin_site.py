"""The console's admin site — titled for oxide_batch, batch metadata first —
the app config that makes it Django's default site, and the console's refusal
page.

The standalone service's INSTALLED_APPS names :class:`ConsoleAdminConfig`
instead of ``django.contrib.admin`` (a host project keeps its own admin site,
on which the app's admin classes register the same way), so ``admin.site``
*is* a :class:`ConsoleAdminSite` and ``@admin.register`` keeps working
unchanged. Both live outside
``oxide_batch.admin``: that package imports its pages (and models) when loaded,
and the default site is built while the admin modules register, so a site class
inside it would be built twice and lose the first registrations.

Refusals (issue 25 point 6): a staff user without a permission gets a 403 page
in the console's frame (header, breadcrumbs) that names what is needed — the
permission's name and ``app_label.codename``, and the role groups of
:mod:`oxide_batch.roles` that grant it — with a link back. Console views
raise ``PermissionDenied("oxide_batch.<codename>")``; Django's own views raise
it bare, and the page then names the model's permission for that URL (and the
console's ``oxide_batch.view_batch`` for the batch tables), else
``oxide_batch.view_batch``. It is answered wherever the refusal happens, with
no help from the project: every URL of the app's model admins
(:class:`oxide_batch.admin.base.NoEditsAdmin`, on any admin site, so in a host
project that sets no ``handler403``), every admin view of a
:class:`ConsoleAdminSite`, and the standalone service's ``handler403`` outside
the API (``oxide_batch.api.errors``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.http import url_has_allowed_host_and_scheme

from oxide_batch import roles

APP_LABEL = "oxide_batch"
# The permission every console page is read with (the batch-viewer role's).
BASE_PERMISSION = roles.perm(roles.VIEW_BATCH)
REFUSAL_TEMPLATE = "admin/oxide_batch/403.html"
REFUSAL_TITLE = "Permission needed"
NOT_FOUND_TEMPLATE = "admin/oxide_batch/404.html"
NOT_FOUND_TITLE = "Not found"
PERMISSION_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\Z")
# The suffix of an admin URL's name → the model permission Django checks there.
ADMIN_URL_ACTIONS = (
    ("_changelist", "view"),
    ("_change", "view"),
    ("_history", "view"),
    ("_add", "add"),
    ("_delete", "delete"),
)

View = Callable[..., HttpResponse]
_ViewT = TypeVar("_ViewT", bound=Callable[..., Any])


class ConsoleAdminSite(admin.AdminSite):
    site_header = "oxide_batch console"
    site_title = "oxide_batch console"
    index_title = "Batch metadata and administration"
    # Django's "View site" links to "/", which this project does not serve; the
    # header links the dashboard and the API docs instead (admin/base_site.html).
    site_url = None

    def get_app_list(
        self, request: HttpRequest, app_label: str | None = None
    ) -> list[dict[str, Any]]:
        """Django's list (apps by name), with the batch metadata moved first:
        it is what an operator opens the console for."""
        apps = super().get_app_list(request, app_label)
        return sorted(apps, key=lambda app: app["app_label"] != APP_LABEL)

    def admin_view(self, view: _ViewT, cacheable: bool = False) -> _ViewT:
        """Django's wrapper (staff only, never cached, CSRF), refusing in the
        console's frame: every admin page of this site, Django's own included."""
        return cast(_ViewT, refusing(super().admin_view(view, cacheable), self))


class ConsoleAdminConfig(AdminConfig):
    default_site = "oxide_batch.admin_site.ConsoleAdminSite"


# -- the refusal page ---------------------------------------------------------------


def refusing(view: View, site: admin.AdminSite) -> View:
    """``view``, answering a ``PermissionDenied`` with :func:`refusal_response`
    and an ``Http404`` with :func:`not_found_response` (both in the console's frame)."""

    @wraps(view)
    def refused_in_frame(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except PermissionDenied as exception:
            return refusal_response(request, exception, site)
        except Http404 as exception:
            return not_found_response(request, exception, site)

    return refused_in_frame


def not_found_response(
    request: HttpRequest, exception: Http404, site: admin.AdminSite
) -> HttpResponse:
    """The 404 page in the admin's frame (issue 39): what was not found — the
    exception's message, which the console's views write for a reader (a row
    id that is no row: never there, or purged) — and the way back. Django's
    admin answers a missing row by redirecting to the admin's start page with
    a message; the console says it where it was asked."""
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    back_url, back_label = back_link(request, site)
    context = {
        **site.each_context(request),
        "title": NOT_FOUND_TITLE,
        "message": message or "There is no such page in the console.",
        "back_url": back_url,
        "back_label": back_label,
    }
    response = render(request, NOT_FOUND_TEMPLATE, context, status=404)
    add_never_cache_headers(response)
    return response


def needed_permissions(request: HttpRequest, exception: BaseException | None) -> list[str]:
    """The permissions the refused page needs (any one suffices), as
    ``app_label.codename``: the exception's message when it is one, else what
    the URL's model admin checks there, else the console's base permission."""
    message = exception.args[0] if exception is not None and exception.args else None
    if isinstance(message, str) and PERMISSION_NAME.match(message):
        return [message]
    match = getattr(request, "resolver_match", None)
    model_admin = getattr(match.func, "model_admin", None) if match is not None else None
    if model_admin is None:
        return [BASE_PERMISSION]
    opts = model_admin.opts
    url_name = (match.url_name if match is not None else None) or ""
    action = next((a for suffix, a in ADMIN_URL_ACTIONS if url_name.endswith(suffix)), None)
    console = getattr(model_admin, "console_permission", None)
    if action is None:  # a page of the console's own (the dashboard, a confirmation)
        return [console or BASE_PERMISSION]
    model_permission = f"{opts.app_label}.{get_permission_codename(action, opts)}"
    if console and action == "view":
        # A batch table: read with the role's permission, or Django's own for it.
        return [console, model_permission]
    return [model_permission]


def describe_permission(permission: str) -> dict[str, Any]:
    """What the page says of one permission: its name, ``app_label.codename``
    and the role groups (``oxide_batch.roles``) that carry it."""
    app_label, _, codename = permission.partition(".")
    if app_label == roles.APP_LABEL and codename in roles.PERMISSIONS:
        name = roles.PERMISSIONS[codename]
        groups = roles.groups_granting(codename)
    else:
        from oxide_batch.selectors.accounts import permission_name

        name, groups = (permission_name(app_label, codename) or codename), ()
    return {"name": name, "permission": permission, "groups": groups}


def back_link(request: HttpRequest, site: admin.AdminSite) -> tuple[str, str]:
    """Where the page leads back to: the page the user came from when the
    ``Referer`` is of this site (and not the refused page itself), else the
    console's start page."""
    referer = request.headers.get("Referer", "")
    if referer and url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        parts = urlsplit(referer)
        # The link keeps only the path and query; a path that a browser would
        # read as another host ("//evil.example/x", "/\\evil.example/x") is
        # no page of this site, so it must start with exactly one "/".
        local = urlunsplit(("", "", parts.path, parts.query, ""))
        if (
            parts.path.startswith("/")
            and not parts.path.startswith(("//", "/\\"))
            and parts.path != request.path
            and url_has_allowed_host_and_scheme(local, allowed_hosts={request.get_host()})
        ):
            return local, "Back to the previous page"
    return reverse(f"{site.name}:index"), "Back to the console's start page"


def refusal_response(
    request: HttpRequest,
    exception: BaseException | None = None,
    site: admin.AdminSite | None = None,
) -> HttpResponse:
    """The 403 page in the admin's frame, naming what the user lacks."""
    site = site if site is not None else admin.site
    user = getattr(request, "user", None)
    needed = needed_permissions(request, exception)
    # A permission the user holds is not why the page was refused: name none then.
    holds = user is not None and any(user.has_perm(permission) for permission in needed)
    back_url, back_label = back_link(request, site)
    context = {
        **site.each_context(request),
        "title": REFUSAL_TITLE,
        "needed": [] if holds else [describe_permission(p) for p in needed],
        "back_url": back_url,
        "back_label": back_label,
    }
    response = render(request, REFUSAL_TEMPLATE, context, status=403)
    add_never_cache_headers(response)
    return response
