// The workspace's library of blocks in the Compose editor (/api/blocks, studio/graph_blocks.py): the palette's
// "My blocks", each a group saved from some graph into blocks/NAME.yaml. Adding one carries its definition, and
// the groups it uses, into the open document (as a paste carries a group), so the document holds what it
// trains. "Save to my blocks" (a group instance's context menu) saves its group under the group's name, asking
// before another block of that name is replaced. A file of the library that is no block is listed as damaged.
"use strict";

const Blocks = {
  list: [],    // [{name, description, groups: {...the groups it uses, then itself}}]
  damaged: [], // [{file, error}]

  async load() {
    try {
      const found = await api("/api/blocks");
      this.list = found.blocks;
      this.damaged = found.damaged;
    } catch (err) {
      this.list = [];
      this.damaged = [{file: "blocks/", error: err.message}];
    }
    Palette.draw();
  },

  find(name) {
    return this.list.find(block => block.name === name) || null;
  },

  // The group of instance `id` (of the open body) saved as a block of the group's name.
  async save(id) {
    const node = EditorModel.node(EditorView.bodyName(), id);
    if (!node || node.group === undefined) return say(`${id} is no group instance: nothing to save`, true, "canvas");
    const document_ = EditorModel.draft.document;
    const chosen = await saveOrAsk(node.group, (name, overwrite) =>
      api("/api/blocks", {body: {name, group: node.group, document: document_, overwrite}}), "block");
    if (chosen === null) return say("not saved: the block's name is taken (nothing replaced)", false, "canvas");
    say(`saved group ${node.group} to my blocks as ${chosen.name} (${chosen.result.file})`, false, "canvas");
    await this.load();
  },
};

// The palette's section of the library: a heading, the blocks that match, and the files that are no block.
function blocksSection(items, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const damaged = Blocks.damaged.filter(entry => words.every(w => entry.file.toLowerCase().includes(w)));
  if (!items.length && !damaged.length) return [];
  return [element("li", {class: "palette-heading", role: "presentation"}, "My blocks"), ...items,
    ...damaged.map(entry => element("li", {class: "palette-damaged", title: entry.error,
      "aria-label": `${entry.file} is damaged: ${entry.error}`}, element("span", {class: "item-kind"}, "damaged"),
    entry.file.replace(/^blocks\//, "")))];
}
