// The Compose editor's edits of the open body, each one undoable command of EditorModel: add a node, wire two
// ports, delete, move, set a param, paste, collapse, and make a group of a selection. An edit inside a library
// group first copies that group into the document's own groups (the document then holds what it trains).
"use strict";

const Edits = {
  // One command on the open body: `mutate(body, bodyName, draft)`.
  onBody(label, mutate, options) {
    const bodyName = EditorView.bodyName();
    return EditorModel.edit(label, draft => {
      if (bodyName !== "") ownGroup(draft.document, bodyName);
      mutate(EditorModel.body(bodyName), bodyName, draft);
    }, options);
  },

  // A node of the palette entry `item` (an op, a group, or a block of the library, whose groups the document
  // takes in as a paste's: under a fresh name where it has another group of that name) at `at` (the canvas's
  // coordinates).
  addNode(item, at) {
    let added = null;
    this.onBody(`add ${item.name}`, (body, bodyName, draft) => {
      const id = EditorModel.freshId(bodyName, item.name);
      const group = item.kind === "block"
        ? carryGroups(draft.document, bodyName, Blocks.find(item.name).groups)[item.name] || item.name : item.name;
      const node = item.kind === "op" ? {id, op: item.name} : {id, group};
      const params = defaultParams(item);
      if (Object.keys(params).length) node.params = params;
      body.nodes.push(node);
      draft.layout.positions[`${bodyName}/${id}`] = [Math.round(at.x), Math.round(at.y)];
      added = id;
    });
    return added;
  },

  // A wire from output `from` to input `to` (refs "node.port", or "port" on the body's wall). An input that
  // takes one wire loses the one it had, and the status line says so. Returns why it cannot be, or null.
  connect(from, to, fromKinds, toKinds, many) {
    const refused = Ports.refusal(fromKinds, toKinds);
    if (refused) return refused;
    if (splitRef(from).node !== null && splitRef(from).node === splitRef(to).node) return "a node cannot feed itself";
    let replaced = null;
    this.onBody(`wire ${from} to ${to}`, body => {
      if (body.edges.some(e => e.from === from && e.to === to)) return;
      if (!many) {
        replaced = body.edges.find(e => e.to === to) || null;
        body.edges = body.edges.filter(e => e.to !== to);
      }
      body.edges.push({from, to});
    });
    if (replaced) say(`${to} takes one wire: ${from} replaced ${replaced.from} (Ctrl+Z puts it back)`, false, "canvas");
    return null;
  },

  deleteWire(from, to) {
    this.onBody(`delete wire ${from} to ${to}`, body => {
      body.edges = body.edges.filter(e => !(e.from === from && e.to === to));
    });
  },

  deleteNodes(ids) {
    const gone = new Set(ids);
    if (!gone.size) return;
    this.onBody(`delete ${[...gone].join(", ")}`, (body, bodyName, draft) => {
      body.nodes = body.nodes.filter(n => !gone.has(n.id));
      body.edges = body.edges.filter(e => !gone.has(splitRef(e.from).node) && !gone.has(splitRef(e.to).node));
      for (const id of gone) delete draft.layout.positions[`${bodyName}/${id}`];
    });
  },

  // The layout's positions after a drag (one step for the whole drag).
  moveTo(positions) {
    this.onBody("move", (body, bodyName, draft) => {
      for (const [id, at] of Object.entries(positions)) draft.layout.positions[`${bodyName}/${id}`] = at;
    }, {structural: false});
  },

  // A param of a node: "" removes it (the default applies); a value that reads as JSON (a number, a list,
  // true) is kept as that, any other as the text.
  setParam(id, key, text) {
    this.onBody(`set ${id}.${key}`, body => {
      const node = body.nodes.find(n => n.id === id);
      node.params = node.params || {};
      if (text === "") delete node.params[key];
      else node.params[key] = paramValue(text);
      if (!Object.keys(node.params).length) delete node.params;
    }, {merge: true});
  },

  setRepeat(id, text) {
    this.onBody(`set ${id} repeat`, body => {
      const node = body.nodes.find(n => n.id === id);
      if (text === "") delete node.repeat;
      else node.repeat = paramValue(text);
    }, {merge: true});
  },

  // The document's dims from "name=size, name=size" (a size a number or an expression such as 4*d).
  setDims(text) {
    const dims = {};
    for (const part of text.split(",")) {
      const [name, ...rest] = part.split("=");
      if (name.trim() && rest.length) dims[name.trim()] = paramValue(rest.join("=").trim());
    }
    EditorModel.edit("set dims", draft => { draft.document.dims = dims; }, {merge: true});
  },

  // A run setting (the data's, the training's, a family's shape): no structural edit.
  setSetting(key, value) {
    EditorModel.edit(`set ${key}`, draft => {
      if (value === "" || value === null) delete draft.settings[key];
      else draft.settings[key] = value;
    }, {structural: false, merge: true});
  },

  toggleCollapsed(id) {
    const key = `${EditorView.bodyName()}/${id}`;
    EditorModel.edit(`collapse ${id}`, draft => {
      const collapsed = new Set(draft.layout.collapsed || []);
      if (collapsed.has(key)) collapsed.delete(key); else collapsed.add(key);
      draft.layout.collapsed = [...collapsed];
    }, {structural: false});
  },

  // Pasted nodes get new ids; the wires among them come too; they land `offset` from where they were. The
  // groups the clip carries join the document where it lacks them (under a fresh name where its own group of
  // that name is another).
  paste(clip, offset) {
    const made = [];
    this.onBody(`paste ${clip.nodes.length} nodes`, (body, bodyName, draft) => {
      const groupNamed = carryGroups(draft.document, bodyName, clip.groups || {});
      const renamed = {};
      for (const node of clip.nodes) {
        const id = EditorModel.freshId(bodyName, node.id.replace(/\d+$/, "") || node.id);
        renamed[node.id] = id;
        const copy = {...JSON.parse(JSON.stringify(node)), id};
        if (copy.group !== undefined && groupNamed[copy.group]) copy.group = groupNamed[copy.group];
        body.nodes.push(copy);
        const at = clip.positions[node.id] || [0, 0];
        draft.layout.positions[`${bodyName}/${id}`] = [at[0] + offset.x, at[1] + offset.y];
        made.push(id);
      }
      for (const edge of clip.edges) {
        const a = splitRef(edge.from), b = splitRef(edge.to);
        body.edges.push({from: portRef(renamed[a.node], a.port), to: portRef(renamed[b.node], b.port)});
      }
    });
    return made;
  },

  // The selected nodes become a new group of the document, and one instance of it takes their place: each
  // wire into the selection becomes an input port, each value read outside it an output port, typed as the
  // check typed their wires, a width written as the document's dim of that size (stream[d], not stream[64]).
  // One input and one output of the same type share a name (x), so that the group can repeat.
  group(ids, wireType) {
    const inside = new Set(ids);
    if (!inside.size) return null;
    let made = null;
    this.onBody(`group ${[...inside].join(", ")}`, (body, bodyName, draft) => {
      const doc = draft.document;
      const name = freshGroupName(doc);
      const isIn = ref => inside.has(splitRef(ref).node);
      const inputs = {}, outputs = {}, innerEdges = [], outerEdges = [];
      const inputOf = {}, outputOf = {};
      const unique = (ports, base) => { let n = base, i = 2; while (n in ports) n = base + i++; return n; };
      for (const edge of body.edges) {
        if (isIn(edge.from) && isIn(edge.to)) innerEdges.push(edge);
        else if (isIn(edge.to)) {
          if (!(edge.from in inputOf)) {
            const port = unique(inputs, splitRef(edge.to).port);
            inputOf[edge.from] = port;
            inputs[port] = wireType(bodyName, edge) || "stream[d]";
          }
          innerEdges.push({from: inputOf[edge.from], to: edge.to});
        } else if (isIn(edge.from)) {
          if (!(edge.from in outputOf)) {
            const port = unique(outputs, splitRef(edge.from).port);
            outputOf[edge.from] = port;
            outputs[port] = wireType(bodyName, edge) || "stream[d]";
            innerEdges.push({from: edge.from, to: port});
          }
        } else outerEdges.push(edge);
      }
      const id = EditorModel.freshId(bodyName, name);
      for (const [source, port] of Object.entries(inputOf)) outerEdges.push({from: source, to: `${id}.${port}`});
      for (const edge of body.edges) {
        if (isIn(edge.from) && !isIn(edge.to)) outerEdges.push({from: `${id}.${outputOf[edge.from]}`, to: edge.to});
      }
      const enclosing = bodyName === "" ? {} : Ports.group(doc, bodyName).params || {};
      const definition = {description: `made from ${[...inside].join(", ")}`,
        params: Object.fromEntries(Object.keys(enclosing).map(key => [key, null])), inputs, outputs,
        nodes: body.nodes.filter(n => inside.has(n.id)), edges: innerEdges};
      doc.groups = insertedBefore(doc.groups || {}, bodyName, name, definition);
      const positions = [...inside].map(n => draft.layout.positions[`${bodyName}/${n}`] || [0, 0]);
      for (const n of inside) {
        draft.layout.positions[`${name}/${n}`] = draft.layout.positions[`${bodyName}/${n}`];
        delete draft.layout.positions[`${bodyName}/${n}`];
      }
      body.nodes = body.nodes.filter(n => !inside.has(n.id));
      const ins = Object.keys(inputs), outs = Object.keys(outputs);
      if (ins.length === 1 && outs.length === 1 && inputs[ins[0]] === outputs[outs[0]] && ins[0] !== outs[0]) {
        const [from, to] = [outs[0], ins[0]]; // the output takes the input's name
        outputs[to] = outputs[from];
        delete outputs[from];
        for (const edge of innerEdges) if (edge.to === from) edge.to = to;
        for (const edge of outerEdges) if (edge.from === `${id}.${from}`) edge.from = `${id}.${to}`;
      }
      for (const ports of [inputs, outputs]) for (const key of Object.keys(ports)) ports[key] = withDims(ports[key], doc.dims || {});
      body.nodes.push({id, group: name});
      body.edges = outerEdges;
      draft.layout.positions[`${bodyName}/${id}`] = [Math.round(mean(positions.map(p => p[0]))),
        Math.round(mean(positions.map(p => p[1])))];
      made = id;
    });
    return made;
  },
};

