"""The studio's runs, safe and visible, in headless Chromium (Selenium, Debian's chromium + chromium-driver)
against a real `microgpt studio`: the tabs as ARIA tabs; a taken name asked about in a dialog whose default is
a free name (a finished run's checkpoint kept), and a free default run name; the learning-rate chart following
a training run; a dozen charts drawn without WebGL, one colour per run in every view, one dash per figure,
and a crosshair shared by the charts; Compare's one number format per column; a failed run's error in its row
and its log a click away; a reload (and a second tab) while a run trains finding the same view; Evaluate
naming its checkpoint; an empty download said so; nothing but the canvas scrolling sideways at 800x600
(Ctrl+Shift+Z is tested with the editor, in test_studio_editor_browser.py). The tests run in order on one studio and one browser. With STUDIO_SCREENSHOTS=DIR the
Watch, Compare and overlay views are saved there (docs/studio-watch.png, -compare, -overlay)."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from extras import need

need("starlette")
need("selenium")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from studio_browser import MARKS, message, ready, shot, start_browser, tab, wait
from studio_server import http_client
from studio_workspace import ensemble_run
from waiting import wait_for

pytestmark = MARKS

SYNTH_FIGURES = [f"expert{k}_{figure}" for k in (1, 2) for figure in ("router_weight", "stream_cos", "write_norm")] + [
    "head1_loss", "head2_loss", "grad_norm", "lr", "loss", "val_loss", "aux_a", "aux_b", "aux_c", "aux_d", "aux_e"]


def synth_log(path: Path, steps: int = 300) -> None:
    """A metrics log in the format train writes, with a dozen charts' worth of figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for step in range(1, steps + 1):
            record = {"step": step, "time": step * 0.05, "loss": 3 / step ** 0.3, "lr": 1e-3 * (1 - step / steps / 2)}
            record.update({key: 0.5 + 0.1 * ((step * (i + 1)) % 7) for i, key in enumerate(SYNTH_FIGURES)
                           if key not in record and key != "val_loss"})
            if step % 50 == 0:
                record["val_loss"] = 3.1 / step ** 0.3
            f.write(json.dumps(record) + "\n")


@pytest.fixture(scope="module")
def served(served):
    """The file's studio (tests/studio/conftest.py) with runs in its workspace: a copy of the text that a test
    empties, a synthetic log of a dozen charts, run ens trained 3 steps and run1 saved; (url, workspace, http)."""
    url, workspace = served
    shutil.copy(workspace / "tiny.txt", workspace / "fragile.txt")  # emptied once a run of it is saved
    synth_log(workspace / "synth" / "run.metrics.jsonl")
    with http_client(url) as http:
        assert http.post("/api/save", json={"name": "ens", **ensemble_run(steps=3)}).status_code == 200
        assert http.post("/api/runs/ens/start").status_code == 200
        assert http.post("/api/save", json={"name": "run1", **ensemble_run()}).status_code == 200
        wait_for(lambda: studio_state(http, "ens").get("returncode") == 0, "run ens to finish")
        yield url, workspace, http


def studio_state(http, name: str) -> dict:
    for row in http.get("/api/runs").json()["runs"]:
        if row.get("studio", {}).get("name") == name:
            return row["studio"]
    return {}


def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def follow_only(driver, *runs: str) -> None:
    js(driver, "Watch.followOnly(arguments[0])", list(runs))
    wait(driver, lambda d: js(d, "return Watch.followed.join(',')") == ",".join(runs)
         and js(d, "return !Watch.loading && Watch.followed.every(p => Watch.runs[p])"))


def chart_range(driver, chart: str) -> float:
    """The right end of a chart's x axis as it was last drawn (autoranged to the data it was given)."""
    return js(driver, f"const c = document.getElementById('chart-{chart}');"
                      "return c && c.drawn ? c.drawn.xRange[1] : -1;")


