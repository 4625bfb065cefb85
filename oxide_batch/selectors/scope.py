"""The job name of the object a path names (the API's job-pattern scope)."""

from __future__ import annotations

from typing import Any

from oxide_batch import models  # noqa: TID251 (the model layer)


def job_name_of(path_key: str, pk: int) -> str | None:
    """The job name of the object a path names (``instance_id``,
    ``execution_id``, ``step_id``, ``partition_id``), or ``None`` when there is
    none: one indexed read (a join for a step). Job names never change."""
    rows: Any
    if path_key == "instance_id":
        rows = models.JobInstance.objects.filter(pk=pk).values_list("job_name", flat=True)
    elif path_key == "execution_id":
        rows = models.JobExecution.objects.filter(pk=pk).values_list("job_name", flat=True)
    elif path_key == "step_id":
        rows = models.StepExecution.objects.filter(pk=pk).values_list(
            "job_execution__job_name", flat=True
        )
    elif path_key == "partition_id":
        rows = models.StepPartition.objects.filter(pk=pk).values_list(
            "job_instance__job_name", flat=True
        )
    else:
        raise ValueError(f"not a path id: {path_key}")
    found: str | None = rows.first()
    return found
