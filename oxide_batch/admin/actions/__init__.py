"""Audited operator actions behind an intermediate confirmation page
(:mod:`~oxide_batch.admin.actions.confirmation`), by family: the executions'
(recover, abandon, stop: :mod:`~oxide_batch.admin.actions.executions`) and the
instances' (hold, release: :mod:`~oxide_batch.admin.actions.instances`); the
selection a page is given in :mod:`~oxide_batch.admin.actions.selection`.
Which actions apply to a row is :mod:`oxide_batch.admin.applicable`."""
