"""Server-side pictures for the dashboard, without JavaScript.

Each status has a colour and a fill pattern (:mod:`oxide_batch.admin.marks`),
so a mark never depends on colour alone; legends list only the statuses drawn. A chart is an
``<svg role="img">`` with a summary ``aria-label`` and nothing focusable in it;
its data — and any links — are in the table that accompanies it. Text sits in
its own band beside or above the marks, never on them. The partition grid is
an HTML grid of links (each partition's key and status as text), so it
reflows on a phone. Axes and ticks: :mod:`oxide_batch.admin.axes`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.axes import count_ticks, time_axis
from oxide_batch.admin.display import ACTIVE, badge, duration, human, when
from oxide_batch.admin.marks import fill, legend, patterns, present
from oxide_batch.admin.marks import joined as joined

NOTHING = SafeString("")
# The per-day chart's narrowest drawing (a window with one or two days of data).
MIN_WIDTH = 200


def status_bars(
    rows: Sequence[dict[str, Any]], *, days: Sequence[date], prefix: str = "ob-day"
) -> SafeString:
    """Executions created per UTC day (``rows`` of ``{day, status, n}``), stacked by
    status on a count axis; above each bar its total, below it the day of the
    month (and the month under the first day of each); a legend
    of the statuses present; the counts as a table.

    The chart starts at the first day with executions (the empty days before
    it are said in words, not drawn as an empty axis); a window without any
    execution draws its whole, empty axis."""
    window = list(days)
    per_day: dict[date, dict[str, int]] = {day: {} for day in window}
    for row in rows:
        day = row["day"].date() if isinstance(row["day"], datetime) else row["day"]
        if day in per_day:
            per_day[day][row["status"]] = per_day[day].get(row["status"], 0) + int(row["n"])
    first = next((i for i, day in enumerate(window) if per_day[day]), 0)
    days = window[first:]
    empty_before = (
        f"; none on the {first} day{'s' if first > 1 else ''} before "
        f"({window[0].isoformat()} to {window[first - 1].isoformat()})"
        if first
        else ""
    )
    statuses = present(s for counts in per_day.values() for s in counts)
    totals = {day: sum(counts.values()) for day, counts in per_day.items()}
    ticks = count_ticks(max(totals.values(), default=0))
    left, top, plot_h, slot, bar = 64, 24, 170, 32, 22
    # Wide enough for the axis' unit and a month's name under one or two days.
    base, width = top + plot_h, max(left + slot * len(days) + 8, MIN_WIDTH)

    def y_of(count: int) -> float:
        return base - plot_h * count / ticks[-1]

    axis = joined(
        format_html(
            '<line class="ob-grid-line" x1="{}" y1="{y}" x2="{}" y2="{y}"/>'
            '<text class="ob-y-tick" x="{}" y="{}" text-anchor="end">{}</text>',
            left,
            width - 8,
            left - 6,
            _n(y_of(tick) + 4),
            _count(tick),
            y=_n(y_of(tick)),
        )
        for tick in ticks
    )
    # The month under the first day shown and under each 1st, unless the first
    # would run into the next one; near the right edge it ends at its day.
    months = {i for i, day in enumerate(days) if day.day == 1}
    if not months & {1, 2}:
        months.add(0)
    bars: list[SafeString] = []
    for index, day in enumerate(days):
        x, below = left + index * slot + (slot - bar) // 2, 0
        for status in statuses:
            n = per_day[day].get(status, 0)
            if n:
                bars.append(
                    format_html(
                        '<rect class="ob-mark" data-status="{}" x="{}" y="{}" width="{}" '
                        'height="{}" fill="{}"><title>{} {}: {}</title></rect>',
                        status,
                        x,
                        _n(y_of(below + n)),
                        bar,
                        _n(y_of(below) - y_of(below + n)),
                        fill(prefix, status),
                        day.isoformat(),
                        status,
                        n,
                    )
                )
                below += n
        if totals[day]:
            bars.append(
                format_html(
                    '<text class="ob-total" x="{}" y="{}" text-anchor="middle">{}</text>',
                    x + bar // 2,
                    _n(y_of(totals[day]) - 4),
                    _count(totals[day]),
                )
            )
        bars.append(
            format_html(
                '<text class="ob-x-tick" x="{}" y="{}" text-anchor="middle">{}</text>',
                x + bar // 2,
                base + 16,
                day.day,
            )
        )
        if index in months:
            bars.append(
                format_html(
                    '<text class="ob-x-month" x="{}" y="{}" text-anchor="{}">{}</text>',
                    *(
                        (x + bar, base + 30, "end")
                        if index >= len(days) - 2
                        else (x, base + 30, "start")
                    ),
                    day.strftime("%b %Y"),
                )
            )
    busiest = max(days, key=lambda d: totals[d]) if days else None
    summary = (
        f"Executions created per day by status, last {len(window)} days"
        + (f" ({days[0].isoformat()} to {days[-1].isoformat()}, UTC)" if days else "")
        + f": {sum(totals.values())} executions"
        + empty_before
        + (
            f"; most on {busiest.isoformat()} ({totals[busiest]})"
            if busiest and totals[busiest]
            else ""
        )
    )
    picture = format_html(
        '<svg class="ob-chart" role="img" aria-label="{}" viewBox="0 0 {} {}" width="{}" '
        'height="{}" style="max-width:{}px">{}{}{}<text class="ob-axis-unit" '
        'transform="rotate(-90)" x="{}" y="14" text-anchor="middle">executions</text>'
        '<text class="ob-axis-unit" x="{}" y="{}" text-anchor="middle">day (UTC)</text></svg>',
        summary,
        width,
        base + 56,
        width,
        base + 56,
        width,
        patterns(prefix, statuses),
        axis,
        joined(bars),
        _n(-(top + plot_h / 2)),
        _n(left + slot * len(days) / 2),
        base + 50,
    )
    return format_html(
        '<figure class="ob-figure">{}{}<figcaption>{}.</figcaption>{}</figure>',
        legend(statuses, prefix=prefix) if statuses else NOTHING,
        picture,
        summary,
        _day_table(days, per_day, statuses),
    )


def _day_table(
    days: Sequence[date], per_day: dict[date, dict[str, int]], statuses: Sequence[str]
) -> SafeString:
    head = joined(format_html('<th scope="col">{}</th>', s) for s in statuses)
    body = joined(
        format_html(
            '<tr><th scope="row">{}</th>{}<td>{}</td></tr>',
            day.isoformat(),
            joined(format_html("<td>{}</td>", per_day[day].get(s, 0)) for s in statuses),
            sum(per_day[day].values()),
        )
        for day in days
    )
    return format_html(
        '<details class="ob-data"><summary>The counts per day as a table</summary>'
        '<div class="ob-scroll"><table class="ob-data-table"><thead><tr><th scope="col">day '
        '(UTC)</th>{}<th scope="col">total</th></tr></thead><tbody>{}</tbody></table></div>'
        "</details>",
        head,
        body,
    )


def _count(n: int) -> str:
    """A tick or total label of at most four characters, to fit its slot: 9999,
    17k, 230k, 1.5M, 12M (the table has the exact counts)."""
    if n >= 10_000_000:
        return f"{round(n / 1_000_000)}M"
    if n >= 999_500:
        return f"{n / 1_000_000:.1f}".removesuffix(".0") + "M"
    if n >= 10_000:
        return f"{round(n / 1000)}k"
    return str(n)


#: Characters a timeline label may take across the 600-unit picture (at 12 px,
#: 0.62 em a character, after the 8-unit margin); a step name keeps at least
#: LABEL_NAME_MIN of them.
LABEL_CHARS = 78
LABEL_NAME_MIN = 8


def timeline(
    steps: Sequence[dict[str, Any]],
    *,
    now: datetime,
    link: Callable[[int], str],
    table: bool = True,
    prefix: str = "ob-tl",
) -> SafeString:
    """A Gantt-like bar per step from its start (or creation) to its end (or
    ``now``) on a UTC clock axis; each step's name, status and duration above its
    bar; then (``table=True``) a table of the steps whose names link to ``link(id)``.
    A step without an end reads "running" only while its execution (the rows'
    ``execution_status``) is active: under an UNKNOWN execution its outcome is
    unknown, under a finished one no end was recorded."""
    if not steps:
        return format_html("<p>{}</p>", "No steps recorded for this execution.")
    starts = [s["started_at"] or s["created_at"] for s in steps]
    ends = [s["ended_at"] or now for s in steps]
    axis = time_axis(min(starts), max(ends))
    left, plot, row, top = 8, 584, 40, 8
    height = top + row * len(steps) + 40

    def x_of(moment: datetime) -> float:
        return left + plot * axis.fraction(moment)

    grid = joined(
        format_html(
            '<line class="ob-grid-line" x1="{x}" y1="{}" x2="{x}" y2="{}"/>'
            '<text class="ob-x-tick" x="{x}" y="{}" text-anchor="{}">{}</text>',
            top,
            height - 34,
            height - 20,
            "start" if index == 0 else "end" if index == len(axis.ticks) - 1 else "middle",
            axis.label(tick),
            x=_n(x_of(tick)),
        )
        for index, tick in enumerate(axis.ticks)
    )
    bars: list[SafeString] = []
    for index, (step, start, end) in enumerate(zip(steps, starts, ends, strict=True)):
        y = top + index * row
        took = _took(step, now)
        # The label fits the picture's width: the name gives way to the status
        # and the duration ("10h 00m 00s (no end recorded)" is long).
        name_room = max(LABEL_NAME_MIN, LABEL_CHARS - len(f" — {step['status']} · {took}"))
        x0, x1 = x_of(start), x_of(end)
        bars.append(
            format_html(
                '<text class="ob-label" x="{}" y="{}"><tspan class="ob-name">{}</tspan> — {} · {}'
                '</text><rect class="ob-mark" data-status="{}" x="{}" y="{}" width="{}" '
                'height="16" rx="2" fill="{}"><title>step {}: {}, {}</title></rect>',
                left,
                y + 13,
                _short(step["step_name"], min(40, name_room)),
                step["status"],
                took,
                step["status"],
                _n(x0),
                y + 18,
                _n(max(x1 - x0, 3.0)),
                fill(prefix, step["status"]),
                step["step_name"],
                step["status"],
                took,
            )
        )
    running = any(
        s["ended_at"] is None and s.get("execution_status", "STARTED") in ACTIVE for s in steps
    )
    now_line = (
        format_html(
            '<line class="ob-now" x1="{x}" y1="{}" x2="{x}" y2="{}"/>',
            top,
            height - 34,
            x=_n(x_of(now)),
        )
        if running
        else NOTHING
    )
    statuses = present(s["status"] for s in steps)
    summary = (
        f"Step timeline: {len(steps)} step{'s' if len(steps) != 1 else ''} from {axis.dates()} "
        f"{min(starts):%H:%M:%S} UTC over {human(max(ends) - min(starts))}"
        f"{', still running at ' + f'{now:%H:%M:%S} UTC' if running else ''}"
    )
    picture = format_html(
        '<svg class="ob-chart" role="img" aria-label="{}" viewBox="0 0 600 {}" width="600" '
        'height="{}" style="max-width:600px">{}{}{}{}'
        '<text class="ob-axis-unit" x="300" y="{}" text-anchor="middle">time (UTC, {})</text>'
        "</svg>",
        summary,
        height,
        height,
        patterns(prefix, statuses),
        grid,
        joined(bars),
        now_line,
        height - 4,
        axis.dates(),
    )
    caption = format_html(
        "<figcaption>{}.{}</figcaption>",
        summary,
        " The dashed line is now." if running else "",
    )
    rows = _step_table(steps, now=now, link=link) if table else NOTHING
    return format_html(
        '<figure class="ob-figure">{}{}{}{}</figure>',
        legend(statuses, prefix=prefix),
        picture,
        caption,
        rows,
    )


def _took(step: dict[str, Any], now: datetime) -> str:
    return duration(
        step["started_at"] or step["created_at"],
        step["ended_at"],
        step["status"],
        now,
        parent_status=step.get("execution_status"),
    )


def _step_table(
    steps: Sequence[dict[str, Any]], *, now: datetime, link: Callable[[int], str]
) -> SafeString:
    body = joined(
        format_html(
            '<tr><th scope="row"><a href="{}">{}</a></th><td>{}</td><td>{}</td><td>{}</td>'
            "<td>{}</td></tr>",
            link(step["id"]),
            step["step_name"],
            badge(step["status"]),
            when(step["started_at"] or step["created_at"], now),
            when(step["ended_at"], now),
            _took(step, now),
        )
        for step in steps
    )
    return format_html(
        '<div class="ob-scroll"><table class="ob-data-table"><caption>Steps (the timeline as a '
        'table)</caption><thead><tr><th scope="col">step</th><th scope="col">status</th>'
        '<th scope="col">started</th><th scope="col">ended</th><th scope="col">took</th>'
        "</tr></thead><tbody>{}</tbody></table></div>",
        body,
    )


def partition_grid(
    partitions: Sequence[dict[str, Any]], *, link: Callable[[int], str], prefix: str = "ob-grid"
) -> SafeString:
    """One cell per partition in ordinal order: its key and status as text beside a
    strip of the status's pattern; each cell a link to ``link(id)`` whose name is
    its visible text. A legend counts the statuses present."""
    if not partitions:
        return format_html("<p>{}</p>", "No partitions.")
    counts: dict[str, int] = {}
    for partition in partitions:
        counts[partition["status"]] = counts.get(partition["status"], 0) + 1
    statuses = present(counts)
    described = ", ".join(f"{counts[s]} {s}" for s in statuses)
    cells = joined(
        format_html(
            '<li><a class="ob-cell" data-status="{}" href="{}" title="partition {} (#{}): {}, '
            '{} written"><svg class="ob-cell-mark" aria-hidden="true" focusable="false" '
            'width="10" height="100%"><rect width="100%" height="100%" fill="{}"/></svg>'
            '<span class="ob-key">{}</span> <span class="ob-cell-status">{}</span> '
            '<span class="ob-cell-count">{} written</span></a></li>',
            partition["status"],
            link(partition["id"]),
            partition["partition_key"],
            partition["ordinal"],
            partition["status"],
            partition["written_count"],
            fill(prefix, partition["status"]),
            partition["partition_key"],
            partition["status"],
            partition["written_count"],
        )
        for partition in partitions
    )
    return format_html(
        '<div class="ob-figure"><svg class="ob-defs" width="0" height="0" aria-hidden="true" '
        'focusable="false">{}</svg>{}<ol class="ob-grid" aria-label="Partition grid: {} '
        'partitions ({})">{}</ol></div>',
        patterns(prefix, statuses),
        legend(statuses, prefix=prefix, counts=counts),
        len(partitions),
        described,
        cells,
    )


def _n(value: float) -> str:
    """A coordinate with one decimal (format_html escapes before it formats)."""
    return f"{value:.1f}".removesuffix(".0")


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
