"""The load process of ``bench/layers.py`` (layer L4): runtime clients over HTTP.

Not meant to be run by hand: ``layers.py`` starts it once per measurement, with
a plan on standard input, against the gunicorn server it started::

    python bench/load.py < plan.json > result.json

The plan names the base URL, the runtime token, the operation, and one target
per client (each client works on its own execution or step, so clients never
contend for a row)::

    {"base_url": "http://127.0.0.1:8123", "token": "…", "op": "chunk",
     "duration": 2.0, "clients": [{"step": 17, "version": 1}, …]}

Operations: ``transition`` (STARTING → STARTED on each of the client's fresh
executions, ``{"executions": [ids]}``), ``exit-status`` (exit-code enrichment of
one execution, ``{"execution": id, "version": v}``), ``chunk`` (chunk commits of
one STARTED step, ``{"step": id, "version": v}``) and ``lifecycle`` (whole job
lifecycles, ``{"lifecycles": n, "tag": "…"}``: launch, 10 steps × 20 chunk
commits, completion). Each client is one thread with its own
:class:`~oxide_batch.client.RuntimeClient` (a new loopback connection per request:
gunicorn's sync workers do not keep connections alive). Clients start together
after imports and stop at the deadline or when their targets are used up.

Prints one JSON document: successful operations, errors by code, every
latency in seconds, wall time, the load process's CPU time, and (lifecycle)
the execution ids it created, for the caller to verify.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oxide_batch.client import RuntimeClient  # noqa: E402
from oxide_batch.domain.status import BatchStatus  # noqa: E402

STEPS = 10
CHUNKS = 20
DELTA = {"read": 100, "processed": 100, "written": 100, "committed": 1}
EXIT_CODES = ("BENCH_A", "BENCH_B")


def checkpoint(offset: int) -> dict[str, Any]:
    """The checkpoint every layer writes with a chunk (same shape, same size)."""
    return {
        "schema": "bench.reader",
        "schema_version": 1,
        "payload": {"file": "part-00001.csv", "offset": offset},
    }


class Worker(threading.Thread):
    def __init__(self, plan: dict[str, Any], target: dict[str, Any], start: threading.Barrier):
        super().__init__(daemon=True)
        self.client = RuntimeClient(plan["base_url"], plan["token"], timeout=60.0)
        self.op = plan["op"]
        self.duration = float(plan["duration"])
        self.target = target
        self.start_barrier = start
        self.ok = 0
        self.errors: dict[str, int] = {}
        self.latencies: list[float] = []
        self.executions: list[int] = []
        self.finished = 0.0

    def run(self) -> None:
        self.start_barrier.wait()
        deadline = time.perf_counter() + self.duration
        try:
            getattr(self, "run_" + self.op.replace("-", "_"))(deadline)
        finally:
            self.finished = time.perf_counter()

    def timed(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            result = call(*args, **kwargs)
        except Exception as error:
            code = getattr(error, "code", type(error).__name__)
            self.errors[code] = self.errors.get(code, 0) + 1
            raise
        self.latencies.append(time.perf_counter() - started)
        self.ok += 1
        return result

    def run_transition(self, deadline: float) -> None:
        for execution_id in self.target["executions"]:
            if time.perf_counter() >= deadline:
                return
            self.timed(self.client.transition, execution_id, 0, BatchStatus.STARTED)

    def run_exit_status(self, deadline: float) -> None:
        execution_id, version = self.target["execution"], self.target["version"]
        while time.perf_counter() < deadline:
            code = EXIT_CODES[version % 2]
            version = self.timed(self.client.exit_status, execution_id, version, code).version

    def run_chunk(self, deadline: float) -> None:
        step_id, version = self.target["step"], self.target["version"]
        offset = 0
        while time.perf_counter() < deadline:
            offset += 1
            step = self.timed(
                self.client.commit_chunk, step_id, version, DELTA, checkpoint=checkpoint(offset)
            )
            version = step.version

    def run_lifecycle(self, deadline: float) -> None:
        del deadline  # a lifecycle count, not a duration, bounds this one
        for number in range(self.target["lifecycles"]):
            self.executions.append(self.lifecycle(f"{self.target['tag']}-{number}"))

    def lifecycle(self, tag: str) -> int:
        """Launch, 10 steps × 20 chunk commits, completion: 234 requests."""
        client, timed = self.client, self.timed
        instance, _ = timed(client.select_or_create_instance, "bench_lifecycle", {"run": tag})
        execution = timed(client.create_execution, instance.id)
        execution = timed(client.start, execution)
        for number in range(STEPS):
            step = timed(client.create_step, execution, f"step{number:02d}")
            step = timed(client.transition_step, step, step.version, BatchStatus.STARTED)
            for chunk in range(CHUNKS):
                step = timed(
                    client.commit_chunk, step, step.version, DELTA, checkpoint=checkpoint(chunk)
                )
            timed(client.transition_step, step, step.version, BatchStatus.COMPLETED)
        execution = timed(client.transition, execution, execution.version, BatchStatus.COMPLETED)
        return int(execution.id)


def main() -> None:
    plan = json.load(sys.stdin)
    targets = plan["clients"]
    start = threading.Barrier(len(targets) + 1)
    workers = [Worker(plan, target, start) for target in targets]
    for worker in workers:
        worker.start()
    cpu = time.process_time()
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    wall = max(worker.finished for worker in workers) - began
    errors: dict[str, int] = {}
    for worker in workers:
        for code, count in worker.errors.items():
            errors[code] = errors.get(code, 0) + count
    json.dump(
        {
            "ok": sum(worker.ok for worker in workers),
            "errors": errors,
            "wall": wall,
            "cpu": time.process_time() - cpu,
            "latencies": [latency for worker in workers for latency in worker.latencies],
            "executions": [execution for worker in workers for execution in worker.executions],
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
