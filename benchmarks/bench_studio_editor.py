"""The studio's node editor on a graph of 500 nodes, in headless Chromium: frames per second while it pans and
while it zooms (requestAnimationFrame timestamps while a script pans or zooms a step each frame), and the time
from an edit to its errors shown (the edit, the server's check, the drawing of what it found). Then the layout
of a residual stack of --layout-nodes nodes (each block a layer_norm, a linear and an add that also reads the
block's input): the server's layered layout (POST /api/graph/layout), the page's whole drawing of it with every
wire routed around the boxes, and the slowest of the drags of a node a step (the node moved, its wires and
those it now lies on routed again), and the slowest of --edits edits of that stack (edit to errors shown). Then
the gestures a scripted user makes to build a 2-layer GPT on the page as it opens, by each route: (a) from a
template (the template menu's gpt graph, its block's repeat set to 2), (b) by hand (the
minimal graph, a block of six nodes dragged from the palette and wired, grouped with Ctrl+G, copied and pasted
with Ctrl+C and Ctrl+V, the copy wired in). A gesture is a click, a drag, a key chord or one field's value
typed (moving the pointer is not one); a route ends when the page's check is clean and its top level holds 2
blocks (groups other than attention and feed_forward, each counted with its repeat). Not a timed test: it
prints the figures with the machine's processor.

    python benchmarks/bench_studio_editor.py [--nodes 500] [--frames 300] [--edits 20] [--layout-nodes 300]
    python benchmarks/bench_studio_editor.py --gestures    # the gesture counts only

Needs the studio extra and Debian's chromium and chromium-driver, as the browser tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from itertools import pairwise
from pathlib import Path

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    sys.exit("bench_studio_editor.py needs selenium (the studio extra): pip install -e '.[studio]'")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from studio_browser import (
    canvas,
    clean,
    drag_from_palette,
    drag_wire,
    node,
    node_ids,
    press,
    start_browser,
    type_into,
    wait,
)
from studio_workspace import make_workspace


# A graph of `count` nodes that compiles: an embedding, a chain of layer_norm, relu and linear, the logits and
# the loss, laid out in rows of 25.
def big_document(count: int) -> tuple[dict, dict]:
    middle = ["layer_norm", "relu", "linear"]
    nodes = [{"id": "embed", "op": "embedding"}]
    for i in range(count - 3):
        op = middle[i % 3]
        nodes.append({"id": f"n{i}", "op": op, **({"params": {"out": "d"}} if op == "linear" else {})})
    nodes += [{"id": "head", "op": "logits"}, {"id": "loss", "op": "cross_entropy"}]
    edges = [{"from": "tokens", "to": "embed.ids"}]
    for a, b in pairwise(nodes[:-1]):
        edges.append({"from": f"{a['id']}.out", "to": f"{b['id']}.x"})
    edges += [{"from": "head.out", "to": "loss.logits"}, {"from": "head.out", "to": "logits"}]
    positions = {f"/{n['id']}": [(i % 25) * 250, (i // 25) * 130] for i, n in enumerate(nodes)}
    document = {"microgpt_graph": 1, "description": f"a chain of {count} nodes", "dims": {"d": 16},
                "nodes": nodes, "edges": edges}
    return document, {"version": 1, "positions": positions, "collapsed": []}


# A residual stack of about `count` nodes: blocks of layer_norm -> linear -> add, the add also reading the
# block's input (the wire that must go around the block's two boxes), then the logits and the loss.
def residual_document(count: int) -> dict:
    nodes, edges, stream = [{"id": "embed", "op": "embedding"}], [{"from": "tokens", "to": "embed.ids"}], "embed.out"
    for i in range((count - 3) // 3):
        nodes += [{"id": f"ln{i}", "op": "layer_norm"}, {"id": f"lin{i}", "op": "linear", "params": {"out": "d"}},
                  {"id": f"add{i}", "op": "add"}]
        edges += [{"from": stream, "to": f"ln{i}.x"}, {"from": f"ln{i}.out", "to": f"lin{i}.x"},
                  {"from": f"lin{i}.out", "to": f"add{i}.in"}, {"from": stream, "to": f"add{i}.in"}]
        stream = f"add{i}.out"
    nodes += [{"id": "head", "op": "logits"}, {"id": "loss", "op": "cross_entropy"}]
    edges += [{"from": stream, "to": "head.x"}, {"from": "head.out", "to": "loss.logits"},
              {"from": "head.out", "to": "logits"}]
    return {"microgpt_graph": 1, "description": f"a residual stack of {len(nodes)} nodes", "dims": {"d": 16},
            "nodes": nodes, "edges": edges}


# The page's whole drawing of the open body (every node and wire made anew, every wire routed) `times` times,
# and a node dragged a step at a time over the graph `times` times: the ms of each.
LAYOUT_JS = """
const [times, done] = [arguments[0], arguments[arguments.length - 1]];
const draws = [], drags = [];
for (let i = 0; i < times; i++) {
  EditorRender.drawn = {body: null, nodes: new Map(), wires: new Map()};
  const start = performance.now();
  EditorRender.render();
  draws.push(performance.now() - start);
}
const ids = EditorModel.body('').nodes.map(n => n.id);
for (let i = 0; i < times; i++) {
  const id = ids[Math.floor(ids.length * i / times)], at = EditorModel.position('', id);
  const start = performance.now();
  at[1] += 37;
  EditorRender.moved([id]);
  drags.push(performance.now() - start);
}
done([draws, drags, document.querySelectorAll('#editor-wires .wire').length]);
"""


# The server's layered layout of a document, and the ms from request to answer.
LAYOUT_REQUEST_JS = """
const [document_, done] = [arguments[0], arguments[arguments.length - 1]];
const start = performance.now();
api("/api/graph/layout", {body: {document: document_}}).then(answer => done([answer.layout, performance.now() - start]));
"""


# Fit the graph in view, let the page paint it, then pan (or zoom) a step every frame.
FRAMES_JS = """
const [kind, frames, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
EditorView.fit();
const stamps = [];
let i = 0;
function step(now) {
  stamps.push(now);
  if (kind === "pan") EditorView.panBy(i % 120 < 60 ? 4 : -4, i % 80 < 40 ? 2 : -2);
  else { const r = EditorView.area.getBoundingClientRect();
         EditorView.zoomAt(i % 60 < 30 ? 1.02 : 1 / 1.02, r.left + r.width / 2 + 50, r.top + r.height / 2); }
  if (++i < frames) requestAnimationFrame(step); else done(stamps);
}
setTimeout(() => requestAnimationFrame(step), 1500);
"""

# One edit at a time: linear `node`'s `out` set to a name bound nowhere (an error), then back (none); each waits for
# what its check found to be drawn.
EDITS_JS = """
const [node, count, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
EditorCheck.latencies = [];
EditorCheck.phases = [];
performance.clearResourceTimings();
let i = 0;
function next() {
  if (i === count) {
    const checks = performance.getEntriesByType("resource").filter(e => e.name.includes("/api/graph/check"));
    return done([EditorCheck.latencies, EditorCheck.phases, checks.map(e => [e.duration, e.responseStart - e.requestStart])]);
  }
  const wanted = EditorCheck.latencies.length + 1;
  Edits.setParam(node, "out", i % 2 === 0 ? "width_bound_nowhere" : "d");
  EditorModel.endMerge();
  i++;
  const poll = () => EditorCheck.latencies.length >= wanted ? setTimeout(next, 30) : setTimeout(poll, 2);
  poll();
}
next();
"""


# The parts of an edit's latency (EditorCheck.phases): the page's own work before the request goes (the edit,
# its drawing, a wait while edits come faster than one per 50 ms), the request (the server's check and the
# answer's parsing) and the drawing of what it found.
PHASES = (("edit to request", "waited"), ("request to answer", "request"), ("answer to drawn", "drawing"))


# The blocks on the draft's top level: its group instances other than attention and feed_forward, each with its
# repeat.
BLOCKS_JS = """
return EditorModel.draft.document.nodes.filter(n => n.group && !["attention", "feed_forward"].includes(n.group))
  .reduce((sum, n) => sum + (n.repeat || 1), 0);
"""

# The hand-built block, as in tests/studio/test_studio_blocks_browser.py: each node as the palette names it (kind,
# name, dropped at x, y px from the canvas's centre), the ids the editor gives them, and its wires.
PLACED = [("op", "layer_norm", -300, 80), ("group", "attention", -80, 80), ("op", "add", 140, 80),
          ("op", "layer_norm", -300, 210), ("group", "feed_forward", -80, 210), ("op", "add", 140, 210)]
BLOCK = ["layer_norm", "attention", "add", "layer_norm2", "feed_forward", "add2"]
WIRES = [("embed.out", "layer_norm.x"), ("layer_norm.out", "attention.x"), ("embed.out", "add.in"),
         ("attention.y", "add.in"), ("add.out", "layer_norm2.x"), ("layer_norm2.out", "feed_forward.x"),
         ("add.out", "add2.in"), ("feed_forward.y", "add2.in"), ("add2.out", "norm.x")]


class User:
    """A scripted user of the studio's page who counts the gestures made: a click, a drag, a key chord, one
    field's value typed."""

    def __init__(self, driver):
        self.driver, self.gestures = driver, 0

    def did(self, count: int = 1) -> None:
        self.gestures += count

    def done(self) -> int:
        """The gestures made, once the page's check is clean and the draft holds 2 blocks."""
        wait(self.driver, lambda d: clean(d) and d.execute_script(BLOCKS_JS) == 2)
        return self.gestures


def from_template(driver) -> int:
    """(a) The template menu's gpt graph (a block repeated 4 times), the block clicked and its repeat set to 2."""
    user = User(driver)
    Select(driver.find_element(By.ID, "template")).select_by_value("family:gpt")
    user.did()
    wait(driver, lambda d: "blocks" in node_ids(d) and d.execute_script("return EditorModel.draft.family") == "graph")
    ActionChains(driver).click(node(driver, "blocks")).perform()
    type_into(driver, '#inspector-node [data-param="repeat"]', "2")
    user.did(2)
    return user.done()


def by_hand(driver) -> int:
    """(b) The minimal graph, a block dragged from the palette and wired, grouped, copied and pasted, the copy
    wired in after the first."""
    user = User(driver)
    Select(driver.find_element(By.ID, "family")).select_by_value("graph")
    user.did()
    wait(driver, lambda d: sorted(node_ids(d)) == ["embed", "head", "loss", "norm"])
    type_into(driver, "#inspector [data-dims]", "d=16, heads=2, d_ff=32")
    driver.find_element(By.ID, "fit").click()
    for _ in range(2):  # zoom 0.64: room below the graph for the block's two rows
        driver.find_element(By.ID, "zoom-out").click()
    user.did(4)
    for kind, name, x, y in PLACED:
        drag_from_palette(driver, kind, name, x, y)  # the search typed, then the drag
        user.did(2)
    type_into(driver, "#palette-search", "")
    user.did()
    wait(driver, lambda d: set(BLOCK) <= set(node_ids(d)))
    for source, target in WIRES:
        drag_wire(driver, source, target)
        user.did()
    chain = ActionChains(driver).click(node(driver, BLOCK[0])).key_down(Keys.SHIFT)
    for node_id in BLOCK[1:]:
        chain.click(node(driver, node_id))
    chain.key_up(Keys.SHIFT).perform()
    user.did(len(BLOCK))
    press(driver, Keys.CONTROL, "g")
    user.did()
    wait(driver, lambda d: "group1" in node_ids(d))
    press(driver, Keys.CONTROL, "c")
    ActionChains(driver).move_to_element_with_offset(canvas(driver), 150, 300).perform()  # the pointer, no gesture
    press(driver, Keys.CONTROL, "v")
    user.did(2)
    copy = wait(driver, lambda d: [i for i in node_ids(d) if i not in ("embed", "head", "loss", "norm", "group1")])[0]
    drag_wire(driver, "group1.x", f"{copy}.x")
    drag_wire(driver, f"{copy}.x", "norm.x")
    user.did(2)
    return user.done()


def cpu_model() -> str:
    found = re.search(r"Model name:\s*(.+)", subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout)
    return found.group(1).strip() if found else "unknown processor"


def fps(stamps: list[float]) -> tuple[float, float, float]:
    """Frames per second over the whole run, at the median frame, and the longest frame in ms."""
    gaps = [b - a for a, b in pairwise(stamps)]
    return 1000 * len(gaps) / (stamps[-1] - stamps[0]), 1000 / statistics.median(gaps), max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--layout-nodes", type=int, default=300)
    parser.add_argument("--layout-times", type=int, default=20)
    parser.add_argument("--gestures", action="store_true", help="only the gestures of the routes to a 2-layer GPT")
    args = parser.parse_args()
    workspace = make_workspace(Path(tempfile.mkdtemp(prefix="bench-editor-")))
    studio = subprocess.Popen([sys.executable, "-m", "microgpt", "studio", str(workspace), "--port", "0",
                               "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = re.search(r"http://\S+", studio.stdout.readline()).group(0)
    try:
        lines = [] if args.gestures else timings(url, args)
        gestures = {}
        for route, build in (("(a) from the gpt template, repeat 2", from_template),
                             ("(b) by hand from the palette, the block copied and pasted", by_hand)):
            driver = start_browser(url, size="1440,900")  # a fresh page: no draft kept from the route before
            try:
                gestures[route] = build(driver)
            finally:
                driver.quit()
    finally:
        studio.send_signal(signal.SIGINT)
        studio.communicate(timeout=60)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"studio editor, headless Chromium, {cpu_model()}, {os.cpu_count()} cores, load average {load}")
    for line in lines:
        print(line)
    print("  gestures to a 2-layer GPT, from the page as it opens to a clean check with 2 blocks:")
    for route, count in gestures.items():
        print(f"    {route}: {count} gestures")


def timings(url: str, args) -> list[str]:
    """The frames, edits and layout figures, a line each."""
    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(300)
    try:
        driver.get(url)
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return document.body.dataset.editor") == "ready")
        document, layout = big_document(args.nodes)
        draft = {"mode": "graph", "family": "graph", "edited": False, "extra": {}, "document": document,
                 "layout": layout, "settings": {"file": "tiny.txt", "seq_len": "16", "batch_size": "4"}}
        driver.execute_script(f"EditorModel.reset({json.dumps(draft)});")
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return document.body.dataset.checked"))
        drawn = driver.execute_script("return document.querySelectorAll('#editor-nodes .node:not(.wall)').length")
        results = {kind: fps(driver.execute_async_script(FRAMES_JS, kind, args.frames)) for kind in ("pan", "zoom")}
        latencies, phases, requests = driver.execute_async_script(EDITS_JS, "n2", args.edits)
        stack = residual_document(args.layout_nodes)
        laid = driver.execute_async_script(LAYOUT_REQUEST_JS, stack)
        driver.execute_script(f"EditorModel.reset({json.dumps({**draft, 'document': stack, 'layout': laid[0]})});")
        WebDriverWait(driver, 120).until(lambda d: d.execute_script(
            f"return document.querySelectorAll('#editor-nodes .node:not(.wall)').length === {len(stack['nodes'])}"))
        draws, drags, wire_count = driver.execute_async_script(LAYOUT_JS, args.layout_times)
        middle = f"lin{len(stack['nodes']) // 6}"  # a linear halfway down the stack
        stack_latencies = driver.execute_async_script(EDITS_JS, middle, args.edits)[0]
    finally:
        driver.quit()
    lines = [f"  a graph of {drawn} nodes drawn:"]
    for kind, (rate, typical, longest) in results.items():
        lines.append(f"  {kind}: {rate:.1f} frames/s over {args.frames} frames, {typical:.1f} at the median frame, "
                     f"longest frame {longest:.1f} ms")
    lines.append(f"  edit to errors shown: median {statistics.median(latencies):.0f} ms, max {max(latencies):.0f} ms "
                 f"over {len(latencies)} edits (each sent at once, after a quiet 50 ms); of it the request to "
                 f"/api/graph/check (median {statistics.median(r[0] for r in requests):.0f} ms)")
    worst = phases[latencies.index(max(latencies))]
    lines.append("  of an edit, median (the worst edit's): " + ", ".join(
        f"{what} {statistics.median(p[key] for p in phases):.0f} ({worst[key]:.0f})" for what, key in PHASES))
    for kind, chosen in (("with an error", latencies[0::2]), ("without", latencies[1::2])):
        lines.append(f"    edits {kind}: median {statistics.median(chosen):.0f} ms, max {max(chosen):.0f}")
    lines.append(f"    the server's answer from the request's arrival to its first byte: median "
                 f"{statistics.median(r[1] for r in requests):.0f} ms, max {max(r[1] for r in requests):.0f}")
    lines.append(f"  layout of a residual stack of {len(stack['nodes'])} nodes and {wire_count} wires: the server's "
                 f"layered layout {laid[1]:.0f} ms (request to answer); the page's whole drawing, every wire routed: "
                 f"median {statistics.median(draws):.0f} ms, max {max(draws):.0f} over {len(draws)}; a node dragged "
                 f"a step (its wires routed again): median {statistics.median(drags):.1f} ms, max {max(drags):.1f} "
                 f"over {len(drags)}")
    lines.append(f"  the slowest edit on that {len(stack['nodes'])}-node graph: {max(stack_latencies):.0f} ms edit to "
                 f"errors shown (median {statistics.median(stack_latencies):.0f} ms over {len(stack_latencies)} "
                 f"edits of {middle}'s out)")
    return lines

if __name__ == "__main__":
    main()
