// Each run's one colour in every view (its lines in Watch, the swatch beside its name in Watch, Compare and
// Sample): a palette index per run, kept in localStorage so that it survives a reload and a second tab agrees.
// A run new to the page takes the first index that no run listed now holds; a "-best" copy is its run's.
"use strict";

const RUN_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
  "#7f7f7f", "#bcbd22", "#393b79", "#ad494a", "#637939", "#e7969c", "#3182bd", "#843c39", "#31a354", "#7b4173",
  "#fd8d3c", "#636363"];

const RunColours = {
  STORE: "microgpt-studio-colours",
  given: null,      // run path -> palette index
  listed: new Set(), // the runs the page lists now

  load() {
    if (this.given) return;
    try {
      this.given = JSON.parse(localStorage.getItem(this.STORE) || "{}") || {};
    } catch (err) {  // storage turned off, or a value that is not ours: start afresh
      this.given = {};
    }
  },

  // The runs listed now (their colours are kept apart; a run gone from the list gives up its colour).
  list(paths) {
    this.load();
    this.listed = new Set(paths.map(p => this.runOf(p)));
    for (const path of this.listed) this.indexOf(path);
  },

  runOf(path) {
    return path.replace(/-best$/, "");
  },

  indexOf(path) {
    this.load();
    const run = this.runOf(path);
    if (!(run in this.given)) {
      const mine = this.given;  // another tab may have given it one since: take the stored word first
      this.given = null;
      this.load();
      this.given = {...mine, ...this.given};
    }
    if (!(run in this.given)) {
      const taken = new Set([...this.listed].filter(p => p !== run && p in this.given).map(p => this.given[p]));
      const free = RUN_PALETTE.findIndex((_, i) => !taken.has(i));
      this.given[run] = free >= 0 ? free : Object.keys(this.given).length % RUN_PALETTE.length;
      try { localStorage.setItem(this.STORE, JSON.stringify(this.given)); } catch (err) { /* storage off */ }
    }
    return this.given[run];
  },

  of(path) {
    return RUN_PALETTE[this.indexOf(path) % RUN_PALETTE.length];
  },

  swatch(path) {
    return element("span", {class: "swatch", "data-run": this.runOf(path), style: `background:${this.of(path)}`,
      "aria-hidden": "true"});
  },
};
