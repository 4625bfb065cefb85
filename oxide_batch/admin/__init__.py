"""The operator console (Django admin).

- :mod:`.pages` — read-only inspection pages with drill-down
- :mod:`.actions` — audited operator actions behind a confirmation page
- :mod:`.dashboard` and :mod:`.svg` — the dashboard and its pictures
- :mod:`.paginator` — a paginator that never counts a whole table
- :mod:`.tokens` — API tokens: listed without secrets, revoked after a confirmation

Every change to batch rows goes through the services; the admin never adds,
edits or deletes them.
"""

from __future__ import annotations

from oxide_batch.admin import notify, pages, tokens

__all__ = ["notify", "pages", "tokens"]