def line_reaches_last_step(driver, chart: str) -> bool:
    """Whether the line a chart draws (its SVG path) ends at the last step of the data it holds now."""
    return js(driver, f"""const c = document.getElementById('chart-{chart}');
        const path = c && c.querySelector('svg.plot path.line');
        if (!path || !c.drawn) return false;
        const xs = (path.getAttribute('d').match(/[ML]([-\\d.]+),/g) || []).map(m => parseFloat(m.slice(1)));
        const last = Math.max(...c.data[0].x.filter(x => x !== null));
        return xs.length > 0 && Math.abs(Math.max(...xs) - c.drawn.xPixel(last)) < 2;""")


def test_the_tabs_are_aria_tabs_moved_between_with_the_arrow_keys(browser):
    assert browser.find_element(By.CSS_SELECTOR, "nav").get_attribute("role") == "tablist"
    tabs = browser.find_elements(By.CSS_SELECTOR, ".tab")
    assert [t.get_attribute("role") for t in tabs] == ["tab"] * 4
    for t in tabs:
        panel = browser.find_element(By.ID, t.get_attribute("aria-controls"))
        assert panel.get_attribute("role") == "tabpanel" and panel.get_attribute("aria-labelledby") == t.get_attribute("id")
    tab(browser, "compose")
    browser.find_element(By.ID, "tab-compose").send_keys(Keys.ARROW_RIGHT)
    assert browser.find_element(By.ID, "tab-watch").get_attribute("aria-selected") == "true"
    assert browser.find_element(By.ID, "tab-compose").get_attribute("aria-selected") == "false"
    assert js(browser, "return document.activeElement.id") == "tab-watch"
    assert browser.find_element(By.ID, "watch").is_displayed()
    assert "view=watch" in js(browser, "return location.hash")
    browser.find_element(By.ID, "tab-watch").send_keys(Keys.END)
    assert browser.find_element(By.ID, "tab-sample").get_attribute("aria-selected") == "true"
    browser.find_element(By.ID, "tab-sample").send_keys(Keys.ARROW_RIGHT)  # wraps round
    assert browser.find_element(By.ID, "tab-compose").get_attribute("aria-selected") == "true"


def test_a_views_message_goes_with_it_and_a_runs_stays(browser):
    tab(browser, "compose")
    js(browser, "say('run run1 is training already (process 1); stop it first', true)")  # as Train says it
    tab(browser, "watch")
    assert message(browser) == ""
    js(browser, "say('run long: finished', false, 'run:long')")
    tab(browser, "compare")
    assert message(browser) == "run long: finished"


def test_the_default_run_name_is_a_free_one(browser):
    """run1 is in studio.yaml (the fixture saved it) and ens has a checkpoint: the page offers run2."""
    wait(browser, lambda d: d.find_element(By.ID, "run-name").get_attribute("value") == "run2")


def test_a_failed_runs_error_shows_in_its_row_with_its_log_a_click_away(browser, served):
    http = served[2]
    run = ensemble_run(steps=3)
    run["settings"]["file"] = "fragile.txt"
    assert http.post("/api/save", json={"name": "broken", **run}).status_code == 200
    (served[1] / "fragile.txt").write_text("", encoding="utf-8")  # nothing to train on: train says so, exits 1
    assert http.post("/api/runs/broken/start").status_code == 200
    tab(browser, "watch")
    row = '.run-row[data-run="checkpoints/broken"]'
    wait(browser, lambda d: js(d, f"const e = document.querySelector('{row} .run-error-line'); return e && e.textContent"))
    error = js(browser, f"return document.querySelector('{row} .run-error-line').textContent")
    assert error == studio_state(http, "broken")["error"]
    assert js(browser, f"return document.querySelector('{row} .status').textContent") == "failed"
    assert not js(browser, f"return document.querySelector('{row} .log-tail').textContent")
    js(browser, f"document.querySelector('{row} button.show-log').click()")
    wait(browser, lambda d: error in js(d, f"return document.querySelector('{row} .log-tail').textContent"))
    assert js(browser, f"return document.querySelector('{row} .log-tail').hidden") is False


