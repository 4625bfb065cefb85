"""Notification rules (issue 41 point 2): who hears what.

A rule names job-name patterns (the token's glob syntax, ``domain/jobscope.py``),
event kinds and one destination: a webhook signed as Standard Webhooks says
(``standard``), a Slack-compatible incoming webhook (``slack``), or e-mail
addresses (Django's e-mail backend). The destination is sealed at rest
(``notify_keys.py``) and never shown again; every change is audited
(``ob_notification_rule_change``).
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from standardwebhooks import Webhook

from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.domain.evidence import instant_text
from oxide_batch.domain.jobscope import validate_patterns
from oxide_batch.domain.notifications import (
    Destination,
    NotificationDeliveryNotDead,
    NotificationRuleInvalid,
    NotificationRuleNotFound,
    parse_kinds,
)
from oxide_batch.repository import notifications as store
from oxide_batch.repository.clock import Clock, SystemClock
from oxide_batch.selectors.notifications import sealed_destination
from oxide_batch.services import notify_keys
from oxide_batch.services.notify_send import Attempt, execution_url, send

RULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SECRET_PREFIX = "whsec_"  # nosec B105 # the Standard Webhooks prefix, not a secret
MAX_ADDRESSES = 20


@dataclass(frozen=True)
class NewRule:
    """A rule as asked for, validated; ``secret`` was generated when not given
    (to be shown once)."""

    name: str
    patterns: tuple[str, ...]
    kinds: tuple[str, ...]
    destination: Destination
    target: dict[str, Any]
    hint: str
    secret: str | None = None
    secret_generated: bool = False


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _validate_secret(secret: str) -> str:
    if not secret.startswith(SECRET_PREFIX):
        raise NotificationRuleInvalid(field="secret", reason="must begin with whsec_")
    try:
        body = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        Webhook(secret)
    except Exception:
        raise NotificationRuleInvalid(field="secret", reason="whsec_ then base64") from None
    if len(body) < 24:
        raise NotificationRuleInvalid(field="secret", reason="at least 24 bytes of key")
    return secret


def validate_webhook_url(url: str) -> str:
    """An absolute https URL; plain http only to a host named in
    ``OXIDE_BATCH_WEBHOOK_HTTP_HOSTS``."""
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in {"http", "https"}:
        raise NotificationRuleInvalid(field="webhook", reason="an absolute http(s) URL")
    if any(character.isspace() or ord(character) < 0x20 for character in url):
        raise NotificationRuleInvalid(field="webhook", reason="no whitespace or control character")
    if parts.scheme == "http" and parts.hostname not in batch_settings.WEBHOOK_HTTP_HOSTS:
        raise NotificationRuleInvalid(
            field="webhook",
            reason=(
                "https required (plain http only to a host named in OXIDE_BATCH_WEBHOOK_HTTP_HOSTS)"
            ),
        )
    return url


def _addresses(addresses: Sequence[str]) -> tuple[str, ...]:
    found = tuple(dict.fromkeys(a.strip() for a in addresses if a.strip()))
    if not 1 <= len(found) <= MAX_ADDRESSES:
        raise NotificationRuleInvalid(field="email", reason=f"1 to {MAX_ADDRESSES} addresses")
    for address in found:
        try:
            validate_email(address)
        except ValidationError:
            raise NotificationRuleInvalid(
                field="email", reason=f"not an address: {address!r}"
            ) from None
    return found


def new_rule(
    *,
    name: str,
    jobs: Sequence[str],
    events: Sequence[str],
    webhook: str | None = None,
    secret: str | None = None,
    format: str = "standard",
    email: Sequence[str] | None = None,
) -> NewRule:
    """Validate a rule's fields (``NotificationRuleInvalid`` names the field)."""
    if not RULE_NAME.fullmatch(name):
        raise NotificationRuleInvalid(
            field="name", reason="1-64 of A-Z a-z 0-9 . _ -, beginning with a letter or digit"
        )
    try:
        patterns = validate_patterns(jobs)
    except OxideBatchError as error:
        raise NotificationRuleInvalid(field="jobs", reason=error.message) from None
    kinds = parse_kinds(events)
    if (webhook is None) == (email is None):
        raise NotificationRuleInvalid(field="destination", reason="one of --webhook or --email")
    if email is not None:
        if secret is not None:
            raise NotificationRuleInvalid(field="secret", reason="only for a webhook")
        found = _addresses(email)
        plural = "es" if len(found) > 1 else ""
        return NewRule(
            name,
            patterns,
            kinds,
            Destination.EMAIL,
            {"addresses": list(found)},
            hint=f"{len(found)} address{plural}",
        )
    assert webhook is not None
    url = validate_webhook_url(webhook)
    hint = f"{urlsplit(url).scheme}://{urlsplit(url).hostname}/…"
    if format == "slack":
        if secret is not None:
            raise NotificationRuleInvalid(field="secret", reason="a Slack webhook is not signed")
        return NewRule(name, patterns, kinds, Destination.SLACK, {"url": url}, hint=hint)
    if format != "standard":
        raise NotificationRuleInvalid(field="format", reason="standard or slack")
    generated = secret is None
    secret = generate_secret() if secret is None else _validate_secret(secret)
    return NewRule(
        name,
        patterns,
        kinds,
        Destination.WEBHOOK,
        {"url": url, "secret": secret},
        hint=hint,
        secret=secret,
        secret_generated=generated,
    )


