"""Run deadlines and missing runs (issue 41 points 4-5): set, clear and list
a job's deadlines (audited), and the watchdog's deadline pass, which raises
``execution.overdue`` once per execution and ``job.missing`` once per period
(``domain/deadlines.py`` defines the periods).

A pass reads in a fixed number of queries — the rules, the overdue runs, the
jobs' last completions, the completions within their periods, the alarms
already raised — and writes two INSERTs per event it raises (the event, its
alarm), each pair in its own transaction; an alarm raised before (by a
watchdog since restarted, or another one now) refuses the second insert, and
its event goes with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from oxide_batch.domain.deadlines import (
    DeadlineRule,
    Period,
    deadline_rule,
    latest_deadline,
    missed_period,
)
from oxide_batch.domain.evidence import instant_text
from oxide_batch.repository import deadlines as store
from oxide_batch.repository.clock import Clock, SystemClock
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.selectors import deadlines as reads


@dataclass(frozen=True)
class RaisedAlarm:
    """One deadline event a pass raised (``event_id``: its outbox row)."""

    kind: str
    job_name: str
    event_id: int
    job_execution_id: int | None = None
    period_start: datetime | None = None
    deadline: datetime | None = None


class Deadlines:
    """Sets, clears and lists job deadlines (audited); raises their events."""

    def __init__(self, *, using: str = "default", clock: Clock | None = None) -> None:
        self.using = using
        self.clock = clock or SystemClock()

    def set(
        self,
        job_name: str,
        *,
        by: ChangeBy,
        max_duration: str | None = None,
        expect_every: str | None = None,
        at: str | None = None,
        zone: str | None = None,
    ) -> DeadlineRule:
        """Validate (``DeadlineInvalid``) and store the job's deadlines,
        replacing any it had; its periods restart now."""
        rule = deadline_rule(
            job_name=job_name,
            set_at=self.clock.now(),
            max_duration=max_duration,
            expect_every=expect_every,
            by=at,
            zone=zone,
        )
        store.set_deadline(self.using, rule, by=by)
        return rule

    def clear(self, job_name: str, *, by: ChangeBy) -> None:
        store.clear_deadline(self.using, job_name, by=by, now=self.clock.now())

    def rules(self) -> list[DeadlineRule]:
        return reads.deadline_rules(self.using)

    # -- the watchdog's pass -------------------------------------------------------------

    def raise_due(self, *, now: datetime | None = None, limit: int = 100) -> list[RaisedAlarm]:
        """Raise what is due at ``now``: ``execution.overdue`` for at most
        ``limit`` runs past their job's maximum duration, ``job.missing`` for
        each job whose latest ended period has no completion."""
        now = now or self.clock.now()
        rules = reads.deadline_rules(self.using)
        if not rules:
            return []
        raised = self._overdue(rules, now, limit)
        raised += self._missing([rule for rule in rules if rule.expect_every is not None], now)
        return raised

    def _overdue(self, rules: list[DeadlineRule], now: datetime, limit: int) -> list[RaisedAlarm]:
        limits = {rule.job_name: rule for rule in rules}
        raised: list[RaisedAlarm] = []
        for run in reads.overdue_runs(rules, now=now, limit=limit, using=self.using):
            maximum = limits[run.job_name].max_duration
            assert maximum is not None
            draft = store.AlarmDraft(
                kind=reads.OVERDUE,
                job_name=run.job_name,
                job_instance_id=run.job_instance_id,
                job_execution_id=run.job_execution_id,
                period_start=None,
                status=run.status,
                occurred_at=run.began_at + maximum,
                data={
                    "began_at": instant_text(run.began_at),
                    "max_duration_seconds": maximum.total_seconds(),
                    "overdue_since": instant_text(run.began_at + maximum),
                    "by": "watchdog",
                },
            )
            event = store.raise_alarm(self.using, draft, now=now)
            if event is not None:
                raised.append(
                    RaisedAlarm(
                        draft.kind, run.job_name, event, job_execution_id=run.job_execution_id
                    )
                )
        return raised

    def _missing(self, rules: list[DeadlineRule], now: datetime) -> list[RaisedAlarm]:
        if not rules:
            return []
        last = reads.last_completions([rule.job_name for rule in rules], self.using)
        windows: dict[str, Period] = {}
        for rule in rules:
            if rule.by is not None:
                period = latest_deadline(rule, now)
                if period is not None:
                    windows[rule.job_name] = period
        completed = reads.completed_within(windows, self.using)
        due: dict[str, tuple[DeadlineRule, Period]] = {}
        for rule in rules:
            period = missed_period(
                rule,
                now,
                last_completed_at=last.get(rule.job_name),
                completed_in=rule.job_name in completed,
            )
            if period is not None:
                due[rule.job_name] = (rule, period)
        already = reads.raised_missing({name: p for name, (_, p) in due.items()}, self.using)
        raised: list[RaisedAlarm] = []
        for name, (rule, period) in due.items():
            if name in already:
                continue
            event = store.raise_alarm(
                self.using, _missing_draft(rule, period, last.get(name)), now=now
            )
            if event is not None:
                raised.append(
                    RaisedAlarm(
                        reads.MISSING,
                        name,
                        event,
                        period_start=period.start,
                        deadline=period.deadline,
                    )
                )
        return raised


def _missing_draft(
    rule: DeadlineRule, period: Period, last_completed_at: datetime | None
) -> store.AlarmDraft:
    assert rule.expect_every is not None
    return store.AlarmDraft(
        kind=reads.MISSING,
        job_name=rule.job_name,
        job_instance_id=None,
        job_execution_id=None,
        period_start=period.start,
        status="",
        occurred_at=period.deadline,
        data={
            "period_start": instant_text(period.start),
            "deadline": instant_text(period.deadline),
            "expect_every_seconds": rule.expect_every.total_seconds(),
            "by_time": None if rule.by is None else rule.by.strftime("%H:%M"),
            "tz": rule.zone,
            "last_completed_at": None
            if last_completed_at is None
            else instant_text(last_completed_at),
            "by": "watchdog",
        },
    )
