"""Skipped items in the console (issue 42): the table a step's page and the
case file show of the skip ledger — the message to whoever may read
payloads, the type alone to anyone else, as the API shows them."""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.base import link, linked_rows


def skip_type(type_: str | None) -> SafeString:
    return format_html("<code>{}</code>", type_) if type_ else format_html("{}", "—")


def skip_message(message: str | None) -> str:
    """A table cell: the message's first line ('—' without one)."""
    return (message or "").split("\n", 1)[0] or "—"


def _step(row: dict[str, Any]) -> SafeString:
    return link("stepexecution", row["step_execution_id"], row["step_execution__step_name"])


def skip_rows(
    rows: list[dict[str, Any]],
    *,
    payload_reader: bool,
    query: str,
    step_names: bool = False,
) -> SafeString:
    """A page's table of skipped items (rows of ``pages.step_skips`` or
    ``pages.execution_skips``, one more than shown), with "See all" to this
    page filtered by ``query``; the message to a payload reader only."""
    headers = [
        *(["step"] if step_names else []),
        "phase",
        "item",
        "category",
        "type",
        *(["message"] if payload_reader else []),
        "chunk",
    ]
    return linked_rows(
        headers,
        (
            (
                *(
                    [
                        link(
                            "stepexecution",
                            row["step_execution_id"],
                            row["step_execution__step_name"],
                        )
                    ]
                    if step_names
                    else []
                ),
                row["phase"],
                row["item"],
                row["category"],
                skip_type(row["type"]),
                *([skip_message(row["message"])] if payload_reader else []),
                row["chunk"],
            )
            for row in rows
        ),
        model="skip",
        query=query,
    )
