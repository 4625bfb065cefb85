from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("oxide_batch.api.urls")),
]

# Under /api/ every error is application/problem+json; elsewhere Django's pages.
handler400 = "oxide_batch.api.errors.handler400"
handler403 = "oxide_batch.api.errors.handler403"
handler404 = "oxide_batch.api.errors.handler404"
handler500 = "oxide_batch.api.errors.handler500"
