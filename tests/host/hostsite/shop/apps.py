from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "hostsite.shop"
    label = "shop"
