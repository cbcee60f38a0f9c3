"""Issue 49 item 1's proof in headless Chromium at 1440x900, on one studio and one browser, in order: a GPT block
built by hand from the palette on the minimal graph (layer norm, attention, residual add, layer norm,
feed-forward, residual add, each dragged onto the canvas and wired port to port), grouped, its ports and the
group renamed in place, repeated three times, trained from the page on the workspace's tiny text, and a finite
validation loss read from Watch; then the block saved into the workspace's library, listed under the palette's
"My blocks", dropped into a new graph (its definition carried into that document) where it checks and trains
as drawn, a second save of another definition under its name asking first, and a file of the library that is no
block listed as damaged. With STUDIO_SCREENSHOTS=DIR the built block and My blocks are saved there
(docs/images/studio-blocks*.png)."""

from __future__ import annotations

import math
import re

import pytest

from extras import need

need("starlette")
need("selenium")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from studio_browser import (
    MARKS,
    canvas,
    clean,
    drag_from_palette,
    drag_wire,
    node,
    node_ids,
    port,
    press,
    shot,
    start_browser,
    tab,
    type_into,
    wait,
    wires,
)

pytestmark = MARKS

# The block, node by node as the palette names them (kind, name, dropped at x, y px from the canvas's centre),
# and the ids the editor gives them.
PLACED = [("op", "layer_norm", -300, 80), ("group", "attention", -80, 80), ("op", "add", 140, 80),
          ("op", "layer_norm", -300, 210), ("group", "feed_forward", -80, 210), ("op", "add", 140, 210)]
BLOCK = ["layer_norm", "attention", "add", "layer_norm2", "feed_forward", "add2"]
# pre-LayerNorm: x + attention(LN(x)), then + feed_forward(LN(.)); the block's output replaces embed -> norm
WIRES = [("embed.out", "layer_norm.x"), ("layer_norm.out", "attention.x"), ("embed.out", "add.in"),
         ("attention.y", "add.in"), ("add.out", "layer_norm2.x"), ("layer_norm2.out", "feed_forward.x"),
         ("add.out", "add2.in"), ("feed_forward.y", "add2.in"), ("add2.out", "norm.x")]
SETTINGS = {"file": "tiny.txt", "seq_len": "16", "steps": "8", "batch_size": "4", "eval_every": "4",
            "val_tokens": "200", "gen": "0", "threads": "1"}


@pytest.fixture(scope="module")
def browser(served):
    driver = start_browser(served[0], size="1440,900")
    yield driver
    driver.quit()


def click_empty_canvas(driver) -> None:
    ActionChains(driver).move_to_element_with_offset(canvas(driver), 0, -300).click().perform()


def menu_actions(driver) -> list[str]:
    return driver.execute_script("const m = document.getElementById('context-menu'); return m && !m.hidden ? "
                                 "[...m.querySelectorAll('button')].map(b => b.dataset.action) : []")


def from_menu(driver, target, action: str) -> None:
    ActionChains(driver).context_click(target).perform()
    wait(driver, lambda d: action in menu_actions(d))
    driver.find_element(By.CSS_SELECTOR, f'#context-menu [data-action="{action}"]').click()


def rename_in_place(driver, target, action: str, name: str) -> None:
    from_menu(driver, target, action)
    wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "rename-field")
    driver.switch_to.active_element.send_keys(Keys.CONTROL, "a")
    driver.switch_to.active_element.send_keys(name, Keys.ENTER)


def checked(driver) -> str:
    return driver.execute_script("return document.body.dataset.checked || ''")


def message(driver) -> str:
    return driver.find_element(By.ID, "message").text


