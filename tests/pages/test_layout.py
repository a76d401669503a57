"""The pages as they render, at a desktop's 1400 px and a phone's 390 px, light and dark: the page
never scrolls sideways (a wide table scrolls inside its own box), no header or title breaks inside
a word ("valu e", "similar ity"), no section is left empty, and on a phone the list shows each
incident's title and top cause whole. Screenshots of each go to the test's tmp dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.helpers.service import API_TOKEN
from tests.pages.browser import chromium, emulate, screenshot_at
from tests.pages.test_incident_story import warn

WIDTHS = (1400, 390)
SCHEMES = ("light", "dark")

# What the rendered page gets wrong, in words: one string per problem.
PROBLEMS = """
const problems = [];
const root = document.documentElement;
if (root.scrollWidth > root.clientWidth) {
  const wide = [...document.querySelectorAll("body *")]
    .filter((el) => el.getBoundingClientRect().right > root.clientWidth + 1)
    .filter((el) => !el.closest(".scroll"))
    .map((el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className ? "." + el.className : ""));
  problems.push(`the page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth} px (${wide.slice(0, 5)})`);
}
// A word that the layout split over two lines: its text range has boxes on different lines.
function broken(el) {
  const found = [];
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.textContent.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      if (tops.size > 1) found.push(match[0]);
    }
  }
  return found;
}
const words = [...document.querySelectorAll(arguments[0])].filter((el) => el.getClientRects().length);
for (const el of words) {
  const where = `<${el.tagName.toLowerCase()}> "${el.textContent.trim().slice(0, 60)}"`;
  for (const word of broken(el)) problems.push(`"${word}" breaks inside the word in ${where}`);
}
for (const section of document.querySelectorAll("main section")) {
  const heading = section.querySelector("h1, h2");
  const text = section.innerText.replace(heading ? heading.innerText : "", "").trim();
  if (!text && !section.querySelector("canvas, form, table")) problems.push(`section #${section.id} is empty`);
}
// Whatever is not inside a scrolling box lies within the viewport.
for (const el of document.querySelectorAll(arguments[1])) {
  const box = el.getBoundingClientRect();
  if (box.width && (box.left < 0 || box.right > root.clientWidth + 1)) {
    const span = `${Math.round(box.left)}..${Math.round(box.right)} px`;
    problems.push(`${el.className || el.tagName} "${el.innerText.trim().slice(0, 40)}" is cut off: ${span}`);
  }
}
return problems;
"""

# Where a word must never break, and what must lie within the viewport, per page.
WORDS = ", ".join(
    ("time", "th", "h1", "h2", "h3", "h4", "table.incidents td.title-cell a", "table.incidents td.top-cause")
    + (".for-against li a", "figcaption b")
)
VISIBLE = "table.incidents td.title-cell, table.incidents td.top-cause, .for-against > div, figure.chart, .cause"


def test_the_pages_fit_a_phone_and_a_desktop_in_light_and_dark(
    investigated: tuple[str, dict[str, Any]], pg_db: str, tmp_path: Path
) -> None:
    base, incident = investigated
    warning = warn(pg_db)  # an early warning too: the table of signals that moved, in its header
    breached = [f for f in incident["investigation"]["findings"] if f["breached"] and f["kind"] != "trace"]
    driver = chromium(tmp_path / "chromium-profile")
    problems: list[str] = []
    try:
        wait = WebDriverWait(driver, 20)
        driver.get(f"{base}/signin?next=/")
        driver.find_element(By.NAME, "token").send_keys(API_TOKEN)
        driver.find_element(By.CSS_SELECTOR, "#signin button").click()
        wait.until(lambda d: d.find_elements(By.ID, "incidents"))
        for width in WIDTHS:
            for scheme in SCHEMES:
                emulate(driver, width, scheme=scheme)
                pages = {
                    "list": "/",
                    "incident": f"/incidents/{incident['id']}",
                    "warning": f"/incidents/{warning}",
                    "stats": "/stats",
                }
                for name, path in pages.items():
                    driver.get(f"{base}{path}")
                    if name == "incident":
                        wait.until(
                            lambda d: len(d.find_elements(By.CSS_SELECTOR, "figure.chart[data-drawn]")) == len(breached)
                        )
                        figure = driver.find_element(By.CSS_SELECTOR, "figure.chart")
                        figure.screenshot(str(tmp_path / f"chart-{width}-{scheme}.png"))
                    dark = driver.execute_script("return matchMedia('(prefers-color-scheme: dark)').matches")
                    assert dark == (scheme == "dark"), f"{scheme} was not emulated"
                    found = driver.execute_script(PROBLEMS, WORDS, VISIBLE)
                    problems += [f"{name} at {width} px, {scheme}: {problem}" for problem in found]
                    screenshot_at(driver, tmp_path / f"{name}-{width}-{scheme}.png", width)
                    emulate(driver, width, scheme=scheme)
    finally:
        driver.quit()
    print(f"screenshots in {tmp_path}")
    assert problems == [], "\n".join(problems)
