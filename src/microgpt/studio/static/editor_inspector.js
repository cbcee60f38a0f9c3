// The Compose editor's inspector, on the right: the family's shape settings (in family mode) or the line that
// says the draft is a free graph, and its dims; the selected node's params (and a group's repeat); the run's data and
// training settings, described as /api/graph/settings describes them. Every field's typing is one undoable step, and
// a problem the check finds with a setting or the node shows under its field.
"use strict";

const Inspector = {
  drawnKeys: {}, // section id -> the setting keys its fields are for

  // The fields are made again only where their keys change (another family); otherwise each shows the draft's
  // value, except the one being typed in.
  draw() {
    const draft = EditorModel.draft;
    this.showMode();
    this.fields("inspector-family", draft.mode === "family" ? Family.keysOf("shape", draft.family) : []);
    this.fields("inspector-data", Family.keysOf("data"));
    this.fields("inspector-training", Family.keysOf("training"));
    const dims = Object.entries(draft.document.dims || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    const dimsField = document.querySelector("#inspector-dims input");
    if (!dimsField) {
      document.getElementById("inspector-dims").replaceChildren(textField("dims", "dims", dims, "d=64, heads=4",
        text => Edits.setDims(text), {"data-dims": "yes", title: "the document's sizes by name: name=size, ..."}));
    } else if (document.activeElement !== dimsField) dimsField.value = dims;
    this.drawNode();
  },

  fields(id, keys) {
    const box = document.getElementById(id);
    if (JSON.stringify(this.drawnKeys[id]) !== JSON.stringify(keys)) {
      box.replaceChildren(...keys.map(key => settingField(key)));
      this.drawnKeys[id] = keys;
      return;
    }
    for (const input of box.querySelectorAll("[data-setting]")) {
      if (input !== document.activeElement) showSetting(input, EditorModel.draft.settings[input.dataset.setting]);
    }
  },

  // The line on what the draft is, and the family's settings only while it is a family's.
  showMode() {
    const draft = EditorModel.draft;
    const line = document.getElementById("mode-line");
    line.textContent = draft.mode === "graph" && draft.edited ? EDITED_LINE : draft.mode === "graph"
      ? "a graph document: it trains as drawn" : `the ${Family.spec.families[draft.family].label} family: its shape settings`;
    line.className = draft.mode === "graph" && draft.edited ? "edited" : "";
    document.getElementById("inspector-family-section").hidden = draft.mode !== "family";
    document.getElementById("inspector-dims-section").hidden = draft.mode === "family";
  },

  drawNode() {
    const box = document.getElementById("inspector-node");
    if (box.contains(document.activeElement) && document.activeElement.tagName === "INPUT") {
      return this.showErrors(EditorCheck.errors()); // its params are being typed: keep the field
    }
    const ids = [...EditorView.selection];
    const node = ids.length === 1 ? EditorModel.node(EditorView.bodyName(), ids[0]) : null;
    if (!node) {
      box.replaceChildren(element("div", {class: "note"}, ids.length ? `${ids.length} nodes selected` : "select a node to see its params"));
      return;
    }
    const rows = [element("div", {class: "node-heading"}, `${node.id}: ${node.op !== undefined ? `op ${node.op}` : `group ${node.group}`}`)];
    const doc = node.op !== undefined ? (Ports.ops[node.op] || {}).doc : (Ports.group(EditorModel.draft.document, node.group) || {}).description;
    if (doc) rows.push(element("div", {class: "note"}, doc));
    rows.push(element("div", {class: "node-costs note"}));
    for (const param of paramsOf(node)) {
      const value = (node.params || {})[param.name];
      if (param.choices) { rows.push(choiceField(node.id, param, value)); continue; }
      rows.push(textField(`param-${param.name}`, param.name, value === undefined ? "" : JSON.stringify(value).replace(/^"(.*)"$/, "$1"),
        param.default === null || param.default === undefined ? (node.group !== undefined ? "from where it is used" : "required")
          : String(param.default),
        text => Edits.setParam(node.id, param.name, text), {"data-param": param.name}));
    }
    if (node.group !== undefined) {
      rows.push(textField("repeat", "repeat", node.repeat === undefined ? "" : String(node.repeat), "1",
        text => Edits.setRepeat(node.id, text), {"data-param": "repeat"}));
    }
    rows.push(element("div", {class: "node-errors"}));
    box.replaceChildren(...rows);
    this.showErrors(EditorCheck.errors());
  },

  showErrors(errors) {
    document.querySelectorAll("#inspector .field-error").forEach(e => e.remove());
    document.querySelectorAll("#inspector .has-error").forEach(e => e.classList.remove("has-error"));
    for (const error of errors) {
      const field = error.setting && document.querySelector(`#inspector [data-setting="${cssEscape(error.setting)}"]`);
      if (field) {
        field.closest(".field").classList.add("has-error");
        field.closest(".field").after(element("div", {class: "field-error"}, error.message));
      }
    }
    const ids = [...EditorView.selection];
    const box = document.querySelector("#inspector-node .node-errors");
    if (box && ids.length === 1) {
      const key = `${EditorView.bodyName()}/${ids[0]}`;
      const mine = errors.filter(e => (e.at || []).includes(key) || (!e.at && pathSteps(e.path || []).some(s => `${s.body}/${s.node}` === key)));
      box.replaceChildren(...mine.map(e => element("div", {class: "field-error"}, e.message)));
      this.showCosts(key);
    }
  },

  // What the selected node costs, from the last check: its parameters and memory, its share of a step's
  // operations, and the tokens/s it alone would run at (the model's expected tokens/s over that share).
  showCosts(key) {
    const box = document.querySelector("#inspector-node .node-costs");
    const checked = EditorCheck.graph || {};
    const stats = (checked.nodes || {})[key];
    if (!box) return;
    if (!stats) return box.replaceChildren();
    const each = Math.max(1, stats.instances || 1); // a group body's figures sum its instances
    const share = (stats.share || 0) / each;
    const parts = [`${compact(stats.parameters / each)} parameters`, `${bytes(stats.memory_bytes / each)} of a step's memory`,
      `${(100 * share).toFixed(share < 0.1 ? 1 : 0)}% of its operations`];
    if (checked.tokens_per_second && share > 0) parts.push(`alone ≈ ${compact(checked.tokens_per_second / share)} tokens/s`);
    box.textContent = parts.join(" · ") + (each > 1 ? ` (each of ${each} instances)` : "");
  },
};

// The params a node may take: an op's (with defaults), or its group's.
function paramsOf(node) {
  if (node.op !== undefined) return ((Ports.ops[node.op] || {}).params || []);
  const group = Ports.group(EditorModel.draft.document, node.group) || {};
  return Object.entries(group.params || {}).map(([name, value]) => ({name, default: value}));
}

function settingField(key) {
  const setting = Family.spec.settings[key];
  let input;
  if (setting.input === "switch") {
    input = element("select", {}, element("option", {value: ""}, `default (${setting.default})`),
      element("option", {value: "true"}, "on"), element("option", {value: "false"}, "off"));
  } else if (setting.input === "choice") {
    input = element("select", {}, element("option", {value: ""}, `default (${setting.default})`),
      ...setting.options.map(option => element("option", {value: option}, option)));
  } else {
    input = element("input", {placeholder: setting.default, size: 10});
  }
  input.setAttribute("data-setting", key);
  showSetting(input, EditorModel.draft.settings[key]);
  input.setAttribute("id", `setting-${key}`);
  const read = () => setting.input === "switch" ? (input.value === "" ? null : input.value === "true") : input.value;
  const edited = () => Edits.setSetting(key, read());
  input.addEventListener("input", edited);
  input.addEventListener("change", () => { edited(); EditorModel.endMerge(); });
  input.addEventListener("blur", () => EditorModel.endMerge());
  return element("label", {class: "field", title: `${setting.flag}: ${setting.help}`, for: `setting-${key}`},
    element("span", {}, key), input);
}

function showSetting(input, value) {
  if (Family.spec.settings[input.dataset.setting].input === "switch") {
    input.value = value === true ? "true" : value === false ? "false" : "";
  } else input.value = value === undefined || value === null ? "" : value;
}

// A param that takes one of a list of words (or a switch) as a menu: "default (causal)" first, then each
// word; a value of the document's that is no word of the list (an init's number) stays as an entry of its own.
function choiceField(id, param, value) {
  const words = param.choices.map(String);
  const input = element("select", {id: `inspect-param-${param.name}`, "data-param": param.name},
    element("option", {value: ""}, `default (${param.default})`), ...words.map(word => element("option", {value: word}, word)));
  const now = value === undefined ? "" : typeof value === "string" ? value : JSON.stringify(value);
  if (now !== "" && !words.includes(now)) input.append(element("option", {value: now}, now));
  input.value = now;
  const raw = text => text === "" || param.choices.some(c => typeof c !== "string") || /^-?[0-9.e+-]+$/.test(text);
  input.addEventListener("change", () => Edits.setParam(id, param.name, raw(input.value) ? input.value : JSON.stringify(input.value)));
  return element("label", {class: "field", for: input.id}, element("span", {}, param.name), input);
}

function textField(id, label, value, placeholder, onEdit, attributes = {}) {
  const input = element("input", {id: `inspect-${id}`, placeholder, size: 10, ...attributes});
  input.value = value;
  input.addEventListener("input", () => onEdit(input.value));
  input.addEventListener("blur", () => EditorModel.endMerge());
  return element("label", {class: "field", for: `inspect-${id}`}, element("span", {}, label), input);
}
