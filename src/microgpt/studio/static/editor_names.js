// Renaming in the Compose editor, each one undoable step typed in place (a field over what is renamed): a node
// of the open body (the wires, layout and selection that name it follow); a group of the document (its
// instances everywhere, its layout and the breadcrumbs follow); a port of a group (the wires to it inside the
// group and to its instances everywhere follow).
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

  renameGroup(old, name) {
    const doc = EditorModel.draft.document;
    if (!NAME_PATTERN.test(name)) return `${JSON.stringify(name)} is no name: letters, digits and _, not first a digit`;
    if (name === old) return null;
    if ((doc.groups || {})[name] || name in Ports.library) return `a group ${name} exists: choose another name`;
    EditorModel.edit(`rename group ${old} to ${name}`, draft => {
      ownGroup(draft.document, old);
      draft.document.groups = Object.fromEntries(Object.entries(draft.document.groups).map(([k, v]) => [k === old ? name : k, v]));
      for (const body of [draft.document, ...Object.values(draft.document.groups)]) {
        for (const n of body.nodes || []) if (n.group === old) n.group = name;
      }
      const moved = key => key.startsWith(`${old}/`) ? `${name}/${key.slice(old.length + 1)}` : key;
      draft.layout.positions = Object.fromEntries(Object.entries(draft.layout.positions).map(([k, v]) => [moved(k), v]));
      draft.layout.collapsed = (draft.layout.collapsed || []).map(moved);
    });
    EditorView.path = EditorView.path.map(g => g === old ? name : g);
    EditorRender.render();
    return null;
  },

  // Port `port` (side "in" or "out") of group `group` becomes `name`.
  renamePort(group, side, port, name) {
    if (!NAME_PATTERN.test(name)) return `${JSON.stringify(name)} is no name: letters, digits and _, not first a digit`;
    if (name === port) return null;
    const definition = Ports.group(EditorModel.draft.document, group);
    const ports = side === "in" ? definition.inputs : definition.outputs;
    if (portList(ports).some(p => p.name === name)) return `${group} has an ${side === "in" ? "input" : "output"} ${name}: choose another name`;
    EditorModel.edit(`rename port ${group}.${port} to ${name}`, draft => {
      ownGroup(draft.document, group);
      const own = draft.document.groups[group];
      const key = side === "in" ? "inputs" : "outputs";
      own[key] = Object.fromEntries(Object.entries(own[key]).map(([k, v]) => [k === port ? name : k, v]));
      own.edges = own.edges.map(e => side === "in" ? (e.from === port ? {...e, from: name} : e) : (e.to === port ? {...e, to: name} : e));
      for (const body of [draft.document, ...Object.values(draft.document.groups)]) {
        const users = new Set((body.nodes || []).filter(n => n.group === group).map(n => n.id));
        const moved = ref => { const r = splitRef(ref); return users.has(r.node) && r.port === port ? portRef(r.node, name) : ref; };
        body.edges = (body.edges || []).map(e => side === "in" ? {...e, to: moved(e.to)} : {...e, from: moved(e.from)});
      }
    });
    return null;
  },

  // A field at (clientX, clientY) holding `now`: Enter calls rename(text) (a refusal keeps the field), Escape
  // or leaving it keeps the name; then `after(name)` gives the focus back.
  field(clientX, clientY, now, label, rename, after) {
    const area = document.getElementById("editor-area");
    const box = area.getBoundingClientRect();
    const field = element("input", {id: "rename-field", "aria-label": label});
    Object.assign(field.style, {left: `${clientX - box.left}px`, top: `${clientY - box.top}px`, width: "160px"});
    field.value = now;
    let done = false;
    const finish = commit => {
      if (done) return;
      const refused = commit ? rename(field.value.trim()) : null;
      if (refused) { say(`cannot rename: ${refused}`, true, "canvas"); field.select(); return; }
      done = true;
      field.remove();
      if (commit && field.value.trim() !== now) say(`renamed ${now} to ${field.value.trim()}`, false, "canvas");
      after(commit ? field.value.trim() : now);
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

  editGroup(id) {
    const node = EditorModel.node(EditorView.bodyName(), id);
    const box = document.querySelector(`#editor-nodes .node[data-id="${cssEscape(id)}"]`).getBoundingClientRect();
    this.field(box.left, box.top, node.group, `new name of group ${node.group}`, name => this.renameGroup(node.group, name),
      () => refocus(`#editor-nodes .node[data-id="${cssEscape(id)}"]`));
  },

  editPort(id, side, port) {
    const node = EditorModel.node(EditorView.bodyName(), id);
    const at = document.querySelector(`#editor-nodes .port[data-ref="${cssEscape(portRef(id, port))}"][data-side="${side}"]`).getBoundingClientRect();
    this.field(at.left, at.top, port, `new name of ${node.group}'s ${side === "in" ? "input" : "output"} ${port}`,
      name => this.renamePort(node.group, side, port, name),
      name => refocus(`#editor-nodes .port[data-ref="${cssEscape(portRef(id, name))}"][data-side="${side}"]`));
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
