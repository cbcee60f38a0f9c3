// The Compose editor's drawing of the open body in SVG: each node with its inputs on the left and outputs on
// the right, its label and a summary of its params (wrapped to the box, the rest cut with an ellipsis and
// whole in its tooltip); the body's own ports on two walls at the left and right; the wires routed around the
// boxes (EditorLayout.route), each with its shape's label on its longest level run. Every node, port and wire is focusable and named for a screen reader. What the check
// found (shapes, errors, sizes) is drawn on top by EditorCheck.decorate.
"use strict";

const NODE_W = 190, HEADER = 24, ROW = 20, LINE = 15, PAD = 6;
const SUMMARY_LINES = 3; // a summary longer than this is cut

const EditorRender = {
  geometry: new Map(), // node id ("@in", "@out" for the walls) -> {x, y, width, height, inputs, outputs}
  wiresOf: new Map(),  // node id -> the wire elements that touch it
  routes: new WeakMap(), // a wire's element -> the corners of its route
  boxesDrawn: new Map(), // node id -> "x,y,width,height" of its box when the wires were last routed
  drawn: {body: null, nodes: new Map(), wires: new Map()}, // what is on the page: key -> {signature, g}

  // Draw the open body again, making anew only the nodes and wires that changed (an edit of one node's
  // params redraws that node, not 500). A wire is routed again only when an end moved or a box that came,
  // moved or grew lies on its route.
  render() {
    const bodyName = EditorView.bodyName();
    const body = EditorModel.body(bodyName);
    const documentNow = EditorModel.draft.document;
    const nodesLayer = document.getElementById("editor-nodes");
    const wiresLayer = document.getElementById("editor-wires");
    if (this.drawn.body !== bodyName) {
      nodesLayer.replaceChildren();
      wiresLayer.replaceChildren();
      this.drawn = {body: bodyName, nodes: new Map(), wires: new Map()};
    }
    this.geometry = new Map();
    this.wiresOf = new Map();
    const nodes = new Map();
    for (const node of body.nodes) {
      const shape = this.shapeOf(documentNow, bodyName, node);
      this.geometry.set(node.id, shape);
      const signature = `${JSON.stringify(node)}|${shape.x},${shape.y}|${shape.collapsed}` +
        (node.group !== undefined ? JSON.stringify([shape.inputs, shape.outputs, shape.summary]) : "");
      nodes.set(node.id, reuse(this.drawn.nodes.get(node.id), signature, () => this.drawNode(bodyName, node, shape), nodesLayer));
    }
    for (const wall of this.walls(documentNow, bodyName)) {
      this.geometry.set(wall.id, wall);
      nodes.set(wall.id, reuse(this.drawn.nodes.get(wall.id), JSON.stringify(wall), () => this.drawWall(wall), nodesLayer));
    }
    const wires = new Map(), boxes = [...this.geometry.values()], changed = [], boxesNow = new Map();
    for (const [id, box] of this.geometry) {
      const signature = `${box.x},${box.y},${box.width},${box.height}`;
      boxesNow.set(id, signature);
      if (this.boxesDrawn.get(id) !== signature) changed.push(inflate(box, CLEAR));
    }
    this.boxesDrawn = boxesNow;
    for (const edge of body.edges) {
      const a = this.portPoint(edge.from, "out"), b = this.portPoint(edge.to, "in");
      if (!a || !b) continue;
      const key = `${edge.from}|${edge.to}`;
      if (wires.has(key)) continue;
      const old = this.drawn.wires.get(key), before = old && this.routes.get(old.g);
      const kept = before && before[0][0] === a.x && before[0][1] === a.y && before.at(-1)[0] === b.x &&
        before.at(-1)[1] === b.y && !crossings(before, changed);
      const points = kept ? before : EditorLayout.route(a, b, boxes);
      const made = reuse(this.drawn.wires.get(key), JSON.stringify(points), () => this.drawWire(edge, points), wiresLayer);
      this.routes.set(made.g, points);
      wires.set(key, made);
      this.touches(edge, made.g);
    }
    for (const [key, old] of this.drawn.nodes) if (!nodes.has(key) || nodes.get(key).g !== old.g) old.g.remove();
    for (const [key, old] of this.drawn.wires) if (!wires.has(key) || wires.get(key).g !== old.g) old.g.remove();
    this.drawn = {body: bodyName, nodes, wires};
    for (const [id, {g}] of nodes) g.classList.toggle("selected", EditorView.selection.has(id));
    EditorView.frame(this.bounds());
    Minimap.schedule();
    EditorBreadcrumbs.draw();
  },

  touches(edge, g) {
    for (const ref of [edge.from, edge.to]) {
      const {node} = splitRef(ref);
      const id = node === null ? (ref === edge.from ? "@in" : "@out") : node;
      if (!this.wiresOf.has(id)) this.wiresOf.set(id, []);
      this.wiresOf.get(id).push(g);
    }
  },

  shapeOf(documentNow, bodyName, node) {
    const ports = Ports.of(documentNow, node);
    const at = EditorModel.position(bodyName, node.id) || [0, 0];
    const collapsed = node.group !== undefined && EditorModel.isCollapsed(bodyName, node.id);
    const summary = collapsed ? [] : summaryLines(documentNow, node, NODE_W - 16);
    const rows = Math.max(1, ports.inputs.length, ports.outputs.length);
    const height = HEADER + rows * ROW + summary.length * LINE + PAD + (node.group !== undefined ? 2 * LINE : 0);
    return {x: at[0], y: at[1], width: NODE_W, height, inputs: ports.inputs, outputs: ports.outputs, summary, collapsed};
  },

  // The body's ports as two walls that frame its nodes.
  walls(documentNow, bodyName) {
    const {inputs, outputs} = Ports.walls(documentNow, bodyName);
    const shapes = [...this.geometry.values()];
    const minX = shapes.length ? Math.min(...shapes.map(s => s.x)) : 0;
    const maxX = shapes.length ? Math.max(...shapes.map(s => s.x + s.width)) : 400;
    const minY = shapes.length ? Math.min(...shapes.map(s => s.y)) : 0;
    const wall = (id, x, ins, outs) => ({id, x, y: minY, width: 110, inputs: ins, outputs: outs, summary: [],
      height: HEADER + Math.max(1, ins.length, outs.length) * ROW + PAD});
    return [wall("@in", minX - 200, [], inputs), wall("@out", maxX + 90, outputs, [])];
  },

  drawNode(bodyName, node, shape) {
    const kind = node.op !== undefined ? node.op : node.group;
    const isGroup = node.group !== undefined;
    const label = `${isGroup ? "group" : "op"} ${kind}`;
    const g = svgElement("g", {class: "node" + (isGroup ? " group-node" : "") + (EditorView.selection.has(node.id) ? " selected" : ""),
      "data-id": node.id, [isGroup ? "data-group" : "data-op"]: kind, tabindex: 0, role: "group",
      "aria-label": `node ${node.id}: ${label}${node.repeat !== undefined ? `, repeated ${node.repeat}` : ""}`,
      transform: `translate(${shape.x},${shape.y})`});
    g.append(svgElement("rect", {class: "node-box", width: shape.width, height: shape.height, rx: 5}),
      svgElement("rect", {class: "node-head", width: shape.width, height: HEADER, rx: 5}),
      svgElement("text", {class: "node-title", x: 8, y: 16}, node.id),
      svgElement("text", {class: "node-kind", x: shape.width - 8, y: 16, "text-anchor": "end"},
        fitted(kind + (node.repeat !== undefined ? ` ×${node.repeat}` : ""), "node-kind",
          shape.width - 24 - textWidth(node.id, "node-title"))));
    if (isGroup) {
      g.append(nodeButton("collapse", shape.collapsed ? "▸" : "▾", 4, shape.height - LINE - 2,
        shape.collapsed ? `expand ${node.id}` : `collapse ${node.id}`),
      nodeButton("open", "open ⤢", shape.width - 52, shape.height - LINE - 2, `open group ${node.group} (${node.id})`),
      svgElement("text", {class: "badge", x: 8, y: shape.height - LINE - 6}));
    }
    this.drawPorts(g, node.id, shape);
    shape.summary.forEach((line, i) => {
      const text = svgElement("text", {class: "summary", x: 8,
        y: HEADER + Math.max(1, shape.inputs.length, shape.outputs.length) * ROW + i * LINE + 11}, line.text);
      if (line.text !== line.whole) text.append(svgElement("title", {}, line.whole));
      g.append(text);
    });
    g.append(svgElement("title", {}, ""));
    return g;
  },

  drawWall(wall) {
    const g = svgElement("g", {class: "node wall", "data-id": wall.id, transform: `translate(${wall.x},${wall.y})`,
      role: "group", "aria-label": wall.id === "@in" ? "the body's inputs" : "the body's outputs"});
    g.append(svgElement("rect", {class: "node-box", width: wall.width, height: wall.height, rx: 3}),
      svgElement("text", {class: "node-title", x: 8, y: 16}, wall.id === "@in" ? "inputs" : "outputs"));
    this.drawPorts(g, wall.id, wall);
    return g;
  },

  drawPorts(g, nodeId, shape) {
    const wall = nodeId.startsWith("@");
    shape.inputs.forEach((port, i) => g.append(portElement(nodeId, wall, port, "in", 0, HEADER + i * ROW + ROW / 2)));
    shape.outputs.forEach((port, i) => g.append(portElement(nodeId, wall, port, "out", shape.width, HEADER + i * ROW + ROW / 2)));
  },

  // Where a port is on the canvas: side "out" or "in" of node `id` (or the walls for a ref without a node),
  // with the box it is on and its place down the side.
  portPoint(ref, side) {
    const {node, port} = splitRef(ref);
    const id = node === null ? (side === "out" ? "@in" : "@out") : node;
    const shape = this.geometry.get(id);
    if (!shape) return null;
    const list = side === "out" ? shape.outputs : shape.inputs;
    const index = list.findIndex(p => p.name === port);
    if (index < 0) return null;
    return {x: shape.x + (side === "out" ? shape.width : 0), y: shape.y + HEADER + index * ROW + ROW / 2, box: shape,
      slot: index};
  },

  drawWire(edge, points) {
    const g = svgElement("g", {class: "wire", "data-from": edge.from, "data-to": edge.to, tabindex: 0, role: "button",
      "aria-label": `wire from ${edge.from} to ${edge.to}`});
    const d = routePath(points), label = EditorLayout.labelAt(points, [...this.geometry.values()]);
    g.append(svgElement("path", {class: "wire-hit", d}), svgElement("path", {class: "wire-line", d}),
      svgElement("text", {class: "wire-shape", x: label.x, y: label.y, "text-anchor": "middle"}),
      svgElement("title", {}, ""));
    return g;
  },

  // Move drawn nodes to their layout positions without redrawing anything else; route again the wires that
  // touch them and those that a moved box now lies on.
  moved(ids) {
    const bodyName = EditorView.bodyName();
    const wires = new Set(), boxes = [];
    for (const id of ids) {
      const shape = this.geometry.get(id), at = EditorModel.position(bodyName, id);
      if (!shape || !at) continue;
      [shape.x, shape.y] = at;
      boxes.push(inflate(shape, CLEAR));
      const g = document.querySelector(`#editor-nodes .node[data-id="${id}"]`);
      if (g) g.setAttribute("transform", `translate(${shape.x},${shape.y})`);
      for (const wire of this.wiresOf.get(id) || []) wires.add(wire);
    }
    for (const {g: wire} of this.drawn.wires.values()) {
      const points = this.routes.get(wire);
      if (points && crossings(points, boxes)) wires.add(wire);
    }
    const all = [...this.geometry.values()];
    for (const wire of wires) {
      const a = this.portPoint(wire.dataset.from, "out"), b = this.portPoint(wire.dataset.to, "in");
      if (!a || !b) continue;
      const points = EditorLayout.route(a, b, all), label = EditorLayout.labelAt(points, all);
      this.routes.set(wire, points);
      wire.querySelectorAll("path").forEach(path => path.setAttribute("d", routePath(points)));
      const text = wire.querySelector(".wire-shape");
      text.setAttribute("x", label.x);
      text.setAttribute("y", label.y);
    }
  },

  bounds() {
    const shapes = [...this.geometry.values()];
    if (!shapes.length) return null;
    const x = Math.min(...shapes.map(s => s.x)), y = Math.min(...shapes.map(s => s.y));
    const right = Math.max(...shapes.map(s => s.x + s.width)), bottom = Math.max(...shapes.map(s => s.y + s.height));
    return {x, y, width: Math.max(1, right - x), height: Math.max(1, bottom - y)};
  },
};

