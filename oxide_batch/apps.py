from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


def analyze_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate`` (this app's post-migrate step, once the permissions and
    content types exist): statistics for the authentication read's tables."""
    from oxide_batch.repository.statements import analyze_credentials_tables

    analyze_credentials_tables(connections[using])


class OxideBatchConfig(AppConfig):
    name = "oxide_batch"
    verbose_name = "Batch metadata"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import oxide_batch.conf  # noqa: F401  (registers the settings check)
        from oxide_batch import checks  # noqa: F401  (registers the schema check)
        from oxide_batch.observability import logins
        from oxide_batch.observability.observer import OBSERVER
        from oxide_batch.repository import hooks

        # Metrics and structured events for every repository operation.
        hooks.register(OBSERVER)
        post_migrate.connect(analyze_after_migrate, sender=self)
        # Failed and refused console logins: an event line and a count each.
        logins.connect()
