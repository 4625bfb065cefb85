from django.urls import path
from hostsite.shop.views import ItemsView, MissingView

urlpatterns = [
    path("items/", ItemsView.as_view(), name="shop-items"),
    path("missing/", MissingView.as_view(), name="shop-missing"),
]
