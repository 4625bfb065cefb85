"""The soak's figures: calls, errors by code, latency percentiles, lifecycles,
operator outcomes, rows purged — as JSON and as a few lines for the terminal."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from tests.soak.ledger import Call, Ledger
from tests.soak.purge import COMMAND


def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank percentile (0 for no samples)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _latency(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(samples, 0.50) * 1000, 2),
        "p99_ms": round(percentile(samples, 0.99) * 1000, 2),
    }


def figures(ledger: Ledger, *, seconds: float, rows_purged: Mapping[str, int]) -> dict[str, Any]:
    """The run's figures as one JSON-ready object."""
    by_operation: defaultdict[str, list[Call]] = defaultdict(list)
    for call in ledger.calls:
        by_operation[call.operation].append(call)
    operations = {
        name: {
            "calls": len(calls),
            "ok": sum(call.ok for call in calls),
            "errors": dict(Counter(call.code for call in calls if not call.ok).most_common()),
            **_latency([call.seconds for call in calls]),
        }
        for name, calls in sorted(by_operation.items())
    }
    operator_outcomes = Counter(e.outcome for e in ledger.operator)
    operator_details = Counter(
        f"{e.kind} {e.replay_of or 'new'}: {e.outcome}" + (f" {e.code}" if e.code else "")
        for e in ledger.operator
    )
    # The totals are the HTTP calls; the purge command has its own row below.
    http = [call for call in ledger.calls if call.operation != COMMAND]
    return {
        "duration_s": round(seconds, 1),
        "calls": len(http),
        "calls_per_s": round(len(http) / seconds, 1) if seconds else 0.0,
        "ok": sum(call.ok for call in http),
        "errors_by_code": dict(
            Counter(call.code for call in ledger.calls if not call.ok).most_common()
        ),
        "server_errors": sum(call.server_error for call in ledger.calls),
        "transport_errors": sum(call.transport_error for call in ledger.calls),
        "latency": _latency([call.seconds for call in http]),
        "operations": operations,
        "lifecycles": dict(ledger.lifecycles.most_common()),
        "notes": dict(ledger.notes.most_common()),
        "operator_actions": dict(operator_outcomes.most_common()),
        "operator_details": dict(sorted(operator_details.items())),
        "purge_runs": len(ledger.purges),
        "rows_purged": dict(rows_purged),
        "mutations_recorded": sum(len(v) for v in ledger.versions.values()),
    }


def render(report: Mapping[str, Any]) -> str:
    """A few lines for the terminal (the JSON artifact has everything)."""
    lines = [
        f"soak: {report['duration_s']} s, {report['calls']} HTTP calls "
        f"({report['calls_per_s']}/s), "
        f"{report['ok']} ok, p50 {report['latency']['p50_ms']} ms, "
        f"p99 {report['latency']['p99_ms']} ms, 5xx {report['server_errors']}, "
        f"transport errors {report['transport_errors']}",
        f"  errors by code: {report['errors_by_code']}",
        f"  lifecycles: {report['lifecycles']}",
        f"  notes: {report['notes']}",
        f"  operator actions: {report['operator_actions']}",
        f"  operator details: {report['operator_details']}",
        f"  purge runs: {report['purge_runs']}, rows purged: {report['rows_purged']}",
        f"  invariants checked: {report.get('checked', {})}",
        "  stop-requested executions by final status: "
        f"{report.get('stop_requested_executions_by_final_status', {})}",
        "  per operation (calls, ok, p50/p99 ms, errors):",
    ]
    for name, figures_ in report["operations"].items():
        lines.append(
            f"    {name:<42} {figures_['calls']:>6} {figures_['ok']:>6} "
            f"{figures_['p50_ms']:>8}/{figures_['p99_ms']:<8} {figures_['errors'] or ''}"
        )
    return "\n".join(lines)
