// The Compose view's canvas: starts the node editor (editor_*.js) and ties its parts together. After every
// change of the draft the open body is drawn again, re-checked, and kept in localStorage; a family's draft has
// its graph regenerated from its settings. studio.js calls Canvas.init; body[data-editor] is "ready" after.
"use strict";

const Canvas = {
  async init(spec) {
    try {
      await this.start(spec);
      document.body.dataset.editor = "ready";
    } catch (err) {
      say(err.message, true, "canvas");
    }
  },

  async start(spec) {
    Family.init(spec);
    Ports.init(await api("/api/graph/palette"));
    const area = document.getElementById("editor-area");
    EditorView.init(area, document.getElementById("editor-stage"));
    Minimap.init(document.getElementById("minimap"));
    Pointer.init(area);
    Keys.init();
    Palette.init();
    Blocks.load(); // the workspace's library: the palette shows it once it is in
    AddMenu.init();
    Groups.init();
    TextView.init();
    const select = document.getElementById("family");
    for (const [name, family] of Object.entries(spec.families)) select.append(element("option", {value: name}, family.label));
    select.append(element("option", {value: "graph"}, "graph (a free graph)"));
    select.addEventListener("change", () => this.startFrom(select.value));
    const on = (id, handler) => document.getElementById(id).addEventListener("click", handler);
    on("new-graph", () => this.startFrom(select.value));
    on("undo", () => EditorModel.undo());
    on("redo", () => EditorModel.redo());
    on("zoom-in", () => EditorView.zoomCentre(1.25));
    on("zoom-out", () => EditorView.zoomCentre(0.8));
    on("zoom-reset", () => EditorView.zoomCentre(1 / EditorView.transform.k));
    on("fit", () => EditorView.fit());
    on("arrange", () => EditorLayout.arrange().catch(err => say(err.message, true, "canvas")));
    on("save", () => RunIO.save().catch(err => say(err.message, true, "canvas")));
    on("start", () => RunIO.start().catch(err => say(err.message, true, "canvas")));
    document.getElementById("load-run").addEventListener("change", event => {
      if (event.target.value) RunIO.load(event.target.value).catch(err => say(err.message, true));
    });
    document.getElementById("run-name").addEventListener("input", () => DraftStore.store());
    window.addEventListener("pagehide", () => DraftStore.storeNow()); // a reload within the store's delay
    EditorModel.onChange(reason => this.changed(reason));
    const kept = DraftStore.restore();
    if (kept) {
      document.getElementById("run-name").value = kept.runName || "";
      EditorView.path = (kept.path || []).filter(name => Ports.group(kept.draft.document, name));
      EditorModel.reset(kept.draft);
      EditorModel.undoStack = kept.undo || []; // the history kept across the reload (editor_io.js)
      EditorModel.redoStack = kept.redo || [];
      document.getElementById("undo").disabled = !EditorModel.undoStack.length;
      document.getElementById("redo").disabled = !EditorModel.redoStack.length;
    } else {
      Family.fitNext = true;
      const fresh = Family.fresh(select.value);
      EditorModel.reset(fresh);
      if (fresh.mode === "family") Family.regenerate(); // the family's own graph, not the minimal one drawn meanwhile
      freeRunName().then(name => { if (!this.runNameTyped()) document.getElementById("run-name").value = name; })
        .catch(err => say(err.message, true));
    }
    const view = kept && (kept.view || kept.draft.layout.viewport);
    if (view) { EditorView.transform = {...view}; EditorView.apply(); }
    else EditorView.fit();
    RunIO.refreshRunList();
  },

  runNameTyped() {
    return document.getElementById("run-name").value.trim() !== "";
  },

  // A new draft from a family (or the minimal graph), as one undoable step.
  startFrom(family) {
    if (!confirmDrop()) { document.getElementById("family").value = EditorModel.draft.family; return; }
    const fresh = Family.fresh(family, EditorModel.draft.settings);
    EditorView.path = [];
    EditorView.selection = new Set();
    EditorModel.edit(`new ${family}`, draft => {
      for (const key of Object.keys(draft)) delete draft[key];
      Object.assign(draft, fresh);
    }, {structural: false});
    if (fresh.mode === "family") { Family.fitNext = true; Family.regenerate(); } else requestAnimationFrame(() => EditorView.fit());
  },

  changed(reason) {
    EditorCheck.schedule(); // first: the server checks while the page draws
    const draft = EditorModel.draft;
    EditorView.path = EditorView.path.filter(name => Ports.group(draft.document, name));
    const bodyName = EditorView.bodyName();
    const ids = new Set(EditorModel.body(bodyName).nodes.map(n => n.id));
    EditorView.selection = new Set([...EditorView.selection].filter(id => ids.has(id)));
    EditorLayout.place(bodyName);
    EditorRender.render();
    EditorCheck.decorate();
    Inspector.draw();
    if (!reason.startsWith("set ")) Palette.draw();
    document.getElementById("family").value = draft.family;
    document.getElementById("undo").disabled = !EditorModel.undoStack.length;
    document.getElementById("redo").disabled = !EditorModel.redoStack.length;
    if (reason === "amend" && Family.fitNext) { Family.fitNext = false; EditorView.fit(); }
    if (draft.mode === "family" && (reason.startsWith("set ") || reason === "reset" || reason === "undo" || reason === "redo")) {
      if (reason.startsWith("set ") || !Object.keys(draft.layout.positions).length) Family.regenerate();
    }
    DraftStore.store();
  },
};
