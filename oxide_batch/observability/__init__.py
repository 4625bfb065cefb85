"""Operator observability: request ids, structured events, Prometheus metrics,
health and readiness (``docs/observability.md``).

- :mod:`.context` — the request id carried by every event.
- :mod:`.events` — the event catalogue, :func:`~.events.emit` and the JSON formatter.
- :mod:`.metrics` — the app's own ``CollectorRegistry`` and its bounded labels.
- :mod:`.observer` — the repository hook (registered in ``OxideBatchConfig.ready``):
  what each typed fact (``domain/events.py``) says, the services' reports included.
- :mod:`.middleware` — ``X-Request-ID`` and API request metrics.
- :mod:`.views` — ``/healthz``, ``/readyz`` and ``/metrics``.
"""
