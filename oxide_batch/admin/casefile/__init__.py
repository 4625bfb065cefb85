"""The top of an execution's page: a case file an operator reads at 3 a.m.

What the execution is (status, attempt, job, the parameters an operator may
see), whether it is stuck (last activity, inactivity against the recovery
threshold — the owner's lease when one is recorded —, owner, lease and stop
state), and — for an unresolved one — the recovery proposal inline:
eligibility in words (why, or until when and the override), each marker
explained, the evidence, and the one action that applies; for a failure,
what became of it (abandoned, rerun, still failed). Below it a timeline of
what happened, built from the durable timestamps and the audit rows only
(nothing is inferred): the runtime's writes (a step's last write stays, even
after a recovery ended it), and the operators' and the watchdog's acts as
events of their own — each recovery decision, stop request, abandon, and hold
placed or released on the instance — with who and why.

"Last activity" is the runtime's only (contract §2.5.3,
:func:`oxide_batch.facts.last_activity_of`): the execution's and its steps'
``last_activity_at`` — a row's ``updated_at`` (a recovery moves it) only for
a row written outside the adapter without one; with a proposal, exactly the
proposal's — and the page reads every
relative time at the proposal's instant, so one fact has one value.

Bounded: the proposal is one unit of work (the repository's evidence read),
the steps one query (at most
:data:`~oxide_batch.selectors.casefile.TIMELINE_STEPS`, partition workers left
out — their partitions are on the step's page), the decisions, the operator
requests and the instance's hold records one query each (bounded).

:mod:`.page` assembles it, :mod:`.recovery` renders the proposal,
:mod:`.timeline` the timeline; the reads are
:mod:`oxide_batch.selectors.casefile`.
"""

from oxide_batch.admin.casefile.page import proposal_for, render
from oxide_batch.admin.casefile.recovery import read_only_note

__all__ = ["proposal_for", "read_only_note", "render"]
