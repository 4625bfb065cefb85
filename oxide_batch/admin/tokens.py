"""API tokens in the console: listed without anything secret, revoked behind a
confirmation page (Django's ``delete_selected`` pattern). Never added here —
the token is shown only to whoever creates it (``manage.py batch_token
create``) — nor edited or deleted: a revoked token stays listed.

Django's model permissions decide: ``view_apitoken`` to see, ``change_apitoken``
to revoke (superusers hold both); the batch roles grant neither.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import NoEditsAdmin
from oxide_batch.admin.display import when
from oxide_batch.repository.clock import SystemClock
from oxide_batch.repository.tokens import revoke_api_tokens
from oxide_batch.selectors import console

SHOWN = ("key_prefix", "name", "user", "created_at", "expires_at", "revoked_at")


class RevokedFilter(admin.SimpleListFilter):
    title = "revoked"
    parameter_name = "revoked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "not revoked"), ("yes", "revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in {"no", "yes"}:
            return queryset.filter(revoked_at__isnull=self.value() == "no")
        return queryset


@admin.register(models.ApiToken)
class ApiTokenAdmin(NoEditsAdmin):
    list_display = ("key_prefix", "name", "user", "created", "expires", "revoked")
    list_filter = (RevokedFilter,)
    search_fields = ("key_prefix", "name", "user__username")
    search_help_text = "A token prefix, a token name or a user name."
    ordering = ("-id",)
    fields = SHOWN
    readonly_fields = SHOWN
    actions = ["revoke_selected"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.ApiToken]:
        return console.token_list(super().get_queryset(request))

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return bool(request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}"))

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: models.ApiToken) -> SafeString:
        return when(obj.created_at)

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, obj: models.ApiToken) -> Any:
        return "never" if obj.expires_at is None else when(obj.expires_at)

    @admin.display(description="revoked", ordering="revoked_at")
    def revoked(self, obj: models.ApiToken) -> Any:
        return "—" if obj.revoked_at is None else when(obj.revoked_at)

    @admin.action(description="Revoke selected API tokens", permissions=["revoke"])
    def revoke_selected(
        self, request: HttpRequest, queryset: QuerySet[models.ApiToken]
    ) -> TemplateResponse | None:
        """A confirmation page listing the tokens; once confirmed, those not
        revoked yet are (they answer 401 from the next request on)."""
        live = list(queryset.filter(revoked_at__isnull=True))
        if not live:
            self.message_user(request, "The selected tokens are revoked already.", messages.INFO)
            return None
        if request.POST.get("post"):
            count = revoke_api_tokens(ids=[row.pk for row in live], now=SystemClock().now())
            self.message_user(
                request,
                f"Revoked {count} API token{'s' if count != 1 else ''}: "
                "requests with them are refused from now on.",
                messages.SUCCESS,
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Revoke API tokens?",
            "opts": self.opts,
            "tokens": live,
            "skipped": queryset.count() - len(live),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(
            request, "admin/oxide_batch/apitoken/revoke_confirmation.html", context
        )
