"""The browser's viewport and colour scheme, set through the DevTools protocol,
and full-page screenshots kept as test artifacts.

Device metrics, not the window: a headless window is not always the viewport
asked for (a 390 px window can lay out at 500). The colour scheme is what the
system would report (``prefers-color-scheme``): the admin's theme is "auto"
and follows it. Screenshots go to ``$OXIDE_BATCH_SCREENSHOTS/<folder>``
(``scripts/test``: ``var/test-artifacts``) and are skipped when it is unset."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

SCHEMES = ("light", "dark")
WIDE, PHONE = 1440, 390
WIDTHS = (WIDE, PHONE)
# The tallest screenshot taken (a long page is cut there).
TALLEST = 5000


def emulate_scheme(driver: Any, scheme: str) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"media": "", "features": [{"name": "prefers-color-scheme", "value": scheme}]},
    )


def viewport(driver: Any, width: int, height: int = 900) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )


def reset(driver: Any) -> None:
    """Back to the window's own viewport and the light scheme."""
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    emulate_scheme(driver, "light")


def dark_scheme_applies(driver: Any) -> bool:
    """Whether the admin's dark colours apply to the page (its body is not white)."""
    background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    return bool(background) and background not in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)")


def screenshot(driver: Any, folder: str, name: str, scheme: str, width: int) -> Path | None:
    """The whole page (up to ``TALLEST`` px) at ``width`` in ``scheme``; the
    viewport is left at ``width`` × 900."""
    kept = os.environ.get("OXIDE_BATCH_SCREENSHOTS")
    if not kept:
        return None
    target = Path(kept) / folder
    target.mkdir(parents=True, exist_ok=True)
    viewport(driver, width)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    viewport(driver, width, min(int(height), TALLEST))
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    path = target / f"{slug}-{scheme}-{width}.png"
    driver.save_screenshot(str(path))
    viewport(driver, width)
    return path