class NotificationRules:
    """Adds, lists, disables, removes rules; every change audited."""

    def __init__(self, *, using: str = "default", clock: Clock | None = None) -> None:
        self.using = using
        self.clock = clock or SystemClock()

    def add(self, rule: NewRule, *, by: store.ChangeBy) -> int:
        row = store.insert_rule(
            self.using,
            name=rule.name,
            patterns=rule.patterns,
            kinds=rule.kinds,
            destination=rule.destination.value,
            sealed=notify_keys.seal(rule.target),
            hint=rule.hint,
            by=by,
            now=self.clock.now(),
        )
        return int(row.pk)

    def disable(self, name: str, *, by: store.ChangeBy) -> None:
        store.set_rule_enabled(self.using, name, enabled=False, by=by, now=self.clock.now())

    def enable(self, name: str, *, by: store.ChangeBy) -> None:
        store.set_rule_enabled(self.using, name, enabled=True, by=by, now=self.clock.now())

    def remove(self, name: str, *, by: store.ChangeBy) -> None:
        store.delete_rule(self.using, name, by=by, now=self.clock.now())

    def test(self, name: str, *, by: store.ChangeBy) -> Attempt:
        """Send a test message to the rule's destination now (audited with its outcome)."""
        found = sealed_destination(name, self.using)
        if found is None:
            raise NotificationRuleNotFound(name=name)
        destination, sealed = found
        now = self.clock.now()
        document = {
            "type": "notification.test",
            "timestamp": instant_text(now),
            "data": {
                "job_name": "(test)",
                "job_instance_id": None,
                "job_execution_id": None,
                "status": "",
                "url": execution_url(None),
                "rule": name,
            },
        }
        attempt = send(
            destination,
            notify_keys.unseal(sealed),
            document,
            webhook_id=f"msg_test_{secrets.token_hex(12)}",
            timeout=batch_settings.NOTIFY_TIMEOUT,
        )
        store.record_rule_test(
            self.using, name, by=by, now=now, outcome=f"{attempt.verdict}: {attempt.detail}"
        )
        return attempt

    def redeliver(self, delivery_id: int, *, by: store.ChangeBy) -> None:
        """A dead delivery pending again from its first attempt (audited);
        ``NotificationDeliveryNotDead`` when it is not dead (or not there)."""
        if not store.redeliver(self.using, delivery_id, by=by, now=self.clock.now()):
            raise NotificationDeliveryNotDead(id=delivery_id)

    def rotate(self, *, by: store.ChangeBy) -> int:
        return store.reseal_rules(self.using, notify_keys.reseal, by=by, now=self.clock.now())
