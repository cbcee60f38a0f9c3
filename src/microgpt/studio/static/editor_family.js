// Families in the Compose editor. A family's draft is its settings (the shape, the data, the training); the
// canvas draws the family's graph for them (/api/graph/from-family, laid out as the family is), regenerated
// on each change of a shape setting. The family's chain of components (/api/canvas, studio/canvas.py) is how
// /api/save reads a family's settings, as it always has.
"use strict";

const MINIMAL_GRAPH = {
  microgpt_graph: 1, description: "a minimal graph: embedding, layer_norm, logits, loss", dims: {d: 32},
  nodes: [{id: "embed", op: "embedding"}, {id: "norm", op: "layer_norm"}, {id: "head", op: "logits"},
    {id: "loss", op: "cross_entropy"}],
  edges: [{from: "tokens", to: "embed.ids"}, {from: "embed.out", to: "norm.x"}, {from: "norm.out", to: "head.x"},
    {from: "head.out", to: "loss.logits"}, {from: "head.out", to: "logits"}],
};

const Family = {
  spec: null,   // /api/canvas: {families, settings}
  serial: 0,
  fitNext: false, // fit the view to the next graph regenerated (a new draft's)

  init(spec) {
    this.spec = spec;
  },

  // The settings keys of component `kind` ("data", "training") or, with a family, of its shape components.
  keysOf(kind, family = null) {
    const families = family ? [family] : Object.keys(this.spec.families);
    const keys = [];
    for (const name of families) {
      for (const c of this.spec.families[name].components) {
        const shape = kind === "shape" && c.kind !== "data" && c.kind !== "training";
        if (shape || c.kind === kind) keys.push(...c.keys.filter(k => !keys.includes(k)));
      }
    }
    return keys;
  },

  // A new draft: a family's first model, or the minimal graph; the data and training settings carried over.
  fresh(family, previous = {}) {
    const carried = Object.fromEntries(Object.entries(previous).filter(([key]) =>
      this.keysOf("data").includes(key) || this.keysOf("training").includes(key)));
    const settings = {...carried};
    const described = this.spec.families[family];
    const template = described ? described.template : (Object.values(this.spec.families)[0] || {}).template || {};
    for (const [kind, values] of Object.entries(template)) {
      if (kind === "training" || kind === "data") { for (const [k, v] of Object.entries(values)) if (!(k in settings)) settings[k] = v; continue; }
      if (!described) continue;
      const component = described.components.find(c => c.kind === kind);
      if (component && component.repeated) settings[component.keys[0]] = values.join(",");
      else Object.assign(settings, values);
    }
    const document_ = JSON.parse(JSON.stringify(MINIMAL_GRAPH));
    return {mode: described ? "family" : "graph", family: described ? family : "graph", settings, extra: {},
      document: document_, layout: {version: 1, positions: {}, collapsed: []}};
  },

  // The draft's family graph for its settings, put in place without an undo step of its own.
  async regenerate() {
    const draft = EditorModel.draft;
    if (draft.mode !== "family") return;
    const serial = ++this.serial;
    const asked = JSON.stringify(draft.settings);
    try {
      const made = await api("/api/graph/from-family", {body: {family: draft.family, settings: givenSettings(draft.settings)}});
      if (serial !== this.serial || EditorModel.draft.mode !== "family" || JSON.stringify(EditorModel.draft.settings) !== asked) return;
      if (made.document) {
        EditorModel.amend(d => {
          d.document = made.document;
          d.layout = {...d.layout, positions: (made.layout || {}).positions || {}, collapsed: (made.layout || {}).collapsed || d.layout.collapsed || []};
        });
      } else EditorCheck.schedule();
    } catch (err) {
      say(err.message, true, "canvas");
    }
  },

  // The family's chain of components for /api/save: {family, nodes, edges, extra}.
  chain(draft) {
    const described = this.spec.families[draft.family];
    const nodes = [];
    for (const component of described.components) {
      if (component.repeated) {
        const specs = String(draft.settings[component.keys[0]] || "").split(",").map(s => s.trim()).filter(Boolean);
        specs.forEach((spec, i) => nodes.push({id: `${component.kind}${i + 1}`, kind: component.kind,
          values: {[component.keys[0]]: spec}}));
        continue;
      }
      const values = {};
      for (const key of component.keys) {
        if (draft.settings[key] !== undefined && draft.settings[key] !== null && draft.settings[key] !== "") values[key] = draft.settings[key];
      }
      nodes.push({id: component.kind, kind: component.kind, values});
    }
    const edges = nodes.slice(1).map((node, i) => ({from: nodes[i].id, to: node.id}));
    return {family: draft.family, nodes, edges, extra: draft.extra || {}};
  },

  // A family run of studio.yaml (the chain /api/config gives) as settings.
  settingsOfChain(graph) {
    const settings = {};
    for (const node of graph.nodes || []) {
      for (const [key, value] of Object.entries(node.values || {})) {
        settings[key] = key in settings && settings[key] !== "" ? `${settings[key]},${value}` : value;
      }
    }
    return settings;
  },
};
