// The Compose editor's context menu (right-click, or the context-menu key / Shift+F10 on what has the focus):
// on a node rename, duplicate, copy, cut, delete, group, and for a group instance open, ungroup, rename the
// group and save it to the workspace's blocks (editor_blocks.js); on a group instance's port rename the port; on a wire
// delete; on empty canvas add, paste here, select all and fit. Commands holds what the menu and the keys
// (editor_keys.js) both do. The menu is a list of buttons: the arrows move in it, Enter or Space presses one,
// Escape closes it and gives the focus back.
"use strict";

const Commands = {
  selected() {
    return [...EditorView.selection];
  },

  deleteSelection() {
    const ids = this.selected();
    Selection.set([]);
    Edits.deleteNodes(ids);
  },

  cut() {
    if (!EditorView.selection.size) return;
    Keys.copy();
    this.deleteSelection();
    say(`cut ${Keys.clipboard.nodes.length} node(s)`, false, "canvas");
  },

  // A copy of the selection a step down and right, the clipboard untouched.
  duplicate() {
    if (!EditorView.selection.size) return;
    const clip = Keys.clipFrom(EditorView.selection);
    const made = Keys.pasteClip(clip, {x: 30, y: 30});
    say(`duplicated as ${made.join(", ")}`, false, "canvas");
  },

  selectAll() {
    Selection.set(EditorModel.body(EditorView.bodyName()).nodes.map(n => n.id));
    say(`selected ${EditorView.selection.size} node(s)`, false, "canvas");
  },

  save() {
    RunIO.save().catch(err => say(err.message, true, "canvas"));
  },
};

const ContextMenu = {
  returnTo: null, // what had the focus before the menu opened

  element() {
    let menu = document.getElementById("context-menu");
    if (!menu) {
      menu = element("div", {id: "context-menu", role: "menu", hidden: ""});
      menu.addEventListener("keydown", event => this.key(event));
      document.getElementById("editor-area").append(menu);
    }
    return menu;
  },

  // The menu for what is at (clientX, clientY): `target` is the element right-clicked (or focused).
  open(clientX, clientY, target) {
    AddMenu.close();
    const nodeBox = target.closest && target.closest("#editor-nodes .node:not(.wall)");
    const wire = target.closest && target.closest("#editor-wires .wire");
    const at = EditorView.toWorld(clientX, clientY);
    let items, title;
    const port = target.closest && target.closest("#editor-nodes .node.group-node .port");
    if (port) {
      const {node: id, port: name} = splitRef(port.dataset.ref);
      title = `${port.dataset.side === "in" ? "input" : "output"} ${name} of ${id}`;
      items = [["Rename port", "", () => Names.editPort(id, port.dataset.side, name)]];
    } else if (nodeBox) {
      const id = nodeBox.dataset.id;
      if (!EditorView.selection.has(id)) Selection.set([id]);
      items = this.nodeItems(id, clientX, clientY);
      title = EditorView.selection.size > 1 ? `${EditorView.selection.size} nodes` : id;
    } else if (wire) {
      const {from, to} = wire.dataset;
      title = `wire ${from} → ${to}`;
      items = [["Delete wire", "Delete", () => Edits.deleteWire(from, to)]];
    } else {
      title = "canvas";
      items = [["Add node…", "double-click", () => AddMenu.open(clientX, clientY)],
        ["Paste here", "Ctrl+V", () => Keys.paste(at), !Keys.clipboard],
        ["Select all", "Ctrl+A", () => Commands.selectAll()],
        ["Fit", "F", () => EditorView.fit()]];
    }
    this.returnTo = document.activeElement;
    const menu = this.element();
    const area = document.getElementById("editor-area").getBoundingClientRect();
    menu.setAttribute("aria-label", `actions: ${title}`);
    menu.replaceChildren(element("div", {class: "menu-title"}, title), ...items.map(([label, keys, run, disabled]) => {
      const button = element("button", {role: "menuitem", type: "button", "data-action": label.toLowerCase().replace(/[^a-z]+/g, "-").replace(/-$/, ""),
        tabindex: -1, onclick: () => { this.close(false); run(); }}, element("span", {}, label), element("kbd", {}, keys));
      if (disabled) button.disabled = true;
      return button;
    }));
    menu.hidden = false;
    const width = menu.offsetWidth, height = menu.offsetHeight;
    menu.style.left = `${Math.min(clientX - area.left, area.width - width - 4)}px`;
    menu.style.top = `${Math.min(clientY - area.top, area.height - height - 4)}px`;
    menu.querySelector("button:not([disabled])")?.focus();
  },

  nodeItems(id, clientX, clientY) {
    const node = EditorModel.node(EditorView.bodyName(), id);
    const many = EditorView.selection.size > 1;
    const items = [];
    if (!many) items.push(["Rename", "F2", () => Names.editNode(id)]);
    if (!many && node.group !== undefined) {
      items.push(["Open", "double-click", () => Groups.open(id)], ["Ungroup", "", () => Groups.ungroup(id)],
        ["Rename group", "", () => Names.editGroup(id)],
        ["Save to my blocks", "", () => Blocks.save(id).catch(err => say(err.message, true, "canvas"))]);
    }
    items.push(["Duplicate", "Ctrl+D", () => Commands.duplicate()], ["Copy", "Ctrl+C", () => Keys.copy()],
      ["Cut", "Ctrl+X", () => Commands.cut()], ["Group", "Ctrl+G", () => Groups.fromSelection()],
      ["Delete", "Delete", () => Commands.deleteSelection()]);
    return items;
  },

  close(giveFocusBack = true) {
    const menu = document.getElementById("context-menu");
    if (!menu || menu.hidden) return false;
    menu.hidden = true;
    if (giveFocusBack && this.returnTo && this.returnTo.isConnected) this.returnTo.focus({preventScroll: true});
    return true;
  },

  key(event) {
    const buttons = [...this.element().querySelectorAll("button:not([disabled])")];
    const at = buttons.indexOf(document.activeElement);
    const step = {ArrowDown: 1, ArrowUp: -1}[event.key];
    if (step) buttons[(at + step + buttons.length) % buttons.length].focus();
    else if (event.key === "Home") buttons[0].focus();
    else if (event.key === "End") buttons[buttons.length - 1].focus();
    else if (event.key === "Escape" || event.key === "Tab") this.close();
    else return;
    event.preventDefault();
    event.stopPropagation();
  },
};
