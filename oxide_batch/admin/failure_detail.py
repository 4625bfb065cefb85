"""A failure's detail in the console (contract §2, "Failure detail"): the type,
the scrubbed message and, when kept, the traceback — to whoever may read
payloads; the type alone to anyone else (a viewer), as the API shows it."""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.domain.failure_detail import FailureDetail

CUT = " (cut to its bound)"


def shown_detail(detail: FailureDetail, *, payload_reader: bool) -> SafeString:
    """The case file's "Why it failed": escaped text, the traceback collapsed."""
    type_ = format_html("<code>{}</code>", detail.type or "(no type sent)")
    if not payload_reader:
        return format_html(
            "{} <small>(the message is shown only with view_batch_payload)</small>", type_
        )
    message = (
        format_html(
            '<pre class="ob-failure-message">{}</pre>{}',
            detail.message,
            CUT if detail.message_truncated else "",
        )
        if detail.message
        else format_html("{}", "")
    )
    traceback = (
        format_html(
            '<details class="ob-traceback"><summary>Traceback{}</summary>'
            '<pre tabindex="0">{}</pre></details>',
            CUT if detail.traceback_truncated else "",
            detail.traceback,
        )
        if detail.traceback
        else format_html("{}", "")
    )
    return format_html("{}{}{}", type_, message, traceback)


def failure_line(failure_type: str | None, message: str | None) -> SafeString:
    """A list's cell: the type and the message's first line (the message only
    when the reader may see it: the list's query selected it)."""
    if not failure_type and not message:
        return format_html("{}", "")
    first = (message or "").split("\n", 1)[0]
    if first:
        return format_html("<code>{}</code>: {}", failure_type or "?", first)
    return format_html("<code>{}</code>", failure_type or "?")