def test_a_taken_name_is_asked_about_and_the_default_is_a_new_name(browser, served):
    """Train on the finished run's name: a dialog names what is there; Enter saves and trains as ens-2, and
    the checkpoint of ens is untouched."""
    workspace, http = served[1], served[2]
    checkpoint = workspace / "checkpoints" / "ens"
    before = {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()}
    js(browser, """window.asked = undefined;
        const draft = arguments[0];
        saveOrAsk("ens", async (name, overwrite) => {
          await api("/api/save", {body: {name, ...draft, overwrite}});
          return api(`/api/runs/${name}/start`, {body: {overwrite}});
        }).then(answer => { window.asked = answer; }, err => { window.asked = {error: err.message}; });""",
       ensemble_run(steps=3))
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "dialog#name-dialog[open]"))
    text = browser.find_element(By.ID, "name-dialog-text").text
    assert text == ("run ens exists (in studio.yaml (ensemble), with a checkpoint checkpoints/ens (ensemble, "
                    "finished, step 3 of 3)); replace it, or save as ens-2")
    assert browser.find_element(By.ID, "name-dialog-name").get_attribute("value") == "ens-2"
    assert js(browser, "return document.activeElement.id") == "name-dialog-save-as"  # the default: a new name
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    wait(browser, lambda d: js(d, "return window.asked !== undefined"))
    answer = js(browser, "return window.asked")
    assert answer["name"] == "ens-2" and answer["replaced"] is False, answer
    assert {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()} == before
    wait_for(lambda: studio_state(http, "ens-2").get("returncode") == 0, "run ens-2 to finish")
    js(browser, """window.asked = undefined;
        saveOrAsk("ens", (name, overwrite) => api(`/api/runs/${name}/start`, {body: {overwrite}}))
          .then(answer => { window.asked = answer; });""")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "dialog#name-dialog[open]"))
    browser.find_element(By.ID, "name-dialog-cancel").click()
    wait(browser, lambda d: js(d, "return window.asked !== undefined"))
    assert js(browser, "return window.asked") is None
    assert {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()} == before


def test_the_learning_rate_chart_follows_a_training_run(browser, served):
    http = served[2]
    run = ensemble_run(steps=100000)
    run["settings"].update(eval_every="10", val_tokens="64", warmup="1000")
    assert http.post("/api/save", json={"name": "long", **run}).status_code == 200
    assert http.post("/api/runs/long/start").status_code == 200
    tab(browser, "watch")
    follow_only(browser, "checkpoints/long")
    wait(browser, lambda d: chart_range(d, "lr") > 5)
    first = chart_range(browser, "lr")
    wait(browser, lambda d: chart_range(d, "lr") > first + 20)  # its x axis goes on with the steps
    assert chart_range(browser, "loss") > first + 20
    for _ in range(3):  # and the line drawn goes on with it, to the last step the chart was given
        later = chart_range(browser, "lr")
        wait(browser, lambda d, later=later: chart_range(d, "lr") > later and line_reaches_last_step(d, "lr"))


def test_a_training_runs_row_shows_its_live_progress(browser):
    row = '.run-row[data-run="checkpoints/long"] .progress'
    pattern = re.compile(r"step [\d,]+ of 100,000 · ETA \d+(h \d\dm|m \d\ds|s) · [\d,]+ tokens/s · val \d+\.\d{4}")
    wait(browser, lambda d: pattern.fullmatch(js(d, f"return document.querySelector('{row}').textContent")))
    first = js(browser, f"return document.querySelector('{row}').textContent")
    wait(browser, lambda d: js(d, f"return document.querySelector('{row}').textContent") != first)  # live
    assert not browser.find_elements(By.CSS_SELECTOR, '.run-row[data-run="checkpoints/long-best"]')  # folded in
    time.sleep(1)
    shot(browser, "watch")


