"""What a page asked the network for, from chromium's DevTools log (every
request the page started, with why it failed if it did) and from the page's
resource timing (what it actually loaded).

Requests of the browser's own pages (its new-tab page, ``chrome://…``) are
left out: they are not the page under test and never leave the machine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    url: str
    # DevTools' blockedReason: "csp" when the page's Content-Security-Policy
    # refused it before anything was sent; None when it was sent (or failed later).
    blocked: str | None


def requests_started(driver: Any) -> list[Request]:
    """Every request started since the last call (the log is drained as it is read)."""
    urls: dict[str, str] = {}
    blocked: dict[str, str] = {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message["params"]
        if message["method"] == "Network.requestWillBeSent":
            if not params.get("documentURL", "").startswith("chrome"):
                urls[params["requestId"]] = params["request"]["url"]
        elif message["method"] == "Network.loadingFailed" and params.get("blockedReason"):
            blocked[params["requestId"]] = params["blockedReason"]
    return [Request(url, blocked.get(request_id)) for request_id, url in urls.items()]


def resources_loaded(driver: Any) -> list[str]:
    """The page's resource timing entries: what it fetched, by URL."""
    names: list[str] = driver.execute_script(
        "return performance.getEntriesByType('resource').map((entry) => entry.name)"
    )
    return names
