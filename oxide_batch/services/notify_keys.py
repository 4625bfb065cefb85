"""Destinations sealed at rest (issue 41): a webhook's URL and secret, a Slack
webhook URL (itself a secret) and e-mail addresses are stored as one Fernet
token, never shown again.

Keys: ``OXIDE_BATCH_NOTIFY_KEYS`` (Fernet keys, the first encrypts, every one
decrypts — rotation by ``MultiFernet``: add the new key first, run
``manage.py batch_notifications rotate``, then drop the old one);
when empty, one key derived from ``SECRET_KEY`` (HKDF-SHA256 with a purpose
label, so the key is never the secret itself).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import RepositoryError

_PURPOSE = b"oxide-batch.notifications.destination.v1"


@dataclass(eq=False)
class DestinationUnreadable(RepositoryError):
    """No configured key opens a sealed destination (its key was dropped)."""

    code: ClassVar[str] = "notification_destination_unreadable"

    @property
    def message(self) -> str:
        return "no key in OXIDE_BATCH_NOTIFY_KEYS opens the rule's destination"


def derived_key(secret: str) -> bytes:
    """The Fernet key derived from ``secret`` (``SECRET_KEY``) for this purpose."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_PURPOSE).derive(
        secret.encode()
    )
    return base64.urlsafe_b64encode(raw)


def keyring() -> MultiFernet:
    """Every configured key, the first one encrypting."""
    keys = batch_settings.NOTIFY_KEYS or (derived_key(str(settings.SECRET_KEY)).decode(),)
    return MultiFernet([Fernet(key.encode()) for key in keys])


def seal(destination: Mapping[str, Any]) -> str:
    return keyring().encrypt(json.dumps(dict(destination), sort_keys=True).encode()).decode()


def unseal(token: str) -> dict[str, Any]:
    try:
        opened = keyring().decrypt(token.encode())
    except InvalidToken:
        raise DestinationUnreadable() from None
    document = json.loads(opened)
    assert isinstance(document, dict)
    return document


def reseal(token: str) -> str:
    """The same destination under the first key (rotation)."""
    return keyring().rotate(token.encode()).decode()
