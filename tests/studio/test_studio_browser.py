"""The studio end to end in headless Chromium (Selenium and Debian's chromium + chromium-driver), against a
real `microgpt studio` on a tiny workspace: compose a two-expert ensemble from its family's settings in the
editor's inspector, see an error appear in the list of problems and clear, and the family drawn (and undo and
redo the edit); the node editor itself is tests/studio/test_studio_editor_browser.py's; save it to studio.yaml, train it, and see its curve grow; stop it, load
its checkpoint, resume it and stop it again; see a refused sample's reason (from one request) and sample from
it and evaluate it; overlay two runs, the header's message following the second run to its end, and download
them as CSV. The tests run
in order on one studio and one browser. With STUDIO_SCREENSHOTS=DIR each view is saved there as a PNG (the
pictures of docs/studio.md)."""

from __future__ import annotations

import time

from extras import need

need("starlette")
need("selenium")

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

import microgpt
from microgpt.model.checkpoint import is_checkpoint
from microgpt.settings.named_runs import load_run
from studio_browser import MARKS, message, shot, tab, text_of, type_into, wait

pytestmark = MARKS

def setting(driver, key: str):
    """The inspector's field of a run setting (the data's, the training's, the family's shape)."""
    return driver.find_element(By.CSS_SELECTOR, f'#inspector [data-setting="{key}"]')


def choose(driver, key: str, value: str) -> None:
    Select(setting(driver, key)).select_by_value(value)


def points(driver, chart: str) -> int:
    return driver.execute_script(f"const c = document.getElementById('chart-{chart}');"
                                 "return c && c.data ? c.data[0].x.filter(x => x !== null).length : 0;")


def status_of(driver, run: str) -> str:
    """A run's status in the Watch list (read in one go: the list is redrawn as runs change)."""
    return driver.execute_script(f"const s = document.querySelector('.run-row[data-run=\"{run}\"] .status');"
                                 "return s ? s.textContent : '';")


def last_step(driver) -> int:
    """The last step the loss chart draws (of the one run followed)."""
    return driver.execute_script("const c = document.getElementById('chart-loss');"
                                 "return c && c.data ? Math.max(-1, ...c.data[0].x.filter(x => x !== null)) : -1;")


def click(driver, selector: str) -> None:
    """Click what `selector` finds once it is there (the run list is redrawn as runs change)."""
    wait(driver, lambda d: d.execute_script(f"const b = document.querySelector('{selector}'); if (b) b.click(); "
                                            "return Boolean(b);"))


def test_compose_a_two_expert_ensemble_and_see_an_error_appear_and_clear(browser):
    Select(browser.find_element(By.ID, "family")).select_by_value("ensemble")
    wait(browser, lambda d: setting(d, "cooperative").get_attribute("value") == "d4x16n2,d4x16n2")
    type_into(browser, '#inspector [data-setting="file"]', "tiny.txt")
    type_into(browser, '#inspector [data-setting="seq_len"]', "16")
    type_into(browser, '#inspector [data-setting="cooperative"]', "d2x8n1,d4x16n2")
    type_into(browser, '#inspector [data-setting="stream_dim"]', "16")
    for key, value in (("steps", "100000"), ("batch_size", "4"), ("eval_every", "10"), ("val_tokens", "200"),
                       ("gen", "0")):
        type_into(browser, f'#inspector [data-setting="{key}"]', value)
    choose(browser, "backend", "numpy")
    wait(browser, lambda d: "parameters" in text_of(d, "estimates"))
    type_into(browser, '#inspector [data-setting="cooperative"]', "d2x8n1,d2x8")
    wait(browser, lambda d: "model spec 'd2x8' is not valid" in text_of(d, "graph-errors"))
    # the figures bar keeps the last good figures, marked stale, while the settings have a problem (issue 49 item 3)
    assert text_of(browser, "estimates").startswith("stale: the last good figures (1 problem below)")
    shot(browser, "compose-family")
    setting(browser, "cooperative").send_keys("n1")
    wait(browser, lambda d: not text_of(d, "graph-errors")
         and "parameters" in text_of(d, "estimates") and "stale" not in text_of(d, "estimates"))
    # the ensemble drawn as it is: two experts on the stream, their logits into the mix
    wait(browser, lambda d: {"expert1", "expert2", "mix", "router"} <= set(d.execute_script(
        "return [...document.querySelectorAll('#editor-nodes .node')].map(n => n.dataset.id)")))
    drawn = browser.execute_script("return [...document.querySelectorAll('#editor-nodes .node:not(.wall)')].map(n => "
                                   "[n.dataset.id, n.textContent])")
    assert all(text.startswith(node) for node, text in drawn), drawn  # each node drawn with its name (and more)
    assert "the cooperative ensemble family" in browser.find_element(By.ID, "mode-line").text

    def expert_specs(d):
        return setting(d, "cooperative").get_attribute("value")

    browser.find_element(By.ID, "undo").click()
    assert expert_specs(browser) == "d2x8n1,d4x16n2"  # the whole edit of that field is one step
    browser.find_element(By.ID, "redo").click()
    assert expert_specs(browser) == "d2x8n1,d2x8n1"
    wait(browser, lambda d: not text_of(d, "graph-errors"))


