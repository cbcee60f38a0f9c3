"""The Sample view's Inspect panel in headless Chromium: a trained checkpoint, a prompt and a node give the
node's activations, its attention maps, the logit lens and every head's ablation score (the figures of
`microgpt inspect`), and a node of another model is forgotten when the checkpoint changes."""

from __future__ import annotations

import pytest

from extras import need

need("selenium")
need("matplotlib")

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from microgpt.cli import main
from studio_browser import MARKS, message, shot, tab, wait

pytestmark = MARKS


@pytest.fixture(scope="module")
def served(served):
    """The file's studio with a gpt checkpoint of heads 2 and 6 wide trained 2 steps in its workspace."""
    url, workspace = served
    assert main(["train", str(workspace / "tiny.txt"), "--d-model", "8", "--n-layers", "2", "--heads", "2,6",
                 "--seq-len", "16", "--steps", "2", "--backend", "numpy", "--threads", "1", "--quiet", "--gen", "0",
                 "--val-tokens", "0", "--model", str(workspace / "checkpoints" / "gpt")]) == 0
    return url, workspace


def test_inspect_a_node_of_a_trained_checkpoint(browser):
    browser.refresh()
    wait(browser, lambda d: d.execute_script("return document.body.dataset.ready === 'yes'"))
    tab(browser, "sample")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#sample-checkpoint option[value="checkpoints/gpt"]'))
    Select(browser.find_element(By.ID, "sample-checkpoint")).select_by_value("checkpoints/gpt")
    Select(browser.find_element(By.ID, "sample-backend")).select_by_value("numpy")
    browser.find_element(By.ID, "prompt").send_keys("the cat sat")
    browser.find_element(By.ID, "inspect").click()  # no node chosen yet: the first attention node
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#inspect-result img[data-figure="lens"]'))
    figures = {img.get_attribute("data-figure") for img in browser.find_elements(By.CSS_SELECTOR, "#inspect-result img")}
    assert figures == {"activations", "attention", "lens"}
    node = Select(browser.find_element(By.ID, "inspect-node"))
    assert node.first_selected_option.get_attribute("value") == "blocks.0.attn.heads"
    rows = browser.find_elements(By.CSS_SELECTOR, "#inspect-heads tr")
    assert len(rows) == 1 + 4  # a header, then 2 layers x 2 heads
    node.select_by_value("blocks.1.ff.l1")
    browser.find_element(By.ID, "inspect").click()
    wait(browser, lambda d: "blocks.1.ff.l1" in d.find_element(By.ID, "inspect-result").text)
    figures = {img.get_attribute("data-figure") for img in browser.find_elements(By.CSS_SELECTOR, "#inspect-result img")}
    assert figures == {"activations", "lens"}  # no attention maps for a feed-forward node
    assert all(browser.execute_script("return arguments[0].naturalWidth", img) > 100
               for img in browser.find_elements(By.CSS_SELECTOR, "#inspect-result img"))  # decoded pictures
    shot(browser, "inspect")
    browser.find_element(By.ID, "prompt").send_keys("\u00e9")  # a character outside the vocabulary
    browser.find_element(By.ID, "inspect").click()
    wait(browser, lambda d: "not in the model's vocabulary" in message(d))
