// Where the Compose editor puts nodes and wires. Placing: the nodes of a body that have no position yet (a
// library group opened, a document loaded without its layout) go in layers from left to right, each node one
// layer past the nodes it reads; placing is no edit of its own, and positions come from the server's layout
// (studio/graph_layout.py) where it gave one, or where Arrange asks for it. Routing: each wire leaves its output to the right and enters its
// input from the left in straight runs joined at right angles, around every node box rather than behind it.
"use strict";

const LAYER_W = 320, SLOT_H = 150;   // graph_layout.py's COLUMN and a node's height with room for wires
const CLEAR = 10;      // px kept between a wire and a box it passes
const STUB = 14;       // px a wire runs straight out of a port before it turns, and more per port below
const STUB_STEP = 6;
const BEND = 24;       // what a turn costs, in px of length, when routes are compared
const TRIES = 5;       // turning places tried near each end
const LABEL_W = 60, LABEL_H = 12; // about the box of a shape's label ("[T, 96]" in 11 px)

const EditorLayout = {
  place(bodyName) {
    const body = EditorModel.body(bodyName);
    const positions = EditorModel.draft.layout.positions;
    const missing = body.nodes.filter(n => !positions[`${bodyName}/${n.id}`]);
    if (!missing.length) return;
    const layers = layersOf(body);
    const used = {};
    for (const node of body.nodes) {
      const layer = layers[node.id];
      used[layer] = (used[layer] || 0) + 1;
      if (!positions[`${bodyName}/${node.id}`]) positions[`${bodyName}/${node.id}`] = [layer * LAYER_W, (used[layer] - 1) * SLOT_H];
    }
  },

  // The open body laid out again by the server's layered layout (Arrange): one undoable step, then Fit.
  async arrange() {
    const bodyName = EditorView.bodyName(), draft = EditorModel.draft, prefix = `${bodyName}/`;
    const answer = await api("/api/graph/layout", {body: {document: draft.document,
      ...(draft.mode === "family" ? {family: draft.family} : {})}});
    const positions = {};
    for (const [key, at] of Object.entries(answer.layout.positions)) {
      if (key.startsWith(prefix) && !key.slice(prefix.length).includes("/")) positions[key.slice(prefix.length)] = at;
    }
    Edits.moveTo(positions);
    EditorView.fit();
  },

  // The corners of a wire from output point `a` to input point `b` (each {x, y, box, slot}: the box of the
  // node it is on, the port's place down its side) around `boxes` ({x, y, width, height}). A route is five
  // straight runs at most: out of `a` to the right, up or down to a lane, along it, up or down to `b`'s row,
  // and into `b` from the left; the shortest with the fewest turns that crosses no box wins (a route that must
  // cross one, boxed in on every side, crosses the fewest).
  route(a, b, boxes) {
    const near = boxes.filter(box => box !== a.box && box !== b.box).map(box => inflate(box, CLEAR));
    const solid = [...near, ...[a.box, b.box].filter(Boolean)];
    const outX = a.x + STUB + STUB_STEP * (a.slot || 0), inX = b.x - STUB - STUB_STEP * (b.slot || 0);
    const edges = near.flatMap(r => [r.x, r.x + r.width]);
    const xs1 = turns(outX, edges.filter(x => x > outX), 1), xs2 = turns(inX, edges.filter(x => x < inX), -1);
    const candidates = [];
    for (const x1 of xs1) {
      for (const x2 of xs2) {
        const lo = Math.min(x1, x2), hi = Math.max(x1, x2);
        const lanes = new Set([a.y, b.y]);
        for (const r of near) {
          if (r.x < hi && r.x + r.width > lo) { lanes.add(r.y); lanes.add(r.y + r.height); }
        }
        for (const y of lanes) {
          const points = simplify([[a.x, a.y], [x1, a.y], [x1, y], [x2, y], [x2, b.y], [b.x, b.y]]);
          candidates.push({points, cost: length(points) + BEND * (points.length - 2)});
        }
      }
    }
    candidates.sort((p, q) => p.cost - q.cost);
    const clear = candidates.find(c => crossings(c.points, solid) === 0);
    if (clear) return clear.points;
    let best = candidates[0];
    for (const c of candidates) { c.crossed = crossings(c.points, solid); if (c.crossed < best.crossed) best = c; }
    return best.points;
  },

  // Where a wire's label goes: over the middle of its longest level run, away from the ports at its ends;
  // above the run, or below it where a box of `boxes` is right above (a lane that passes under a box).
  labelAt(points, boxes) {
    let best = null;
    for (let i = 1; i < points.length; i++) {
      const [[x1, y1], [x2, y2]] = [points[i - 1], points[i]];
      if (y1 !== y2) continue;
      const span = Math.abs(x2 - x1) - (i === 1 ? STUB : 0) - (i === points.length - 1 ? STUB : 0);
      if (!best || span > best.span) best = {span, x: (x1 + x2) / 2, y: y1};
    }
    if (!best) return {x: points[0][0], y: points[0][1] - 5};
    const over = {x: best.x - LABEL_W / 2, y: best.y - LABEL_H - 2, width: LABEL_W, height: LABEL_H};
    return {x: best.x, y: crossings([[over.x, over.y + over.height / 2], [over.x + over.width, over.y + over.height / 2]],
      boxes.map(box => inflate(box, LABEL_H / 2))) ? best.y + LABEL_H + 2 : best.y - 5};
  },
};

