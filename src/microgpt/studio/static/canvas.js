// The Compose view: a model as a chain of typed components on a canvas, checked by the server on every edit.
// The components, their settings and the types of their connections come from /api/canvas; every rule about
// the settings is the library's (/api/check), so nothing here decides whether a value is allowed.
"use strict";

const Canvas = {
  spec: null,
  graph: null,
  undoStack: [],
  redoStack: [],
  editing: null,   // "node/key" while a field is being typed in: one undo step per field edit
  pendingOut: null, // the node whose output port was clicked, waiting for an input port
  checkTimer: null,
  checkSerial: 0,
  lastChecked: null,

  init(spec) {
    this.spec = spec;
    const select = document.getElementById("family");
    for (const [name, family] of Object.entries(spec.families)) {
      select.append(element("option", {value: name}, family.label));
    }
    select.addEventListener("change", () => this.newGraph(select.value));
    document.getElementById("new-graph").addEventListener("click", () => this.newGraph(select.value));
    document.getElementById("undo").addEventListener("click", () => this.undo());
    document.getElementById("redo").addEventListener("click", () => this.redo());
    document.getElementById("save").addEventListener("click", () => this.save().catch(err => say(err.message, true, "canvas")));
    document.getElementById("start").addEventListener("click", () => this.start().catch(err => say(err.message, true, "canvas")));
    document.getElementById("load-run").addEventListener("change", event => {
      if (event.target.value) this.load(event.target.value).catch(err => say(err.message, true));
    });
    document.addEventListener("keydown", event => {
      if (!document.getElementById("compose").classList.contains("active")) return;
      if (!(event.ctrlKey || event.metaKey) || event.target.tagName === "INPUT") return;
      const key = event.key.toLowerCase();  // with Shift held the key reads "Z"
      if (key === "z" && !event.shiftKey) { event.preventDefault(); this.undo(); }
      if ((key === "z" && event.shiftKey) || key === "y") { event.preventDefault(); this.redo(); }
    });
    this.newGraph(select.value, false);
    this.refreshRunList();
    freeRunName().then(name => { document.getElementById("run-name").value = name; })
      .catch(err => say(err.message, true));
  },

  components() {
    return Object.fromEntries(this.spec.families[this.graph.family].components.map(c => [c.kind, c]));
  },

  nextId() {
    const used = this.graph.nodes.map(n => parseInt(n.id.slice(1), 10) || 0);
    return "n" + (Math.max(0, ...used) + 1);
  },

  layout(nodes) {
    nodes.forEach((node, i) => {
      node.x = 24 + (i % 5) * 262;
      node.y = 16 + Math.floor(i / 5) * 330;
    });
  },

  newGraph(family, remember = true) {
    const described = this.spec.families[family];
    const nodes = [];
    for (const component of described.components) {
      const template = described.template[component.kind];
      const copies = component.repeated ? (template || [""]) : [template || {}];
      for (const copy of copies) {
        const values = component.repeated ? {[component.keys[0]]: copy} : {...copy};
        nodes.push({id: "n" + (nodes.length + 1), kind: component.kind, values});
      }
    }
    this.layout(nodes);
    const edges = nodes.slice(1).map((node, i) => ({from: nodes[i].id, to: node.id}));
    this.replace({family, nodes, edges, extra: {}}, remember);
    document.getElementById("family").value = family;
  },

  replace(graph, remember = true) {
    if (remember && this.graph) this.remember();
    this.graph = graph;
    this.render();
    this.scheduleCheck();
  },

  snapshot() {
    return JSON.stringify(this.graph);
  },

  remember() {
    this.undoStack.push(this.snapshot());
    if (this.undoStack.length > 200) this.undoStack.shift();
    this.redoStack = [];
  },

  change(apply) {
    this.remember();
    apply();
    this.render();
    this.scheduleCheck();
  },

  undo() {
    if (!this.undoStack.length) return;
    this.redoStack.push(this.snapshot());
    this.graph = JSON.parse(this.undoStack.pop());
    this.editing = null;
    document.getElementById("family").value = this.graph.family;
    this.render();
    this.scheduleCheck();
  },

  redo() {
    if (!this.redoStack.length) return;
    this.undoStack.push(this.snapshot());
    this.graph = JSON.parse(this.redoStack.pop());
    this.editing = null;
    document.getElementById("family").value = this.graph.family;
    this.render();
    this.scheduleCheck();
  },

  // ---- drawing --------------------------------------------------------------------------------

  render() {
    const canvas = document.getElementById("canvas");
    canvas.querySelectorAll(".node").forEach(n => n.remove());
    const components = this.components();
    for (const node of this.graph.nodes) {
      canvas.append(this.drawNode(node, components[node.kind]));
    }
    this.drawPalette();
    this.drawEdges();
    if (this.lastChecked) this.showChecked(this.lastChecked);
  },

  drawPalette() {
    const palette = document.getElementById("palette");
    palette.replaceChildren("add:");
    for (const component of this.spec.families[this.graph.family].components) {
      palette.append(element("button", {class: "add", "data-kind": component.kind,
        title: component.note, onclick: () => this.addNode(component.kind)}, component.title));
    }
  },

  drawNode(node, component) {
    const box = element("div", {class: "node", "data-id": node.id, "data-kind": node.kind});
    box.style.left = node.x + "px";
    box.style.top = node.y + "px";
    if (!component) {
      box.append(element("div", {class: "node-title"}, node.kind), element("div", {class: "node-errors"}));
      return box;
    }
    const title = element("div", {class: "node-title", title: component.note}, component.title,
      element("button", {class: "remove", title: "remove", onclick: () => this.removeNode(node.id)}, "×"));
    title.addEventListener("mousedown", event => this.startDrag(event, node));
    box.append(title);
    if (component.accepts) {
      box.append(element("div", {class: "port in", "data-type": component.accepts,
        title: `input: takes ${component.accepts} (click after an output to connect)`,
        onclick: () => this.clickIn(node.id)}));
    }
    if (component.gives) {
      box.append(element("div", {class: "port out", "data-type": component.gives,
        title: `output: gives ${component.gives} (click, then click an input)`, onclick: () => this.clickOut(node.id)}));
    }
    const types = [component.accepts && `takes ${component.accepts}`, component.gives && `gives ${component.gives}`];
    box.append(element("div", {class: "types"}, types.filter(Boolean).join(" · ")));
    const fields = element("div", {class: "fields"});
    if (!component.keys.length) fields.append(element("div", {class: "note"}, component.note));
    for (const key of component.keys) fields.append(this.drawField(node, key, component.repeated));
    box.append(fields, element("div", {class: "node-errors"}));
    return box;
  },

  drawField(node, key, repeated) {
    const setting = this.spec.settings[key];
    const value = node.values[key];
    let input;
    if (setting.input === "switch") {
      input = element("select", {},
        element("option", {value: ""}, `default (${setting.default})`),
        element("option", {value: "true"}, "on"), element("option", {value: "false"}, "off"));
      input.value = value === true ? "true" : value === false ? "false" : "";
    } else if (setting.input === "choice") {
      input = element("select", {}, element("option", {value: ""}, `default (${setting.default})`),
        ...setting.options.map(option => element("option", {value: option}, option)));
      input.value = value || "";
    } else {
      input = element("input", {placeholder: repeated ? "e.g. d4x16n2" : setting.default, size: 10});
      input.value = value === undefined || value === null ? "" : value;
    }
    input.setAttribute("data-key", key);
    const read = () => {
      if (setting.input === "switch") return input.value === "" ? null : input.value === "true";
      return input.value;
    };
    const edited = () => {
      const mark = node.id + "/" + key;
      if (this.editing !== mark) { this.remember(); this.editing = mark; }
      const found = this.graph.nodes.find(n => n.id === node.id);
      found.values[key] = read();
      this.scheduleCheck();
    };
    input.addEventListener("input", edited);
    input.addEventListener("change", edited);
    input.addEventListener("blur", () => { this.editing = null; });
    return element("label", {class: "field", title: `${setting.flag}: ${setting.help}`},
      element("span", {}, repeated ? "spec" : key), input);
  },

  portPoint(id, side) {
    const box = document.querySelector(`.node[data-id="${id}"] .port.${side}`);
    if (!box) return null;
    const canvas = document.getElementById("canvas").getBoundingClientRect();
    const rect = box.getBoundingClientRect();
    const scroll = document.getElementById("canvas");
    return {x: rect.left - canvas.left + rect.width / 2 + scroll.scrollLeft,
      y: rect.top - canvas.top + rect.height / 2 + scroll.scrollTop};
  },

  // A connection's path: a curve to an input on the right; to one on the left (the chain wrapping to the next
  // row), out to the right, along the lane just above the target's row, and down into its input.
  route(a, b, target) {
    if (b.x > a.x + 30) {
      const bend = Math.max(40, (b.x - a.x) / 2);
      return `M${a.x},${a.y} C${a.x + bend},${a.y} ${b.x - bend},${b.y} ${b.x},${b.y}`;
    }
    const right = a.x + 16, left = b.x - 16, lane = Math.min(target.y - 12, b.y - 24);
    return `M${a.x},${a.y} H${right} V${lane} H${left} V${b.y} H${b.x}`;
  },

  drawEdges() {
    const svg = document.getElementById("edges");
    svg.replaceChildren();
    for (const edge of this.graph.edges) {
      const a = this.portPoint(edge.from, "out"), b = this.portPoint(edge.to, "in");
      if (!a || !b) continue;
      const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
      path.setAttribute("d", this.route(a, b, this.graph.nodes.find(n => n.id === edge.to)));
      path.setAttribute("class", "edge");
      path.setAttribute("data-from", edge.from);
      path.setAttribute("data-to", edge.to);
      path.addEventListener("click", () => this.change(() => {
        this.graph.edges = this.graph.edges.filter(e => e !== edge);
      }));
      path.append(document.createElementNS("http://www.w3.org/2000/svg", "title"));
      path.firstChild.textContent = "click to remove this connection";
      svg.append(path);
    }
  },

  // ---- editing the graph ----------------------------------------------------------------------

  addNode(kind) {
    const component = this.components()[kind];
    this.change(() => {
      const values = component.repeated ? {[component.keys[0]]: ""} : {};
      const lowest = Math.max(0, ...this.graph.nodes.map(n => n.y));
      this.graph.nodes.push({id: this.nextId(), kind, values, x: 24, y: lowest + 330});
    });
  },

  removeNode(id) {
    this.change(() => {
      this.graph.nodes = this.graph.nodes.filter(n => n.id !== id);
      this.graph.edges = this.graph.edges.filter(e => e.from !== id && e.to !== id);
    });
  },

  clickOut(id) {
    this.pendingOut = id;
    document.querySelectorAll(".port.out").forEach(p => p.classList.remove("pending"));
    document.querySelector(`.node[data-id="${id}"] .port.out`).classList.add("pending");
    say("now click the input of the component to connect it to", false, "canvas");
  },

  clickIn(id) {
    const from = this.pendingOut;
    this.pendingOut = null;
    document.querySelectorAll(".port.out").forEach(p => p.classList.remove("pending"));
    if (!from || from === id) return;
    const components = this.components();
    const source = this.graph.nodes.find(n => n.id === from), target = this.graph.nodes.find(n => n.id === id);
    const gives = components[source.kind].gives, accepts = components[target.kind].accepts;
    if (gives !== accepts) {
      say(`cannot connect: the ${target.kind} takes ${accepts}, but the ${source.kind} gives ${gives}`, true, "canvas");
      const box = document.querySelector(`.node[data-id="${id}"]`);
      box.classList.add("refused");
      setTimeout(() => box.classList.remove("refused"), 1200);
      return;
    }
    this.change(() => {
      // one chain: the new connection replaces the source's output and the target's input
      this.graph.edges = this.graph.edges.filter(e => e.from !== from && e.to !== id);
      this.graph.edges.push({from, to: id});
    });
    say(`connected the ${source.kind} to the ${target.kind}`, false, "canvas");
  },

  startDrag(event, node) {
    if (event.target.tagName === "BUTTON") return;
    event.preventDefault();
    const start = {x: event.clientX, y: event.clientY, nodeX: node.x, nodeY: node.y};
    const box = document.querySelector(`.node[data-id="${node.id}"]`);
    let moved = false;
    const move = e => {
      if (!moved) { this.remember(); moved = true; }
      node.x = Math.max(0, start.nodeX + e.clientX - start.x);
      node.y = Math.max(0, start.nodeY + e.clientY - start.y);
      const live = this.graph.nodes.find(n => n.id === node.id);
      live.x = node.x; live.y = node.y;
      box.style.left = node.x + "px";
      box.style.top = node.y + "px";
      this.drawEdges();
    };
    const up = () => {
      document.removeEventListener("mousemove", move);
      document.removeEventListener("mouseup", up);
    };
    document.addEventListener("mousemove", move);
    document.addEventListener("mouseup", up);
  },

  // ---- the server's checks --------------------------------------------------------------------

  forServer() {
    const {family, nodes, edges, extra} = this.graph;
    return {family, extra, edges, nodes: nodes.map(({id, kind, values}) => ({id, kind, values}))};
  },

  scheduleCheck() { // after every edit of the graph: a message about the graph as it was is stale now
    unsay("canvas");
    clearTimeout(this.checkTimer);
    this.checkTimer = setTimeout(() => this.check(), 150);
  },

  async check() {
    const serial = ++this.checkSerial;
    try {
      const checked = await api("/api/check", {body: this.forServer()});
      if (serial === this.checkSerial) this.showChecked(checked);
    } catch (err) {
      say(err.message, true, "canvas");
    }
  },

  showChecked(checked) {
    this.lastChecked = checked;
    document.querySelectorAll(".node").forEach(box => {
      box.classList.remove("has-error");
      box.querySelector(".node-errors").replaceChildren();
    });
    const general = document.getElementById("graph-errors");
    general.replaceChildren();
    for (const error of checked.errors) {
      const box = error.node && document.querySelector(`.node[data-id="${error.node}"]`);
      if (box) {
        box.classList.add("has-error");
        box.querySelector(".node-errors").append(element("div", {class: "node-error"}, error.message));
      } else {
        general.append(element("div", {class: "graph-error"}, error.message));
      }
    }
    const estimates = document.getElementById("estimates");
    if (checked.ok) {
      const speed = Math.round(checked.tokens_per_second).toLocaleString();
      estimates.replaceChildren(
        element("span", {id: "parameters"}, `${checked.parameters.toLocaleString()} parameters`),
        element("span", {id: "memory"}, `memory ≈ ${checked.memory} per training step`),
        element("span", {id: "speed", title: `estimated from ${checked.speed_basis}`}, `≈ ${speed} tokens/s here`),
        element("span", {class: "description"}, checked.description));
      estimates.className = "";
    } else {
      estimates.className = "stale";
    }
  },

  // ---- saving, loading, training ----------------------------------------------------------------

  runName() {
    return document.getElementById("run-name").value.trim();
  },

  // Save (and with `andStart`, start) under the run name, asking first where the name is taken.
  async save(andStart = false) {
    const graph = this.forServer();
    const chosen = await saveOrAsk(this.runName(), async (name, overwrite) => {
      const saved = await api("/api/save", {body: {name, graph, overwrite}});
      return andStart ? {saved, run: await api(`/api/runs/${encodeURIComponent(name)}/start`, {body: {overwrite}})}
        : {saved};
    });
    if (chosen === null) { say("not saved: the name is taken (nothing replaced)", false, "canvas"); return null; }
    document.getElementById("run-name").value = chosen.name;
    const {saved, run} = chosen.result;
    document.getElementById("saved-yaml").textContent =
      `saved to ${saved.file}; the same run from a shell:\n  ${saved.command}\n\n${saved.yaml}`;
    say(`saved run ${saved.saved} to ${saved.file}`, false, "canvas");
    await this.refreshRunList();
    return run;
  },

  async start() {
    const run = await this.save(true);
    if (!run) return null;
    say(`run ${run.name} is training (process ${run.pid}); watch it in Watch`, false, `run:${run.name}`);
    Watch.follow(run.checkpoint, true);
    return run;
  },

  async load(name) {
    const graph = await api(`/api/config?name=${encodeURIComponent(name)}`);
    this.layout(graph.nodes);
    document.getElementById("run-name").value = graph.name;
    delete graph.name;
    this.replace(graph);
    document.getElementById("family").value = graph.family;
    say(`loaded run ${name} from studio.yaml`, false, "canvas");
  },

  async refreshRunList() {
    const select = document.getElementById("load-run");
    try {
      const {runs} = await api("/api/configs");
      select.replaceChildren(element("option", {value: ""}, "(a run of studio.yaml)"),
        ...runs.map(name => element("option", {value: name}, name)));
    } catch (err) {
      say(err.message, true);
    }
  },
};
