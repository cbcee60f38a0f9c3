"""The Compose editor's gestures and keyboard (issue 49 items 5 and 6) in headless Chromium at 1440x900, on one
studio and one browser, in order: the context menu of a node (rename in place), of a wire (delete) and of the
canvas; Escape, Ctrl+A, Ctrl+D, Ctrl+X, Ctrl+V at the pointer, Ctrl+G, F and Ctrl+S, none of them taken from a
field being typed in; a double-click opening a group and Ungroup undoing a group; a pasted custom group working
in another graph; word-valued params as menus; the focus on what was just added, a focused node off view
brought into view, Space pressing a focused button, and the palette as one Tab stop. With
STUDIO_SCREENSHOTS=DIR the context menu and a focused node are saved there (docs/images/studio-*.png)."""

from __future__ import annotations

import pytest

from extras import need

need("starlette")
need("selenium")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from studio_browser import MARKS, shot, start_browser, text_of, type_into, wait

pytestmark = MARKS


@pytest.fixture(scope="module")
def browser(served):
    driver = start_browser(served[0], size="1440,900")
    yield driver
    driver.quit()


def node_ids(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#editor-nodes .node:not(.wall)')]"
                                 ".map(n => n.dataset.id)")


def wires(driver) -> set[tuple[str, str]]:
    return {tuple(pair) for pair in driver.execute_script(
        "return [...document.querySelectorAll('#editor-wires .wire')].map(w => [w.dataset.from, w.dataset.to])")}


def node(driver, node_id: str):
    return driver.find_element(By.CSS_SELECTOR, f'#editor-nodes .node[data-id="{node_id}"] .node-head')


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


def selection(driver) -> list[str]:
    return driver.execute_script("return [...EditorView.selection].sort()")


def menu_actions(driver) -> list[str]:
    return driver.execute_script("const m = document.getElementById('context-menu'); return m && !m.hidden ? "
                                 "[...m.querySelectorAll('button')].map(b => b.dataset.action) : []")


def active(driver, attribute: str) -> str:
    return driver.switch_to.active_element.get_attribute(attribute) or ""


def click_empty_canvas(driver) -> None:
    ActionChains(driver).move_to_element_with_offset(canvas(driver), 0, -300).click().perform()


def test_a_nodes_context_menu_renames_it_in_place(browser):
    Select(browser.find_element(By.ID, "family")).select_by_value("graph")
    wait(browser, lambda d: sorted(node_ids(d)) == ["embed", "head", "loss", "norm"])
    before = {w for w in wires(browser) if "norm" in w[0] or "norm" in w[1]}
    ActionChains(browser).context_click(node(browser, "norm")).perform()
    wait(browser, lambda d: menu_actions(d))
    assert menu_actions(browser) == ["rename", "duplicate", "copy", "cut", "group", "delete"]
    assert active(browser, "data-action") == "rename"  # the menu has the focus: the arrows move in it
    shot(browser, "context-menu")
    press(browser, Keys.ARROW_DOWN)
    assert active(browser, "data-action") == "duplicate"
    press(browser, Keys.ARROW_UP)
    press(browser, Keys.ENTER)
    wait(browser, lambda d: active(d, "id") == "rename-field")
    browser.switch_to.active_element.send_keys(Keys.CONTROL, "a")
    browser.switch_to.active_element.send_keys("9bad", Keys.ENTER)  # refused, the field stays
    assert "cannot rename" in browser.find_element(By.ID, "message").text
    browser.switch_to.active_element.send_keys(Keys.CONTROL, "a")
    browser.switch_to.active_element.send_keys("ln_f", Keys.ENTER)
    wait(browser, lambda d: "ln_f" in node_ids(d) and "norm" not in node_ids(d))
    after = {w for w in wires(browser) if "ln_f" in w[0] or "ln_f" in w[1]}
    assert after == {(a.replace("norm.", "ln_f."), b.replace("norm.", "ln_f.")) for a, b in before} and after
    assert active(browser, "data-id") == "ln_f"  # the focus back on the renamed node
    press(browser, Keys.CONTROL, "z")
    wait(browser, lambda d: "norm" in node_ids(d))
    press(browser, Keys.CONTROL, "y")
    wait(browser, lambda d: "ln_f" in node_ids(d))


