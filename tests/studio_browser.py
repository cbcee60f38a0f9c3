"""The studio in headless Chromium (Selenium, with Debian's chromium and chromium-driver), for the browser tests
in tests/studio/: the marks that skip them, with the reason, where Chromium is missing; a browser opened on the
studio's page once it is ready; and what every such test does with it (wait for something, switch a tab, read
the header's message, save a screenshot) and on Compose's canvas (a node, a port, a palette entry dragged
onto the canvas, a wire dragged port to port, a key chord, whether the latest check is clean), shared with
benchmarks/bench_studio_editor.py. A test module asks for the studio extra (extras.need("selenium"))
before importing this.

With STUDIO_SCREENSHOTS=DIR, `shot` saves each view it is given there as a PNG (the pictures of docs/studio.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from waiting import WAIT_S

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
MARKS = [pytest.mark.browser, pytest.mark.slow,
         pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                            reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium "
                            "chromium-driver; .ci/run installs them as root)")]
SHOTS = os.environ.get("STUDIO_SCREENSHOTS")


def start_browser(url: str, size: str = "1400,1000"):
    """Headless Chromium at `size` on `url`, once the page and its node editor are ready."""
    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={size}"):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.get(url)
    wait(driver, ready)
    return driver


def ready(driver) -> bool:
    """Whether the page has loaded its data and started its node editor."""
    return driver.execute_script("return document.body.dataset.ready === 'yes' "
                                 "&& document.body.dataset.editor === 'ready'")


def wait(driver, condition, timeout: float = WAIT_S):
    """The first truthy value of `condition(driver)`, polled every 0.1 s (`timeout` is a limit for a hang only)."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def shot(driver, name: str) -> None:
    """A screenshot for docs/studio.md, in 256 colours to stay small."""
    if not SHOTS:
        return
    from PIL import Image

    path = Path(SHOTS) / f"studio-{name}.png"
    driver.save_screenshot(str(path))
    Image.open(path).convert("RGB").quantize(colors=256).save(path, optimize=True)


def type_into(driver, selector: str, text: str) -> None:
    """The field at `selector` emptied, then `text` typed into it."""
    field = driver.find_element(By.CSS_SELECTOR, selector)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)
    if text:
        field.send_keys(text)


def text_of(driver, element_id: str) -> str:
    """An element's text, read in one go (the estimates and the problems are redrawn by every check)."""
    return driver.execute_script(f"const e = document.getElementById('{element_id}'); return e ? e.innerText : ''")


def tab(driver, view: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'.tab[data-view="{view}"]').click()


def message(driver) -> str:
    return driver.find_element(By.ID, "message").text


def node_ids(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#editor-nodes .node:not(.wall)')]"
                                 ".map(n => n.dataset.id)")


def wires(driver) -> set[tuple[str, str]]:
    return {tuple(pair) for pair in driver.execute_script(
        "return [...document.querySelectorAll('#editor-wires .wire')].map(w => [w.dataset.from, w.dataset.to])")}


def node(driver, node_id: str):
    return driver.find_element(By.CSS_SELECTOR, f'#editor-nodes .node[data-id="{node_id}"] .node-head')


def port(driver, ref: str, side: str):
    return driver.find_element(By.CSS_SELECTOR, f'#editor-nodes .port.{side}[data-ref="{ref}"] circle')


def canvas(driver):
    return driver.find_element(By.ID, "editor-area")


def press(driver, *keys: str) -> None:
    chain = ActionChains(driver)
    for key in keys[:-1]:
        chain.key_down(key)
    chain.send_keys(keys[-1])
    for key in reversed(keys[:-1]):
        chain.key_up(key)
    chain.perform()


def drag_from_palette(driver, kind: str, name: str, x: int, y: int) -> None:
    """Palette entry `name` of `kind` (found by the palette's search) dragged onto the canvas, dropped (x, y) px
    from the canvas's centre."""
    type_into(driver, "#palette-search", name)
    item = driver.find_element(By.CSS_SELECTOR, f'.palette-item.{kind}[data-name="{name}"]')
    ActionChains(driver).click_and_hold(item).move_by_offset(20, 0).move_to_element_with_offset(canvas(driver), x, y) \
        .release().perform()


def drag_wire(driver, source: str, target: str) -> None:
    ActionChains(driver).click_and_hold(port(driver, source, "out")).move_to_element(port(driver, target, "in")) \
        .release().perform()


def clean(driver) -> bool:
    """Whether the latest check found no problem and gave the figures."""
    return not text_of(driver, "graph-errors") and "parameters" in text_of(driver, "estimates") \
        and "stale" not in text_of(driver, "estimates")
