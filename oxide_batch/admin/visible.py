"""Names the console shows are what they hold (decision 201): a job, step or
parameter name stored before names refused invisible characters, or a partition
key (which may hold them, contract §2.4.1), is shown with each such character
written as its escape (``job\\u202eevil``), in lists, detail pages, titles and
attributes alike.

The escaping is applied once to each page the app's admin views render, after
the template: every place a stored string reaches — a column, a case file, a
breadcrumb, ``<title>`` — is covered, and the console's own templates hold no
such character."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import SimpleTemplateResponse

from oxide_batch.domain.names import escape_invisible

View = Callable[..., HttpResponse]
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


def shown_visibly(view: View) -> View:
    """``view``, its answer's invisible characters written as escapes."""

    @wraps(view)
    def visible(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if isinstance(response, SimpleTemplateResponse) and not response.is_rendered:
            response.add_post_render_callback(_escaped)
            return response
        return _escaped(response)

    return visible
