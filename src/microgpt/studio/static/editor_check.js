// The Compose editor's checks: every edit is sent to the server, at most one request per 50 ms (the latest
// answer wins), and what comes back is drawn on the canvas: each wire's shape, each error on the node and port it
// names (the message on hover and focus) and in the list of problems, each group's parameters, memory and
// share of the step, the estimates and the causality verdict. A family's draft is checked as its family and
// shape settings (the server draws the same from-family graph), a setting's problem on its inspector field.
"use strict";

const CHECK_DELAY_MS = 50;
const VERDICT_POLL_MS = 300; // a big graph's causality verdict comes with a later check of the same draft

const EditorCheck = {
  timer: null,
  serial: 0,
  sentAt: -Infinity,  // performance.now() of the last request
  graph: null,        // the last answer of /api/graph/check for the draft as it is
  editedAt: null,     // performance.now() of the first edit not yet shown
  latencies: [],      // edit to errors shown, ms (read by the benchmark)
  phases: [],         // of each latency: {waited: to the request, request: to its answer, drawing: of what it found}
  wires: new Map(),   // "body|from|to" -> {type, shape}
  wireShown: new WeakMap(), // a wire's element -> the "type|shape" it shows
  marked: [],         // the elements decorate marked with an error
  lastGood: null,     // the last answer without problems: its figures stay up, marked stale, while there are some

  // The first edit after a quiet spell is sent at once; edits that follow within 50 ms of a request wait for
  // the last of them (typing sends one check per pause, not one per key).
  schedule() {
    unsay("canvas");
    if (this.editedAt === null) this.editedAt = performance.now();
    document.getElementById("estimates").classList.add("stale");
    clearTimeout(this.timer);
    const quiet = performance.now() - this.sentAt;
    if (quiet >= CHECK_DELAY_MS) this.run();
    else this.timer = setTimeout(() => this.run(), CHECK_DELAY_MS - quiet);
  },

  async run() {
    const sent = this.sentAt = performance.now();
    const serial = ++this.serial;
    const draft = EditorModel.draft;
    try {
      const body = draft.mode === "family" ? {family: draft.family, settings: givenSettings(draft.settings)}
        : {document: draft.document, settings: runSettings(draft)};
      const graph = await api("/api/graph/check", {body});
      if (serial !== this.serial) return;
      const answered = performance.now();
      this.graph = graph;
      this.wires = new Map((graph.wires || []).map(w => [`${w.body}|${w.from}|${w.to}`, w]));
      this.decorate();
      this.showEstimates();
      if (this.editedAt !== null) {
        const drawn = performance.now();
        this.latencies.push(drawn - this.editedAt);
        this.phases.push({waited: sent - this.editedAt, request: answered - sent, drawing: drawn - answered});
      }
      this.editedAt = null;
      document.body.dataset.checked = String(serial);
      if (graph.causality && graph.causality.pending) this.timer = setTimeout(() => this.run(), VERDICT_POLL_MS);
    } catch (err) {
      if (serial === this.serial) say(err.message, true, "canvas");
    }
  },

  wireType(bodyName, edge) {
    const wire = this.wires.get(`${bodyName}|${edge.from}|${edge.to}`);
    return wire ? wire.type : null;
  },

  errors() {
    return (this.graph && this.graph.errors) || [];
  },

  // What the last answer found, drawn on the open body. Only what differs from what an element shows is
  // written (a wire's shape is kept by element: the 500 wires of an edit that changed one are not read again);
  // a wire the compiler did not reach (past an error) is marked unbound, its shape hidden rather than erased,
  // so that the wires an error cuts off and its fix restores are not laid out again.
  decorate() {
    const bodyName = EditorView.bodyName();
    for (const el of this.marked) {
      el.classList.remove("has-error");
      delete el.dataset.error;
      el.removeAttribute("aria-description");
    }
    this.marked = [];
    for (const {g: wire} of EditorRender.drawn.wires.values()) {
      const known = this.wires.get(`${bodyName}|${wire.dataset.from}|${wire.dataset.to}`);
      const shown = known ? `${known.type}|${known.shape}` : "";
      if (this.wireShown.get(wire) === shown) continue;
      this.wireShown.set(wire, shown);
      wire.classList.toggle("unbound", !known);
      if (known) setText(wire.querySelector(".wire-shape"), known.shape || "");
      setText(wire.querySelector("title"), known ? `${known.type}: ${known.shape}` : "");
      wire.setAttribute("aria-label", `wire from ${wire.dataset.from} to ${wire.dataset.to}${known ? ` ${known.shape}` : ""}`);
    }
    const errors = this.errors();
    for (const error of errors) this.mark(error, bodyName);
    this.badges(bodyName);
    this.list(errors);
    Inspector.showErrors(errors);
  },

  // An error on each node of the open body its path goes through, and on the port it names.
  mark(error, bodyName) {
    const steps = error.at ? error.at.map(key => splitKey(key)) : pathSteps(error.path || []);
    steps.forEach((step, i) => {
      if (step.body !== bodyName) return;
      const node = document.querySelector(`#editor-nodes .node[data-id="${cssEscape(step.node)}"]`);
      if (!node) return;
      this.addError(node, error.message);
      if (i === steps.length - 1 && error.port) {
        const port = node.querySelector(`.port.in[data-ref="${cssEscape(portRef(step.node, error.port))}"]`)
          || node.querySelector(`.port[data-ref="${cssEscape(portRef(step.node, error.port))}"]`);
        if (port) this.addError(port, error.message);
      }
    });
    if (!steps.length && error.port && bodyName === "") {
      const wall = document.querySelector(`#editor-nodes .port[data-ref="${cssEscape(error.port)}"]`);
      if (wall) this.addError(wall, error.message);
    }
  },

  addError(el, message) {
    if (!el.classList.contains("has-error")) this.marked.push(el);
    el.classList.add("has-error");
    el.dataset.error = el.dataset.error ? `${el.dataset.error}\n${message}` : message;
    el.setAttribute("aria-description", el.dataset.error); // what a screen reader says with its name
    const title = el.querySelector(":scope > title");
    if (title) title.textContent = el.dataset.error;
  },

  badges(bodyName) {
    const nodes = (this.graph && this.graph.nodes) || {};
    for (const badge of document.querySelectorAll("#editor-nodes .badge")) {
      const id = badge.closest(".node").dataset.id;
      const stats = nodes[`${bodyName}/${id}`];
      const each = stats ? Math.max(1, stats.instances || 1) : 1; // a group body's figures sum its instances
      setText(badge, stats ? `${compact(stats.parameters / each)} params · ${bytes(stats.memory_bytes / each)} · `
        + `${Math.round(100 * (stats.share || 0) / each)}%` : "");
    }
  },

  list(errors) {
    const panel = document.getElementById("graph-errors");
    panel.replaceChildren(...errors.map(error => {
      const where = [...(error.path || []), error.port].filter(Boolean).join("/") || (error.setting ? `setting ${error.setting}` : "the graph");
      return element("li", {class: "graph-error", tabindex: 0, onclick: () => reveal(error)},
        element("span", {class: "where"}, where), " ", error.message);
    }));
  },

  showEstimates() {
    const checked = this.graph;
    const estimates = document.getElementById("estimates");
    const causality = this.graph.causality;
    const verdict = causality ? element("span", {id: "causality", class: verdictClass(causality)}, verdictLine(causality)) : "";
    const ok = checked && checked.parameters !== null && checked.parameters !== undefined && !this.errors().length;
    if (ok) this.lastGood = checked;
    const good = this.lastGood;  // while the draft has problems: the last good figures, marked stale
    const count = this.errors().length;
    const figures = good ? [
      element("span", {id: "parameters"}, `${good.parameters.toLocaleString()} parameters`),
      element("span", {id: "memory"}, `memory ≈ ${good.memory} per training step`),
      element("span", {id: "speed", title: `${TOKENS_PER_S}; for this draft, estimated from ${good.speed_basis}`},
        `≈ ${good.tokens_per_second ? Math.round(good.tokens_per_second).toLocaleString() : "?"} tokens/s here`)] : [];
    const note = ok ? [] : [element("span", {class: "stale-note", id: "stale-note"},
      good ? `stale: the last good figures (${count} problem${count === 1 ? "" : "s"} below)`
        : `no figures yet: ${count} problem${count === 1 ? "" : "s"} below`)];
    estimates.replaceChildren(...note, ...figures, verdict,
      element("span", {class: "description"}, ok ? checked.description || "" : ""));
    estimates.className = ok ? "" : "stale";
  },
};

