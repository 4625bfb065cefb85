"""axe-core (npm, ``package.json``) run inside the page Selenium shows.

``scripts/test`` installs it with ``npm ci``; when it is missing this module
runs ``npm ci`` itself, and a test skips only when npm is not there at all."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
# What the console must never carry (axe's two worst impacts).
BLOCKING = ("serious", "critical")

_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]}).then(
    (result) => done({violations: result.violations}),
    (error) => done({error: String(error)}),
);
"""


@cache
def axe_source() -> str:
    if not AXE.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip(f"axe-core is not installed ({AXE}) and npm is not available to install it")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci failed, axe-core is not installed:\n{done.stdout}{done.stderr}")
    return AXE.read_text(encoding="utf-8")


def axe_violations(driver: Any) -> list[dict[str, Any]]:
    """axe's violations on the page the driver shows (every rule axe runs by default)."""
    driver.execute_script(axe_source())
    result = driver.execute_async_script(_RUN)
    assert "error" not in result, f"axe.run failed: {result['error']}"
    violations: list[dict[str, Any]] = result["violations"]
    return violations


def blocking(violations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for v in violations if v["impact"] in BLOCKING]


def describe(violations: list[dict[str, Any]]) -> str:
    """One line per violation and node: rule, impact, CSS target, what to fix."""
    lines = []
    for violation in violations:
        lines.append(f"{violation['id']} ({violation['impact']}): {violation['help']}")
        for node in violation["nodes"]:
            target = " ".join(str(part) for part in node["target"])
            summary = (node.get("failureSummary") or "").replace("\n", " ")
            lines.append(f"    {target} — {summary[:200]}")
    return "\n".join(lines)


def node_count(violations: list[dict[str, Any]]) -> int:
    return sum(len(v["nodes"]) for v in violations)
