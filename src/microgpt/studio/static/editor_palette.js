// The Compose editor's palette: the primitives and library groups of /api/graph/palette, the document's own
// groups and the workspace's blocks (under "My blocks", editor_blocks.js), searchable; drag one onto the canvas, or click it to add it in the middle of the view. The
// add menu offers the same at the pointer (double-click the canvas), with its own search box. The list is one
// Tab stop: the arrows, Home and End move in it (ArrowDown from the search box enters it), Enter or Space adds.
"use strict";

const Palette = {
  items() {
    const sameAsBlock = (name, group) => {  // a block added from My blocks: listed once, there
      const block = Blocks.find(name);
      return block !== null && JSON.stringify(block.groups[name]) === JSON.stringify(group);
    };
    const own = Object.entries(EditorModel.draft.document.groups || {})
      .filter(([name, group]) => !(name in Ports.library) && !sameAsBlock(name, group))
      .map(([name, group]) => ({kind: "group", name, doc: group.description || "a group of this document"}));
    const blocks = Blocks.list.map(block => ({kind: "block", name: block.name,
      doc: block.description || "a block of this workspace's library (blocks/)"}));
    return [...Ports.palette.ops.map(op => ({kind: "op", name: op.name, doc: op.doc, params: op.params})),
      ...Ports.palette.groups.map(group => ({kind: "group", name: group.name, doc: group.description})), ...own, ...blocks];
  },

  matching(query) {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    const found = this.items().filter(item => words.every(w => `${item.name} ${item.kind} ${item.doc || ""}`.toLowerCase().includes(w)));
    const whole = words.join(" ");  // the name itself first, then names that start with it, then the rest
    const rank = item => item.name.toLowerCase() === whole ? 0 : item.name.toLowerCase().startsWith(whole) ? 1
      : item.name.toLowerCase().includes(whole) ? 2 : 3;
    return whole ? found.map((item, i) => [rank(item), i, item]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map(r => r[2]) : found;
  },

  current: null, // the name of the entry that takes the Tab stop

  init() {
    const search = document.getElementById("palette-search");
    search.addEventListener("input", () => this.draw());
    search.addEventListener("keydown", event => {
      if (event.key !== "ArrowDown") return;
      event.preventDefault();
      document.querySelector("#palette-list .palette-item[tabindex='0']")?.focus();
    });
    document.getElementById("palette-list").addEventListener("keydown", event => this.key(event));
  },

  key(event) {
    const entries = [...document.querySelectorAll("#palette-list .palette-item")];
    const at = entries.indexOf(document.activeElement);
    if (at < 0) return;
    const to = {ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: entries.length - 1}[event.key];
    if (to === undefined) return;
    event.preventDefault();
    if (to < 0) return document.getElementById("palette-search").focus();
    const next = entries[Math.min(to, entries.length - 1)];
    entries.forEach(e => e.setAttribute("tabindex", e === next ? 0 : -1));
    this.current = next.dataset.name;
    next.focus();
  },

  draw() {
    const list = document.getElementById("palette-list");
    const query = document.getElementById("palette-search").value;
    const items = this.matching(query);
    const stop = items.some(item => item.name === this.current) ? this.current : (items[0] || {}).name;
    const entries = items.map(item => {
      const entry = element("li", {class: `palette-item ${item.kind}`, "data-kind": item.kind, "data-name": item.name,
        title: item.doc || "", tabindex: item.name === stop ? 0 : -1, role: "button", "aria-label": `add ${item.kind} ${item.name}`},
      element("span", {class: "item-kind"}, item.kind), item.name);
      entry.addEventListener("pointerdown", event => this.drag(event, item));
      entry.addEventListener("keydown", event => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); addAndShow(item, EditorView.centre()); }
      });
      return entry;
    });
    const isBlock = (_, i) => items[i].kind === "block";
    list.replaceChildren(...entries.filter((e, i) => !isBlock(e, i)), ...blocksSection(entries.filter(isBlock), query));
  },

  // A drag from the palette: dropped on the canvas it adds the node there; a click adds it in view.
  drag(event, item) {
    if (event.button !== 0) return;
    event.preventDefault();
    const ghost = document.getElementById("palette-ghost");
    const start = {x: event.clientX, y: event.clientY};
    let moved = false;
    const move = e => {
      if (Math.abs(e.clientX - start.x) + Math.abs(e.clientY - start.y) > 3) moved = true;
      ghost.textContent = item.name;
      ghost.style.left = `${e.clientX + 6}px`;
      ghost.style.top = `${e.clientY + 6}px`;
      ghost.hidden = !moved;
    };
    const up = e => {
      document.removeEventListener("pointermove", move);
      document.removeEventListener("pointerup", up);
      ghost.hidden = true;
      if (!moved) return addAndShow(item, EditorView.centre());
      const over = document.elementFromPoint(e.clientX, e.clientY);
      if (over && over.closest("#editor-area") && !over.closest("#minimap-box, #add-menu, #breadcrumbs")) addAndShow(item, EditorView.toWorld(e.clientX, e.clientY));
    };
    document.addEventListener("pointermove", move);
    document.addEventListener("pointerup", up);
  },
};

function addAndShow(item, at) {
  const id = Edits.addNode(item, {x: at.x - NODE_W / 2, y: at.y - HEADER});
  if (id) {
    Selection.set([id]);
    say(`added ${item.kind} ${item.name} as ${id}`, false, "canvas");
    refocus(`#editor-nodes .node[data-id="${cssEscape(id)}"]`); // the focus on what was added, not the page
  }
}

const AddMenu = {
  at: null, // where the node goes, in the canvas's coordinates

  open(clientX, clientY) {
    const menu = document.getElementById("add-menu");
    const area = document.getElementById("editor-area").getBoundingClientRect();
    this.at = EditorView.toWorld(clientX, clientY);
    menu.style.left = `${clientX - area.left}px`;
    menu.style.top = `${clientY - area.top}px`;
    menu.hidden = false;
    const search = document.getElementById("add-search");
    search.value = "";
    this.draw();
    search.focus();
  },

  close() {
    document.getElementById("add-menu").hidden = true;
  },

  init() {
    const search = document.getElementById("add-search");
    search.addEventListener("input", () => this.draw());
    search.addEventListener("keydown", event => {
      if (event.key === "Escape") this.close();
      if (event.key === "Enter") {
        const first = Palette.matching(search.value)[0];
        if (first) this.choose(first);
      }
    });
  },

  draw() {
    const list = document.getElementById("add-list");
    list.replaceChildren(...Palette.matching(document.getElementById("add-search").value).slice(0, 40).map(item =>
      element("li", {class: `add-item ${item.kind}`, "data-name": item.name, title: item.doc || "",
        onclick: () => this.choose(item)}, element("span", {class: "item-kind"}, item.kind), item.name)));
  },

  choose(item) {
    this.close();
    addAndShow(item, {x: this.at.x + NODE_W / 2, y: this.at.y + HEADER});
  },
};