def test_save_it_to_yaml_start_it_and_see_its_curve_grow(browser, served):
    run_name = browser.find_element(By.ID, "run-name")
    run_name.send_keys(Keys.CONTROL, "a")
    run_name.send_keys("ens")
    browser.find_element(By.ID, "start").click()
    wait(browser, lambda d: "--config studio.yaml --run ens" in d.find_element(By.ID, "saved-yaml").text)
    named = load_run(served[1] / "studio.yaml", "ens")
    assert named.values["cooperative"] == "d2x8n1,d2x8n1" and named.values["steps"] == 100000
    assert named.values["family"] == "ensemble" and "graph" not in named.values  # the family's settings, short
    assert not (served[1] / "graphs").exists()
    tab(browser, "watch")
    wait(browser, lambda d: points(d, "loss") >= 2)
    before = points(browser, "loss")
    wait(browser, lambda d: points(d, "loss") > before + 5)
    assert status_of(browser, "checkpoints/ens").startswith("training")
    wait(browser, lambda d: points(d, "router_weight") > 0 and points(d, "tokens_per_s") > 0)
    browser.find_element(By.ID, "log-y").click()
    wait(browser, lambda d: d.execute_script("return document.getElementById('chart-loss').drawn.logY"))
    time.sleep(1)
    shot(browser, "watch")
    browser.find_element(By.ID, "log-y").click()


def test_stop_it_load_its_checkpoint_and_resume_it(browser, served):
    click(browser, 'button.stop[data-run="checkpoints/ens"]')
    wait(browser, lambda d: status_of(d, "checkpoints/ens").startswith("stopped"))
    checkpoint = served[1] / "checkpoints" / "ens"
    assert is_checkpoint(checkpoint)
    loaded = microgpt.load(checkpoint, backend="numpy")
    assert loaded.family_name == "ensemble" and len(loaded.sample(10, prompt="the ", seed=1)) > 0
    stopped_at = last_step(browser)
    click(browser, 'button.resume[data-run="checkpoints/ens"]')
    wait(browser, lambda d: status_of(d, "checkpoints/ens").startswith("training") and last_step(d) > stopped_at)
    wait(browser, lambda d: message(d) == "run ens: training")
    click(browser, 'button.stop[data-run="checkpoints/ens"]')
    wait(browser, lambda d: status_of(d, "checkpoints/ens").startswith("stopped"))
    wait(browser, lambda d: message(d) == "run ens: stopped (saved)")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'button.resume[data-run="checkpoints/ens"]'))