// The element drawn before when its signature is the same, else a new one in its place.
function reuse(old, signature, make, layer) {
  if (old && old.signature === signature) return old;
  const g = make();
  if (old) old.g.replaceWith(g); else layer.append(g);
  return {signature, g};
}

// A port at (x, y) of its node: the transform on a wrapper, so that a style of the port's own never moves it.
function portElement(nodeId, wall, port, side, x, y) {
  // a wall's output is the body's input port; its refs have no node
  const ref = wall ? port.name : portRef(nodeId, port.name);
  const role = side === "in" ? "input" : "output";
  const g = svgElement("g", {class: `port ${side}`, "data-ref": ref, "data-side": side, "data-type": port.type || "",
    "data-kinds": (port.kinds || ["*"]).join(","), "data-many": port.many ? "yes" : null, tabindex: 0, role: "button",
    "aria-label": `${role} ${port.name} of ${wall ? "the body" : nodeId}: ${port.type || "any"}${port.many ? ", any number of wires" : ""}`});
  g.append(svgElement("circle", {r: 5.5}), svgElement("text", {class: "port-name", x: side === "in" ? 9 : -9, y: 4,
    "text-anchor": side === "in" ? "start" : "end"}, port.name), svgElement("title", {}, `${port.name}: ${port.type || "any"}`));
  const placed = svgElement("g", {transform: `translate(${x},${y})`});
  placed.append(g);
  return placed;
}

