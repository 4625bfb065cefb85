"""Token authentication against hashed tokens, with the batch permissions, in one query.

``Authorization: Token <token>`` as DRF's ``TokenAuthentication`` reads it
(same header parsing, 401 answers and ``WWW-Authenticate: Token, Bearer``), and the same
token as ``Authorization: Bearer <token>`` (RFC 6750: what most HTTP clients and
API gateways send; contract §4.1), the keyword compared case-insensitively.
The token's first 12 characters find its row (one indexed lookup, which also
reads the user's flags and the batch permissions it holds:
:func:`oxide_batch.selectors.tokens.token_credentials`); the SHA-256 of the whole
token is compared in constant time with the stored digest
(:mod:`oxide_batch.domain.tokens`). A wrong token is ``Invalid token.``; the
holder of a right one that expired or was revoked is told so; an inactive
user is DRF's ``User inactive or deleted.``. Nothing is written: a request's
use of its token is not recorded.

The permissions follow Django's ``ModelBackend``: held directly or through one
of the user's groups, matched by app label and codename; a superuser holds
every one. They are set on the user as :data:`ATTRIBUTE`, which
:mod:`oxide_batch.api.permissions` reads instead of asking Django again.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header

from oxide_batch.api import deps
from oxide_batch.domain.tokens import TokenRefusal, key_prefix, refusal
from oxide_batch.selectors.tokens import BATCH_CODENAMES, token_credentials

# The batch permission codenames the authenticated user holds (see permissions.py).
ATTRIBUTE = "_oxide_batch_permissions"
ALL_HELD = frozenset(BATCH_CODENAMES)


def authenticate_token(token: str) -> tuple[Any, Any]:
    """The user (with its batch permissions as :data:`ATTRIBUTE`) and the
    ``ApiToken`` of ``token`` — one query; ``AuthenticationFailed`` otherwise."""
    found = token_credentials(key_prefix(token))
    if found is None:
        raise exceptions.AuthenticationFailed(_(TokenRefusal.INVALID.value))
    user = found.user
    why = refusal(
        stored_digest=found.token.digest,
        token=token,
        now=deps.clock.now(),
        expires_at=found.token.expires_at,
        revoked_at=found.token.revoked_at,
        user_active=bool(user.is_active),
    )
    if why is not None:
        # DRF's own wording is translated by DRF's catalogue.
        raise exceptions.AuthenticationFailed(_(why.value))
    setattr(user, ATTRIBUTE, ALL_HELD if user.is_superuser else found.held)
    return user, found.token


#: The Authorization keywords that carry a token: DRF's own and RFC 6750's.
KEYWORDS = (b"token", b"bearer")
#: What a 401 challenges with: either keyword, as the header may carry it.
CHALLENGE = "Token, Bearer"


class BatchTokenAuthentication(TokenAuthentication):
    """DRF's token authentication (keyword ``Token``, same answers) against the
    hashed ``ApiToken`` rows, reading the batch permissions in the same query;
    ``Bearer`` is read exactly as ``Token``."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        # DRF's header parsing and answers, for either keyword.
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() not in KEYWORDS:
            return None
        if len(auth) == 1:
            raise exceptions.AuthenticationFailed(
                _("Invalid token header. No credentials provided.")
            )
        if len(auth) > 2:
            raise exceptions.AuthenticationFailed(
                _("Invalid token header. Token string should not contain spaces.")
            )
        try:
            token = auth[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed(
                _("Invalid token header. Token string should not contain invalid characters.")
            ) from None
        return self.authenticate_credentials(token)

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        return authenticate_token(key)

    def authenticate_header(self, request: Any) -> str:
        """The 401's ``WWW-Authenticate``: both schemes the API reads (RFC 9110
        §11.6.1, one challenge each) — DRF's ``Token`` and RFC 6750's ``Bearer``."""
        return CHALLENGE


class BatchTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The OpenAPI document's security schemes for :class:`BatchTokenAuthentication`:
    the token as ``Token <token>`` or as ``Bearer <token>`` (either one)."""

    target_class = BatchTokenAuthentication
    name = ["tokenAuth", "bearerAuth"]
    priority = 1

    def get_security_requirement(self, auto_schema: Any) -> list[dict[str, list[Any]]]:
        return [{"tokenAuth": []}, {"bearerAuth": []}]

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        made_by = "made by `manage.py batch_token create` (a runtime's or an operator's)"
        return [
            {
                "type": "apiKey",
                "in": "header",
                "name": "Authorization",
                "description": f"`Authorization: Token <token>`: an API token {made_by}.",
            },
            {
                "type": "http",
                "scheme": "bearer",
                "description": (
                    f"`Authorization: Bearer <token>` (RFC 6750): the same API token {made_by}, "
                    "accepted exactly as `Token <token>`."
                ),
            },
        ]
