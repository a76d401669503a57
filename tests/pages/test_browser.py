"""The pages in a real browser: sign in, the incident that the demo's recorded window produces
(breached findings with their kept series), a chart drawn per breached finding, the causes and the
timeline, feedback that confirms a cause and shows in the list and /stats, no console errors, and
an alert annotation's <script> shown as text, never run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.helpers.service import API_TOKEN
from tests.pages.browser import chromium, full_page_screenshot
from tests.pages.site import INJECTED

VIEWER_ZONE = "Asia/Kolkata"  # UTC+05:30 all year: the page must show its times in it, UTC on hover
SCREENSHOTS = ("incident-list.png", "incident-page.png")

# Paints a chart's canvas leaves: how many pixels are not blank.
PAINTED = """
const canvas = arguments[0];
const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
let painted = 0;
for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
return painted;
"""


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    driver = chromium(tmp_path / "chromium-profile", timezone=VIEWER_ZONE)
    try:
        yield driver
    finally:
        driver.quit()


def _console_errors(driver: WebDriver) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_sign_in_read_the_evidence_confirm_a_cause_and_see_it_counted(
    investigated: tuple[str, dict[str, Any]], browser: WebDriver, tmp_path: Path
) -> None:
    base, incident = investigated
    inv = incident["investigation"]
    breached = [f["id"] for f in inv["findings"] if f["breached"] and f["kind"] != "trace"]
    assert breached, "the demo incident has breached findings"
    wait = WebDriverWait(browser, 20)

    # A browser without a session is sent to sign in, then back where it was going.
    browser.get(f"{base}/incidents/{incident['id']}")
    assert browser.current_url.startswith(f"{base}/signin?next="), browser.current_url
    browser.find_element(By.NAME, "token").send_keys(API_TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#signin button").click()
    wait.until(lambda d: d.current_url == f"{base}/incidents/{incident['id']}")
    [cookie] = [c for c in browser.get_cookies() if c["name"] == "rca_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and not cookie["secure"]  # plain http here
    assert browser.execute_script("return document.cookie").find("rca_session") == -1
    assert API_TOKEN not in browser.page_source and API_TOKEN not in browser.current_url

    # One chart per breached finding, each drawn: the series and its threshold on a painted canvas.
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "figure.chart[data-drawn]")) == len(breached))
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    assert sorted(f.get_attribute("data-key") for f in figures) == sorted(breached)
    for figure in figures:
        assert figure.get_attribute("data-drawn") == "2", "series and threshold"
        canvas = figure.find_element(By.TAG_NAME, "canvas")
        assert browser.execute_script(PAINTED, canvas) > 2000, f"{figure.get_attribute('data-key')}: blank chart"

    # The charts open on the incident (the first onset less a margin, to the end), the whole kept
    # window a click away; no legend of placeholders, the values under the cursor on hover.
    button = browser.find_element(By.ID, "chart-range")
    begin, end = json.loads(button.get_attribute("data-focus"))
    assert button.text == "Show the whole 3 h"
    assert not browser.find_elements(By.CSS_SELECTOR, ".u-legend")
    specs = {}
    for figure in figures:
        spec = json.loads(figure.find_element(By.CSS_SELECTOR, "script.chart-data").get_attribute("textContent"))
        specs[spec["key"]] = spec
        last = spec["start"] + spec["step"] * (len(spec["values"]) - 1)
        assert spec["start"] < begin < spec["onset"] and end == last, (spec["start"], begin, spec["onset"], end)
        assert float(figure.get_attribute("data-x-min")) == pytest.approx(begin)
        assert float(figure.get_attribute("data-x-max")) == pytest.approx(end)
        assert figure.find_element(By.CSS_SELECTOR, ".readout").text == ""
        ActionChains(browser).move_to_element(figure.find_element(By.CSS_SELECTOR, ".u-over")).perform()
        wait.until(lambda d, f=figure: f.find_element(By.CSS_SELECTOR, ".readout").text)
        shown = figure.find_element(By.CSS_SELECTOR, ".readout").text
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d · \S+.* · threshold [<>] .+", shown), shown
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    button.click()
    for figure in figures:
        assert float(figure.get_attribute("data-x-min")) == pytest.approx(
            specs[figure.get_attribute("data-key")]["start"]
        )
    assert button.get_attribute("aria-pressed") == "true" and button.text == "Show the incident only"
    button.click()
    assert all(float(f.get_attribute("data-x-min")) == pytest.approx(begin) for f in figures)

    # The ranked causes with their findings, and the timeline.
    causes = browser.find_elements(By.CSS_SELECTOR, "li.cause")
    assert [c.get_attribute("data-category") for c in causes] == [h["category"] for h in inv["hypotheses"]]
    timeline = browser.find_element(By.ID, "timeline").text
    assert "alert fired" in timeline and f"investigation {inv['id']} done" in timeline
    # Every time in the viewer's zone, 24-hour, its UTC on hover; UTC named once on the page.
    times = browser.find_elements(By.CSS_SELECTOR, "#timeline time")
    assert times, "the timeline's times"
    for time in times:
        local, utc = time.text, time.get_attribute("title")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", local) and utc.endswith(" UTC"), (local, utc)
        moved = datetime.strptime(local, "%Y-%m-%d %H:%M:%S") - timedelta(hours=5, minutes=30)
        assert f"{moved:%Y-%m-%d %H:%M:%S} UTC" == utc, (local, utc)
    footer = browser.find_element(By.TAG_NAME, "footer").text
    assert re.fullmatch(r"Times in your zone, Asia/(Kolkata|Calcutta) \(\+05:30\); hover one for UTC", footer), footer
    page_text = browser.find_element(By.TAG_NAME, "body").text
    assert re.findall(r"\bUTC\b", page_text) == ["UTC"], "UTC is named once, not beside each time"
    assert not re.search(r"\d(am|pm)\b|\b(AM|PM)\b", page_text)
    # A vLLM host's findings are named for vLLM (no "mean on Triton"), and nothing cites "the article".
    assert "vllm" in incident["investigation"]["target"]["stack"]
    assert "Triton" not in page_text and "article" not in page_text.lower()
    assert "Time requests wait in the queue p95" in page_text
    # A finding's "since 11:29 UTC" is shown in the viewer's zone too.
    clocks = browser.find_elements(By.CSS_SELECTOR, "time[data-clock]")
    assert clocks, "a finding's onset in its text"
    for clock in clocks:
        utc = datetime.strptime(clock.get_attribute("title"), "%Y-%m-%d %H:%M:%S UTC")
        assert clock.text == f"{utc + timedelta(hours=5, minutes=30):%H:%M}", clock.text
    # The charts' time axes are 24-hour in the viewer's zone: HH:MM, the date (MM-DD) where it changes.
    for figure in figures:
        ticks = figure.get_attribute("data-x-ticks").split(" | ")
        assert len(ticks) >= 3 and all(re.fullmatch(r"\d\d:\d\d(\n\d\d-\d\d)?", t) for t in ticks), ticks
        assert "\n" in ticks[0], "the first tick carries the date"

    # The earlier incident with the same evidence is listed as similar.
    assert f"#{incident['id'] - 1} " in browser.find_element(By.ID, "similar").text

    # The annotation's markup is shown as text and never ran.
    shown = [dd.get_attribute("textContent") for dd in browser.find_elements(By.CSS_SELECTOR, "dd.annotation")]
    assert INJECTED in shown, shown
    assert browser.execute_script("return window.__injected") is None
    full_page_screenshot(browser, tmp_path / SCREENSHOTS[1])

    # Feedback confirms the top cause; the page, the list and /stats show it.
    top = inv["hypotheses"][0]["category"]
    Select(browser.find_element(By.NAME, "category")).select_by_value(top)
    browser.find_element(By.NAME, "note").send_keys("confirmed from the browser test")
    browser.find_element(By.CSS_SELECTOR, "#feedback-form button").click()
    wait.until(lambda d: d.find_elements(By.ID, "confirmed"))
    assert top in browser.find_element(By.ID, "confirmed").text

    browser.get(f"{base}/")
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-incident='{incident['id']}']")
    assert row.find_element(By.CSS_SELECTOR, ".confirmed-cause").text == top
    assert row.find_element(By.CSS_SELECTOR, ".top-cause").text.startswith(top)
    full_page_screenshot(browser, tmp_path / SCREENSHOTS[0])

    browser.get(f"{base}/stats")
    overall = browser.find_element(By.ID, "overall").text
    assert "all 1 100% 100%" in overall, overall
    assert top in browser.find_element(By.ID, "by-category").text

    # Readable in dark mode: the page and its charts take the dark colours.
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    )
    browser.get(f"{base}/incidents/{incident['id']}")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "figure.chart[data-drawn]")) == len(breached))
    background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 20, 25)", background

    assert _console_errors(browser) == []


def test_investigate_again_from_the_page_keeps_the_diagnosis_while_the_new_one_runs(
    investigated: tuple[str, dict[str, Any]], browser: WebDriver
) -> None:
    """Issue 32.2 in a browser: the button queues a new investigation; the page names it and keeps
    the diagnosis meanwhile; the recorded Prometheus being gone, the new one cannot read the
    evidence, and the page then says so above the causes it keeps."""
    base, incident = investigated
    done = incident["investigation"]
    wait = WebDriverWait(browser, 20)
    browser.get(f"{base}/signin?next=/incidents/{incident['id']}")
    browser.find_element(By.NAME, "token").send_keys(API_TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#signin button").click()
    wait.until(lambda d: d.current_url == f"{base}/incidents/{incident['id']}")

    browser.find_element(By.CSS_SELECTOR, "#again-form button").click()
    wait.until(lambda d: d.current_url == f"{base}/incidents/{incident['id']}#again")
    pending = browser.find_element(By.ID, "again-pending").text
    assert re.match(rf"Investigation {done['id'] + 1} (queued|running) since ", pending), pending
    assert "asked for by env-token-1" in pending and f"investigation {done['id']}'s until it finishes" in pending
    assert not browser.find_elements(By.ID, "again-form")
    assert browser.find_elements(By.CSS_SELECTOR, "li.cause"), "the diagnosis stays while it runs"

    def finished(driver: WebDriver) -> bool:
        driver.refresh()
        return bool(driver.find_elements(By.ID, "blind-since"))

    WebDriverWait(browser, 60, poll_frequency=1).until(finished)
    blind = browser.find_element(By.ID, "blind-since").text
    assert blind.startswith(f"Investigation {done['id'] + 1}, newer,"), blind
    assert browser.find_elements(By.CSS_SELECTOR, "li.cause") and browser.find_elements(By.ID, "again-form")
    assert (
        f"investigation {done['id'] + 1} queued · requested by env-token-1"
        in browser.find_element(By.ID, "timeline").text
    )
    assert not _console_errors(browser)
