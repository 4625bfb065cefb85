"""The bounded load-and-soak run: runtimes, an operator and a purge loop against a
real gunicorn on PostgreSQL, each keeping a ledger that the database is checked
against afterwards."""
