// Families in the Compose editor. A family's draft is its settings (the shape, the data, the training); the
// canvas draws the family's graph for them (/api/graph/from-family, laid out as the family is), regenerated
// on each change of a shape setting. Saved, the draft sends its family and settings beside that graph: the
// server regenerates the graph from them and, where the draft's is still exactly it, saves the run as the
// family's settings. Which settings the inspector shows, and how, is /api/graph/settings.
"use strict";

const MINIMAL_GRAPH = {
  microgpt_graph: 1, description: "a minimal graph: embedding, layer_norm, logits, loss", dims: {d: 32},
  nodes: [{id: "embed", op: "embedding"}, {id: "norm", op: "layer_norm"}, {id: "head", op: "logits"},
    {id: "loss", op: "cross_entropy"}],
  edges: [{from: "tokens", to: "embed.ids"}, {from: "embed.out", to: "norm.x"}, {from: "norm.out", to: "head.x"},
    {from: "head.out", to: "loss.logits"}, {from: "head.out", to: "logits"}],
};

const Family = {
  spec: null,   // /api/graph/settings: {families: {name: {label, shape, template}}, data, training, template, settings}
  serial: 0,
  pending: null, // the regeneration in flight, which a save waits for
  fitNext: false, // fit the view to the next graph regenerated (a new draft's)

  init(spec) {
    this.spec = spec;
  },

  // The settings keys of "data", "training" or "shape" (a family's, or with none every family's).
  keysOf(kind, family = null) {
    if (kind !== "shape") return this.spec[kind] || [];
    const families = family ? [family] : Object.keys(this.spec.families);
    const keys = [];
    for (const name of families) keys.push(...this.spec.families[name].shape.filter(k => !keys.includes(k)));
    return keys;
  },

  // A new draft: a family's first model, or the minimal graph; the data and training settings carried over.
  fresh(family, previous = {}) {
    const carried = Object.fromEntries(Object.entries(previous).filter(([key]) =>
      this.keysOf("data").includes(key) || this.keysOf("training").includes(key)));
    const settings = {...carried};
    for (const [key, value] of Object.entries(this.spec.template || {})) if (!(key in settings)) settings[key] = value;
    const described = this.spec.families[family];
    if (described) Object.assign(settings, described.template);
    const document_ = JSON.parse(JSON.stringify(MINIMAL_GRAPH));
    return {mode: described ? "family" : "graph", family: described ? family : "graph", settings,
      document: document_, layout: {version: 1, positions: {}, collapsed: []}};
  },

  // The draft's family graph for its settings, put in place without an undo step of its own.
  regenerate() {
    const made = this.pending = this.regenerateNow();
    made.finally(() => { if (this.pending === made) this.pending = null; });
    return made;
  },

  // Until the family graph asked for last is in place (a save sends the graph drawn for the settings saved).
  async settled() {
    while (this.pending) await this.pending.catch(() => {});
  },

  async regenerateNow() {
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
};
