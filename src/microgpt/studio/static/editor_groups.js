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
  },

  // Show the body at the end of `path` (a list of group names).
  go(path) {
    this.views[EditorView.bodyName()] = {...EditorView.transform};
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
    }
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