function nodeButton(kind, text, x, y, label) {
  const g = svgElement("g", {class: `node-button ${kind}`, tabindex: 0, role: "button", "aria-label": label,
    transform: `translate(${x},${y})`});
  g.append(svgElement("rect", {width: kind === "open" ? 48 : 14, height: LINE, rx: 3}),
    svgElement("text", {x: kind === "open" ? 24 : 7, y: 11, "text-anchor": "middle"}, text));
  return g;
}

function curve(a, b) {
  const bend = Math.max(40, Math.abs(b.x - a.x) / 2);
  return `M${a.x},${a.y} C${a.x + bend},${a.y} ${b.x - bend},${b.y} ${b.x},${b.y}`;
}

// A node's params, and for a group what is inside it, as lines ({text, whole}) `width` px wide at most: the
// params wrapped at spaces onto up to SUMMARY_LINES lines, the last cut with an ellipsis when more is left
// (`whole`, the tooltip of a line that was cut: the line, or all the params on the last); the group's
// contents on one line, cut the same way.
function summaryLines(documentNow, node, width) {
  const lines = [];
  const params = Object.entries(node.params || {}).map(([k, v]) => `${k}=${Array.isArray(v) ? `[${v}]` : v}`).join(" ");
  if (params) lines.push(...wrapped(params, width));
  if (node.group !== undefined) {
    const group = Ports.group(documentNow, node.group);
    const inner = group && group.nodes ? group.nodes.map(n => n.id) : [];
    const whole = `${inner.length} nodes: ${inner.join(", ")}`;
    if (inner.length) lines.push({text: fitted(whole, "summary", width), whole});
  }
  return lines;
}

