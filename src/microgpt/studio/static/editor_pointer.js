// The Compose editor under the pointer: drag a port to another to wire them, click and shift-click nodes to
// select, drag them to move the selection, drag empty canvas (or the middle button, or space-drag) to pan,
// shift- or Ctrl-drag it for a selection box, wheel to zoom at the pointer, double-click the canvas for the
// add menu and a group to open it, right-click for the context menu (editor_menu.js). A node, port or wire
// that takes the focus off view is brought into view.
"use strict";

const DOUBLE_CLICK_MS = 500;

const Pointer = {
  spaceHeld: false,
  lastDown: {id: null, time: 0}, // a second press on a group node soon after the first opens it (the node
                                 // may be drawn anew between the presses, so no dblclick reaches it)

  // `area` is the visible box of the canvas; what lies over it (breadcrumbs, minimap, add menu) is not canvas.
  init(area) {
    const onCanvas = handler => event => {
      if (!event.target.closest("#breadcrumbs, #minimap-box, #add-menu, #context-menu, #rename-field")) handler(event);
    };
    area.addEventListener("pointerdown", onCanvas(event => this.down(event)));
    area.addEventListener("wheel", onCanvas(event => {
      event.preventDefault();
      EditorView.zoomAt(Math.exp(-event.deltaY * 0.0015), event.clientX, event.clientY);
    }), {passive: false});
    area.addEventListener("dblclick", onCanvas(event => {
      if (!event.target.closest(".node, .wire")) AddMenu.open(event.clientX, event.clientY);
    }));
    area.addEventListener("contextmenu", event => {
      event.preventDefault();
      if (!event.target.closest("#breadcrumbs, #minimap-box, #add-menu, #context-menu, #rename-field")) {
        ContextMenu.open(event.clientX, event.clientY, event.target);
      }
    });
    area.addEventListener("pointerleave", () => { Keys.pointer = null; });
    area.addEventListener("scroll", () => { area.scrollTop = 0; area.scrollLeft = 0; }); // focus never scrolls the box
    area.addEventListener("click", onCanvas(event => this.clickButton(event)));
    area.addEventListener("pointermove", event => this.hover(event));
    area.addEventListener("focusin", event => { // an error's message beside what has the focus, as on hover
      bringIntoView(event.target);
      const error = event.target.closest && event.target.closest("[data-error]");
      if (!error || Wiring.start) return;
      const box = error.getBoundingClientRect();
      showHint(error.dataset.error, box.right, box.top, true);
    });
    area.addEventListener("focusout", () => { if (!Wiring.start) hideHint(); });
    document.addEventListener("keydown", event => {
      if (event.key === " " && !isTyping(event.target) && composeActive() && !pressable(event.target)) {
        this.spaceHeld = true;
        event.preventDefault();
      }
    });
    document.addEventListener("keyup", event => { if (event.key === " ") this.spaceHeld = false; });
  },

  down(event) {
    AddMenu.close();
    ContextMenu.close(false);
    if (isTyping(document.activeElement)) document.activeElement.blur(); // the keys are the canvas's again
    const port = event.target.closest(".port");
    const button = event.target.closest(".node-button");
    const nodeBox = event.target.closest(".node:not(.wall)");
    const wire = event.target.closest(".wire");
    if (event.button === 1 || (event.button === 0 && this.spaceHeld)) return this.drag(event, this.pan());
    if (event.button !== 0) return;
    if (port) return this.drag(event, this.wire(port));
    if (button) return;
    if (nodeBox) {
      const again = this.lastDown.id === nodeBox.dataset.id && event.timeStamp - this.lastDown.time < DOUBLE_CLICK_MS;
      this.lastDown = {id: nodeBox.dataset.id, time: event.timeStamp};
      if (again && nodeBox.classList.contains("group-node")) return Groups.open(nodeBox.dataset.id);
      nodeBox.focus({preventScroll: true});
      return this.drag(event, this.move(nodeBox.dataset.id, event.shiftKey));
    }
    if (wire) { event.preventDefault(); wire.focus(); return; }
    if (event.shiftKey || event.ctrlKey || event.metaKey) return this.drag(event, this.box(event));
    return this.drag(event, this.pan(true));
  },

  // Follow the pointer until it is released: `handler` has move(event, dx, dy) and up(event, moved).
  drag(event, handler) {
    event.preventDefault();
    const start = {x: event.clientX, y: event.clientY};
    let moved = false;
    const move = e => {
      if (Math.abs(e.clientX - start.x) + Math.abs(e.clientY - start.y) > 2) moved = true;
      handler.move(e, e.clientX - start.x, e.clientY - start.y);
    };
    const up = e => {
      document.removeEventListener("pointermove", move);
      document.removeEventListener("pointerup", up);
      handler.up(e, moved);
    };
    document.addEventListener("pointermove", move);
    document.addEventListener("pointerup", up);
  },

  pan(clearsSelection = false) {
    const from = {...EditorView.transform};
    return {
      move: (e, dx, dy) => {
        EditorView.transform.x = from.x + dx;
        EditorView.transform.y = from.y + dy;
        EditorView.apply();
      },
      up: (e, moved) => { if (!moved && clearsSelection) Selection.set([]); },
    };
  },

  wire(port) {
    Wiring.begin(port);
    const start = EditorRender.portPoint(port.dataset.ref, port.dataset.side);
    const line = document.getElementById("editor-drag-wire");
    return {
      move: e => {
        const at = EditorView.toWorld(e.clientX, e.clientY);
        line.setAttribute("d", Wiring.start.side === "out" ? curve(start, at) : curve(at, start));
        const over = document.elementFromPoint(e.clientX, e.clientY)?.closest(".port");
        if (over && over !== port) {
          const refused = Wiring.refusal(over);
          showHint(refused || `connect to ${over.dataset.ref} (${over.dataset.type || "any"})`, e.clientX, e.clientY, Boolean(refused));
        } else hideHint();
      },
      up: e => {
        const over = document.elementFromPoint(e.clientX, e.clientY)?.closest(".port");
        if (!over || over === port) return Wiring.cancel();
        const refused = Wiring.finish(over);
        if (refused) say(`cannot wire: ${refused}`, true, "canvas");
      },
    };
  },

  move(id, shift) {
    if (shift) Selection.toggle(id);
    else if (!EditorView.selection.has(id)) Selection.set([id]);
    const ids = [...EditorView.selection];
    const bodyName = EditorView.bodyName();
    const from = Object.fromEntries(ids.map(n => [n, [...(EditorModel.position(bodyName, n) || [0, 0])]]));
    const k = () => EditorView.transform.k;
    return {
      move: (e, dx, dy) => {
        for (const n of ids) {
          EditorModel.draft.layout.positions[`${bodyName}/${n}`] = [from[n][0] + dx / k(), from[n][1] + dy / k()];
        }
        EditorRender.moved(ids);
      },
      up: (e, moved) => {
        if (!moved) return;
        const to = Object.fromEntries(ids.map(n => [n, EditorModel.position(bodyName, n).map(Math.round)]));
        for (const n of ids) EditorModel.draft.layout.positions[`${bodyName}/${n}`] = from[n];
        Edits.moveTo(to);
      },
    };
  },

  // A rubber band: the nodes it touches are added to the selection.
  box(event) {
    const origin = EditorView.toWorld(event.clientX, event.clientY);
    const band = document.getElementById("editor-band");
    const keep = [...EditorView.selection];
    let rect = null;
    return {
      move: e => {
        const at = EditorView.toWorld(e.clientX, e.clientY);
        rect = {x: Math.min(origin.x, at.x), y: Math.min(origin.y, at.y), width: Math.abs(at.x - origin.x),
          height: Math.abs(at.y - origin.y)};
        for (const [key, value] of Object.entries(rect)) band.setAttribute(key, value);
        band.style.display = "";
      },
      up: () => {
        band.style.display = "none";
        if (!rect) return;
        const hit = [...EditorRender.geometry.entries()].filter(([id, s]) => !id.startsWith("@")
          && s.x < rect.x + rect.width && s.x + s.width > rect.x && s.y < rect.y + rect.height && s.y + s.height > rect.y)
          .map(([id]) => id);
        Selection.set([...keep, ...hit]);
      },
    };
  },

  clickButton(event) {
    const button = event.target.closest(".node-button");
    if (!button) return;
    const id = button.closest(".node").dataset.id;
    if (button.classList.contains("collapse")) Edits.toggleCollapsed(id);
    if (button.classList.contains("open")) Groups.open(id);
  },

  hover(event) {
    Keys.pointer = {x: event.clientX, y: event.clientY};
    if (Wiring.start) return;
    const error = event.target.closest("[data-error]");
    if (error) showHint(error.dataset.error, event.clientX, event.clientY, true);
    else hideHint();
  },
};

