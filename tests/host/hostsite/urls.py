from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("backoffice/", admin.site.urls),
    path("batch/", include("oxide_batch.urls")),
    path("shop/api/", include("hostsite.shop.urls")),
]
