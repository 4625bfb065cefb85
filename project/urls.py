from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from oxide_batch.observability import views as observability

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("oxide_batch.api.urls")),
    # Operator observability (docs/observability.md): unauthenticated probes and
    # the Prometheus endpoint (restrictable by OXIDE_BATCH_METRICS_* settings).
    path("healthz", observability.healthz, name="healthz"),
    path("readyz", observability.readyz, name="readyz"),
    path("metrics", observability.metrics_view, name="metrics"),
    # Browsers ask for /favicon.ico where a page links no icon (the schema's JSON).
    # The icon's URL is looked up per request: with the manifest storage it is
    # a hashed name, known once collectstatic has run, and migrate's checks
    # import this module before that (scripts/serve).
    path(
        "favicon.ico",
        RedirectView.as_view(url=lazy(static, str)("oxide_batch/favicon.svg")),
    ),
]

# Under /api/ every error is application/problem+json; elsewhere Django's pages.
handler400 = "oxide_batch.api.errors.handler400"
handler403 = "oxide_batch.api.errors.handler403"
handler404 = "oxide_batch.api.errors.handler404"
handler500 = "oxide_batch.api.errors.handler500"