def test_a_gpt_block_is_placed_and_wired_by_hand_from_the_palette(browser):
    Select(browser.find_element(By.ID, "family")).select_by_value("graph")
    wait(browser, lambda d: sorted(node_ids(d)) == ["embed", "head", "loss", "norm"])
    for key, value in SETTINGS.items():
        type_into(browser, f'#inspector [data-setting="{key}"]', value)
    Select(browser.find_element(By.CSS_SELECTOR, '#inspector [data-setting="backend"]')).select_by_value("numpy")
    type_into(browser, "#inspector [data-dims]", "d=16, heads=2, d_ff=32")
    browser.find_element(By.ID, "fit").click()
    for _ in range(2):  # zoom 0.64: room below the graph for the block's two rows
        browser.find_element(By.ID, "zoom-out").click()
    for kind, name, x, y in PLACED:
        drag_from_palette(browser, kind, name, x, y)
    type_into(browser, "#palette-search", "")
    wait(browser, lambda d: set(BLOCK) <= set(node_ids(d)))
    groups = browser.execute_script("return Object.fromEntries(EditorModel.draft.document.nodes"
                                    ".map(n => [n.id, n.op || n.group]))")
    assert [groups[node_id] for node_id in BLOCK] == [name for _, name, _, _ in PLACED]
    for source, target in WIRES:
        drag_wire(browser, source, target)
    wait(browser, lambda d: set(WIRES) <= wires(d))
    assert ("embed.out", "norm.x") not in wires(browser)  # norm.x takes one wire: the block's output replaced it
    wait(browser, clean)
    shot(browser, "blocks-built")


def test_the_block_is_grouped_its_ports_and_name_set_in_place_and_repeated_three_times(browser):
    click_empty_canvas(browser)
    chain = ActionChains(browser).click(node(browser, BLOCK[0])).key_down(Keys.SHIFT)
    for node_id in BLOCK[1:]:
        chain.click(node(browser, node_id))
    chain.key_up(Keys.SHIFT).perform()
    assert browser.execute_script("return [...EditorView.selection].sort()") == sorted(BLOCK)
    press(browser, Keys.CONTROL, "g")
    wait(browser, lambda d: "group1" in node_ids(d) and not set(BLOCK) & set(node_ids(d)))
    ports = browser.execute_script("const g = EditorModel.draft.document.groups.group1; return [g.inputs, g.outputs]")
    assert ports == [{"x": "stream[d]"}, {"x": "stream[d]"}]
    for side in ("in", "out"):
        rename_in_place(browser, port(browser, "group1.x", side), "rename-port", "h")
        wait(browser, lambda d, side=side: d.find_elements(By.CSS_SELECTOR,
                                                           f'#editor-nodes .port.{side}[data-ref="group1.h"]'))
    rename_in_place(browser, node(browser, "group1"), "rename-group", "gpt_block")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#editor-nodes .node[data-group="gpt_block"]'))
    rename_in_place(browser, node(browser, "group1"), "rename", "blocks")
    wait(browser, lambda d: "blocks" in node_ids(d))
    assert {("embed.out", "blocks.h"), ("blocks.h", "norm.x")} <= wires(browser)
    node(browser, "blocks").click()
    before = checked(browser)
    type_into(browser, '#inspector-node [data-param="repeat"]', "3")
    wait(browser, lambda d: checked(d) != before and clean(d))
    document = browser.execute_script("return EditorModel.draft.document")
    assert next(n for n in document["nodes"] if n["id"] == "blocks") == {"id": "blocks", "group": "gpt_block",
                                                                          "repeat": 3}
    assert document["groups"]["gpt_block"]["inputs"] == {"h": "stream[d]"}


def test_the_three_blocks_train_from_the_page_and_the_loss_is_read(browser, served):
    type_into(browser, "#run-name", "handmade")
    browser.find_element(By.ID, "start").click()
    wait(browser, lambda d: "--run handmade" in d.find_element(By.ID, "saved-yaml").text)
    tab(browser, "watch")
    row = '.run-row[data-run="checkpoints/handmade"] .progress'
    text = wait(browser, lambda d: (found := d.find_elements(By.CSS_SELECTOR, row)) and "val " in found[0].text
                and "step 8 of 8" in found[0].text and found[0].text)
    loss = float(re.search(r"val (\d+\.\d{4})", text).group(1))
    assert math.isfinite(loss) and 0 < loss < 10, text
    tab(browser, "compose")


def test_the_block_is_saved_to_my_blocks_and_listed_in_the_palette(browser, served):
    click_empty_canvas(browser)
    from_menu(browser, node(browser, "blocks"), "save-to-my-blocks")
    wait(browser, lambda d: "saved group gpt_block to my blocks as gpt_block" in message(d))
    assert (served[1] / "blocks" / "gpt_block.yaml").is_file()
    entry = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#palette-list .palette-item.block[data-name="gpt_block"]'))[0]
    heading = browser.find_element(By.CSS_SELECTOR, "#palette-list .palette-heading")
    assert heading.text == "My blocks" and entry.location["y"] > heading.location["y"]
    browser.execute_script("document.getElementById('palette').scrollTop = 1e6")
    shot(browser, "blocks-palette")


