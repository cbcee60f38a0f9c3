// The studio's calls to its server: JSON in and out, or a stream of server-sent events, the token with each,
// one line for each failure (a refusal's own words, from the response that refused); and the header's status
// line, each message tagged with what it is about, so that it is cleared or updated when that changes; and the
// builders of the page's HTML and SVG elements.
"use strict";

// From the URL the studio printed, kept in this origin's localStorage (kept apart by port, unlike a cookie)
// so that a tab reopened without ?token= works; the API takes it only as a header or in the query.
const studioToken = (() => {
  const given = new URLSearchParams(location.search).get("token");
  try {
    if (given) localStorage.setItem("microgpt-studio-token", given);
    return given || localStorage.getItem("microgpt-studio-token") || "";
  } catch (err) {  // storage turned off: the URL's token only
    return given || "";
  }
})();

// The studio's one tokens/s, said once: Watch's rows, the tokens/s chart and Compare show it for a run (the
// server's metrics.add_speed), and Compose estimates it for a draft; each shows this where it shows the figure.
const TOKENS_PER_S = "tokens/s: tokens trained per second since the run began (steps × batch × context over " +
  "its wall-clock time, validation and saving included)";

async function api(path, options = {}) {
  const init = {method: options.method || "GET", headers: {"X-Studio-Token": studioToken}};
  if (options.body !== undefined) {
    init.method = options.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await refusal(path, response);
  try {
    return await response.json();
  } catch (err) {
    throw new Error(`${path}: the studio answered ${response.status} without JSON`);
  }
}

async function refusal(path, response) {
  try {
    const data = await response.json();
    const error = new Error(data.error || `${path}: status ${response.status}`);
    error.details = data;
    return error;
  } catch (err) {
    return new Error(`${path}: the studio answered ${response.status} without JSON`);
  }
}

// Each server-sent event's JSON to onMessage until the stream ends; a refused request throws its error.
async function streamEvents(path, onMessage, signal) {
  const response = await fetch(path, {headers: {"X-Studio-Token": studioToken}, signal});
  if (!response.ok) throw await refusal(path, response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const data = buffer.slice(0, end).split("\n").filter(line => line.startsWith("data: "))
          .map(line => line.slice(6)).join("\n");
        buffer = buffer.slice(end + 2);
        if (data) onMessage(JSON.parse(data));
      }
    }
  } finally {
    reader.cancel().catch(() => {}); // onMessage threw, or the stream ended: let it go
  }
}

// The status line: `about` names what the message describes ("canvas", "run:NAME", "sample"...).
function say(text, isError = false, about = "") {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = isError ? "error" : "";
  box.dataset.about = about;
}

function saying(about) {
  return document.getElementById("message").dataset.about === about;
}

// Clear the status line if it is about what has just changed.
function unsay(about) {
  if (saying(about)) say("");
}

function element(tag, attributes = {}, ...children) {
  const made = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") made.className = value;
    else if (key.startsWith("on")) made.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) made.setAttribute(key, value);
  }
  for (const child of children) made.append(child);
  return made;
}

// An SVG element (the node editor's and the charts'), with its attributes and, optionally, its text.
function svgElement(tag, attributes = {}, text = null) {
  const made = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) made.setAttribute(key, value);
  }
  if (text !== null) made.textContent = text;
  return made;
}

// ---- names that are taken: nothing is replaced without a confirmation --------------------------------------

// The first free run name (run1, run2, ...: no run in studio.yaml, no checkpoint): the page's default.
async function freeRunName() {
  return (await api("/api/free-name")).name;
}

// send(name, overwrite) makes the request that saves (or saves and starts) run `name` (or another `what`, such
// as a block of the library). Where the server
// answers 409 {"exists": true, "suggested"}, a dialog asks: save under another name (the suggested one, the
// default button), replace, or cancel; the request is then sent again as chosen. Resolves to {name, result,
// replaced} (the name used; replaced: true where the user chose to replace), or null when cancelled.
async function saveOrAsk(name, send, what = "run") {
  try {
    return {name, result: await send(name, false), replaced: false};
  } catch (err) {
    if (!(err.details && err.details.exists)) throw err;
    const choice = await askName(err.message, name, err.details.suggested, what);
    if (choice === null) return null;
    if (choice.replace) return {name, result: await send(name, true), replaced: true};
    return saveOrAsk(choice.name, send, what);  // the name typed may be taken too: ask again
  }
}

// The dialog: {name} to save under another name, {replace: true}, or null (cancelled, Escape).
function askName(text, name, suggested, what = "run") {
  document.getElementById("name-dialog")?.remove();
  const field = element("input", {id: "name-dialog-name", value: suggested, size: 24, "aria-label": `new ${what} name`});
  const saveAs = element("button", {id: "name-dialog-save-as", type: "submit", value: "save-as"}, `Save as ${suggested}`);
  const replace = element("button", {id: "name-dialog-replace", type: "submit", value: "replace"}, `Replace ${name}`);
  const cancel = element("button", {id: "name-dialog-cancel", type: "submit", value: "cancel"}, "Cancel");
  const form = element("form", {method: "dialog"}, element("p", {id: "name-dialog-text"}, text),
    element("label", {}, "save as ", field), element("div", {class: "dialog-buttons"}, saveAs, replace, cancel));
  const dialog = element("dialog", {id: "name-dialog", "aria-labelledby": "name-dialog-text"}, form);
  field.addEventListener("input", () => { saveAs.textContent = `Save as ${field.value.trim()}`; });
  document.body.append(dialog);
  return new Promise(resolve => {
    dialog.addEventListener("close", () => {
      const kind = dialog.returnValue;
      dialog.remove();
      if (kind === "replace") resolve({replace: true});
      else if (kind === "save-as" && field.value.trim()) resolve({name: field.value.trim()});
      else resolve(null);
    });
    dialog.showModal();
    saveAs.focus();  // the default: a new name; Enter in the field submits it too
  });
}
