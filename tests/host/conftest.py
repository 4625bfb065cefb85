"""The host-project tests (tests/host): the app installed in another Django
project (hostsite), through its URLs, its admin site and its commands.

They run in their own passes of scripts/test, with ``tests/host`` on the
Python path and ``--ds hostsite.settings``; under the service's settings
(every other pass) they are not collected."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client

HOST_SETTINGS = "hostsite.settings"

if settings.SETTINGS_MODULE != HOST_SETTINGS:
    collect_ignore_glob = ["test_*.py"]

API = "/batch/api/v1/"


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def token_for(user: str, *groups: str) -> str:
    """A token issued as the README says: ``manage.py batch_token create``."""
    grouped = [arg for group in groups for arg in ("--group", group)]
    created: dict[str, Any] = json.loads(
        command(
            "batch_token",
            "create",
            "--user",
            user,
            "--name",
            "host-tests",
            "--create-user",
            "--json",
            *grouped,
        )
    )
    return str(created["token"])


class Api:
    """Requests to the app's API under the host's prefix, with a token."""

    def __init__(self, token: str | None) -> None:
        headers = {"Authorization": f"Token {token}"} if token else {}
        self.client = Client(raise_request_exception=False, headers=headers)

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(API + path, params)

    def post(self, path: str, body: Any, content_type: str = "application/json") -> Any:
        data = (
            json.dumps(body)
            if content_type == "application/json" and not isinstance(body, str | bytes)
            else body
        )
        return self.client.post(API + path, data, content_type=content_type)


@pytest.fixture
def runtime(db: None) -> Api:
    return Api(token_for("host-runtime", "batch-runtime"))


@pytest.fixture
def viewer(db: None) -> Api:
    return Api(token_for("host-viewer", "batch-viewer"))


@pytest.fixture
def anonymous() -> Api:
    return Api(None)
