"""Debian's chromium driven through its chromium-driver (selenium), headless, with every host but
loopback unresolvable: the pages must work with no internet."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def _binary(names: tuple[str, ...], package: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    pytest.fail(f"no {names[0]}: `apt-get install -y {package}` (.ci/run installs it); the page tests drive it")


def chromium(profile: Path, timezone: str = "UTC") -> webdriver.Chrome:
    """Headless chromium whose viewer lives in `timezone` (an IANA name)."""
    options = webdriver.ChromeOptions()
    options.binary_location = _binary(("chromium", "chromium-browser"), "chromium")
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--window-size=1400,1000",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    environment = {name: value for name, value in os.environ.items() if name != "TZ"} | {"TZ": timezone}
    service = Service(executable_path=_binary(("chromedriver",), "chromium-driver"), env=environment)
    return webdriver.Chrome(options=options, service=service)


def full_page_screenshot(driver: webdriver.Chrome, path: Path, max_height: int = 4000) -> None:
    """The whole page down to `max_height` pixels, as docs/pages.md shows it."""
    height = min(max_height, int(driver.execute_script("return document.documentElement.scrollHeight")))
    driver.set_window_size(1400, max(height, 600))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)


def emulate(driver: webdriver.Chrome, width: int, height: int = 900, scheme: str | None = None) -> None:
    """A viewport `width` px wide (a phone's below 700: mobile, as the viewport meta sees it), and
    the viewer's light or dark preference."""
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    if scheme:
        feature = {"name": "prefers-color-scheme", "value": scheme}
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [feature]})


def screenshot_at(driver: webdriver.Chrome, path: Path, width: int, max_height: int = 5000) -> None:
    """The whole page at `width` px down to `max_height` pixels; the viewport is left that tall."""
    height = min(max_height, int(driver.execute_script("return document.documentElement.scrollHeight")))
    emulate(driver, width, max(height, 600))
    driver.save_screenshot(str(path))
