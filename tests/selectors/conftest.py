"""The demo workload the console's tests read (tests/admin/conftest.py)."""

from tests.admin.conftest import demo

__all__ = ["demo"]
