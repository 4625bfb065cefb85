"""The operator throttle: at most ``OXIDE_BATCH_OPERATOR_THROTTLE_RATE`` operator
actions per user (default ``60/min``), counted in a cache every process shares.

It applies to every method whose view requires an operator action's permission (stop, abandon,
recover, hold and release, purge survey and apply) — never to runtimes' or
readers' requests, so a busy runtime is not slowed and a new operator endpoint
is covered without being listed here. Authorization runs first (DRF checks
permissions before throttles): a refused caller spends no allowance and sees
401/403, not 429. Past the rate the answer is 429 ``throttled`` with
``Retry-After`` (oxide_batch.api.errors).

The count lives in the ``throttle`` cache (Django's DatabaseCache on the table
the app's migration 0010 creates): one count for every gunicorn worker and
every host. A project that names no ``throttle`` cache in ``CACHES`` (a host
project, README) gets that same cache from the app itself. DRF's
read-then-write of the history is not atomic, so requests of one user racing
each other may both be admitted — a bound on a person's or a script's pace, not
an exact quota. Hosts should keep their clocks in sync (NTP): each stamps the
shared history with its own time.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.core.cache.backends.db import DatabaseCache
from rest_framework.throttling import UserRateThrottle

from oxide_batch.conf import batch_settings

THROTTLE_CACHE = "throttle"
# The table of migration 0010 (oxide_batch.migrations.0010_throttle_cache_table).
THROTTLE_TABLE = "ob_throttle_cache"
# Expired entries are culled first; above this, a third of the rest.
_OWN_CACHE_PARAMS = {"OPTIONS": {"MAX_ENTRIES": 10_000}}
THROTTLED_CODE = "throttled"
# The documented problem of a throttled operation (merged into its errors).
THROTTLED: Mapping[int, tuple[str, ...]] = {429: (THROTTLED_CODE,)}


def throttle_cache() -> BaseCache:
    """The project's ``throttle`` cache, else the app's own on its table."""
    if THROTTLE_CACHE in settings.CACHES:
        return caches[THROTTLE_CACHE]
    return DatabaseCache(THROTTLE_TABLE, _OWN_CACHE_PARAMS)


class OperatorRateThrottle(UserRateThrottle):
    """Per user, one allowance across every operator endpoint (scope ``operator``).
    The API's base view builds it only for a method that is an operator action
    (:func:`oxide_batch.api.permissions.requires_operate`), so it counts every
    request it sees."""

    scope = "operator"

    def __init__(self) -> None:
        # Resolved per request, not at import: tests and deployments may swap caches.
        self.cache = throttle_cache()
        super().__init__()

    def get_rate(self) -> str | None:
        # Read per request (DRF's THROTTLE_RATES is frozen at import).
        return batch_settings.OPERATOR_THROTTLE_RATE