// A wire's drawing: its runs with the corners rounded.
function routePath(points) {
  let d = `M${points[0][0]},${points[0][1]}`;
  for (let i = 1; i < points.length - 1; i++) {
    const [p, q, r] = [points[i - 1], points[i], points[i + 1]];
    const round = Math.min(6, dist(p, q) / 2, dist(q, r) / 2);
    const before = toward(q, p, round), after = toward(q, r, round);
    d += ` L${before[0]},${before[1]} Q${q[0]},${q[1]} ${after[0]},${after[1]}`;
  }
  const last = points[points.length - 1];
  return `${d} L${last[0]},${last[1]}`;
}

function inflate(box, by) {
  return {x: box.x - by, y: box.y - by, width: box.width + 2 * by, height: box.height + 2 * by};
}

// Where a wire can turn near an end: `first` (the port's own stub), then at the nearest box edges (a gap's
// sides) in `direction` (+1 right of the output, -1 left of the input).
function turns(first, edges, direction) {
  const sorted = [...new Set(edges)].sort((p, q) => direction * (p - q));
  return [first, ...sorted.slice(0, TRIES - 1)];
}

function simplify(points) {
  const kept = [];
  for (const p of points) {
    const last = kept[kept.length - 1];
    if (last && last[0] === p[0] && last[1] === p[1]) continue;
    const before = kept[kept.length - 2];
    if (before && ((before[0] === last[0] && last[0] === p[0]) || (before[1] === last[1] && last[1] === p[1]))) kept.pop();
    kept.push(p);
  }
  return kept;
}

function length(points) {
  let sum = 0;
  for (let i = 1; i < points.length; i++) sum += dist(points[i - 1], points[i]);
  return sum;
}

function dist(p, q) {
  return Math.abs(p[0] - q[0]) + Math.abs(p[1] - q[1]);
}

function toward(from, to, by) {
  const d = dist(from, to) || 1;
  return [from[0] + (to[0] - from[0]) * by / d, from[1] + (to[1] - from[1]) * by / d];
}

// How many of `boxes` the runs pass through (touching an edge is not passing through).
function crossings(points, boxes) {
  let count = 0;
  for (const r of boxes) {
    for (let i = 1; i < points.length; i++) {
      const [[x1, y1], [x2, y2]] = [points[i - 1], points[i]];
      const lx = Math.min(x1, x2), hx = Math.max(x1, x2), ly = Math.min(y1, y2), hy = Math.max(y1, y2);
      if (hx > r.x && lx < r.x + r.width && hy > r.y && ly < r.y + r.height) { count++; break; }
    }
  }
  return count;
}

// The layer of each node: one past the deepest node it reads (0 when it reads only the body's inputs).
function layersOf(body) {
  const reads = {};
  for (const edge of body.edges) {
    const to = splitRef(edge.to).node, from = splitRef(edge.from).node;
    if (to === null || from === null) continue;
    (reads[to] = reads[to] || []).push(from);
  }
  const layers = {};
  const visiting = new Set();
  const layer = id => {
    if (id in layers) return layers[id];
    if (visiting.has(id)) return 0; // a cycle: the check names it
    visiting.add(id);
    layers[id] = Math.max(-1, ...(reads[id] || []).map(layer)) + 1;
    return layers[id];
  };
  body.nodes.forEach(n => layer(n.id));
  return layers;
}