def test_a_wires_and_the_canvass_context_menus(browser):
    wire = browser.find_element(By.CSS_SELECTOR, '#editor-wires .wire[data-to="ln_f.x"] .wire-hit')
    source = wire.find_element(By.XPATH, "..").get_attribute("data-from")
    ActionChains(browser).context_click(wire).perform()
    wait(browser, lambda d: menu_actions(d) == ["delete-wire"])
    press(browser, Keys.ENTER)
    wait(browser, lambda d: (source, "ln_f.x") not in wires(d))
    press(browser, Keys.CONTROL, "z")
    wait(browser, lambda d: (source, "ln_f.x") in wires(d))
    ActionChains(browser).move_to_element_with_offset(canvas(browser), -200, 250).context_click().perform()
    wait(browser, lambda d: menu_actions(d))
    assert menu_actions(browser) == ["add-node", "paste-here", "select-all", "fit"]
    press(browser, Keys.ESCAPE)
    assert menu_actions(browser) == []
    # right-click no longer opens the add menu; its first entry does
    ActionChains(browser).move_to_element_with_offset(canvas(browser), -200, 250).context_click().perform()
    wait(browser, lambda d: menu_actions(d))
    press(browser, Keys.ENTER)
    wait(browser, lambda d: active(d, "id") == "add-search")
    press(browser, Keys.ESCAPE)


def test_the_editing_keys(browser):
    click_empty_canvas(browser)
    # Ctrl+A selects every node, not the page's text; Escape clears the selection
    press(browser, Keys.CONTROL, "a")
    wait(browser, lambda d: selection(d) == ["embed", "head", "ln_f", "loss"])
    assert browser.execute_script("return String(window.getSelection())") == ""
    press(browser, Keys.ESCAPE)
    wait(browser, lambda d: selection(d) == [])
    # in a field Ctrl+A is the field's
    field = browser.find_element(By.ID, "palette-search")
    field.send_keys("lay")
    field.send_keys(Keys.CONTROL, "a")
    assert selection(browser) == []
    field.send_keys(Keys.DELETE)
    # Ctrl+D duplicates the selection, the copy selected and focused
    node(browser, "ln_f").click()
    press(browser, Keys.CONTROL, "d")
    wait(browser, lambda d: "ln_f2" in node_ids(d))
    assert selection(browser) == ["ln_f2"]
    wait(browser, lambda d: active(d, "data-id") == "ln_f2")
    # Ctrl+X takes it away, Ctrl+V puts it back where the pointer is
    press(browser, Keys.CONTROL, "x")
    wait(browser, lambda d: "ln_f2" not in node_ids(d))
    ActionChains(browser).move_to_element_with_offset(canvas(browser), 150, 200).perform()
    press(browser, Keys.CONTROL, "v")
    wait(browser, lambda d: "ln_f2" in node_ids(d))
    pointer = browser.execute_script("const a = document.getElementById('editor-area').getBoundingClientRect(); "
                                     "return EditorView.toWorld(a.left + a.width / 2 + 150, a.top + a.height / 2 + 200)")
    at = browser.execute_script("return EditorModel.position('', 'ln_f2')")
    assert abs(at[0] - pointer["x"]) < 3 and abs(at[1] - pointer["y"]) < 3  # whole canvas units, from a whole pixel
    # F fits; the ln_f2 far off comes into view
    browser.execute_script("EditorView.panBy(3000, 0)")
    press(browser, "f")
    assert browser.execute_script("return EditorView.inView({x: EditorModel.position('', 'ln_f2')[0],"
                                  " y: EditorModel.position('', 'ln_f2')[1]})")
    press(browser, Keys.DELETE)
    wait(browser, lambda d: "ln_f2" not in node_ids(d))


def test_ctrl_g_groups_a_double_click_opens_it_and_ungroup_undoes_it(browser):
    click_empty_canvas(browser)
    browser.execute_script("Selection.set(['ln_f', 'head'])")  # (shift-click is test_studio_editor_browser's)
    press(browser, Keys.CONTROL, "g")
    wait(browser, lambda d: "group1" in node_ids(d) and "ln_f" not in node_ids(d))
    wait(browser, lambda d: active(d, "data-id") == "group1")
    ActionChains(browser).double_click(node(browser, "group1")).perform()
    wait(browser, lambda d: sorted(node_ids(d)) == ["head", "ln_f"])
    assert browser.execute_script("return EditorView.path") == ["group1"]
    browser.find_element(By.CSS_SELECTOR, '.crumb[data-depth="0"]').click()
    wait(browser, lambda d: "group1" in node_ids(d))
    outside = wires(browser)
    ActionChains(browser).context_click(node(browser, "group1")).perform()
    wait(browser, lambda d: menu_actions(d))
    assert menu_actions(browser)[:3] == ["rename", "open", "ungroup"]
    browser.find_element(By.CSS_SELECTOR, '#context-menu [data-action="ungroup"]').click()
    wait(browser, lambda d: sorted(node_ids(d)) == ["embed", "head", "ln_f", "loss"])
    # wired as before the group: embed into ln_f, head to the loss and the output
    assert ("embed.out", "ln_f.x") in wires(browser) and ("head.out", "logits") in wires(browser)
    assert not any("group1" in a or "group1" in b for a, b in wires(browser)) and outside
    press(browser, Keys.CONTROL, "z")
    wait(browser, lambda d: "group1" in node_ids(d))