// The document's own copy of a library group, made before an edit inside it; its wall ports keep their types.
function ownGroup(doc, name) {
  if ((doc.groups || {})[name]) return;
  const library = Ports.library[name];
  if (!library) return;
  const copy = {description: library.description || "", params: JSON.parse(JSON.stringify(library.params || {})),
    inputs: Object.fromEntries(portList(library.inputs).map(p => [p.name, p.type])),
    outputs: Object.fromEntries(portList(library.outputs).map(p => [p.name, p.type])),
    nodes: JSON.parse(JSON.stringify(library.nodes || [])), edges: JSON.parse(JSON.stringify(library.edges || []))};
  doc.groups = {[name]: copy, ...(doc.groups || {})};
}

// Adds the groups `carried` (in their order: each after those it uses) to `doc` before body `before`; returns
// carried name -> the name it has in doc where that differs.
function carryGroups(doc, before, carried) {
  const named = {};
  for (const [name, definition] of Object.entries(carried)) {
    const body = JSON.parse(JSON.stringify(definition));
    for (const n of body.nodes || []) if (n.group !== undefined && named[n.group]) n.group = named[n.group];
    const mine = (doc.groups || {})[name];
    if (mine && JSON.stringify(mine) === JSON.stringify(body)) continue;
    if (!mine && !(name in Ports.library)) { doc.groups = insertedBefore(doc.groups || {}, before, name, body); continue; }
    named[name] = freshGroupName(doc, name);
    doc.groups = insertedBefore(doc.groups || {}, before, named[name], body);
  }
  return named;
}

