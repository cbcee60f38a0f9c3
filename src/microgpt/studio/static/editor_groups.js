// Groups in the Compose editor: open a group instance (the canvas then shows the group's body, its ports on
// the walls, and editing there edits the group's definition), breadcrumbs back out, and "Group" to make a
// new group of the selected nodes.
"use strict";

const Groups = {
  views: {}, // body name -> the pan and zoom it was left at

  init() {
    document.getElementById("group-selection").addEventListener("click", () => this.fromSelection());
  },

  open(id) {
    const node = EditorModel.node(EditorView.bodyName(), id);
    if (!node || node.group === undefined) return;
    this.go([...EditorView.path, node.group]);
    const uses = instancesOf(EditorModel.draft.document, node.group);
    say(uses > 1 ? `editing ${node.group}: its ${uses} instances share this definition, and all change`
      : `editing ${node.group}: ${id} is its only instance`, false, "canvas");
  },

  // Show the body at the end of `path` (a list of group names).
  go(path) {
    this.views[EditorView.bodyName()] = {...EditorView.transform};
    Pointer.lastDown = {id: null, time: 0}; // a press in the body left is no first half of a double-click here
    EditorView.path = path;
    EditorView.selection = new Set();
    EditorLayout.place(EditorView.bodyName());
    EditorRender.render();
    EditorCheck.decorate();
    Inspector.drawNode();
    const kept = this.views[EditorView.bodyName()];
    if (kept) { EditorView.transform = {...kept}; EditorView.apply(); } else EditorView.fit();
  },

  fromSelection() {
    const ids = [...EditorView.selection];
    if (!ids.length) return say("select the nodes to group first (shift-click, or shift-drag a box)", true, "canvas");
    const made = Edits.group(ids, (bodyName, edge) => EditorCheck.wireType(bodyName, edge));
    if (made) {
      Selection.set([made]);
      say(`grouped ${ids.length} node(s) as ${made}`, false, "canvas");
      refocus(`#editor-nodes .node[data-id="${cssEscape(made)}"]`);
    }
  },

  // Group instance `id` gives way to the nodes of its group's body (fresh ids where they are taken), wired as
  // the instance was; the definition stays for its other uses. A repeated instance, or one setting its
  // group's params, is refused: its body alone is not what it computes.
  ungroup(id) {
    const bodyName = EditorView.bodyName();
    const node = EditorModel.node(bodyName, id);
    if (!node || node.group === undefined) return say(`${id} is no group instance: nothing to ungroup`, true, "canvas");
    if (node.repeat !== undefined && node.repeat !== 1) return say(`${id} repeats ${node.repeat} times: set its repeat to 1 to ungroup it`, true, "canvas");
    if (Object.keys(node.params || {}).length) return say(`${id} sets its group's params: clear them to ungroup it`, true, "canvas");
    const group = Ports.group(EditorModel.draft.document, node.group);
    const made = [];
    Edits.onBody(`ungroup ${id}`, (body, name, draft) => {
      const at = draft.layout.positions[`${name}/${id}`] || [0, 0];
      const inner = group.nodes || [];
      const xs = inner.map(n => (draft.layout.positions[`${node.group}/${n.id}`] || [0, 0])[0]);
      const ys = inner.map(n => (draft.layout.positions[`${node.group}/${n.id}`] || [0, 0])[1]);
      const left = xs.length ? Math.min(...xs) : 0, top = ys.length ? Math.min(...ys) : 0;
      body.nodes = body.nodes.filter(n => n.id !== id);
      const renamed = {};
      for (const [i, n] of inner.entries()) {
        const fresh = EditorModel.freshId(name, n.id);
        renamed[n.id] = fresh;
        body.nodes.push({...JSON.parse(JSON.stringify(n)), id: fresh});
        draft.layout.positions[`${name}/${fresh}`] = [at[0] + xs[i] - left, at[1] + ys[i] - top];
        made.push(fresh);
      }
      const inside = ref => { const r = splitRef(ref); return r.node === null ? null : portRef(renamed[r.node], r.port); };
      const outer = body.edges.filter(e => splitRef(e.from).node !== id && splitRef(e.to).node !== id);
      const into = body.edges.filter(e => splitRef(e.to).node === id), out = body.edges.filter(e => splitRef(e.from).node === id);
      for (const edge of group.edges || []) {
        const from = inside(edge.from), to = inside(edge.to);
        if (from && to) outer.push({from, to});
        else if (to) into.filter(e => splitRef(e.to).port === edge.from).forEach(e => outer.push({from: e.from, to}));
        else if (from) out.filter(e => splitRef(e.from).port === edge.to).forEach(e => outer.push({from, to: e.to}));
        else {
          for (const a of into.filter(e => splitRef(e.to).port === edge.from)) {
            out.filter(e => splitRef(e.from).port === edge.to).forEach(e => outer.push({from: a.from, to: e.to}));
          }
        }
      }
      body.edges = outer;
      delete draft.layout.positions[`${name}/${id}`];
    });
    Selection.set(made);
    say(`ungrouped ${id} into ${made.length} node(s)`, false, "canvas");
    if (made.length) refocus(`#editor-nodes .node[data-id="${cssEscape(made[0])}"]`);
  },
};

// The path of opened groups above the canvas; each crumb goes back to its body.
const EditorBreadcrumbs = {
  draw() {
    const crumbs = document.getElementById("breadcrumbs");
    const path = EditorView.path;
    const items = [element("button", {class: "crumb", "data-depth": 0, onclick: () => Groups.go([])}, "graph")];
    path.forEach((name, i) => items.push(element("span", {class: "crumb-sep"}, "›"),
      element("button", {class: "crumb", "data-depth": i + 1, onclick: () => Groups.go(path.slice(0, i + 1))}, name)));
    crumbs.replaceChildren(...items);
    crumbs.querySelectorAll(".crumb").forEach((b, i, all) => {
      if (i === all.length - 1) b.setAttribute("aria-current", "location");
    });
  },
};

// How many nodes of the document (its top level and its own groups) are instances of group `name`.
function instancesOf(doc, name) {
  const bodies = [doc, ...Object.values(doc.groups || {})];
  return bodies.reduce((count, body) => count + (body.nodes || []).filter(n => n.group === name).length, 0);
}