def test_reload_while_a_run_trains_and_find_the_same_view(browser, served):
    tab(browser, "watch")
    follow_only(browser, "checkpoints/long", "checkpoints/ens")
    colour = js(browser, "return RunColours.of('checkpoints/long')")
    browser.refresh()
    wait(browser, ready)
    assert browser.find_element(By.ID, "tab-watch").get_attribute("aria-selected") == "true"
    assert browser.find_element(By.ID, "watch").is_displayed()
    assert js(browser, "return Watch.followed") == ["checkpoints/long", "checkpoints/ens"]
    wait(browser, lambda d: js(d, "const b = document.querySelector('#run-list input[data-run=\"checkpoints/long\"]');"
                                  "return b && b.checked"))
    before = chart_range(browser, "loss")
    wait(browser, lambda d: chart_range(d, "loss") > before)  # still live after the reload
    assert js(browser, "return RunColours.of('checkpoints/long')") == colour
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")  # a second tab opened on the printed URL
    browser.get(served[0])
    try:
        wait(browser, ready)
        assert browser.find_element(By.ID, "tab-watch").get_attribute("aria-selected") == "true"
        assert js(browser, "return Watch.followed") == ["checkpoints/long", "checkpoints/ens"]
        assert js(browser, "return RunColours.of('checkpoints/long')") == colour
    finally:
        browser.close()
        browser.switch_to.window(first)


def test_a_dozen_charts_draw_as_svg_each_run_in_one_colour(browser):
    follow_only(browser, "synth/run", "checkpoints/long")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts .chart")) >= 12 and js(
        d, "return document.getElementById('chart-loss').data.some(t => t.meta === 'checkpoints/long')"))
    charts = js(browser, """return [...document.querySelectorAll('#charts .chart')].map(c => ({id: c.id,
        drawn: [...c.querySelectorAll('svg.plot path.line')].filter(p => p.getAttribute('d').includes('L')).length,
        gl: c.querySelectorAll('canvas').length,
        synth: c.data.filter(t => t.meta === 'synth/run').map(t => [t.color, t.dash])}));""")
    assert len(charts) >= 12
    for chart in charts:
        assert chart["gl"] == 0, chart
        assert chart["drawn"] >= 1, f"{chart['id']} is blank"
        colours = {colour for colour, _ in chart["synth"]}
        assert colours <= {js(browser, "return RunColours.of('synth/run')")}, chart  # tokens/s: not synth's
        dashes = [dash for _, dash in chart["synth"]]
        assert len(set(dashes)) == len(dashes), f"{chart['id']}: one run's figures share a dash"
    swatch = js(browser, "return document.querySelector('#run-list .run-row[data-run=\"checkpoints/long\"] .swatch')"
                         ".style.background")
    long_colour = js(browser, "return document.getElementById('chart-loss').data.find(t => t.meta === "
                              "'checkpoints/long').color")
    assert swatch == js(browser, "const s = document.createElement('span'); s.style.background = arguments[0];"
                                 "return s.style.background", long_colour)


def test_a_crosshair_is_shared_across_the_charts(browser):
    target = browser.find_element(By.CSS_SELECTOR, "#chart-router_weight .plot-area")
    ActionChains(browser).move_to_element_with_offset(target, 10, 5).perform()

    def lines(d):
        return js(d, "return [...document.querySelectorAll('#charts .chart')].map(c => "
                     "c.querySelector('line.crosshair').getAttribute('data-x') || '')")

    wait(browser, lambda d: len(set(lines(d))) == 1 and lines(d)[0] != "")
    ActionChains(browser).move_to_element(browser.find_element(By.ID, "run-list")).perform()
    wait(browser, lambda d: set(lines(d)) == {""})


