"""Every module of the app imports in a host project's process: Django set up by
settings of its own (the app and what it needs installed, nothing of
``project/settings.py``), so without ``django_stubs_ext.monkeypatch()``, which
makes Django's classes subscriptable for our type annotations. A class
subscripted at run time (``Paginator[Any]``) would fail there at import
(issue 17's first finding; the same mistake was in the admin's base class and
in a lookup)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOST = """
import importlib, json, pkgutil
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
        "django.contrib.sessions", "django.contrib.messages", "rest_framework", "oxide_batch",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    SECRET_KEY="host-project",
)
django.setup()
from django.core.paginator import Paginator
try:
    Paginator[int]
    patched = True
except TypeError:
    patched = False
import oxide_batch
failed = {}
modules = 0
for info in pkgutil.walk_packages(oxide_batch.__path__, "oxide_batch."):
    modules += 1
    try:
        importlib.import_module(info.name)
    except Exception as error:
        failed[info.name] = f"{type(error).__name__}: {error}"
print(json.dumps({"patched": patched, "modules": modules, "failed": failed}))
"""


def test_every_module_imports_in_a_host_project_without_the_stubs_monkeypatch() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    done = subprocess.run(
        [sys.executable, "-c", HOST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # The condition the test is about: Django's classes are not subscriptable here.
    assert report["patched"] is False
    assert report["modules"] > 50
    assert report["failed"] == {}
