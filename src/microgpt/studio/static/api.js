// The studio's calls to its server: JSON in and out, the token with each, one line for each failure.
"use strict";

const studioToken = new URLSearchParams(location.search).get("token") || "";

async function api(path, options = {}) {
  const init = {method: options.method || "GET", headers: {"X-Studio-Token": studioToken}};
  if (options.body !== undefined) {
    init.method = options.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(path, init);
  let data;
  try {
    data = await response.json();
  } catch (err) {
    throw new Error(`${path}: the studio answered ${response.status} without JSON`);
  }
  if (!response.ok) {
    const error = new Error(data.error || `${path}: status ${response.status}`);
    error.details = data;
    throw error;
  }
  return data;
}

function say(text, isError = false) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = isError ? "error" : "";
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
