"""The app's URLs, to include under any prefix (README, "Add oxide_batch to
your Django project")::

    path("batch/", include("oxide_batch.urls"))

gives the API at ``batch/api/v1/`` (namespace ``oxide_batch:api``) and the
probes ``batch/healthz``, ``batch/readyz`` and ``batch/metrics``. Every answer
under ``api/v1/`` is the API's own, whatever the host's ``REST_FRAMEWORK`` and
error handlers say: a path the API does not know is a 404 problem, not the
host's 404 page. The console is not here: it is the ``oxide_batch`` section of
the host's admin site."""

from __future__ import annotations

from django.urls import include, path, re_path

from oxide_batch.api.errors import not_found
from oxide_batch.observability import views as observability

app_name = "oxide_batch"

urlpatterns = [
    path("api/v1/", include("oxide_batch.api.urls")),
    # Last under api/v1/: what no route of the API matched (a trailing slash, a
    # typo) is answered in the API's own terms. Not all of api/: with the empty
    # prefix that would take the project's own api/ routes listed after this.
    re_path(r"^api/v1/", not_found, name="api-not-found"),
    # Operator observability (docs/observability.md): unauthenticated probes and
    # the Prometheus endpoint (restrictable by OXIDE_BATCH_METRICS_* settings).
    path("healthz", observability.healthz, name="healthz"),
    path("readyz", observability.readyz, name="readyz"),
    path("metrics", observability.metrics_view, name="metrics"),
]
