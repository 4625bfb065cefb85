"""The purge loop of the soak: ``manage.py purge_batch_metadata`` as a separate
process (as a scheduler would run it) on the server's database, again and
again, purging every finished instance older than "now" (minimum age 0s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from tests.live import ROOT
from tests.soak.ledger import Call, Ledger

PURGE_ACTOR = "soak-purge"
PURGE_PREFIX = "soak-purge-"
COMMAND = "manage.py purge_batch_metadata"
COMMAND_TIMEOUT = 120.0
# Exit 5 = a conflict the command re-surveyed a few times and then gave up on:
# a race lost against the runtimes, like a 409. Any other failure is a failure.
EXPECTED_EXITS = {0: 200, 5: 409}


class PurgeLoop:
    def __init__(
        self,
        ledger: Ledger,
        *,
        deadline: float,
        database_url: str,
        interval: float,
        batch_size: int = 50,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.deadline = deadline
        self.interval = interval
        self.batch_size = batch_size
        self.environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "DATABASE_URL": database_url,
            "SECRET_KEY": settings.SECRET_KEY,
            "OXIDE_BATCH_PURGE_MIN_AGE": "0s",
            "LOG_LEVEL": "WARNING",
            "OXIDE_BATCH_EVENTS_LEVEL": "WARNING",
            **(environment or {}),
        }

    def run(self) -> None:
        number = 0
        while time.monotonic() < self.deadline:
            number += 1
            self.once(f"{PURGE_PREFIX}{number}")
            pause = min(self.interval, self.deadline - time.monotonic())
            if pause > 0:
                time.sleep(pause)

    def once(self, operation_id: str) -> None:
        command = [
            sys.executable,
            *COMMAND.split(),
            "--older-than",
            "0s",
            "--batch-size",
            str(self.batch_size),
            "--no-input",
            "--operation-id",
            operation_id,
            "--actor",
            PURGE_ACTOR,
            "--json",
        ]
        started = time.perf_counter()
        finished = subprocess.run(
            command,
            cwd=ROOT,
            env=self.environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        seconds = time.perf_counter() - started
        document = self._document(finished.stdout)
        status = EXPECTED_EXITS.get(finished.returncode, 500)
        code = None if finished.returncode == 0 else f"purge_exit_{finished.returncode}"
        self.ledger.call(Call(COMMAND, status, code, seconds))
        self.ledger.purges.append(
            {
                "operation_id": operation_id,
                "exit_code": finished.returncode,
                "seconds": round(seconds, 3),
                "counts": (document.get("counts") or document.get("progress", {}).get("counts")),
                "batches": len(document.get("batches", [])),
                "error": document.get("error"),
                "stderr": finished.stderr.decode(errors="replace")[-2000:]
                if finished.returncode not in EXPECTED_EXITS
                else "",
            }
        )

    @staticmethod
    def _document(stdout: bytes) -> dict[str, Any]:
        lines = stdout.decode(errors="replace").strip().splitlines()
        try:
            document = json.loads(lines[-1]) if lines else {}
        except ValueError:
            return {"error": {"code": "unparsable_output", "message": lines[-1][:500]}}
        return document if isinstance(document, dict) else {}
