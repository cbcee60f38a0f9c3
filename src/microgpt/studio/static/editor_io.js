// The Compose editor's draft outside the page: kept in localStorage on every change (so a reload finds it),
// saved to studio.yaml (a family's draft sends its family and settings beside its graph, and is saved as the
// family's settings while the graph is still the family's own; a graph's run with its document in
// graphs/NAME.json and its layout in studio/layout/NAME.json, written by the server), trained, and loaded back
// from a run.
"use strict";

const DRAFT_KEY = "microgpt-studio-draft";
const KEPT_STEPS = 50; // undo and redo steps kept across a reload (each is the draft as it was)

const DraftStore = {
  timer: null,

  // Soon, when the page is idle (not in the way of an edit's check); the page going stores it at once.
  store() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => (window.requestIdleCallback || (f => f()))(() => this.storeNow(), {timeout: 1000}), 200);
  },

  storeNow() {
    try {
      localStorage.setItem(DRAFT_KEY, JSON.stringify({version: 1, draft: EditorModel.draft,
        runName: document.getElementById("run-name").value, path: EditorView.path, view: EditorView.transform,
        undo: EditorModel.undoStack.slice(-KEPT_STEPS), redo: EditorModel.redoStack.slice(-KEPT_STEPS)}));
    } catch (err) { // storage full or turned off: the draft lives as long as the page
    }
  },

  restore() {
    try {
      const kept = JSON.parse(localStorage.getItem(DRAFT_KEY) || "null");
      if (!kept || kept.version !== 1 || !kept.draft || !kept.draft.document) return null;
      return kept;
    } catch (err) {
      return null;
    }
  },
};

const RunIO = {
  savedDraft: null, // the draft (as JSON) the last save wrote as a run
  runName() {
    return document.getElementById("run-name").value.trim();
  },

  // The layout as the server keeps it, with the view it is looked at from.
  layout() {
    return {...EditorModel.draft.layout, version: 1, viewport: {...EditorView.transform}};
  },

  body(name, overwrite) {
    const draft = EditorModel.draft;
    if (draft.mode === "family") {
      return {name, family: draft.family, settings: givenSettings(draft.settings), document: draft.document,
        layout: this.layout(), overwrite};
    }
    return {name, document: draft.document, layout: this.layout(), settings: runSettings(draft), overwrite};
  },

  // Save (and with `andStart`, start), asking first where the name is taken (saveOrAsk, api.js).
  async save(andStart = false) {
    DraftStore.storeNow();
    await Family.settled(); // the graph of the settings saved, not one still being regenerated
    const chosen = await saveOrAsk(this.runName(), async (name, overwrite) => {
      const saved = await api("/api/save", {body: this.body(name, overwrite)});
      return andStart && !saved.draft  // a draft is never a run: nothing to start
        ? {saved, run: await api(`/api/runs/${encodeURIComponent(name)}/start`, {body: {overwrite}})} : {saved};
    });
    if (chosen === null) { say("not saved: the name is taken (nothing replaced)", false, "canvas"); return null; }
    document.getElementById("run-name").value = chosen.name;
    DraftStore.store();
    const {saved, run} = chosen.result;
    if (!saved.draft) this.savedDraft = JSON.stringify(EditorModel.draft); // replaced without asking (confirmDrop)
    if (saved.draft) {
      document.getElementById("saved-yaml").textContent = saved.message;
      say(saved.message, true, "canvas");
      await this.refreshRunList();
      return null;
    }
    document.getElementById("saved-yaml").textContent =
      `saved to ${saved.file}; the same run from a shell:\n  ${saved.command}\n\n${saved.yaml}`;
    say(`saved run ${saved.saved} to ${saved.file}`, false, "canvas");
    await this.refreshRunList();
    return run || saved;
  },

  async start() {
    const run = await this.save(true);
    if (!run) return null;
    say(`run ${run.name} is training (process ${run.pid}); watch it in Watch`, false, `run:${run.name}`);
    Watch.follow(run.checkpoint, true);
    return run;
  },

  // A run of studio.yaml as the draft: a graph run's document and layout, or a family run's settings (its graph
  // regenerated from them).
  async load(choice) {
    const isDraft = choice.startsWith("draft:");
    const name = isDraft ? choice.slice("draft:".length) : choice;
    const run = await api(`/api/config?name=${encodeURIComponent(name)}${isDraft ? "&draft=1" : ""}`);
    let draft;
    if (run.document) {
      draft = {mode: "graph", family: "graph", edited: false, settings: run.settings || {}, document: run.document,
        layout: run.layout || {version: 1, positions: {}, collapsed: []}};
    } else {
      draft = {...Family.fresh(run.family), settings: run.settings || {}};
      if (run.layout) draft.layout = run.layout;
    }
    document.getElementById("run-name").value = run.name || name;
    EditorView.path = [];
    EditorModel.edit(`load ${name}`, d => Object.assign(d, draft), {structural: false});
    if (draft.mode === "family") Family.regenerate();
    if (draft.layout.viewport) { EditorView.transform = {...draft.layout.viewport}; EditorView.apply(); } else EditorView.fit();
    say(isDraft ? `loaded the draft ${name} (${(run.problems || []).length} problem(s) to fix before it trains)`
      : `loaded run ${name} from studio.yaml`, false, "canvas");
  },

  async refreshRunList() {
    const select = document.getElementById("load-run");
    try {
      const {runs, drafts} = await api("/api/configs");
      select.replaceChildren(element("option", {value: ""}, "(a run of studio.yaml)"),
        ...runs.map(name => element("option", {value: name}, name)),
        ...(drafts || []).map(name => element("option", {value: `draft:${name}`}, `${name} (draft, not runnable)`)));
    } catch (err) {
      say(err.message, true);
    }
  },
};
