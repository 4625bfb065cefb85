"""The read-only base of every console page: no add/change/delete (every change
goes through the services), viewers read via ``view_batch``, a paginator that
never counts a whole table, bounded linked tables for drill-down, and refusals
answered in the console's frame on every URL of the app's pages (on any admin
site: a host project's too, with no ``handler403`` of its own), with every
invisible character a page shows written as its escape (decision 201)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import wraps
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import SimpleTemplateResponse
from django.urls import URLPattern, URLResolver, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.paginator import BoundedCountPaginator
from oxide_batch.admin_site import refusing
from oxide_batch.domain.names import MAX_IDENTIFIER, escape_invisible
from oxide_batch.roles import VIEW_BATCH, VIEW_BATCH_PAYLOAD, perm

LINKED_ROWS = 50


def can_view(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.has_perm(perm(VIEW_BATCH)))


def can(request: HttpRequest, codename: str) -> bool:
    """Whether the user holds one batch permission (an operator action's own)."""
    return bool(request.user.is_active and request.user.has_perm(perm(codename)))


def parse_id(text: str | None) -> int | None:
    """A row id typed or passed in a URL: ASCII digits (``"²".isdigit()`` is
    true, ``int("²")`` fails) within 1..2^63-1 (the bigint the database holds),
    else ``None`` — never an exception that would be a 500 further on."""
    text = (text or "").strip()
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 0 < value <= MAX_IDENTIFIER else None


def can_view_payload(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.has_perm(perm(VIEW_BATCH_PAYLOAD)))


def change_url(model: str, pk: int) -> str:
    return reverse(f"admin:oxide_batch_{model}_change", args=[pk])


def link(model: str, pk: int | None, text: Any = None) -> SafeString:
    if pk is None:
        return format_html("{}", "—")
    return format_html('<a href="{}">{}</a>', change_url(model, pk), text if text else f"#{pk}")


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    more: bool = False,
    more_url: str | None = None,
) -> SafeString:
    """A bounded HTML table (``more`` says rows were left off, with a link to all)."""
    head = format_html_join("", '<th scope="col">{}</th>', ((h,) for h in headers))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
    )
    note = (
        format_html(
            '<p>Only the first {} rows are shown. <a href="{}">See all</a></p>',
            LINKED_ROWS,
            more_url,
        )
        if more and more_url
        else format_html("{}", "")
    )
    if not body:
        return format_html("<p>{}</p>", "None.")
    return format_html(
        '<table class="ob-linked"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>{}',
        head,
        body,
        note,
    )


def bounded(rows: Iterable[Any]) -> tuple[list[Any], bool]:
    """Split a ``[:LINKED_ROWS + 1]`` slice into the shown rows and a "more" flag."""
    items = list(rows)
    return items[:LINKED_ROWS], len(items) > LINKED_ROWS


def linked_rows(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, model: str, query: str
) -> SafeString:
    """A detail page's table of the rows it links to: ``rows`` are the cells of
    a ``[:LINKED_ROWS + 1]`` slice; the first :data:`LINKED_ROWS` are shown, and
    when there were more, a link to ``model``'s list filtered by ``query``."""
    shown, more = bounded(rows)
    return table(
        headers,
        shown,
        more=more,
        more_url=reverse(f"admin:oxide_batch_{model}_changelist") + f"?{query}",
    )


# -- names show what they hold (decision 201): a name stored before names refused
# invisible characters, or a partition key (which may hold them, contract §2.4.1),
# is shown with each such character written as its escape (``job\\u202eevil``),
# in lists, detail pages, titles and attributes alike. Applied once to each page
# the app's admin views render, after the template: every place a stored string
# reaches is covered, and the console's own templates hold no such character.

# The answers whose text a reader sees (a page, a drawing).
SHOWN_TYPES = ("text/html", "image/svg+xml")


def _escaped(response: HttpResponse) -> HttpResponse:
    content_type = response.get("Content-Type", "")
    if not content_type.startswith(SHOWN_TYPES) or response.streaming:
        return response
    charset = response.charset or "utf-8"
    text = response.content.decode(charset)
    shown = escape_invisible(text)
    if shown != text:
        response.content = shown.encode(charset)
    return response


def shown_visibly(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``view``, its answer's invisible characters written as escapes."""

    @wraps(view)
    def visible(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if isinstance(response, SimpleTemplateResponse) and not response.is_rendered:
            response.add_post_render_callback(_escaped)
            return response
        return _escaped(response)

    return visible


# Generic only for the type checker: without django_stubs_ext's monkeypatch
# (a host project's settings) Django's class is not subscriptable at run time.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


class NoEditsAdmin(_ModelAdmin):
    """Listed and shown, never added, changed or deleted through the console
    (writes go through the repository, its commands and the audited actions);
    the list's count is bounded."""

    show_full_result_count = False
    paginator = BoundedCountPaginator
    list_per_page = 50

    @property
    def urls(self) -> list[URLPattern | URLResolver]:  # type: ignore[override]
        """Every URL of the page — Django's and those a subclass adds (the
        dashboard, the confirmations) — answering a ``PermissionDenied`` with
        the console's 403 page (:mod:`oxide_batch.admin_site`)."""
        return [self._refusing(pattern) for pattern in self.get_urls()]

    def _refusing(self, pattern: URLPattern | URLResolver) -> URLPattern | URLResolver:
        if not isinstance(pattern, URLPattern):
            return pattern
        callback: Any = refusing(shown_visibly(pattern.callback), self.admin_site)
        # Which page refused: the 403 page names this model's permission.
        callback.model_admin = self
        return URLPattern(pattern.pattern, callback, pattern.default_args, pattern.name)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """Only the page's own filters filter its list. Django also lets a URL
        filter by any column of the row (``?key_digest=…``,
        ``?identifying_parameters__icontains=…``, ``?checkpoint__contains=…``),
        which would tell a reader, by the rows found, a value hidden from them
        (decision 200): such a lookup answers 400."""
        allowed = {self.date_hierarchy} if self.date_hierarchy else set()
        for item in self.get_list_filter(request) if request is not None else self.list_filter:
            if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
                allowed.add(str(item.parameter_name))
            elif isinstance(item, (list, tuple)):
                allowed.add(str(item[0]))
            else:
                allowed.add(str(item))
        if lookup not in allowed and lookup.split("__", 1)[0] not in allowed:
            return False
        return super().lookup_allowed(lookup, value, request)

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        """The row, or ``Http404`` saying which id is no row — answered with
        the console's 404 page (:func:`oxide_batch.admin_site.refusing`), where
        Django's admin would redirect to its start page with a message."""
        found = super().get_object(request, object_id, from_field)
        if found is None:
            raise Http404(
                f"There is no {self.opts.verbose_name} #{object_id[:40]}: it never "
                "existed, or it was purged."
            )
        return found

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(NoEditsAdmin):
    """A batch table: seen by whoever holds a batch role."""

    # What a refusal of its pages names first (admin_site.needed_permissions).
    console_permission = perm(VIEW_BATCH)
    # Facets count every filter choice over the whole (filtered) table.
    show_facets = admin.ShowFacets.NEVER
    change_list_template = "admin/oxide_batch/change_list.html"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view(request) or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_view(request) or super().has_module_permission(request)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return tuple(str(field) for field in self.get_fields(request, obj))


Renderer = Callable[[Any], Any]
