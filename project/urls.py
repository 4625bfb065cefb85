"""The standalone service's URLs: the console at ``admin/``, and the app's own
(``oxide_batch.urls``: the API at ``api/v1/``, the probes) at the root."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("oxide_batch.urls")),
    # Browsers ask for /favicon.ico where a page links no icon (the schema's JSON).
    # The icon's URL is looked up per request: with the manifest storage it is
    # a hashed name, known once collectstatic has run, and migrate's checks
    # import this module before that (scripts/serve).
    path(
        "favicon.ico",
        RedirectView.as_view(url=lazy(static, str)("oxide_batch/favicon.svg")),
    ),
]

# Under the API's prefix every error is application/problem+json; elsewhere
# Django's pages. (The API's own views answer their errors themselves; these
# cover what fails before a view runs, such as a refused Host header.)
handler400 = "oxide_batch.api.errors.handler400"
handler403 = "oxide_batch.api.errors.handler403"
handler404 = "oxide_batch.api.errors.handler404"
handler500 = "oxide_batch.api.errors.handler500"
