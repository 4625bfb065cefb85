"""Making the confirmation's choices as an operator would, whichever control
the page offers for one (a ``<select>`` or a group of radio buttons)."""

from __future__ import annotations

from typing import Any


def choose(driver: Any, name: str, value: str) -> None:
    """Pick ``value`` for the form field ``name``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    radios = driver.find_elements(By.CSS_SELECTOR, f'input[type="radio"][name="{name}"]')
    if radios:
        radio = next(r for r in radios if r.get_attribute("value") == value)
        driver.find_element(By.CSS_SELECTOR, f'label[for="{radio.get_attribute("id")}"]').click()
        assert radio.is_selected()
        return
    Select(driver.find_element(By.NAME, name)).select_by_value(value)
