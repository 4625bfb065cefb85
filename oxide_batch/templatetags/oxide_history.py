"""The admin's history of an execution or an instance, with its audit rows linked.

An operator action's ``LogEntry`` (decision 135) names the rows that tell the
rest — "recovery decision #12", "operator request #40 (op-1)", "retention
record #3" —; on HISTORY those become links to them. Everything else of the
message stays text (escaped)."""

from __future__ import annotations

import re

from django import template
from django.urls import NoReverseMatch
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.base import change_url

register = template.Library()

AUDIT_ROW = re.compile(r"(recovery decision|operator request|retention record) #(\d+)")
MODELS = {
    "recovery decision": "recoverydecision",
    "operator request": "operatorrequest",
    "retention record": "retentionrecord",
}


@register.filter
def audit_links(message: str) -> SafeString:
    """``message`` escaped, each audit row it names a link to that row."""
    parts: list[SafeString] = []
    done = 0
    for match in AUDIT_ROW.finditer(message):
        parts.append(format_html("{}", message[done : match.start()]))
        parts.append(_linked(match))
        done = match.end()
    parts.append(format_html("{}", message[done:]))
    return format_html_join("", "{}", ((part,) for part in parts))


def _linked(match: re.Match[str]) -> SafeString:
    try:
        url = change_url(MODELS[match.group(1)], int(match.group(2)))
    except NoReverseMatch:  # a host project without that page
        return format_html("{}", match.group(0))
    return format_html('<a href="{}">{}</a>', url, match.group(0))
