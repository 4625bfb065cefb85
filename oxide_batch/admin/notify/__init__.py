"""Notifications in the console (issue 41 point 6; docs/console.md,
"Notifications"): the rules (disable/enable), the deliveries (deliver a dead
one again) and the jobs' deadlines — read by every batch role, acted on with
``manage_notifications`` only, through the services the commands use."""

from __future__ import annotations

from oxide_batch.admin.notify import deadlines, deliveries, rules

__all__ = ["deadlines", "deliveries", "rules"]
