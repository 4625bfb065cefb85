"""The database router of the console's read replica (docs/scale-out.md).

List it in ``DATABASE_ROUTERS`` with :mod:`oxide_batch.db.middleware` in
``MIDDLEWARE``. The router has no opinion (``None``) unless
``OXIDE_BATCH_REPLICA_DATABASE`` names a replica, so it changes nothing
without one. With one:

- reads of the app's models go to the replica only while the current request
  is marked (:func:`oxide_batch.db.replica.replica_for_read`: a console list,
  detail or dashboard page); every other read — the API, the runtime, the
  commands, the watchdog, the confirmation pages and actions — has no mark and
  goes to the primary. Other apps' models (users, permissions, sessions, the
  admin log) always read the primary: a permission is checked where it was
  granted, a new session is found at once;
- writes of the app's models go to ``default``, also for an instance read from
  the replica;
- nothing is migrated on the replica (it replays the primary's schema);
- the primary and the replica hold the same rows, so relations between
  instances read from either are allowed.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, models

from oxide_batch.conf import batch_settings
from oxide_batch.db.replica import replica_for_read

APP_LABEL = "oxide_batch"


class ReplicaRouter:
    def db_for_read(self, model: type[models.Model], **hints: Any) -> str | None:
        alias = replica_for_read()
        if alias is None or model._meta.app_label != APP_LABEL:
            return None
        return alias

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str | None:
        if model._meta.app_label == APP_LABEL and batch_settings.REPLICA_DATABASE:
            return DEFAULT_DB_ALIAS
        return None

    def allow_relation(self, obj1: models.Model, obj2: models.Model, **hints: Any) -> bool | None:
        replica = batch_settings.REPLICA_DATABASE
        if replica and {obj1._state.db, obj2._state.db} <= {DEFAULT_DB_ALIAS, replica}:
            return True
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        replica = batch_settings.REPLICA_DATABASE
        if replica and db == replica:
            return False
        return None
