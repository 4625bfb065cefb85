"""The HTTP API (``/api/v1/``): DRF views over the repository port.

Every mutating view validates its input with a serializer, runs ONE unit of
work of the repository and renders an output serializer; errors are mapped to
``application/problem+json`` in one place (:mod:`oxide_batch.api.errors`).
Read-only lists use the selectors of :mod:`oxide_batch.selectors`.
"""
