"""What each failure category means to an operator, and where its text lives.

Failures are redacted by design (contract §2): a row stores a category and an
opaque failure id, never text. The console explains the category in words and,
with ``OXIDE_BATCH_FAILURE_URL_TEMPLATE``, turns the failure id into a link to
the team's log search or error tracker, where the runtime logged the text under
that id (contract §5.5).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

from oxide_batch.domain.status import FailureCategory

C = FailureCategory


@dataclass(frozen=True)
class FailureHelp:
    """What the category means, and what an operator usually does about it."""

    meaning: str
    action: str


# How the watchdog's audited actor begins (``watchdog@<host>``, contract §2.5.7).
WATCHDOG_ACTOR_PREFIX = "watchdog@"

# The seed's documentation of each category, then the usual operator move.
FAILURE_HELP: dict[FailureCategory, FailureHelp] = {
    C.INVALID_DEFINITION: FailureHelp(
        "The job definition or its launch configuration is invalid.",
        "Fix the definition or the parameters and launch again; a restart fails the same way.",
    ),
    C.DUPLICATE_EXECUTION: FailureHelp(
        "A duplicate, completed or non-restartable execution was launched.",
        "Check whether the run already happened (the instance's attempts) before relaunching.",
    ),
    C.ILLEGAL_TRANSITION: FailureHelp(
        "An illegal or conflicting lifecycle transition was attempted.",
        "Usually a runtime defect: report it with the failure id; restart once it is fixed.",
    ),
    C.TRANSIENT_INFRASTRUCTURE: FailureHelp(
        "A transient repository or infrastructure failure (network, database, broker).",
        "Restart the job: a retry usually succeeds once the dependency is back.",
    ),
    C.PERMANENT_INFRASTRUCTURE: FailureHelp(
        "A permanent repository or infrastructure failure (missing resource, bad credentials).",
        "Fix the environment first (see the log under the failure id), then restart.",
    ),
    C.USER_COMPONENT: FailureHelp(
        "A user reader, processor, writer, tasklet or listener failed.",
        "Read the exception in the logs under the failure id; fix the data or the code, "
        "then restart from the last checkpoint.",
    ),
    C.CANCELLED: FailureHelp(
        "The work was cancelled, stopped or ran past its deadline.",
        "Restart when the work is wanted again; nothing is lost before the last checkpoint.",
    ),
    C.SERIALIZATION: FailureHelp(
        "Serialization or version incompatibility (a checkpoint or message of another version).",
        "Check the definition upgrade and the runtime version before restarting.",
    ),
    C.INVARIANT: FailureHelp(
        "A framework invariant was violated.",
        "A defect: report it with the failure id; do not retry blindly.",
    ),
    C.OPTIMISTIC_CONFLICT: FailureHelp(
        "An optimistic version check lost to a concurrent writer.",
        "Another process touched the same rows; check for a duplicate worker, then restart.",
    ),
    C.TIMEOUT: FailureHelp(
        "A bounded operation exceeded its deadline.",
        "Look at the slow dependency in the logs; restart, possibly with a larger deadline.",
    ),
    C.UNSUPPORTED_CAPABILITY: FailureHelp(
        "The repository or a resource cannot provide a capability the job requires.",
        "Upgrade the repository (schema) or the resource; restarting alone fails again.",
    ),
    C.UNKNOWN_COMMIT: FailureHelp(
        "A commit's outcome is unknown and must never be guessed.",
        "Check the target system for the last chunk's effect before restarting; "
        "recover with reason UNKNOWN_EFFECT.",
    ),
    C.SHUTDOWN_INCOMPLETE: FailureHelp(
        "A bounded shutdown could not join or resolve every owned child (thread, partition).",
        "Check for workers still running before restarting; recover what stayed unresolved.",
    ),
    C.STALE_RECOVERED: FailureHelp(
        "The execution was resolved from stale-ownership evidence (its worker went silent): "
        "by an operator, or by the watchdog once the owner's lease expired.",
        "Restart it if the work is still wanted: the restart resumes from the last checkpoint.",
    ),
}

_HELP_BY_CODE = {category.value: help_ for category, help_ in FAILURE_HELP.items()}


def failure_help(code: str, *, decided_by: str | None = None) -> FailureHelp | None:
    """The help of a durable category code (``None`` for a code no one knows).

    With ``decided_by`` (the actor of the recovery decision that recorded the
    failure), a ``STALE_RECOVERED`` failure says who resolved it: the watchdog
    (an actor ``watchdog@<host>``) or an operator, by name."""
    found = _HELP_BY_CODE.get(code)
    if found is None or code != C.STALE_RECOVERED.value or not decided_by:
        return found
    if decided_by.startswith(WATCHDOG_ACTOR_PREFIX):
        meaning = (
            f"The watchdog ({decided_by}) failed the execution: its owner's lease expired "
            "(the worker went silent and did not renew it)."
        )
    else:
        meaning = (
            f"An operator ({decided_by}) resolved the execution from stale-ownership "
            "evidence (its worker went silent)."
        )
    return FailureHelp(meaning, found.action)


# The placeholders a failure URL template may use (contract §5.5; the last four
# decision 316: the failed step, the worker's host, the failed row's times).
FAILURE_URL_PLACEHOLDERS = frozenset(
    {
        "failure_id",
        "execution_id",
        "job_name",
        "step_execution_id",
        "host",
        "started_at",
        "ended_at",
    }
)
PLACEHOLDER_LIST = (
    "{failure_id}, {execution_id}, {job_name}, {step_execution_id}, {host}, "
    "{started_at}, {ended_at}"
)


def validate_failure_url_template(template: str) -> str:
    """An ``http``/``https`` URL template whose placeholders are among
    :data:`FAILURE_URL_PLACEHOLDERS` (empty: no links); ``ValueError`` naming
    what is wrong otherwise."""
    if not template:
        return template
    try:
        parsed = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as error:
        raise ValueError(f"not a valid template ({error})") from None
    fields = {name for name, _, _ in parsed}
    unknown = fields - FAILURE_URL_PLACEHOLDERS
    if unknown or "" in fields:
        raise ValueError(
            "unknown placeholder(s) "
            + ", ".join(sorted(f"{{{name}}}" for name in unknown or {""}))
            + f"; use {PLACEHOLDER_LIST}"
        )
    if any(spec or conversion for _, spec, conversion in parsed):
        raise ValueError("placeholders take no format spec or conversion")
    if "failure_id" not in fields:
        raise ValueError("the template must use {failure_id}")
    parts = urlsplit(template.replace("{", "").replace("}", ""))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("the template must be an absolute http(s) URL")
    return template


def failure_url(
    template: str,
    *,
    failure_id: int,
    execution_id: int,
    job_name: str,
    step_execution_id: int | None = None,
    host: str | None = None,
    started_at: datetime | None = None,
    ended_at: datetime | None = None,
) -> str | None:
    """The link to a failure's text ("Open the logs"), or ``None`` without a
    template. Every value is URL-quoted (a job name or a host is any visible
    character); times are RFC 3339 UTC with milliseconds (``…T21:00:00.000Z``);
    an unknown value is the empty string (decision 316)."""
    if not template:
        return None

    def text(value: object) -> str:
        return "" if value is None else quote(str(value), safe="")

    return template.format(
        failure_id=failure_id,
        execution_id=execution_id,
        job_name=text(job_name),
        step_execution_id=text(step_execution_id),
        host=text(host),
        started_at=text(rfc3339(started_at)),
        ended_at=text(rfc3339(ended_at)),
    )


def rfc3339(instant: datetime | None) -> str | None:
    """``2026-12-06T21:00:00.000Z`` (UTC, milliseconds), ``None`` for ``None``."""
    if instant is None:
        return None
    utc = instant.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