// The selected nodes of the open body, shown as such and in the inspector.
const Selection = {
  set(ids) {
    EditorView.selection = new Set(ids);
    this.show();
  },

  toggle(id) {
    if (EditorView.selection.has(id)) EditorView.selection.delete(id); else EditorView.selection.add(id);
    this.show();
  },

  show() {
    document.querySelectorAll("#editor-nodes .node").forEach(g => g.classList.toggle("selected",
      EditorView.selection.has(g.dataset.id)));
    Inspector.drawNode();
  },
};

function isTyping(target) {
  return target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
}

// What Space presses (a button, a palette entry, a tab...): Space there is no pan.
function pressable(target) {
  return Boolean(target && target.closest && target.closest("button, a, summary, [role=button], [role=menuitem], [role=tab], [role=option]"));
}

// Pan so that the node (or the node of the port, or the wire) that has the focus is in view, whole where it
// fits, when any part of it is out of view.
function bringIntoView(target) {
  const item = target.closest && target.closest("#editor-nodes .node, #editor-wires .wire");
  if (!item) return;
  const area = EditorView.size();
  const box = item.getBoundingClientRect(), margin = 24;
  if (box.left >= area.left && box.top >= area.top && box.right <= area.left + area.width && box.bottom <= area.top + area.height) return;
  const dx = box.width + 2 * margin > area.width ? area.left + margin - box.left
    : box.left < area.left + margin ? area.left + margin - box.left
      : box.right > area.left + area.width - margin ? area.left + area.width - margin - box.right : 0;
  const dy = box.height + 2 * margin > area.height ? area.top + margin - box.top
    : box.top < area.top + margin ? area.top + margin - box.top
      : box.bottom > area.top + area.height - margin ? area.top + area.height - margin - box.bottom : 0;
  EditorView.panBy(dx, dy);
}

function composeActive() {
  return document.getElementById("compose").classList.contains("active");
}
