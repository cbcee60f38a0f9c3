"""The Compose editor's drawing reads at a glance (issue 49, item 4), checked in headless Chromium at 1440×900 on
the gpt family's graph as from-family writes it, at the top level and inside its transformer block: no wire
passes through a node's box other than the two it joins, no wire's shape label lies on a port's circle or a box, every
text of the canvas is 11 px or more on the screen at the zoom the page opens with and after Fit, and a node's
parameter summary stays inside its box; Arrange lays a scrambled body out again, as one undoable step. With STUDIO_SCREENSHOTS=DIR the views are saved there
(docs/images/studio-compose-layout.png, studio-compose-layout-block.png)."""

from __future__ import annotations

from extras import need

need("starlette")
need("selenium")

from selenium.webdriver.common.by import By

from studio_browser import MARKS, shot, start_browser, wait

pytestmark = MARKS

# In the page: every wire's path sampled every 2 px, in screen pixels, and the boxes of the nodes it does not
# join (1 px inside their edges); the wires whose points fall in one, with the node.
WIRES_THROUGH_BOXES = """
const boxes = [...document.querySelectorAll('#editor-nodes .node')].map(n => {
  const r = n.querySelector('.node-box').getBoundingClientRect();
  return {id: n.dataset.id, left: r.left + 1, right: r.right - 1, top: r.top + 1, bottom: r.bottom - 1};
});
const endOf = (ref, wall) => ref.includes('.') ? ref.split('.')[0] : wall;
const found = [];
for (const wire of document.querySelectorAll('#editor-wires .wire')) {
  const ends = [endOf(wire.dataset.from, '@in'), endOf(wire.dataset.to, '@out')];
  const path = wire.querySelector('.wire-line'), matrix = path.getScreenCTM(), total = path.getTotalLength();
  for (let at = 0; at <= total; at += 2) {
    const p = path.getPointAtLength(at).matrixTransform(matrix);
    const hit = boxes.find(b => !ends.includes(b.id) && p.x > b.left && p.x < b.right && p.y > b.top && p.y < b.bottom);
    if (hit) { found.push(`${wire.dataset.from} -> ${wire.dataset.to} through ${hit.id}`); break; }
  }
}
return found;"""

# The wire labels (shown, with text) whose box meets a port's circle or a node's box.
LABELS_ON_PORTS = """
const circles = [...document.querySelectorAll('#editor-nodes .port circle, #editor-nodes .node-box')]
  .map(c => c.getBoundingClientRect());
const found = [];
for (const label of document.querySelectorAll('#editor-wires .wire-shape')) {
  if (!label.textContent || getComputedStyle(label).visibility === 'hidden') continue;
  const r = label.getBoundingClientRect();
  if (circles.some(c => r.left < c.right && r.right > c.left && r.top < c.bottom && r.bottom > c.top))
    found.push(label.textContent);
}
return found;"""

# Every text of the canvas with its size on screen: its computed font size times the view's zoom.
TEXT_SIZES = """
const k = EditorView.transform.k;
return [...document.querySelectorAll('#editor-canvas text')].filter(t => t.textContent.trim())
  .map(t => [t.textContent, parseFloat(getComputedStyle(t).fontSize) * k]);"""

# The summaries whose text runs past the right edge of their node's box.
SUMMARIES_OUTSIDE = """
return [...document.querySelectorAll('#editor-nodes .node')].flatMap(n => {
  const box = n.querySelector('.node-box').getBoundingClientRect();
  return [...n.querySelectorAll('.summary')].filter(s => s.getBoundingClientRect().right > box.right)
    .map(s => `${n.dataset.id}: ${s.textContent}`);
});"""

# The view panned to show the open body's right end.
TO_THE_RIGHT_END = """
const b = EditorRender.bounds(), s = EditorView.size();
EditorView.transform.x = s.width - 30 - (b.x + b.width) * EditorView.transform.k;
EditorView.apply();"""


def x_of(driver, node_id: str) -> float:
    """The x of a node of the open body."""
    return driver.execute_script(f"return EditorModel.position(EditorView.bodyName(), '{node_id}')[0]")