def test_a_pasted_custom_group_works_in_another_graph(browser):
    click_empty_canvas(browser)
    node(browser, "group1").click()
    press(browser, Keys.CONTROL, "c")
    browser.execute_script("window.confirm = () => true; Canvas.startFrom('graph')")  # New, its question answered
    wait(browser, lambda d: sorted(node_ids(d)) == ["embed", "head", "loss", "norm"])
    assert browser.execute_script("return Object.keys(EditorModel.draft.document.groups || {})") == []
    click_empty_canvas(browser)
    press(browser, Keys.CONTROL, "v")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#editor-nodes .node[data-group="group1"]'))
    assert browser.execute_script("return Object.keys(EditorModel.draft.document.groups)") == ["group1"]
    wait(browser, lambda d: d.execute_script("return document.body.dataset.checked || ''") != "")
    assert "unknown group" not in text_of(browser, "graph-errors")


def test_word_params_are_menus_and_the_focus_follows_what_is_added(browser):
    search = browser.find_element(By.ID, "palette-search")
    type_into(browser, "#palette-search", "attention")
    search.send_keys(Keys.ARROW_DOWN)
    assert active(browser, "data-name") == "attention"
    press(browser, Keys.ENTER)
    wait(browser, lambda d: "attention" in node_ids(d))
    wait(browser, lambda d: active(d, "data-id") == "attention")  # the new node has the focus, not the page
    shot(browser, "focused-node")
    mask = Select(browser.find_element(By.CSS_SELECTOR, '#inspector-node select[data-param="mask"]'))
    assert [o.get_attribute("value") for o in mask.options] == ["", "causal", "gap", "full", "anticausal"]
    mask.select_by_value("full")
    wait(browser, lambda d: d.execute_script("return EditorModel.node('', 'attention').params.mask") == "full")
    node(browser, "attention").click()
    wait(browser, lambda d: Select(d.find_element(By.CSS_SELECTOR, '#inspector-node select[data-param="mask"]'))
         .first_selected_option.get_attribute("value") == "full")
    press(browser, Keys.DELETE)
    wait(browser, lambda d: "attention" not in node_ids(d))
    # a switch is a menu of true and false
    type_into(browser, "#palette-search", "linear")
    search.send_keys(Keys.ARROW_DOWN)
    press(browser, Keys.ENTER)
    wait(browser, lambda d: "linear" in node_ids(d))
    bias = Select(browser.find_element(By.CSS_SELECTOR, '#inspector-node select[data-param="bias"]'))
    assert [o.get_attribute("value") for o in bias.options] == ["", "true", "false"]
    bias.select_by_value("false")
    wait(browser, lambda d: d.execute_script("return EditorModel.node('', 'linear').params.bias") is False)
    type_into(browser, "#palette-search", "")


def test_the_palette_is_one_tab_stop_with_arrows_inside(browser):
    stops = browser.execute_script("return [...document.querySelectorAll('#palette-list .palette-item')]"
                                   ".filter(e => e.tabIndex === 0).length")
    assert stops == 1
    browser.find_element(By.ID, "palette-search").click()
    press(browser, Keys.TAB)
    first = active(browser, "data-name")
    assert first and "palette-item" in active(browser, "class")
    press(browser, Keys.ARROW_DOWN)
    second = active(browser, "data-name")
    assert second != first and "palette-item" in active(browser, "class")
    press(browser, Keys.TAB)  # one Tab leaves the list
    assert "palette-item" not in active(browser, "class")


def test_a_focused_node_off_view_is_brought_into_view_and_space_presses_buttons(browser):
    browser.execute_script("EditorView.panBy(-4000, -3000)")
    browser.execute_script("document.querySelector('#editor-nodes .node[data-id=\"embed\"]').focus()")
    inside = browser.execute_script(
        "const r = document.querySelector('#editor-nodes .node[data-id=\"embed\"]').getBoundingClientRect(), "
        "a = document.getElementById('editor-area').getBoundingClientRect(); "
        "return r.left >= a.left && r.top >= a.top && r.right <= a.right && r.bottom <= a.bottom")
    assert inside
    assert browser.execute_script("const a = document.getElementById('editor-area'); "
                                  "return a.scrollLeft + a.scrollTop") == 0
    zoom = browser.execute_script("return EditorView.transform.k")
    browser.execute_script("document.getElementById('zoom-in').focus()")
    press(browser, Keys.SPACE)
    wait(browser, lambda d: d.execute_script("return EditorView.transform.k") > zoom)
    assert not browser.execute_script("return Pointer.spaceHeld")


