// The Compose editor's keyboard: undo (Ctrl+Z), redo (Ctrl+Shift+Z, Ctrl+Y), copy and paste (Ctrl+C, Ctrl+V),
// Delete or Backspace (the selection, or the focused wire), the arrows (move the focused node), and wiring
// without a mouse: Enter on a port starts a wire, Tab or the arrows go to the next port that takes it, Enter
// connects, Escape stops.
"use strict";

const NUDGE = 10;

const Keys = {
  clipboard: null, // {nodes, edges, positions} copied from a body
  pastes: 0,       // pastes since the copy: each lands a step further on

  init() {
    document.addEventListener("keydown", event => {
      if (!composeActive() || isTyping(event.target) || document.getElementById("name-dialog")) return;
      if (event.key === "Escape") AddMenu.close();
      if (Wiring.start && this.wiringKey(event)) return event.preventDefault();
      if ((event.ctrlKey || event.metaKey) && this.commandKey(event)) return event.preventDefault();
      if (!event.ctrlKey && !event.metaKey && !event.altKey && this.plainKey(event)) event.preventDefault();
    });
  },

  commandKey(event) {
    const key = event.key.toLowerCase(); // with Shift held the key reads "Z"
    if (key === "z" && !event.shiftKey) EditorModel.undo();
    else if ((key === "z" && event.shiftKey) || key === "y") EditorModel.redo();
    else if (key === "c") this.copy();
    else if (key === "v") this.paste();
    else return false;
    return true;
  },

  plainKey(event) {
    const focused = document.activeElement;
    if (event.key === "Delete" || event.key === "Backspace") {
      const wire = focused && focused.closest && focused.closest("#editor-wires .wire");
      if (wire) Edits.deleteWire(wire.dataset.from, wire.dataset.to);
      else {
        const node = focused && focused.closest && focused.closest("#editor-nodes .node:not(.wall)");
        const ids = EditorView.selection.size ? [...EditorView.selection] : node ? [node.dataset.id] : [];
        Selection.set([]);
        Edits.deleteNodes(ids);
      }
      return true;
    }
    if (!focused || !focused.closest) return false;
    const port = focused.closest("#editor-nodes .port");
    if (port && event.key === "Enter") {
      Wiring.begin(port);
      const first = Wiring.candidates()[0];
      if (first) first.focus(); else { Wiring.cancel(); say("no port takes a wire from here", true, "canvas"); }
      return true;
    }
    const button = focused.closest(".node-button");
    if (button && (event.key === "Enter" || event.key === " ")) {
      button.dispatchEvent(new MouseEvent("click", {bubbles: true}));
      return true;
    }
    const node = focused.closest("#editor-nodes .node:not(.wall)");
    if (node && focused === node) {
      const step = event.shiftKey ? NUDGE * 5 : NUDGE;
      const delta = {ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step]}[event.key];
      if (delta) {
        const at = EditorModel.position(EditorView.bodyName(), node.dataset.id) || [0, 0];
        Edits.moveTo({[node.dataset.id]: [at[0] + delta[0], at[1] + delta[1]]});
        refocus(`#editor-nodes .node[data-id="${cssEscape(node.dataset.id)}"]`);
        return true;
      }
      if (event.key === "Enter") { Selection.set([node.dataset.id]); return true; }
    }
    return false;
  },

  wiringKey(event) {
    const candidates = Wiring.candidates();
    const at = candidates.indexOf(document.activeElement);
    const forward = (event.key === "Tab" && !event.shiftKey) || event.key === "ArrowDown" || event.key === "ArrowRight";
    const back = (event.key === "Tab" && event.shiftKey) || event.key === "ArrowUp" || event.key === "ArrowLeft";
    if (forward || back) {
      const next = candidates[(at + (forward ? 1 : candidates.length - 1) + (at < 0 && back ? 1 : 0)) % candidates.length];
      if (next) next.focus();
      return true;
    }
    if (event.key === "Escape") {
      const start = Wiring.start.ref, side = Wiring.start.side;
      Wiring.cancel();
      document.querySelector(`#editor-nodes .port[data-ref="${cssEscape(start)}"][data-side="${side}"]`)?.focus();
      return true;
    }
    if (event.key === "Enter" && at >= 0) {
      const start = Wiring.start;
      const refused = Wiring.finish(candidates[at]);
      if (refused) say(`cannot wire: ${refused}`, true, "canvas");
      else say(`wired ${start.ref}`, false, "canvas");
      refocus(`#editor-nodes .port[data-ref="${cssEscape(start.ref)}"][data-side="${start.side}"]`);
      return true;
    }
    return false;
  },

  copy() {
    const bodyName = EditorView.bodyName();
    const ids = new Set(EditorView.selection);
    if (!ids.size) return;
    const body = EditorModel.body(bodyName);
    this.clipboard = {
      nodes: JSON.parse(JSON.stringify(body.nodes.filter(n => ids.has(n.id)))),
      edges: body.edges.filter(e => ids.has(splitRef(e.from).node) && ids.has(splitRef(e.to).node)),
      positions: Object.fromEntries([...ids].map(id => [id, EditorModel.position(bodyName, id) || [0, 0]])),
    };
    this.pastes = 0;
    say(`copied ${ids.size} node(s)`, false, "canvas");
  },

  // Beside the originals (each paste a step further) when that is in view, else in the middle of the view.
  paste() {
    if (!this.clipboard) return;
    const spots = Object.values(this.clipboard.positions);
    const left = Math.min(...spots.map(p => p[0])), top = Math.min(...spots.map(p => p[1]));
    const step = 40 * ++this.pastes;
    let offset = {x: step, y: step};
    if (!EditorView.inView({x: left + step, y: top + step})) {
      const centre = EditorView.centre();
      offset = {x: centre.x - left, y: centre.y - top};
    }
    const made = Edits.paste(this.clipboard, offset);
    Selection.set(made);
  },
};

// Focus what `selector` finds once the editor has drawn again.
function refocus(selector) {
  requestAnimationFrame(() => document.querySelector(selector)?.focus());
}