function verdictLine(causality) {
  if (causality.ok === true) return `causal: ${causality.message || "no position sees the future"}`;
  if (causality.ok === false) return `not causal: ${causality.message}`;
  return causality.pending ? "causality: being checked…" : "causality: not checked (the other problems first)";
}

function verdictClass(causality) {
  return causality.ok === true ? "sound" : causality.ok === false ? "leaks" : "pending";
}

// "BODY/NODE" (a key of the layout and of the check's answers) as {body, node}.
function splitKey(key) {
  const cut = key.lastIndexOf("/");
  return {body: key.slice(0, cut), node: key.slice(cut + 1)};
}

// The (body, node) pairs an error path passes through: a repeated group's copy number is skipped.
function pathSteps(path) {
  const steps = [];
  let bodyName = "";
  for (let i = 0; i < path.length; i++) {
    const id = String(path[i]);
    steps.push({body: bodyName, node: id});
    const node = EditorModel.body(bodyName).nodes.find(n => n.id === id);
    if (!node || node.group === undefined) break;
    if (node.repeat !== undefined && /^\d+$/.test(String(path[i + 1]))) i++;
    bodyName = node.group;
  }
  return steps;
}

// Text changed only where it differs: a check's answer touches only what it changed.
function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

// Go to where an error is: its body opened and its node focused; a setting's field focused.
function reveal(error) {
  if (error.setting) return document.querySelector(`#inspector [data-setting="${cssEscape(error.setting)}"]`)?.focus();
  const steps = error.at ? error.at.map(key => splitKey(key)) : pathSteps(error.path || []);
  if (!steps.length) return;
  const last = steps[steps.length - 1];
  const path = steps.slice(1).map((step, i) => EditorModel.body(steps[i].body).nodes.find(n => n.id === steps[i].node).group);
  Groups.go(path);
  Selection.set([last.node]);
  document.querySelector(`#editor-nodes .node[data-id="${cssEscape(last.node)}"]`)?.focus();
}

function givenSettings(settings) {
  return Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== "" && v !== null && v !== undefined));
}

// The run settings of a draft: the data's and the training's (a family's shape settings are its document).
function runSettings(draft) {
  const keys = new Set([...Family.keysOf("data"), ...Family.keysOf("training")]);
  return Object.fromEntries(Object.entries(givenSettings(draft.settings)).filter(([key]) => keys.has(key)));
}

function compact(n) {
  if (n === null || n === undefined) return "?";
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(Math.round(n));
}

function bytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
