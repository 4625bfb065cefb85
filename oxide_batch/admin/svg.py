"""Server-side SVG pictures for the dashboard: no JavaScript, text alternatives
on every picture and every mark (``<title>``, ``aria-label``), links focusable."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.display import human
from oxide_batch.domain.status import BatchStatus

COLOURS = {
    "COMPLETED": "#2e7d32",
    "STARTING": "#1565c0",
    "STARTED": "#1e88e5",
    "STOPPING": "#f9a825",
    "STOPPED": "#ef6c00",
    "FAILED": "#c62828",
    "ABANDONED": "#757575",
    "UNKNOWN": "#6a1b9a",
}
STATUSES = [status.value for status in BatchStatus]


def joined(parts: Sequence[SafeString]) -> SafeString:
    """Concatenate fragments built with format_html (a plain str would be escaped)."""
    return format_html_join("", "{}", ((part,) for part in parts))


def legend() -> SafeString:
    items = format_html_join(
        "",
        '<li><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" '
        'fill="{}"/></svg> {}</li>',
        ((COLOURS[s], s) for s in STATUSES),
    )
    return format_html('<ul class="ob-legend">{}</ul>', items)


def status_bars(rows: Sequence[dict[str, Any]], *, days: Sequence[date]) -> SafeString:
    """Stacked bars per day: executions created that day by status."""
    per_day: dict[date, dict[str, int]] = {day: {} for day in days}
    for row in rows:
        day = row["day"]
        if isinstance(day, datetime):
            day = day.date()
        if day in per_day:
            per_day[day][row["status"]] = per_day[day].get(row["status"], 0) + int(row["n"])
    top = max([sum(counts.values()) for counts in per_day.values()] + [1])
    width, height, bar, gap, base = 40 * len(days) + 40, 220, 28, 12, 190
    parts: list[SafeString] = []
    for index, day in enumerate(days):
        counts = per_day[day]
        x = 30 + index * (bar + gap)
        y = base
        total = sum(counts.values())
        summary = ", ".join(f"{s} {counts[s]}" for s in STATUSES if counts.get(s)) or "none"
        segments: list[SafeString] = []
        for status in STATUSES:
            n = counts.get(status, 0)
            if not n:
                continue
            h = max(int(170 * n / top), 1)
            y -= h
            segments.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{} {}: {}'
                    "</title></rect>",
                    x,
                    y,
                    bar,
                    h,
                    COLOURS[status],
                    day.isoformat(),
                    status,
                    n,
                )
            )
        parts.append(
            format_html(
                '<g role="listitem" aria-label="{}: {} executions ({})"><title>{}: {} ({})'
                '</title>{}<text x="{}" y="{}" font-size="9" text-anchor="middle">{}</text>'
                '<text x="{}" y="{}" font-size="9" text-anchor="middle">{}</text></g>',
                day.isoformat(),
                total,
                summary,
                day.isoformat(),
                total,
                summary,
                joined(segments),
                x + bar // 2,
                base + 12,
                day.strftime("%m-%d"),
                x + bar // 2,
                y - 3,
                total or "",
            )
        )
    return format_html(
        '<svg class="ob-chart" role="list" width="{}" height="{}" viewBox="0 0 {} {}" '
        'aria-label="Executions created per day by status, last {} days">{}</svg>',
        width,
        height,
        width,
        height,
        len(days),
        joined(parts),
    )


def timeline(
    steps: Sequence[dict[str, Any]], *, now: datetime, link: Callable[[int], str]
) -> SafeString:
    """A Gantt-like bar per step from its start (or creation) to its end (or now)."""
    if not steps:
        return format_html("<p>{}</p>", "No steps recorded for this execution.")
    starts = [s["started_at"] or s["created_at"] for s in steps]
    ends = [s["ended_at"] or now for s in steps]
    origin, finish = min(starts), max(ends)
    span = max((finish - origin).total_seconds(), 1.0)
    row, label, plot = 26, 180, 560
    parts: list[SafeString] = []
    for index, (step, start, end) in enumerate(zip(steps, starts, ends, strict=True)):
        y = 10 + index * row
        x = label + int(plot * (start - origin).total_seconds() / span)
        w = max(int(plot * (end - start).total_seconds() / span), 3)
        took = human(end - start) + ("" if step["ended_at"] else " so far")
        text = f"step {step['step_name']}: {step['status']}, {took}"
        parts.append(
            format_html(
                '<a href="{}" aria-label="{}"><title>{}</title>'
                '<text x="4" y="{}" font-size="11">{}</text>'
                '<rect x="{}" y="{}" width="{}" height="16" rx="3" fill="{}"/>'
                '<text x="{}" y="{}" font-size="10">{} · {}</text></a>',
                link(step["id"]),
                text,
                text,
                y + 12,
                step["step_name"][:28],
                x,
                y,
                w,
                COLOURS.get(step["status"], "#999"),
                min(x + w + 4, label + plot - 60),
                y + 12,
                step["status"],
                took,
            )
        )
    height = 20 + row * len(steps)
    return format_html(
        '<svg class="ob-chart" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="Step timeline: {} steps from {} over {}">{}</svg>',
        label + plot + 120,
        height,
        label + plot + 120,
        height,
        len(steps),
        origin.strftime("%Y-%m-%d %H:%M:%S UTC"),
        human(timedelta(seconds=span)),
        joined(parts),
    )


def partition_grid(
    partitions: Sequence[dict[str, Any]], *, link: Callable[[int], str]
) -> SafeString:
    """One square per partition, coloured by status, with the status as a letter and title."""
    if not partitions:
        return format_html("<p>{}</p>", "No partitions.")
    size, per_row = 30, 20
    parts: list[SafeString] = []
    for index, partition in enumerate(partitions):
        x = (index % per_row) * (size + 4)
        y = (index // per_row) * (size + 4)
        text = (
            f"partition {partition['partition_key']} (#{partition['ordinal']}): "
            f"{partition['status']}, {partition['written_count']} written"
        )
        parts.append(
            format_html(
                '<a href="{}" aria-label="{}"><title>{}</title><rect x="{}" y="{}" width="{}" '
                'height="{}" fill="{}"/><text x="{}" y="{}" font-size="11" fill="#fff" '
                'text-anchor="middle">{}</text></a>',
                link(partition["id"]),
                text,
                text,
                x,
                y,
                size,
                size,
                COLOURS.get(partition["status"], "#999"),
                x + size // 2,
                y + 19,
                partition["status"][:2],
            )
        )
    rows = (len(partitions) + per_row - 1) // per_row
    width, height = per_row * (size + 4), rows * (size + 4)
    summary: dict[str, int] = {}
    for partition in partitions:
        summary[partition["status"]] = summary.get(partition["status"], 0) + 1
    described = ", ".join(f"{n} {s}" for s, n in sorted(summary.items()))
    return format_html(
        '<svg class="ob-chart" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="Partition grid: {} partitions ({})">{}</svg>',
        width,
        height,
        width,
        height,
        len(partitions),
        described,
        joined(parts),
    )