function wrapped(whole, width) {
  const lines = [];
  let line = "";
  for (const word of whole.split(" ")) {
    const longer = line ? `${line} ${word}` : word;
    if (!line || textWidth(longer, "summary") <= width) { line = longer; continue; }
    lines.push(line);
    line = word;
  }
  lines.push(line);
  const kept = lines.slice(0, SUMMARY_LINES);
  if (lines.length > SUMMARY_LINES) kept[SUMMARY_LINES - 1] += " " + lines.slice(SUMMARY_LINES).join(" ");
  return kept.map((text, i) => ({text: fitted(text, "summary", width), whole: i === SUMMARY_LINES - 1 ? whole : text}));
}

// `text` cut with an ellipsis to `width` px in the font of canvas class `kind`.
function fitted(text, kind, width) {
  if (textWidth(text, kind) <= width) return text;
  let keep = text.length;
  while (keep > 1 && textWidth(text.slice(0, keep) + "…", kind) > width) keep--;
  return text.slice(0, keep) + "…";
}

// The width of `text` in the font that editor.css gives canvas class `kind`, measured on a 2D canvas (no
// layout of the page); the font is read once from a probe.
const FONTS = {};
let MEASURE = null;
function textWidth(text, kind) {
  if (!FONTS[kind]) {
    const probe = svgElement("text", {class: kind});
    document.getElementById("editor-nodes").append(probe);
    const style = getComputedStyle(probe);
    FONTS[kind] = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    probe.remove();
    MEASURE = MEASURE || document.createElement("canvas").getContext("2d");
  }
  MEASURE.font = FONTS[kind];
  return MEASURE.measureText(text).width;
}
