"""A Django project that installs oxide_batch the way the README's "Add
oxide_batch to your Django project" says, and otherwise makes its own choices:
its own user model, its own DRF and drf-spectacular settings, other URL
prefixes, another time zone, none of the app's OXIDE_BATCH_* settings.

It is imported as ``hostsite`` (``tests/host`` on the Python path: scripts/test's
host pass, and the wheel test, which copies it next to a fresh install)."""
