"""How a status is drawn in the dashboard's pictures: a colour and a fill
pattern per status (so a mark never depends on colour alone), the SVG
``<pattern>`` definitions, and a legend of the statuses a picture shows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.domain.status import BatchStatus


def _shape(tag: str, **attributes: object) -> SafeString:
    """One SVG element of a texture (``stroke_width`` → ``stroke-width``)."""
    return format_html(
        "<{} {}/>",
        tag,
        format_html_join(
            " ", '{}="{}"', ((name.replace("_", "-"), value) for name, value in attributes.items())
        ),
    )


@dataclass(frozen=True)
class Mark:
    """How one status is drawn: a fill colour and a texture over it."""

    colour: str
    pattern: str  # the texture's name (also in the pattern's class)
    texture: SafeString | None = None  # drawn on an 8×8 tile, over the colour


# The pairs a trial operator confused differ in lightness (light and dark blue,
# yellow and brown) as well as in texture.
MARKS = {
    "STARTING": Mark("#8ec5ee", "dots", _shape("circle", cx=4, cy=4, r=1.7, fill="#0b3a66")),
    "STARTED": Mark(
        "#1d5a9e",
        "diagonal",
        _shape("path", d="M-2 2l4-4M0 8l8-8M6 10l4-4", stroke="#fff", stroke_width=1.6),
    ),
    "STOPPING": Mark(
        "#f3c94f", "horizontal", _shape("path", d="M0 4h8", stroke="#5c4400", stroke_width=1.6)
    ),
    "STOPPED": Mark(
        "#8d4300", "vertical", _shape("path", d="M4 0v8", stroke="#fff", stroke_width=1.6)
    ),
    "COMPLETED": Mark("#2e7d32", "solid"),
    "FAILED": Mark(
        "#c62828",
        "crosshatch",
        _shape("path", d="M0 0l8 8M8 0l-8 8", stroke="#fff", stroke_width=1.3),
    ),
    "ABANDONED": Mark(
        "#7a7a7a",
        "backslash",
        _shape("path", d="M-2 6l4 4M0 0l8 8M6-2l4 4", stroke="#fff", stroke_width=1.6),
    ),
    "UNKNOWN": Mark(
        "#6a1b9a",
        "checks",
        _shape("path", d="M0 0h4v4H0zM4 4h4v4H4z", fill="#fff", fill_opacity=".55"),
    ),
}
STATUSES = [status.value for status in BatchStatus]
_OTHER = Mark("#999999", "none")


def joined(parts: Iterable[SafeString]) -> SafeString:
    """Concatenate fragments built with format_html (a plain str would be escaped)."""
    return format_html_join("", "{}", ((part,) for part in parts))


def pattern_id(prefix: str, status: str) -> str:
    return f"{prefix}-p-{status}"


def patterns(prefix: str, statuses: Iterable[str]) -> SafeString:
    """``<defs>`` with one ``<pattern id="{prefix}-p-{STATUS}">`` per status."""
    return format_html(
        "<defs>{}</defs>",
        joined(
            format_html(
                '<pattern id="{}" class="ob-pattern-{}" width="8" height="8" '
                'patternUnits="userSpaceOnUse"><rect width="8" height="8" fill="{}"/>{}</pattern>',
                pattern_id(prefix, status),
                mark.pattern,
                mark.colour,
                mark.texture or "",
            )
            for status in statuses
            for mark in [MARKS.get(status, _OTHER)]
        ),
    )


def fill(prefix: str, status: str) -> str:
    return f"url(#{pattern_id(prefix, status)})"


def present(statuses: Iterable[str]) -> list[str]:
    """The distinct statuses among ``statuses``, in lifecycle order."""
    seen = set(statuses)
    return [s for s in STATUSES if s in seen] + sorted(seen - set(STATUSES))


def legend(
    statuses: Sequence[str], *, prefix: str, counts: dict[str, int] | None = None
) -> SafeString:
    """A list of the given statuses with a swatch of their pattern (defined by the
    picture using ``prefix``), and their count when ``counts`` is given."""
    return format_html(
        '<ul class="ob-legend" aria-label="Legend">{}</ul>',
        joined(
            format_html(
                '<li data-status="{}"><svg class="ob-swatch" width="14" height="14" '
                'aria-hidden="true" focusable="false"><rect width="14" height="14" fill="{}"/>'
                "</svg> {}{}</li>",
                status,
                fill(prefix, status),
                status,
                f" {counts[status]}" if counts is not None else "",
            )
            for status in statuses
        ),
    )
