// Places the nodes of a body that have no position yet (a library group opened, a document loaded without
// its layout): in layers from left to right, each node one layer past the nodes it reads. Placing is no edit
// of its own; positions come from the server's layout where it gave one.
"use strict";

const LAYER_W = 250, SLOT_H = 120;

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
};

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
