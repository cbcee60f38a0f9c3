// The Compare view: every run of the workspace in one table (its checkpoints, their results.jsonl lines and
// the studio's own runs; a run's -best copy is its "best bpc" and "best at" cells; the validation losses in
// held-out bits per character, which compare across tokenizers, as microgpt runs shows them), sortable by any column
// and filtered by text; the selection overlays in Watch and downloads as CSV of every metrics record (an empty
// selection, or one without records, is said so, and nothing is downloaded). Each column has one number
// format (FORMATS), and each run its colour's swatch.
"use strict";

const COLUMNS = [
  ["path", "run"], ["family", "family"], ["tokenizer", "tokenizer"], ["parameters", "parameters"], ["step", "step"],
  ["steps", "of"], ["best_val_bpc", "best bpc"], ["val_bpc", "val bpc"], ["val_loss", "val nats"],
  ["best_step", "best at"], ["tokens_per_sec", "tokens/s"], ["seconds", "seconds"], ["status", "status"], ["model", "model"],
];

const WHOLE = value => Math.round(value).toLocaleString("en-US");
const FORMATS = {  // one format per column: "13,313" beside "19,350", never "1.935e+4"
  parameters: WHOLE, step: WHOLE, steps: WHOLE, best_step: WHOLE, tokens_per_sec: WHOLE,
  val_loss: value => value.toFixed(4),  // nats per token, which depend on the tokenizer; bits per character do not
  val_bpc: value => value.toFixed(4), best_val_bpc: value => value.toFixed(4),
  seconds: value => value.toLocaleString("en-US", {minimumFractionDigits: 1, maximumFractionDigits: 1}),
};

const Compare = {
  rows: [],
  selected: new Set(),
  sortKey: "path",
  ascending: true,

  init() {
    document.getElementById("filter").addEventListener("input", () => this.draw());
    document.getElementById("overlay").addEventListener("click", () => {
      if (!this.selected.size) { say("select runs in the table first", true, "compare"); return; }
      showView("watch");
      Watch.followOnly([...this.selected]).catch(err => say(err.message, true));
    });
    const head = element("tr", {}, element("th", {}, ""));
    for (const [key, title] of COLUMNS) {
      head.append(element("th", {"data-key": key, onclick: () => this.sortBy(key),
        ...(key === "tokens_per_sec" ? {title: TOKENS_PER_S} : {})}, title));
    }
    document.querySelector("#runs-table thead").append(head);
    document.getElementById("csv").addEventListener("click", event => {
      event.preventDefault();
      this.download();
    });
  },

  // The selection's records as a CSV file, or one line saying why there is none.
  async download() {
    if (!this.selected.size) { say("no run is selected; tick the runs to download first", true, "compare"); return; }
    const link = document.getElementById("csv");
    try {
      const response = await fetch(link.href);
      if (!response.ok) throw await refusal("/api/csv", response);
      const url = URL.createObjectURL(await response.blob());
      const save = element("a", {href: url, download: "metrics.csv"});
      document.body.append(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
      say(`downloaded the records of ${this.selected.size} run(s) as metrics.csv`, false, "compare");
    } catch (err) {
      say(err.message, true, "compare");
    }
  },

  show(answer) {
    this.rows = answer.runs.map(row => {  // a run training before its first save: its step from its progress
      const live = row.studio && row.studio.progress;
      return {...row, status: runStatus(row), step: row.step ?? (live ? live.step : null),
        steps: row.steps ?? (live ? live.steps : null)};
    });
    this.draw();
  },

  sortBy(key) {
    this.ascending = this.sortKey === key ? !this.ascending : true;
    this.sortKey = key;
    this.draw();
  },

  draw() {
    const words = document.getElementById("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
    const shown = this.rows.filter(row => words.every(word =>
      COLUMNS.some(([key]) => String(row[key] ?? "").toLowerCase().includes(word))));
    const key = this.sortKey, sign = this.ascending ? 1 : -1;
    shown.sort((a, b) => {
      const x = a[key], y = b[key];
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * sign;
    });
    const body = document.querySelector("#runs-table tbody");
    body.replaceChildren();
    if (!shown.length) {  // an empty state says what to do
      body.append(element("tr", {class: "empty-hint"}, element("td", {colspan: COLUMNS.length + 1},
        this.rows.length ? "no run matches the filter; clear it to see every run"
          : "no runs yet: build a model in Compose and press Train (or run microgpt train in this workspace); "
            + "each run shows here as it trains")));
    }
    for (const row of shown) {
      const box = element("input", {type: "checkbox", "data-run": row.path});
      box.checked = this.selected.has(row.path);
      box.addEventListener("change", () => {
        if (box.checked) this.selected.add(row.path); else this.selected.delete(row.path);
        unsay("compare");
        this.updateCsv();
      });
      const cells = COLUMNS.map(([column]) => element("td", {class: column}, format(row[column], column)));
      cells[0].prepend(RunColours.swatch(row.path));
      if (row.error) cells[COLUMNS.findIndex(([column]) => column === "status")].title = row.error;
      if (row.best_checkpoint) {
        for (const cell of cells.filter(c => c.className.startsWith("best_"))) {
          cell.title = `the best validation checkpoint: ${row.best_checkpoint}`;
        }
      }
      body.append(element("tr", {"data-run": row.path}, element("td", {}, box), ...cells));
    }
    document.querySelectorAll("#runs-table th").forEach(th => {
      th.classList.toggle("sorted", th.dataset.key === key);
      th.classList.toggle("descending", th.dataset.key === key && !this.ascending);
    });
    this.updateCsv();
  },

  updateCsv() {
    const link = document.getElementById("csv");
    link.href = "/api/csv?" + [...this.selected].map(p => "run=" + encodeURIComponent(p))
      .concat("token=" + encodeURIComponent(studioToken)).join("&");  // a download is a navigation: no header
  },
};

function format(value, column) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return (FORMATS[column] || WHOLE)(value);
  return String(value);
}
