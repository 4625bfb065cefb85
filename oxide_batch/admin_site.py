"""The console's admin site — titled for oxide_batch, batch metadata first —
and the app config that makes it Django's default site.

The standalone service's INSTALLED_APPS names :class:`ConsoleAdminConfig`
instead of ``django.contrib.admin`` (a host project keeps its own admin site,
on which the app's admin classes register the same way), so ``admin.site``
*is* a :class:`ConsoleAdminSite` and ``@admin.register`` keeps working
unchanged. Both live outside
``oxide_batch.admin``: that package imports its pages (and models) when loaded,
and the default site is built while the admin modules register, so a site class
inside it would be built twice and lose the first registrations."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest

APP_LABEL = "oxide_batch"


class ConsoleAdminSite(admin.AdminSite):
    site_header = "oxide_batch console"
    site_title = "oxide_batch console"
    index_title = "Batch metadata and administration"
    # Django's "View site" links to "/", which this project does not serve; the
    # header links the dashboard and the API docs instead (admin/base_site.html).
    site_url = None

    def get_app_list(
        self, request: HttpRequest, app_label: str | None = None
    ) -> list[dict[str, Any]]:
        """Django's list (apps by name), with the batch metadata moved first:
        it is what an operator opens the console for."""
        apps = super().get_app_list(request, app_label)
        return sorted(apps, key=lambda app: app["app_label"] != APP_LABEL)


class ConsoleAdminConfig(AdminConfig):
    default_site = "oxide_batch.admin_site.ConsoleAdminSite"