def readable(driver) -> None:
    """The open body's drawing passes every check above, its shape labels drawn."""
    wait(driver, lambda d: d.execute_script("return document.querySelectorAll('#editor-wires .wire-shape:not(:empty)')"
                                            ".length") > 0)
    assert driver.execute_script(WIRES_THROUGH_BOXES) == []
    assert driver.execute_script(LABELS_ON_PORTS) == []
    small = [(text, round(px, 2)) for text, px in driver.execute_script(TEXT_SIZES) if px < 11]
    assert small == [], f"canvas text under 11 px on screen: {small}"
    assert driver.execute_script(SUMMARIES_OUTSIDE) == []


def test_the_gpt_graph_reads_at_the_default_zoom_and_after_fit(served):
    browser = start_browser(served[0], size="1440,900")
    try:
        wait(browser, lambda d: {"tok_emb", "blocks", "final_norm", "head", "loss"} == set(
            d.execute_script("return EditorModel.body('').nodes.map(n => n.id)")))
        readable(browser)
        browser.find_element(By.ID, "fit").click()
        readable(browser)
        browser.execute_script(TO_THE_RIGHT_END)  # head -> logits goes under the loss, not behind it
        readable(browser)
        shot(browser, "compose-layout")
        browser.find_element(By.ID, "fit").click()
        browser.find_element(By.CSS_SELECTOR, '#editor-nodes .node[data-id="blocks"] .node-button.open').click()
        wait(browser, lambda d: "blocks" in d.find_element(By.ID, "breadcrumbs").text
             or "transformer_block" in d.find_element(By.ID, "breadcrumbs").text)
        readable(browser)
        shot(browser, "compose-layout-block")
    finally:
        browser.quit()


def test_a_long_parameter_summary_is_wrapped_and_cut_inside_its_box_with_all_of_it_in_the_tooltip(served):
    browser = start_browser(served[0], size="1440,900")
    try:
        wait(browser, lambda d: "head" in d.execute_script("return EditorModel.body('').nodes.map(n => n.id)"))
        browser.execute_script("""
            const head = EditorModel.body('').nodes.find(n => n.id === 'head');
            head.params = {...head.params, note_one: 'a'.repeat(20), note_two: 'b'.repeat(30), note_three: 'c'.repeat(40),
                           note_four: 'd'.repeat(50)};
            EditorRender.render();""")
        summary = browser.execute_script("return [...document.querySelectorAll("
                                         "'#editor-nodes .node[data-id=\"head\"] .summary')].map(s => s.firstChild.data)")
        assert len(summary) == 3 and summary[-1].endswith("…")
        assert browser.execute_script(SUMMARIES_OUTSIDE) == []
        tooltip = browser.execute_script("return document.querySelector("
                                         "'#editor-nodes .node[data-id=\"head\"] .summary:last-of-type title').textContent")
        assert "d" * 50 in tooltip and "a" * 20 in tooltip
    finally:
        browser.quit()


def test_arrange_lays_a_scrambled_body_out_in_the_order_data_flows_and_undo_puts_it_back(served):
    browser = start_browser(served[0], size="1440,900")
    try:
        wait(browser, lambda d: "blocks" in d.execute_script("return EditorModel.body('').nodes.map(n => n.id)"))
        browser.find_element(By.CSS_SELECTOR, '#editor-nodes .node[data-id="blocks"] .node-button.open').click()
        wait(browser, lambda d: "add2" in d.execute_script("return EditorView.bodyName() ? "
                                                           "EditorModel.body(EditorView.bodyName()).nodes.map(n => n.id) : []"))
        # every node dragged backwards: the flow now runs right to left, its wires through the boxes
        browser.execute_script("const ids = EditorModel.body(EditorView.bodyName()).nodes.map(n => n.id);"
                               "Edits.moveTo(Object.fromEntries(ids.map((id, i) => [id, [(ids.length - i) * 120, (i % 2) * 40]])));")
        scrambled = browser.execute_script("return EditorModel.draft.layout.positions[EditorView.bodyName() + '/ln1']")
        browser.find_element(By.ID, "arrange").click()
        wait(browser, lambda d: [x_of(d, n) for n in ("ln1", "attn", "add1", "ln2", "ff", "add2")] == sorted(
            x_of(d, n) for n in ("ln1", "attn", "add1", "ln2", "ff", "add2")) and x_of(d, "ln1") < x_of(d, "add2"))
        readable(browser)
        browser.execute_script("EditorModel.undo()")
        wait(browser, lambda d: d.execute_script(
            "return EditorModel.draft.layout.positions[EditorView.bodyName() + '/ln1']") == scrambled)
    finally:
        browser.quit()
