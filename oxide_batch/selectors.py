"""Read-only queries for the console, the API and the commands.

Writes go through the repository; these only read, each with a fixed query count.
"""

from __future__ import annotations

from oxide_batch import models


def repository_is_empty() -> bool:
    """True when no job instance has been recorded yet (one indexed query)."""
    return not models.JobInstance.objects.exists()
