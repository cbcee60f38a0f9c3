// The ports of the Compose editor's nodes and bodies, from /api/graph/palette and the document's groups, and
// the wiring rule checked as a wire is dragged: the kinds must meet (stream to stream, logits to logits...),
// and an input takes one wire unless it is marked "many". Widths are the server's to check.
"use strict";

const Ports = {
  palette: {ops: [], groups: [], types: []},
  ops: {},     // name -> op of the palette
  library: {}, // name -> library group of the palette

  init(palette) {
    this.palette = palette;
    this.ops = Object.fromEntries(palette.ops.map(op => [op.name, op]));
    this.library = Object.fromEntries(palette.groups.map(group => [group.name, group]));
  },

  // A group's definition: the document's own, else the library's.
  group(document, name) {
    return (document.groups || {})[name] || this.library[name] || null;
  },

  // {inputs: [{name, type, many}], outputs: [{name, type}]} of a node of the document.
  of(document, node) {
    if (node.op !== undefined) {
      const op = this.ops[node.op];
      if (!op) return {inputs: [], outputs: []};
      let outputs = op.outputs;
      if (node.op === "split") {
        const widths = (node.params || {}).widths;
        const count = Array.isArray(widths) ? widths.length : 2;
        outputs = Array.from({length: count}, (_, i) => ({...op.outputs[0], name: `out${i}`}));
      }
      return {inputs: portList(op.inputs), outputs: portList(outputs)};
    }
    const group = this.group(document, node.group);
    if (!group) return {inputs: [], outputs: []};
    return {inputs: portList(group.inputs), outputs: portList(group.outputs)};
  },

  // The ports on a body's walls: its inputs are read inside it (drawn as outputs on the left wall), its
  // outputs written (inputs on the right wall).
  walls(document, bodyName) {
    if (bodyName === "") {
      return {inputs: portList({tokens: "token_ids"}), outputs: portList({logits: "logits"})};
    }
    const group = this.group(document, bodyName) || {};
    return {inputs: portList(group.inputs), outputs: portList(group.outputs)};
  },

  // Why a wire from an output of kinds `from` cannot go to an input of kinds `to` (lists), or null when it can.
  refusal(from, to) {
    const given = new Set(from), taken = new Set(to);
    if (given.has("*") || taken.has("*")) return null;
    for (const kind of given) if (taken.has(kind)) return null;
    return `${[...given].join(" or ")} cannot go to a ${[...taken].join(" or ")} input`;
  },
};

function portList(ports) {
  if (!ports) return [];
  if (Array.isArray(ports)) {
    return ports.map(p => ({name: p.name, type: p.type, kinds: p.kinds || [...kindsOf(p.type)], many: Boolean(p.many)}));
  }
  return Object.entries(ports).map(([name, type]) => ({name, type, kinds: [...kindsOf(type)], many: false}));
}

// The kinds a port type admits where the palette gives none: "stream[d]" -> {stream}; a type this page does
// not know -> {"*"} (anything, left to the server's check).
function kindsOf(type) {
  const known = new Set(Ports.palette.types.length ? Ports.palette.types : ["token_ids", "stream", "logits", "weights"]);
  const kinds = new Set(String(type || "").split(/\s+or\s+|\s*\|\s*|\s*,\s*/)
    .map(part => part.split("[")[0].trim()).filter(Boolean));
  if (!kinds.size || [...kinds].some(kind => !known.has(kind))) return new Set(["*"]);
  return kinds;
}
