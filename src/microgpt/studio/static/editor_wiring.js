// A wire being made in the Compose editor, by the pointer (dragged from a port) or by the keyboard (Enter on
// a port, Tab or the arrows to the next port that fits, Enter to connect, Escape to stop). Every port it
// could go to is marked while it is made, and a port that refuses it says why.
"use strict";

const Wiring = {
  start: null,  // {ref, side, type, many, node} of the port it starts from

  begin(port) {
    this.start = portInfo(port);
    document.getElementById("editor-canvas").classList.add("wiring");
    for (const other of document.querySelectorAll("#editor-nodes .port")) {
      const refused = this.refusal(other);
      other.classList.toggle("accepts", refused === null);
      other.classList.toggle("refuses", refused !== null && other.dataset.side !== this.start.side);
    }
    document.querySelector(`#editor-nodes .port[data-ref="${cssEscape(this.start.ref)}"][data-side="${this.start.side}"]`)
      ?.classList.add("wire-start");
  },

  // Why the wire being made cannot end at `port`, or null.
  refusal(port) {
    const end = portInfo(port);
    if (end.side === this.start.side) return this.start.side === "out" ? "an output goes to an input" : "an input takes an output";
    if (end.node !== null && end.node === this.start.node) return "a node cannot feed itself";
    const [from, to] = this.start.side === "out" ? [this.start, end] : [end, this.start];
    return Ports.refusal(from.kinds, to.kinds);
  },

  // Connect to `port`; returns why not (and makes nothing) or null.
  finish(port) {
    const refused = this.refusal(port);
    const end = portInfo(port);
    const [from, to] = this.start.side === "out" ? [this.start, end] : [end, this.start];
    this.cancel();
    if (refused) return refused;
    return Edits.connect(from.ref, to.ref, from.kinds, to.kinds, to.many);
  },

  cancel() {
    this.start = null;
    document.getElementById("editor-canvas").classList.remove("wiring");
    document.querySelectorAll("#editor-nodes .port").forEach(p => p.classList.remove("accepts", "refuses", "wire-start"));
    document.getElementById("editor-drag-wire").setAttribute("d", "");
    hideHint();
  },

  // The ports this wire may end at, in the order the keyboard visits them.
  candidates() {
    return [...document.querySelectorAll("#editor-nodes .port.accepts")];
  },
};

function portInfo(port) {
  const ref = port.dataset.ref;
  return {ref, side: port.dataset.side, type: port.dataset.type, kinds: port.dataset.kinds.split(","),
    many: port.dataset.many === "yes",
    node: splitRef(ref).node};
}

function cssEscape(text) {
  return window.CSS && CSS.escape ? CSS.escape(text) : text.replace(/["\\]/g, "\\$&");
}

// A one-line hint beside the pointer (why a wire is refused, what a port takes).
function showHint(text, clientX, clientY, refused = false) {
  const hint = document.getElementById("editor-hint");
  hint.textContent = text;
  hint.className = refused ? "refused" : "";
  const area = document.getElementById("editor-area").getBoundingClientRect();
  hint.style.left = `${clientX - area.left + 14}px`;
  hint.style.top = `${clientY - area.top + 14}px`;
  hint.hidden = false;
}

function hideHint() {
  document.getElementById("editor-hint").hidden = true;
}
