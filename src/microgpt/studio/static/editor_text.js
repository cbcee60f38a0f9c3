// The Compose editor's text view, beside the canvas: the draft's document as YAML or JSON (written by the
// server, /api/graph/text), editable. An edit of the text that reads as a document is one undoable step of the
// draft (a family's draft becomes a free graph); text that does not read says why on its line, and the canvas
// keeps its last good document. An edit on the canvas rewrites the text (unless the text is being typed in).
// Also here: opening a document file, exporting the draft's document, and the templates (each family's graph
// for its first settings, and the documents of examples/graphs/).
"use strict";

const TEXT_DELAY_MS = 250;

const TextView = {
  format: "yaml",
  timer: null,
  serial: 0,
  shownFor: null,  // the document (as JSON) the text shows
  typed: false,    // the text holds what was typed and not yet read

  init() {
    this.box = document.getElementById("text-view");
    this.area = document.getElementById("text-source");
    this.problem = document.getElementById("text-problem");
    const toggle = document.getElementById("text-toggle");
    toggle.addEventListener("click", () => this.show(this.box.hidden));
    document.getElementById("text-format").addEventListener("change", event => {
      this.format = event.target.value;
      this.shownFor = null;
      this.refresh();
    });
    this.area.addEventListener("input", () => {
      this.typed = true;
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.read(), TEXT_DELAY_MS);
    });
    document.getElementById("open-file").addEventListener("change", event => this.open(event.target));
    document.getElementById("export").addEventListener("click", () => this.export());
    document.getElementById("template").addEventListener("change", event => {
      const chosen = event.target.value;
      event.target.value = "";
      if (chosen) this.template(chosen).catch(err => say(err.message, true, "canvas"));
    });
    EditorModel.onChange(() => { if (!this.box.hidden) this.refresh(); });
    this.templates().catch(err => say(err.message, true));
  },

  show(open) {
    this.box.hidden = !open;
    document.getElementById("text-toggle").setAttribute("aria-pressed", String(open));
    if (open) this.refresh();
  },

  // The text of the draft's document, unless it already shows it or holds what is being typed.
  async refresh() {
    const shown = JSON.stringify(EditorModel.draft.document);
    if (shown === this.shownFor || (this.typed && document.activeElement === this.area)) return;
    const serial = ++this.serial;
    const {text} = await api("/api/graph/text", {body: {document: EditorModel.draft.document, format: this.format}});
    if (serial !== this.serial || JSON.stringify(EditorModel.draft.document) !== shown) return;
    this.area.value = text;
    this.shownFor = shown;
    this.typed = false;
    this.sayProblem(null);
  },

  // The typed text read as a document: the draft's, or its problem on its line.
  async read() {
    const serial = ++this.serial;
    const answer = await api("/api/graph/text", {body: {text: this.area.value, format: this.format}});
    if (serial !== this.serial) return;
    if (answer.error) { this.sayProblem(answer); return; }
    this.sayProblem(null);
    this.shownFor = JSON.stringify(answer.document);
    this.adopt(answer.document, "edit the text");
    this.typed = false;
  },

  sayProblem(problem) {
    this.area.setAttribute("aria-invalid", String(Boolean(problem)));
    this.problem.hidden = !problem;
    this.problem.textContent = problem
      ? `${problem.line ? `line ${problem.line}: ` : ""}${problem.error} (the canvas keeps the last document that read)` : "";
  },

  // A document as the draft's, one undoable step; positions kept for the nodes it still has.
  adopt(documentGiven, label) {
    EditorModel.edit(label, draft => {
      draft.document = documentGiven;
      draft.mode = "graph";
      draft.family = "graph";
    });
  },

  async open(input) {
    const file = input.files[0];
    input.value = "";
    if (!file) return;
    const answer = await api("/api/graph/text", {body: {text: await file.text()}});
    if (answer.error) { say(`${file.name}: ${answer.error}`, true, "canvas"); return; }
    EditorView.path = [];
    EditorModel.draft.layout.positions = {};
    this.adopt(answer.document, `open ${file.name}`);
    requestAnimationFrame(() => EditorView.fit());
    say(`opened ${file.name}`, false, "canvas");
  },

  async export() {
    const {text} = await api("/api/graph/text", {body: {document: EditorModel.draft.document, format: this.format}});
    const name = `${document.getElementById("run-name").value.trim() || "graph"}.${this.format === "json" ? "json" : "yaml"}`;
    const link = element("a", {href: URL.createObjectURL(new Blob([text], {type: "text/plain"})), download: name});
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
    say(`exported the document as ${name}`, false, "canvas");
  },

  // The template menu: each family (its graph for its first settings) and each example document.
  async templates() {
    const select = document.getElementById("template");
    const families = Object.entries(Family.spec.families);
    const {examples} = await api("/api/graph/examples");
    select.replaceChildren(element("option", {value: ""}, "start from…"),
      element("optgroup", {label: "a family's graph"},
        ...families.map(([name, family]) => element("option", {value: `family:${name}`}, family.label))),
      element("optgroup", {label: "examples/graphs/"},
        ...examples.map(name => element("option", {value: `example:${name}`}, name))));
  },

  async template(chosen) {
    if (!confirmDrop()) return;
    const [kind, name] = [chosen.slice(0, chosen.indexOf(":")), chosen.slice(chosen.indexOf(":") + 1)];
    let made;
    if (kind === "family") {
      const fresh = Family.fresh(name, EditorModel.draft.settings);
      made = await api("/api/graph/from-family", {body: {family: name, settings: givenSettings(fresh.settings)}});
    } else made = await api(`/api/graph/example?name=${encodeURIComponent(name)}`);
    EditorView.path = [];
    EditorModel.edit(`start from ${name}`, draft => {
      draft.document = made.document;
      draft.mode = "graph";
      draft.family = "graph";
      draft.layout = {...draft.layout, positions: (made.layout || {}).positions || {}, collapsed: (made.layout || {}).collapsed || []};
    });
    requestAnimationFrame(() => EditorView.fit());
    say(`started from ${name}`, false, "canvas");
  },
};

// Whether the draft may be replaced: asked where it holds edits made since it was started, opened, loaded or
// saved, so that none is dropped unasked.
function confirmDrop() {
  const top = EditorModel.undoStack[EditorModel.undoStack.length - 1];
  const asStarted = !top || /^(new |start from |load |open )/.test(top.label)
    || JSON.stringify(EditorModel.draft) === RunIO.savedDraft;
  return asStarted || window.confirm("Replace the draft on the canvas? Its edits are not saved (Undo brings them back).");
}
