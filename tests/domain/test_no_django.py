"""The domain package imports no Django, no DRF, no models and no repository (contract §1.1)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DOMAIN_DIR = PROJECT_ROOT / "oxide_batch" / "domain"
FORBIDDEN_ROOTS = ("django", "rest_framework")
FORBIDDEN_PACKAGES = ("oxide_batch.models", "oxide_batch.repository")

PROBE = (
    "import sys, oxide_batch.domain, oxide_batch.domain.durations; "
    "bad=[m for m in sys.modules if m.split('.')[0] in ('django','rest_framework') "
    "or m.startswith(('oxide_batch.models','oxide_batch.repository'))]; "
    "print(bad); sys.exit(1 if bad else 0)"
)


def _is_forbidden(module: str) -> bool:
    if module.split(".")[0] in FORBIDDEN_ROOTS:
        return True
    return any(
        module == package or module.startswith(package + ".") for package in FORBIDDEN_PACKAGES
    )


def _imported_modules(path: Path) -> list[str]:
    """Absolute module names imported anywhere in ``path`` (relative imports resolved)."""
    package = "oxide_batch.domain"
    modules: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            modules.append(module)
            modules.extend(f"{module}.{alias.name}" for alias in node.names)
    return modules


DOMAIN_FILES = sorted(DOMAIN_DIR.glob("*.py"))


def test_importing_the_domain_loads_no_django_drf_models_or_repository_module():
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"forbidden modules loaded: {result.stdout} {result.stderr}"
    assert result.stdout.strip() == "[]"


def test_the_domain_package_has_modules_to_scan():
    names = {path.name for path in DOMAIN_FILES}
    assert {"__init__.py", "lifecycle.py", "errors.py", "durations.py"} <= names


@pytest.mark.parametrize("path", DOMAIN_FILES, ids=lambda path: path.name)
def test_no_domain_module_imports_django_drf_models_or_repository(path):
    forbidden = [module for module in _imported_modules(path) if _is_forbidden(module)]
    assert forbidden == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import django", True),
        ("from django.db import models", True),
        ("import rest_framework.views", True),
        ("from oxide_batch import models", True),
        ("from oxide_batch.repository import DjangoJobRepository", True),
        ("from oxide_batch.models.execution import X", True),
        ("from .. import repository", True),
        ("from oxide_batch.domain.status import BatchStatus", False),
        ("import djangoish", False),
        ("from oxide_batch.modelsx import y", False),
    ],
)
def test_the_import_scan_recognises_forbidden_imports(tmp_path, source, expected):
    probe = tmp_path / "probe.py"
    probe.write_text(source + "\n", encoding="utf-8")
    assert any(_is_forbidden(module) for module in _imported_modules(probe)) is expected
