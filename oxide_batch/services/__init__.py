"""Operator and retention services on top of the repository: idempotency,
audit and evidence. Each use case runs in its own unit of work."""
