"""The read layer: every read of the API, the console and the commands, by
subject. Writes go through the repository's units of work; these only read,
each with a fixed query count (tests/selectors/, and the query-count tests of
the pages and views that call them).

- :mod:`~oxide_batch.selectors.executions`: an execution with its extras (the
  API) or as a view (the commands, the dashboard);
- :mod:`~oxide_batch.selectors.unresolved`: the executions needing an operator;
- :mod:`~oxide_batch.selectors.failures`: what failed and what became of it;
- :mod:`~oxide_batch.selectors.console`: the console's list querysets and the
  confirmation pages' rows; :mod:`~oxide_batch.selectors.pages`: the change
  pages' linked rows; :mod:`~oxide_batch.selectors.casefile`: the case file's;
- :mod:`~oxide_batch.selectors.dashboard`: the dashboard's bounded reads;
- :mod:`~oxide_batch.selectors.instances`, :mod:`~oxide_batch.selectors.steps`,
  :mod:`~oxide_batch.selectors.audit`, :mod:`~oxide_batch.selectors.tokens`,
  :mod:`~oxide_batch.selectors.accounts` (the commands' login account);
- :mod:`~oxide_batch.selectors.scope`: the job name of the object a path names;
- :mod:`~oxide_batch.selectors.job_names`, :mod:`~oxide_batch.selectors.parameters`:
  the console's job-name filter and parameter search;
- :mod:`~oxide_batch.selectors.database`: what the server itself tells;
  :mod:`~oxide_batch.selectors.lookups`: ``InLiterals``.

The derived facts (newest step write, owner recorded, last activity,
inactivity) are defined once, below the repository, in :mod:`oxide_batch.facts`.
"""