def test_ctrl_s_is_the_pages_save(browser):
    """Ctrl+S presses Save (here refused: the graph has unwired nodes), not the browser's Save Page."""
    browser.execute_script("window.saves = 0; const save = RunIO.save.bind(RunIO); "
                           "RunIO.save = (...a) => { window.saves++; return save(...a); }")
    click_empty_canvas(browser)
    press(browser, Keys.CONTROL, "s")
    wait(browser, lambda d: d.execute_script("return window.saves") == 1)


def test_a_group_of_a_stream_to_a_stream_can_repeat_and_opening_it_says_who_shares_it(browser):
    """Group names one input and one output of the same type alike (x), with the document's dim for the width
    (stream[d]): set to repeat 3, the check finds nothing wrong with it; opening it says how many instances
    share the definition."""
    browser.execute_script("window.confirm = () => true; Canvas.startFrom('graph')")
    wait(browser, lambda d: sorted(node_ids(d)) == ["embed", "head", "loss", "norm"])
    click_empty_canvas(browser)
    node(browser, "norm").click()
    press(browser, Keys.CONTROL, "g")
    wait(browser, lambda d: "group1" in node_ids(d))
    ports = browser.execute_script("const g = EditorModel.draft.document.groups.group1; return [g.inputs, g.outputs]")
    assert ports == [{"x": "stream[d]"}, {"x": "stream[d]"}]
    before = browser.execute_script("return document.body.dataset.checked || ''")
    type_into(browser, '#inspector-node [data-param="repeat"]', "3")
    wait(browser, lambda d: d.execute_script("return document.body.dataset.checked || ''") != before)
    wait(browser, lambda d: "≈" in text_of(d, "estimates") and not text_of(d, "graph-errors"))
    click_empty_canvas(browser)
    ActionChains(browser).double_click(node(browser, "group1")).perform()
    wait(browser, lambda d: d.execute_script("return EditorView.path") == ["group1"])
    assert "group1 is its only instance" in browser.find_element(By.ID, "message").text
    browser.find_element(By.CSS_SELECTOR, '.crumb[data-depth="0"]').click()
    wait(browser, lambda d: "group1" in node_ids(d))
    node(browser, "group1").click()
    press(browser, Keys.CONTROL, "d")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, '#editor-nodes .node[data-group="group1"]')) == 2)
    ActionChains(browser).context_click(node(browser, "group1")).perform()
    wait(browser, lambda d: menu_actions(d))
    browser.find_element(By.CSS_SELECTOR, '#context-menu [data-action="open"]').click()
    wait(browser, lambda d: "2 instances share this definition" in d.find_element(By.ID, "message").text)


def rename_in_place(driver, target, action: str, name: str) -> None:
    ActionChains(driver).context_click(target).perform()
    wait(driver, lambda d: action in menu_actions(d))
    driver.find_element(By.CSS_SELECTOR, f'#context-menu [data-action="{action}"]').click()
    wait(driver, lambda d: active(d, "id") == "rename-field")
    driver.switch_to.active_element.send_keys(Keys.CONTROL, "a")
    driver.switch_to.active_element.send_keys(name, Keys.ENTER)


def test_a_groups_ports_and_the_group_are_renamed_in_place(browser):
    browser.find_element(By.CSS_SELECTOR, '.crumb[data-depth="0"]').click()
    wait(browser, lambda d: "group1" in node_ids(d))
    browser.execute_script("const other = EditorModel.draft.document.nodes.find(n => n.group === 'group1' && n.id !== 'group1');"
                           " const p = EditorModel.position('', other.id); Edits.moveTo({[other.id]: [p[0], p[1] + 300]})")
    for side in ("in", "out"):
        circle = browser.find_element(By.CSS_SELECTOR, f'#editor-nodes .port.{side}[data-ref="group1.x"] circle')
        rename_in_place(browser, circle, "rename-port", "h")
        wait(browser, lambda d, side=side: d.find_elements(By.CSS_SELECTOR, f'#editor-nodes .port.{side}[data-ref="group1.h"]'))
    ports = browser.execute_script("const g = EditorModel.draft.document.groups.group1; return [g.inputs, g.outputs]")
    assert ports == [{"h": "stream[d]"}, {"h": "stream[d]"}]
    assert ("embed.out", "group1.h") in wires(browser) and ("group1.h", "head.x") in wires(browser)
    rename_in_place(browser, node(browser, "group1"), "rename-group", "block")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, '#editor-nodes .node[data-group="block"]')) == 2)
    assert browser.execute_script("return Object.keys(EditorModel.draft.document.groups)") == ["block"]
    # the graph with its repeated block still checks clean (the duplicate is unwired: its own problems only)
    wait(browser, lambda d: "group1" not in text_of(d, "graph-errors") and "must be its inputs" not in text_of(d, "graph-errors"))
