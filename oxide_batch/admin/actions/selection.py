"""The rows a confirmation page is given (``ids``) and what it says of them:
the selection, the rows named on the button, the notes on what is not shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse

from oxide_batch.admin.applicable import (
    ActionSpec,
)
from oxide_batch.admin.base import parse_id
from oxide_batch.admin.forms import ABANDON, MARK_FAILED

MAX_ROWS = 100
# Ids named on the page when the selection holds some that are no row.
NOTED = 10


def action_url(
    spec: ActionSpec, ids: list[int], *, more: bool = False, override: bool = False
) -> str:
    """The confirmation page of ``spec`` for ``ids``; ``override`` (recover)
    arrives with the override box ticked — the operator still writes the note."""
    return (
        reverse(f"admin:oxide_batch_{spec.model}_act", args=[spec.name])
        + "?ids="
        + ",".join(str(i) for i in ids)
        + ("&more=1" if more else "")
        + ("&override=1" if override else "")
    )


@dataclass
class Selection:
    """The ids a page was given: the first :data:`MAX_ROWS` that can be ids,
    the texts that cannot (dropped), and whether more were given."""

    ids: list[int] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    over: int = 0  # how many ids beyond MAX_ROWS were left out


def selection_of(values: list[str]) -> Selection:
    """The ids of a query string or form field (``ids=1,2`` or ``ids=1&ids=2``);
    anything that cannot be an id is dropped and said (an id the database never
    holds would only be a 500 further on)."""
    selection = Selection()
    seen: set[int] = set()
    for text in values:
        for part in text.split(","):
            if not part.strip():
                continue
            pk = parse_id(part)
            if pk is None:
                selection.dropped.append(part.strip()[:40])
            elif pk not in seen:
                seen.add(pk)
                selection.ids.append(pk)
    selection.over = max(0, len(selection.ids) - MAX_ROWS)
    selection.ids = selection.ids[:MAX_ROWS]
    return selection


def ids_in(text: str) -> list[int]:
    return selection_of([text]).ids


def targets_text(ids: list[int], model: str) -> str:
    """``#7``, ``#7 and #9``, ``#7, #9 and #12``, or ``5 executions``."""
    noun = "execution" if model == "jobexecution" else "instance"
    if len(ids) > 3:
        return f"{len(ids)} {noun}s"
    named = [f"#{pk}" for pk in ids]
    text = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return text if noun == "execution" else f"{noun}{'s' if len(ids) > 1 else ''} {text}"


BUTTON = {
    "abandon": "Abandon {}",
    "stop": "Request stop of {}",
    "hold": "Place a hold on {}",
    "release": "Release the hold of {}",
    # recover: by the chosen disposition, "" while none is chosen
    MARK_FAILED: "Mark {} FAILED",
    ABANDON: "Abandon {}",
    "": "Apply the chosen disposition to {}",
}


def button_labels(spec: ActionSpec, ids: list[int]) -> dict[str, str]:
    """The confirm button's text for ``ids``: the action and the rows; for
    recover one per disposition ("" while none is chosen)."""
    rows = targets_text(ids, spec.model) if ids else "the selected rows"
    if spec.name != "recover":
        return {"": BUTTON[spec.name].format(rows)}
    return {key: BUTTON[key].format(rows) for key in (MARK_FAILED, ABANDON, "")}


def selection_notes(
    spec: ActionSpec,
    rows: list[dict[str, Any]],
    selection: Selection | None,
    more: bool,
) -> list[str]:
    """What the page was given that it does not show: ids with no row,
    texts that are no id, rows beyond :data:`MAX_ROWS`."""
    if selection is None:
        return []
    noun = "execution" if spec.model == "jobexecution" else "instance"
    notes = []
    found = {row["id"] for row in rows}
    missing = [pk for pk in selection.ids if pk not in found]
    if missing:
        named = ", ".join(f"#{pk}" for pk in missing[:NOTED])
        rest = f" and {len(missing) - NOTED} more" if len(missing) > NOTED else ""
        notes.append(f"No {noun} {named}{rest} (purged or never existed).")
    if selection.dropped:
        named = ", ".join(f"“{text}”" for text in selection.dropped[:NOTED])
        rest = (
            f" and {len(selection.dropped) - NOTED} more" if len(selection.dropped) > NOTED else ""
        )
        notes.append(f"Not {noun} ids, ignored: {named}{rest}.")
    if selection.over or more:
        notes.append(
            f"At most {MAX_ROWS} rows can be confirmed at once: only the first "
            f"{MAX_ROWS} selected are shown. Confirm them, then select the rest."
        )
    return notes