def test_sample_from_it_and_evaluate_it(browser):
    tab(browser, "sample")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#sample-checkpoint option[value="checkpoints/ens"]'))
    Select(browser.find_element(By.ID, "sample-checkpoint")).select_by_value("checkpoints/ens")
    browser.find_element(By.ID, "prompt").send_keys("the cat")
    tokens = browser.find_element(By.ID, "tokens")
    tokens.send_keys(Keys.CONTROL, "a")
    tokens.send_keys("40")
    Select(browser.find_element(By.ID, "sample-backend")).select_by_value("numpy")
    browser.execute_script("""window.sampleRequests = 0;  // every request for a sample, by fetch or EventSource
        const seen = url => { if (String(url).includes('/api/sample')) window.sampleRequests += 1; };
        const realFetch = window.fetch, RealSource = window.EventSource;
        window.fetch = (url, ...rest) => { seen(url); return realFetch(url, ...rest); };
        window.EventSource = function (url, ...rest) { seen(url); return new RealSource(url, ...rest); };""")
    temperature = browser.find_element(By.ID, "temperature")
    temperature.send_keys(Keys.CONTROL, "a")
    temperature.send_keys("hot")
    browser.find_element(By.ID, "generate").click()
    wait(browser, lambda d: d.find_element(By.ID, "completion").get_attribute("class") == "failed")
    assert message(browser) == "temperature must be a number, not 'hot'"
    assert browser.execute_script("return window.sampleRequests") == 1, "the refusal was read from its response"
    temperature.send_keys(Keys.CONTROL, "a")
    temperature.send_keys("0.8")
    browser.find_element(By.ID, "generate").click()
    wait(browser, lambda d: d.find_element(By.ID, "completion").get_attribute("class") in ("done", "failed"))
    completion = browser.find_element(By.ID, "completion")
    assert completion.get_attribute("class") == "done", browser.find_element(By.ID, "message").text
    assert len(completion.text) > 10
    # an ensemble's completion: each generated character in its dominant expert's colour, the weights on hover
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#completion span[data-expert]"))
    coloured = browser.find_elements(By.CSS_SELECTOR, "#completion span[data-expert]")
    assert {span.get_attribute("data-expert") for span in coloured} <= {"1", "2"}
    assert len(coloured) == 40  # one per generated character (a char model: a token each), none for the prompt
    title = coloured[0].get_attribute("title")
    assert "expert 1 0." in title and "expert 2 0." in title, title
    assert completion.text.startswith("the cat")
    assert "expert 1" in browser.find_element(By.ID, "routing-legend").text
    browser.find_element(By.CSS_SELECTOR, 'input[name="eval-kind"][value="prompts"]').click()
    Select(browser.find_element(By.ID, "eval-file")).select_by_value("tiny.txt")  # no prompt<TAB>answer lines
    browser.find_element(By.ID, "evaluate").click()
    wait(browser, lambda d: d.find_element(By.ID, "eval-result").get_attribute("class") == "failed")
    assert message(browser).startswith("tiny.txt line 1 has no tab"), "the status line says it, as the result does"
    Select(browser.find_element(By.ID, "eval-file")).select_by_value("prompts.tsv")
    browser.find_element(By.ID, "evaluate").click()
    wait(browser, lambda d: "of 2 correct" in d.find_element(By.ID, "eval-result").text)
    assert message(browser) == "evaluated"
    shot(browser, "sample")


def test_overlay_two_runs_and_download_them(browser, served):
    tab(browser, "compose")
    run_name = browser.find_element(By.ID, "run-name")
    run_name.send_keys(Keys.CONTROL, "a")
    run_name.send_keys("ens2")
    type_into(browser, '#inspector [data-setting="steps"]', "40")
    time.sleep(0.5)  # let the check of the edit land before the save
    browser.find_element(By.ID, "start").click()
    tab(browser, "watch")
    wait(browser, lambda d: status_of(d, "checkpoints/ens2").startswith("finished"))
    wait(browser, lambda d: message(d) == "run ens2: finished")  # not "is training" any more
    tab(browser, "compare")
    for run in ("checkpoints/ens", "checkpoints/ens2"):  # found and clicked in one go: the table is redrawn
        click(browser, f'#runs-table input[data-run="{run}"]')
    click(browser, '#runs-table th[data-key="val_loss"]')
    shot(browser, "compare")
    href = browser.find_element(By.ID, "csv").get_attribute("href")
    browser.find_element(By.ID, "overlay").click()
    wait(browser, lambda d: d.execute_script(
        "const c = document.getElementById('chart-loss'); return c && c.data ? c.data.map(t => t.name) : [];")
        and {"ens: loss", "ens2: loss"} <= set(d.execute_script(
            "return document.getElementById('chart-loss').data.map(t => t.name)")))
    time.sleep(1)
    shot(browser, "overlay")
    rows = httpx.get(href).text.splitlines()  # the link carries the token: a download sends no header
    assert rows[0].startswith("run,step,time,")
    assert {row.split(",")[0] for row in rows[1:]} == {"checkpoints/ens", "checkpoints/ens2"}


def test_a_tab_reopened_without_the_token_still_works(browser, served):
    """The page keeps the printed URL's token in its origin's localStorage (apart by port, unlike a cookie)."""
    browser.get(served[0].split("?")[0])
    wait(browser, lambda d: d.execute_script("return document.body.dataset.ready") == "yes")
    tab(browser, "watch")
    wait(browser, lambda d: status_of(d, "checkpoints/ens").startswith(("stopped", "finished")))
    assert not browser.find_element(By.ID, "message").get_attribute("class")  # no error said
