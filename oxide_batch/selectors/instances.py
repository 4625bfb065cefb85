"""Job instances as the API shows them (with their hold), and whether any
exists; the key digest a reader may see."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils.crypto import salted_hmac

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.errors import JobInstanceNotFound
from oxide_batch.domain.execution import JobInstance
from oxide_batch.repository.records import INSTANCE_COLUMNS, Row, instance_from_row

HOLD_COLUMNS = ("hold_actor", "hold_reason_code", "hold_placed_at")

# Decision 200: the salt keeps this HMAC apart from every other use of SECRET_KEY.
KEY_DIGEST_SALT = "oxide_batch.key_digest.viewer"


def shown_key_digest(digest: str, *, payload_reader: bool) -> str:
    """The ``key_digest`` a reader is shown (contract §2.2.1, decision 200).

    A payload reader (runtime, operator) gets the contract's digest, which its
    own key reproduces. Anyone else gets HMAC-SHA256 of it under a key derived
    from ``SECRET_KEY``: still 64 lowercase hex characters, one per instance and
    stable while the secret is, but no hash of guessed parameter values
    reproduces it — a viewer cannot confirm a value hidden from them
    (``OXIDE_BATCH_VISIBLE_PARAMETERS``) by trial.
    """
    if payload_reader:
        return digest
    return salted_hmac(KEY_DIGEST_SALT, digest, algorithm="sha256").hexdigest()


@dataclass(frozen=True)
class HoldRef:
    actor: str
    reason_code: str
    placed_at: datetime


@dataclass(frozen=True)
class InstanceRecord:
    instance: JobInstance
    hold: HoldRef | None


def instances() -> QuerySet[Any, dict[str, Any]]:
    rows: QuerySet[Any, dict[str, Any]] = models.JobInstance.objects.values(
        *INSTANCE_COLUMNS, *HOLD_COLUMNS
    )
    return rows


def instance_record_from_row(row: Row) -> InstanceRecord:
    hold = None
    if row["hold_placed_at"] is not None:
        hold = HoldRef(row["hold_actor"], row["hold_reason_code"], row["hold_placed_at"])
    return InstanceRecord(instance_from_row(row), hold)


def instance_record(instance_id: int) -> InstanceRecord:
    """One instance with its hold (one query); ``JobInstanceNotFound``."""
    row = instances().filter(pk=instance_id).first()
    if row is None:
        raise JobInstanceNotFound(id=instance_id)
    return instance_record_from_row(row)


def instance_exists(instance_id: int) -> bool:
    return models.JobInstance.objects.filter(pk=instance_id).exists()


def repository_is_empty() -> bool:
    """True when no job instance has been recorded yet (one indexed query)."""
    return not models.JobInstance.objects.exists()