def test_a_chart_zooms_into_a_dragged_range_shows_values_at_the_pointer_and_hides_a_line_from_its_legend(browser):
    follow_only(browser, "synth/run")  # a finished run: its range stays put
    wait(browser, lambda d: js(d, "const c = document.getElementById('chart-loss'); return Boolean(c && c.drawn);"))
    full = js(browser, "return document.getElementById('chart-loss').drawn.xRange")
    area = browser.find_element(By.CSS_SELECTOR, "#chart-loss .plot-area")
    width = area.size["width"]
    ActionChains(browser).move_to_element_with_offset(area, -width // 4, 0).perform()
    wait(browser, lambda d: js(d, "const t = document.querySelector('#chart-loss .tip'); return !t.hidden && "
                                  "t.textContent.startsWith('step ') && t.textContent.includes('run: loss: ')"))
    (ActionChains(browser).move_to_element_with_offset(area, -width // 4, 0).click_and_hold()
     .move_by_offset(width // 4, 0).release().perform())
    wait(browser, lambda d: js(d, "return document.getElementById('chart-loss').drawn.xRange")[0] > full[0])
    zoomed = js(browser, "return document.getElementById('chart-loss').drawn.xRange")
    span = full[1] - full[0]
    assert zoomed[1] - zoomed[0] == pytest.approx(span / 4, rel=0.1)  # a quarter of the plot's width was dragged
    assert zoomed[0] == pytest.approx(full[0] + span / 4, rel=0.1)
    ActionChains(browser).double_click(area).perform()
    wait(browser, lambda d: js(d, "return document.getElementById('chart-loss').chartState.zoom") is None)
    assert js(browser, "return document.getElementById('chart-loss').drawn.xRange") == full

    def lines(d):
        return js(d, "return [...document.querySelectorAll('#chart-loss svg.plot path.line')].map(p => p.dataset.meta)")

    before = lines(browser)
    entry = browser.find_element(By.CSS_SELECTOR, "#chart-loss .legend .entry")
    hidden = js(browser, "return document.getElementById('chart-loss').data[0].meta")
    entry.click()
    wait(browser, lambda d: len(lines(d)) == len(before) - 1)
    assert browser.find_element(By.CSS_SELECTOR, "#chart-loss .legend .entry").get_attribute("aria-pressed") == "false"
    browser.find_element(By.CSS_SELECTOR, "#chart-loss .legend .entry").click()
    wait(browser, lambda d: sorted(lines(d)) == sorted(before))
    assert hidden in before


def test_compare_gives_each_column_one_number_format(browser, served):
    tab(browser, "compare")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#runs-table tr[data-run="checkpoints/ens-2"]'))
    cells = js(browser, """const out = {};
        for (const td of document.querySelectorAll('#runs-table tbody td')) {
          if (!td.className || !td.textContent) continue;
          (out[td.className] = out[td.className] || []).push(td.textContent); }
        return out;""")
    for column in ("parameters", "step", "steps", "tokens_per_sec"):
        assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", v) for v in cells[column]), (column, cells[column])
    for column in ("val_loss", "val_bpc", "best_val_bpc"):  # bits per character, as microgpt runs shows them
        assert all(re.fullmatch(r"\d+\.\d{4}", v) for v in cells.get(column, [])), (column, cells[column])
    assert cells.get("val_bpc") and set(cells["tokenizer"]) == {"char"}
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})*\.\d", v) for v in cells["seconds"]), cells["seconds"]
    row = next(r for r in served[2].get("/api/runs").json()["runs"] if r["path"] == "checkpoints/ens")
    shown = js(browser, "return document.querySelector('#runs-table tr[data-run=\"checkpoints/ens\"] td.seconds')"
                        ".textContent")
    assert shown == f"{row['seconds']:,.1f}"
    assert browser.find_elements(By.CSS_SELECTOR, '#runs-table tr[data-run="checkpoints/ens"] td.path .swatch')


def test_downloading_an_empty_selection_says_so(browser):
    js(browser, "Compare.selected.clear(); Compare.draw();")
    js(browser, """window.csvFetches = 0; const realFetch = window.fetch;
        window.fetch = (url, ...rest) => { if (String(url).includes('/api/csv')) window.csvFetches += 1;
                                          return realFetch(url, ...rest); };""")
    browser.find_element(By.ID, "csv").click()
    wait(browser, lambda d: message(d) == "no run is selected; tick the runs to download first")
    assert js(browser, "return window.csvFetches") == 0


def test_overlay_two_runs_in_their_colours(browser, served):
    """A run at a higher learning rate beside the long one, overlaid from Compare."""
    http = served[2]
    run = ensemble_run(steps=300)
    run["settings"].update(lr="0.01", eval_every="20", val_tokens="64")
    assert http.post("/api/save", json={"name": "fast", **run}).status_code == 200
    assert http.post("/api/runs/fast/start").status_code == 200
    wait_for(lambda: studio_state(http, "fast").get("returncode") == 0, "run fast to finish")
    wait(browser, lambda d: js(d, "const s = document.querySelector('#runs-table tr[data-run=\"checkpoints/fast\"] "
                                  "td.status'); return s && s.textContent") == "finished")  # read in one go: redrawn
    for run in ("checkpoints/long", "checkpoints/fast"):
        js(browser, f"document.querySelector('#runs-table input[data-run=\"{run}\"]').click()")
    shot(browser, "compare")
    browser.find_element(By.ID, "overlay").click()
    wait(browser, lambda d: {"long: loss", "fast: loss"} <= set(js(
        d, "const c = document.getElementById('chart-loss'); return c && c.data ? c.data.map(t => t.name) : [];")))
    colours = js(browser, "return document.getElementById('chart-loss').data.map(t => t.color)")
    order = js(browser, "return [...document.querySelectorAll('#charts .chart')].map(c => c.dataset.group)")
    assert order[:4] == ["loss", "lr", "grad_norm", "tokens_per_s"], order  # a chart new to the view takes its place
    assert len(set(colours)) == 2
    time.sleep(1)
    shot(browser, "overlay")


def test_evaluate_names_the_checkpoint_it_scores(browser):
    tab(browser, "sample")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#sample-checkpoint option[value="checkpoints/ens"]'))
    Select(browser.find_element(By.ID, "sample-checkpoint")).select_by_value("checkpoints/ens")
    assert browser.find_element(By.ID, "sample-swatch").get_attribute("data-run") == "checkpoints/ens"
    Select(browser.find_element(By.ID, "sample-backend")).select_by_value("numpy")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#eval-file option[value="tiny.txt"]'))
    Select(browser.find_element(By.ID, "eval-file")).select_by_value("tiny.txt")
    browser.find_element(By.CSS_SELECTOR, 'input[name="eval-kind"][value="file"]').click()
    browser.find_element(By.ID, "evaluate").click()
    wait(browser, lambda d: d.find_element(By.ID, "eval-result").get_attribute("class") in ("done", "failed"))
    result = browser.find_element(By.ID, "eval-result").text
    assert result.startswith("checkpoints/ens (step 3), scoring tiny.txt:\n") and "tokens scored" in result, result


def test_nothing_but_the_canvas_scrolls_sideways_at_800_by_600(served):
    driver = start_browser(served[0].split("#")[0] + "#view=watch&runs=synth/run,checkpoints/long", "800,600")
    try:
        driver.set_window_rect(width=800, height=600)
        for view in ("watch", "compare", "sample"):
            tab(driver, view)
            time.sleep(0.5)
            wide = js(driver, "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            assert wide[0] <= wide[1], f"{view} scrolls sideways: {wide[0]} px in {wide[1]}"
    finally:
        driver.quit()
