// Renaming in the Compose editor: a node of the open body gets a new id, and the wires, layout and selection
// that named it follow, as one undoable step. The name is typed in place, in a field over the node's title.
"use strict";

const NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

const Names = {
  // Why `name` cannot be node `id`'s new id in the open body, or null.
  refusal(id, name) {
    if (!NAME_PATTERN.test(name)) return `${JSON.stringify(name)} is no name: letters, digits and _, not first a digit`;
    if (name !== id && EditorModel.node(EditorView.bodyName(), name)) return `${name} is taken in this body: choose another`;
    return null;
  },

  renameNode(id, name) {
    const refused = this.refusal(id, name);
    if (refused) return refused;
    if (name === id) return null;
    const rename = ref => {
      const {node, port} = splitRef(ref);
      return node === id ? portRef(name, port) : ref;
    };
    Edits.onBody(`rename ${id} to ${name}`, (body, bodyName, draft) => {
      body.nodes.find(n => n.id === id).id = name;
      body.edges = body.edges.map(e => ({...e, from: rename(e.from), to: rename(e.to)}));
      const positions = draft.layout.positions;
      if (`${bodyName}/${id}` in positions) {
        positions[`${bodyName}/${name}`] = positions[`${bodyName}/${id}`];
        delete positions[`${bodyName}/${id}`];
      }
      draft.layout.collapsed = (draft.layout.collapsed || []).map(k => k === `${bodyName}/${id}` ? `${bodyName}/${name}` : k);
    }, {structural: true});
    if (EditorView.selection.has(id)) Selection.set([...EditorView.selection].map(n => n === id ? name : n));
    return null;
  },

  // A field over node `id`'s title: Enter renames, Escape or leaving it keeps the name; then the node has
  // the focus again.
  editNode(id) {
    const shape = EditorRender.geometry.get(id);
    if (!shape) return;
    const area = document.getElementById("editor-area");
    const {x, y, k} = EditorView.transform;
    const field = element("input", {id: "rename-field", "aria-label": `new name of ${id}`, value: id});
    Object.assign(field.style, {left: `${shape.x * k + x}px`, top: `${shape.y * k + y}px`, width: `${Math.max(120, shape.width * k)}px`});
    field.value = id;
    let done = false;
    const finish = commit => {
      if (done) return;
      const refused = commit ? this.renameNode(id, field.value.trim()) : null;
      if (refused) { say(`cannot rename: ${refused}`, true, "canvas"); field.select(); return; }
      done = true;
      field.remove();
      const now = commit ? field.value.trim() : id;
      if (commit && now !== id) say(`renamed ${id} to ${now}`, false, "canvas");
      refocus(`#editor-nodes .node[data-id="${cssEscape(now)}"]`);
    };
    field.addEventListener("keydown", event => {
      if (event.key === "Enter") { event.preventDefault(); finish(true); }
      if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); finish(false); }
    });
    field.addEventListener("blur", () => finish(false));
    area.append(field);
    field.focus();
    field.select();
  },
};
