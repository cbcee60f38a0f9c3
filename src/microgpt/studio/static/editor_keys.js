// The Compose editor's keyboard, while the focus is in Compose and not in a field: undo (Ctrl+Z), redo
// (Ctrl+Shift+Z, Ctrl+Y), copy, cut, paste and duplicate (Ctrl+C, X, V, D), group (Ctrl+G), select all nodes
// (Ctrl+A), save (Ctrl+S), fit (F), rename (F2), the context menu (Shift+F10 or the menu key), Escape (close,
// else clear the selection), Delete or Backspace (the selection, or the focused wire), the arrows (move the
// focused node), and wiring without a mouse: Enter on a port starts a wire, Tab or the arrows go to the next
// port that takes it, Enter connects, Escape stops. A paste lands at the pointer where it is over the canvas,
// and brings the definitions of the document's own groups its nodes use.
"use strict";

const NUDGE = 10;

const Keys = {
  clipboard: null, // {nodes, edges, positions, groups} copied from a body
  pointer: null,   // where the pointer last was over the canvas (clientX, clientY), null once it left

  init() {
    document.addEventListener("keydown", event => {
      if (!composeActive() || isTyping(event.target) || document.getElementById("name-dialog")) return;
      if (document.activeElement !== document.body && !document.getElementById("compose").contains(document.activeElement)) return;
      if (event.key === "Escape" && !Wiring.start) {
        if (!ContextMenu.close() && document.getElementById("add-menu").hidden) Selection.set([]);
        AddMenu.close();
        return;
      }
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
    else if (key === "x") Commands.cut();
    else if (key === "v") this.paste();
    else if (key === "d") Commands.duplicate();
    else if (key === "g") Groups.fromSelection();
    else if (key === "a") Commands.selectAll();
    else if (key === "s") Commands.save();
    else return false;
    return true;
  },

  plainKey(event) {
    const focused = document.activeElement;
    const onNode = focused && focused.closest && focused.closest("#editor-nodes .node:not(.wall)");
    if ((event.key === "F10" && event.shiftKey) || event.key === "ContextMenu") {
      const target = onNode || (focused && focused.closest && focused.closest("#editor-wires .wire")) || document.getElementById("editor-area");
      const box = target.getBoundingClientRect();
      ContextMenu.open(box.left + Math.min(box.width / 2, 40), box.top + Math.min(box.height / 2, 20), target);
      return true;
    }
    if (event.key === "f" || event.key === "F") { EditorView.fit(); return true; }
    if (event.key === "F2" && onNode) { Names.editNode(onNode.dataset.id); return true; }
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
    if (!EditorView.selection.size) return;
    this.clipboard = this.clipFrom(EditorView.selection);
    say(`copied ${EditorView.selection.size} node(s)`, false, "canvas");
  },

  // The nodes `ids` of the open body, the wires among them, where they are, and the document's own groups
  // they use (and the groups those use), in the document's order: a paste into another graph needs them.
  clipFrom(ids) {
    const bodyName = EditorView.bodyName();
    const body = EditorModel.body(bodyName);
    const nodes = JSON.parse(JSON.stringify(body.nodes.filter(n => ids.has(n.id))));
    const own = EditorModel.draft.document.groups || {};
    const needed = new Set();
    const need = list => list.forEach(n => {
      if (n.group !== undefined && own[n.group] && !needed.has(n.group)) { needed.add(n.group); need(own[n.group].nodes || []); }
    });
    need(nodes);
    return {
      nodes,
      edges: body.edges.filter(e => ids.has(splitRef(e.from).node) && ids.has(splitRef(e.to).node)),
      positions: Object.fromEntries([...ids].map(id => [id, EditorModel.position(bodyName, id) || [0, 0]])),
      groups: JSON.parse(JSON.stringify(Object.fromEntries(Object.entries(own).filter(([name]) => needed.has(name))))),
    };
  },

  // At `at` (the canvas's coordinates), else at the pointer where it is over the canvas, else in the middle
  // of the view; the pasted nodes selected and the first focused.
  paste(at = null) {
    if (!this.clipboard) return;
    const spots = Object.values(this.clipboard.positions);
    const left = Math.min(...spots.map(p => p[0])), top = Math.min(...spots.map(p => p[1]));
    const to = at || (this.pointer ? EditorView.toWorld(this.pointer.x, this.pointer.y) : EditorView.centre());
    this.pasteClip(this.clipboard, {x: Math.round(to.x - left), y: Math.round(to.y - top)});
  },

  pasteClip(clip, offset) {
    const made = Edits.paste(clip, offset);
    Selection.set(made);
    if (made.length) refocus(`#editor-nodes .node[data-id="${cssEscape(made[0])}"]`);
    return made;
  },
};

// Focus what `selector` finds once the editor has drawn again.
function refocus(selector) {
  requestAnimationFrame(() => document.querySelector(selector)?.focus());
}