def test_the_block_is_dropped_into_another_graph_with_its_definition(browser):
    browser.execute_script("window.confirm = () => true; Canvas.startFrom('graph')")  # New, its question answered
    wait(browser, lambda d: sorted(node_ids(d)) == ["embed", "head", "loss", "norm"])
    assert browser.execute_script("return Object.keys(EditorModel.draft.document.groups || {})") == []
    type_into(browser, "#inspector [data-dims]", "d=16, heads=2, d_ff=32")
    browser.find_element(By.ID, "fit").click()
    drag_from_palette(browser, "block", "gpt_block", -80, 150)
    type_into(browser, "#palette-search", "")
    wait(browser, lambda d: "gpt_block" in node_ids(d))
    assert browser.execute_script("return EditorModel.node('', 'gpt_block').group") == "gpt_block"
    assert browser.execute_script("return Object.keys(EditorModel.draft.document.groups)") == ["gpt_block"]
    listed = browser.execute_script("return [...document.querySelectorAll('#palette-list .palette-item')]"
                                    ".filter(e => e.dataset.name === 'gpt_block').map(e => e.dataset.kind)")
    assert listed == ["block"], listed  # the carried group is the block: listed once, under My blocks
    drag_wire(browser, "embed.out", "gpt_block.h")
    drag_wire(browser, "gpt_block.h", "norm.x")
    wait(browser, lambda d: {("embed.out", "gpt_block.h"), ("gpt_block.h", "norm.x")} <= wires(d))
    wait(browser, clean)


def test_a_second_save_of_another_definition_asks_first(browser, served):
    saved = (served[1] / "blocks" / "gpt_block.yaml").read_text(encoding="utf-8")
    browser.execute_script("EditorModel.edit('describe', d => { d.document.groups.gpt_block.description = 'mine'; })")
    click_empty_canvas(browser)
    from_menu(browser, node(browser, "gpt_block"), "save-to-my-blocks")
    dialog = wait(browser, lambda d: d.find_elements(By.ID, "name-dialog"))[0]
    assert "gpt_block exists" in dialog.text
    assert browser.find_element(By.ID, "name-dialog-name").get_attribute("aria-label") == "new block name"
    browser.find_element(By.ID, "name-dialog-save-as").click()
    wait(browser, lambda d: "as gpt_block_2" in message(d))
    assert (served[1] / "blocks" / "gpt_block.yaml").read_text(encoding="utf-8") == saved  # nothing replaced
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#palette-list .palette-item.block[data-name="gpt_block_2"]'))


def test_a_block_whose_name_the_document_uses_otherwise_comes_in_under_its_name_numbered(browser):
    """The document's gpt_block now differs from the library's (its description): dropping the library's again
    carries its definition in beside it as gpt_block_N, a name that says where it came from, and the document's
    own gpt_block, no longer the block, is listed as the document's group."""
    before = set(node_ids(browser))
    drag_from_palette(browser, "block", "gpt_block", 120, 260)
    type_into(browser, "#palette-search", "")
    added = wait(browser, lambda d: set(node_ids(d)) - before)
    group = browser.execute_script("return EditorModel.node('', arguments[0]).group", added.pop())
    assert re.fullmatch(r"gpt_block_\d+", group), group
    groups = browser.execute_script("return EditorModel.draft.document.groups")
    assert groups[group].get("description") != "mine" and groups["gpt_block"]["description"] == "mine"
    assert browser.find_elements(By.CSS_SELECTOR, '#palette-list .palette-item.group[data-name="gpt_block"]')
    browser.execute_script("EditorModel.undo()")
    wait(browser, lambda d: set(node_ids(d)) == before)


def test_a_file_of_the_library_that_is_no_block_is_listed_as_damaged(browser, served):
    (served[1] / "blocks" / "broken.yaml").write_text("microgpt_graph: 1\ngroups: {a: [\n", encoding="utf-8")
    browser.execute_script("Blocks.load()")
    damaged = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#palette-list .palette-damaged"))[0]
    assert "broken.yaml" in damaged.text and "neither JSON nor YAML" in damaged.get_attribute("title")
    assert browser.find_elements(By.CSS_SELECTOR, '#palette-list .palette-item.block[data-name="gpt_block"]')
