"""Contrast in the Compose view (issue 49 item 6), light and dark (prefers-color-scheme emulated): each key
text against what it sits on at least 4.5:1, each focus indicator against the canvas at least 3:1 (WCAG 2.2
AA), from the browser's computed styles with WCAG's relative luminance; an element's opacity blends it into
its background first (a faded verdict fails). With STUDIO_SCREENSHOTS=DIR the dark theme is saved there."""

from __future__ import annotations

import pytest

from extras import need

need("starlette")
need("selenium")

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from studio_browser import MARKS, shot, start_browser, wait

pytestmark = MARKS

RATIO_JS = """
const rgb = s => { const m = s.match(/[0-9.]+/g).map(Number); return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1]; };
const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
const opacity = e => { let o = 1; for (; e && e.nodeType === 1; e = e.parentNode) o *= Number(getComputedStyle(e).opacity); return o; };
const background = e => { for (; e && e.nodeType === 1; e = e.parentElement) {
  const c = rgb(getComputedStyle(e).backgroundColor); if (c[3] > 0) return c; } return [255, 255, 255, 1]; };
const [fgSel, fgProp, bgSel, bgProp] = arguments;
const fgEl = document.querySelector(fgSel);
if (!fgEl) return null;
const bg = bgSel ? rgb(getComputedStyle(document.querySelector(bgSel))[bgProp]) : background(fgEl);
const fg = rgb(getComputedStyle(fgEl)[fgProp]), a = fg[3] * opacity(fgEl);
const seen = [0, 1, 2].map(i => fg[i] * a + bg[i] * (1 - a));
const [hi, lo] = [lum(seen), lum(bg)].sort((x, y) => y - x);
return (hi + 0.05) / (lo + 0.05);
"""

NODE = '#editor-nodes .node:not(.wall)'
TEXTS = [("body text", "#compose .toolbar label", "color", None, None),
         ("palette entry", "#palette-list .palette-item", "color", None, None),
         ("palette kind", "#palette-list .item-kind", "color", None, None),
         ("node title", f"{NODE} .node-title", "fill", f"{NODE} .node-head", "fill"),
         ("node kind", f"{NODE} .node-kind", "fill", f"{NODE} .node-head", "fill"),
         ("port name", f"{NODE} .port-name", "fill", f"{NODE} .node-box", "fill"),
         ("wire shape", "#editor-wires .wire-shape", "fill", "#editor-wires .wire-shape", "stroke"),
         ("causality verdict", "#causality", "color", None, None),
         ("inspector label", "#inspector .field span", "color", None, None),
         ("mode line", "#mode-line", "color", None, None)]
FOCUS = [("focused node's ring", f"{NODE}:focus .node-box", "stroke", "#editor-area", "backgroundColor"),
         ("focused palette entry's ring", "#palette-list .palette-item:focus", "outlineColor", "#palette", "backgroundColor")]


def ratios(driver, pairs) -> dict[str, float]:
    return {name: driver.execute_script(RATIO_JS, fg, fp, bg, bp) for name, fg, fp, bg, bp in pairs}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_and_focus_contrast_meet_wcag_aa(served, scheme):
    driver = start_browser(served[0], size="1440,900")
    try:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
        Select(driver.find_element(By.ID, "family")).select_by_value("gpt")
        wait(driver, lambda d: d.execute_script("const c = document.getElementById('causality'); "
                                                "return c && (c.className === 'sound' || c.className === 'leaks')"))
        text = ratios(driver, TEXTS)
        assert all(value is not None for value in text.values()), text
        low = {name: round(value, 2) for name, value in text.items() if value < 4.5}
        assert not low, f"text under 4.5:1 ({scheme}): {low}"
        driver.execute_script(f"document.querySelector('{NODE}').focus()")
        # while a check is pending the bar is marked stale: its verdict is no fainter than 4.5:1
        driver.execute_script("document.getElementById('estimates').classList.add('stale')")
        stale = ratios(driver, [t for t in TEXTS if t[0] == "causality verdict"])["causality verdict"]
        assert stale >= 4.5, f"the stale verdict is {stale:.2f}:1 ({scheme})"
        focus = {**ratios(driver, FOCUS[:1])}
        driver.execute_script("document.querySelector('#palette-list .palette-item').focus()")
        focus.update(ratios(driver, FOCUS[1:]))
        low = {name: round(value, 2) for name, value in focus.items() if value is None or value < 3}
        assert not low, f"focus indicators under 3:1 ({scheme}): {low}"
        if scheme == "dark":
            driver.execute_script(f"document.querySelector('{NODE}').focus()")
            shot(driver, "dark")
    finally:
        driver.quit()