// A group must come before the groups that use it: the new one goes just before the body it is used in.
function insertedBefore(groups, before, name, definition) {
  if (!(before in groups)) return {...groups, [name]: definition};
  const ordered = {};
  for (const [key, value] of Object.entries(groups)) {
    if (key === before) ordered[name] = definition;
    ordered[key] = value;
  }
  return ordered;
}

// A port type with its width named by the document's first dim of that size: "stream[64]" -> "stream[d]".
function withDims(type, dims) {
  const match = /^(\w+)\[(\d+)\]$/.exec(type);
  if (!match) return type;
  const name = Object.keys(dims).find(key => dims[key] === Number(match[2]));
  return name ? `${match[1]}[${name}]` : type;
}

// A group name the document and the library do not have: `base` where it is free (a carried group keeps its own
// name), else base_2, base_3, ...; "group1", "group2", ... for a new group.
function freshGroupName(doc, base = "group") {
  const taken = new Set([...Object.keys(doc.groups || {}), ...Object.keys(Ports.library)]);
  if (base !== "group" && !taken.has(base)) return base;
  for (let i = base === "group" ? 1 : 2; ; i++) {
    const name = base === "group" ? `group${i}` : `${base}_${i}`;
    if (!taken.has(name)) return name;
  }
}

function defaultParams(item) {
  if (item.kind === "op") {
    return Object.fromEntries((item.params || []).filter(p => p.default !== null && p.default !== undefined)
      .map(p => [p.name, p.default]));
  }
  return {};
}

function paramValue(text) {
  try {
    return JSON.parse(text);
  } catch (err) {
    return text;
  }
}

function mean(values) {
  return values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
}
