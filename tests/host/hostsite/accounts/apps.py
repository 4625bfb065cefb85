from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "hostsite.accounts"
    label = "accounts"
