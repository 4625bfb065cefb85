"""One attempt of one delivery (issue 41 point 3): a signed webhook, a Slack
message or an e-mail, and what its answer means.

A webhook is ``POST``ed with the Standard Webhooks headers (``webhook-id`` —
the delivery's stable id, repeated by every attempt —, ``webhook-timestamp``,
``webhook-signature``, signed by the ``standardwebhooks`` package). Redirects
are never followed (a 3xx is a final refusal). 2xx: delivered; 429 and 5xx
(``Retry-After`` honoured), a timeout or a connection error: retried; any
other answer: final.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import Message
from typing import Any, Literal

from django.conf import settings
from django.core.mail import EmailMessage
from django.urls import NoReverseMatch, reverse
from standardwebhooks import Webhook

from oxide_batch.conf import batch_settings
from oxide_batch.domain.notifications import (
    Destination,
    one_line,
    parse_retry_after,
    retryable_status,
)

USER_AGENT = "oxide-batch-notifier/1"

Verdict = Literal["delivered", "retry", "final"]


@dataclass(frozen=True)
class Attempt:
    verdict: Verdict
    detail: str
    retry_after: timedelta | None = None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx comes back as an HTTPError: a final refusal


_OPENER = urllib.request.build_opener(_NoRedirects())


def execution_url(job_execution_id: int | None) -> str:
    """The execution's case file in the console, absolute when
    ``OXIDE_BATCH_CONSOLE_URL`` is set."""
    if job_execution_id is None:
        return ""
    try:
        path = reverse("admin:oxide_batch_jobexecution_change", args=[job_execution_id])
    except NoReverseMatch:
        return ""
    return batch_settings.CONSOLE_URL.rstrip("/") + path


def webhook_headers(secret: str, webhook_id: str, body: bytes, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt, signed at ``at`` (wall clock:
    a receiver checks it against its own)."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(webhook_id, at, body),
    }


def slack_text(document: Mapping[str, Any]) -> str:
    """A readable one-line text with a link to the execution's case file."""
    url = document["data"].get("url")
    line = one_line(document)
    return f"{line} — <{url}|case file>" if url else line


def _post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Attempt:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
    )
    try:
        with _OPENER.open(request, timeout=timeout) as response:  # nosec B310
            response.read(65536)
            return Attempt("delivered", f"HTTP {response.status}")
    except urllib.error.HTTPError as error:
        status = error.code
        if 300 <= status < 400:
            return Attempt("final", f"HTTP {status}: redirect not followed")
        if retryable_status(status):
            headers_in: Message = error.headers
            wait = parse_retry_after(headers_in.get("Retry-After"), datetime.now(UTC))
            return Attempt("retry", f"HTTP {status}", wait)
        return Attempt("final", f"HTTP {status}")
    except TimeoutError:
        return Attempt("retry", "timeout")
    except urllib.error.URLError as error:
        return Attempt("retry", f"connection error: {error.reason}"[:200])
    except (ConnectionError, OSError) as error:
        return Attempt("retry", f"connection error: {type(error).__name__}")


def send(
    destination: str,
    target: Mapping[str, Any],
    document: Mapping[str, Any],
    *,
    webhook_id: str,
    timeout: timedelta,
) -> Attempt:
    """One attempt to deliver ``document`` to an unsealed ``target``."""
    seconds = max(0.001, timeout.total_seconds())
    if destination == Destination.EMAIL:
        return _mail(target, document, webhook_id, seconds)
    if destination == Destination.SLACK:
        body = json.dumps({"text": slack_text(document)}).encode()
        return _post(target["url"], body, {"webhook-id": webhook_id}, seconds)
    body = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    headers = webhook_headers(target["secret"], webhook_id, body, datetime.now(UTC))
    return _post(target["url"], body, headers, seconds)


def _mail(
    target: Mapping[str, Any], document: Mapping[str, Any], webhook_id: str, timeout: float
) -> Attempt:
    data = document["data"]
    text = "\n".join(
        [
            one_line(document),
            "",
            f"Case file: {data.get('url') or '(OXIDE_BATCH_CONSOLE_URL is not set)'}",
            "",
            json.dumps(document, indent=2, sort_keys=True),
        ]
    )
    message = EmailMessage(
        subject=f"[oxide-batch] {one_line(document)}",
        body=text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=list(target["addresses"]),
        headers={"Message-ID": f"<{webhook_id}@oxide-batch>", "X-Webhook-Id": webhook_id},
    )
    try:
        message.send(fail_silently=False)
    except (OSError, Exception) as error:  # SMTP errors, refused connections
        return Attempt("retry", f"e-mail: {type(error).__name__}")
    return Attempt("delivered", "sent")
