// The studio's calls to its server: JSON in and out, or a stream of server-sent events, the token with each,
// one line for each failure (a refusal's own words, from the response that refused); and the header's status
// line, each message tagged with what it is about, so that it is cleared or updated when that changes.
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
