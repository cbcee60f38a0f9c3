// The Compose editor's model: the draft (graph document, layout, mode, family, run settings) and every edit of
// it as an undoable command. A command records the draft as it was before; undo and redo swap drafts. What
// is only a view (the body that is open, the selection, pan and zoom) lives in EditorView, not here.
"use strict";

const UNDO_DEPTH = 200;
const EDITED_LINE = "edited: this trains as a graph document; choose a family to start again from one";

const EditorModel = {
  draft: null,      // {mode: "family"|"graph", family, settings, document, layout, edited}
  undoStack: [],    // [{label, before}] with `before` the draft as JSON
  redoStack: [],
  listeners: [],    // called after every change of the draft: (reason) => ...
  merging: null,    // the label of the command that typing in one field goes on adding to

  onChange(listener) { this.listeners.push(listener); },

  changed(reason) { for (const listener of this.listeners) listener(reason); },

  // A new draft that forgets the history (a reload's draft, or the first one).
  reset(draft) {
    this.draft = draft;
    this.undoStack = [];
    this.redoStack = [];
    this.changed("reset");
  },

  // One undoable command. `mutate(draft)` edits the draft in place; a structural edit of a family's drawing
  // turns the draft into a free graph (and undo turns it back). With `merge`, edits of one label in a row
  // (the keys typed into one field) are one step, until endMerge.
  edit(label, mutate, {structural = true, merge = false} = {}) {
    const before = JSON.stringify(this.draft);
    mutate(this.draft);
    if (structural && this.draft.mode === "family") {
      this.draft.mode = "graph";
      this.draft.family = "graph";
      this.draft.edited = true;
    }
    if (JSON.stringify(this.draft) === before) return false;
    const top = this.undoStack[this.undoStack.length - 1];
    if (!(merge && this.merging === label && top && top.label === label)) {
      this.undoStack.push({label, before});
      if (this.undoStack.length > UNDO_DEPTH) this.undoStack.shift();
    }
    this.merging = merge ? label : null;
    this.redoStack = [];
    this.changed(label);
    return true;
  },

  endMerge() { this.merging = null; },

  // A change that is no step of its own: the document a family's settings regenerate, the check's answer.
  amend(mutate) {
    mutate(this.draft);
    this.changed("amend");
  },

  undo() { this.swap(this.undoStack, this.redoStack, "undo"); },

  redo() { this.swap(this.redoStack, this.undoStack, "redo"); },

  swap(from, to, reason) {
    this.merging = null;
    const step = from.pop();
    if (!step) return;
    to.push({label: step.label, before: JSON.stringify(this.draft)});
    this.draft = JSON.parse(step.before);
    this.changed(reason);
  },

  // ---- the document's bodies: "" is the top level, any other name a group of document.groups ----

  // A body to draw: the top level, a group of the document, or (until an edit copies it in) the library's.
  body(name) {
    if (name === "") return this.draft.document;
    const own = (this.draft.document.groups || {})[name];
    if (own) return own;
    const library = Ports.library[name] || {};
    return {nodes: library.nodes || [], edges: library.edges || []};
  },

  node(bodyName, id) {
    return this.body(bodyName).nodes.find(n => n.id === id);
  },

  position(bodyName, id) {
    return this.draft.layout.positions[`${bodyName}/${id}`];
  },

  isCollapsed(bodyName, id) {
    return (this.draft.layout.collapsed || []).includes(`${bodyName}/${id}`);
  },

  // An id of `base` (or base2, base3, ...) that no node of the body has.
  freshId(bodyName, base) {
    const used = new Set(this.body(bodyName).nodes.map(n => n.id));
    const stem = base.replace(/[^A-Za-z0-9_]/g, "_").replace(/^(?=[0-9])/, "_") || "node";
    if (!used.has(stem)) return stem;
    for (let i = 2; ; i++) if (!used.has(stem + i)) return stem + i;
  },
};

// A port reference as edges write it: "node.port", or "port" for a port of the body's own wall.
function portRef(node, port) {
  return node === null ? port : `${node}.${port}`;
}

function splitRef(ref) {
  const dot = ref.indexOf(".");
  return dot < 0 ? {node: null, port: ref} : {node: ref.slice(0, dot), port: ref.slice(dot + 1)};
}
