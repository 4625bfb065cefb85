from django.apps import AppConfig


class OxideBatchConfig(AppConfig):
    name = "oxide_batch"
    verbose_name = "Batch metadata"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import oxide_batch.conf  # noqa: F401  (registers the settings check)
        from oxide_batch import checks  # noqa: F401  (registers the schema check)
        from oxide_batch.observability.observer import OBSERVER
        from oxide_batch.repository import hooks

        # Metrics and structured events for every repository operation.
        hooks.register(OBSERVER)
