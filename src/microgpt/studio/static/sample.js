// The Sample view: a completion streamed from any checkpoint as `microgpt sample` makes it, and `microgpt
// eval` of a workspace file (bits per character) or of a prompts file (exact-match accuracy). An ensemble's
// completion is then coloured, each generated character by its dominant expert (1 to n), with every expert's
// router weight and the prior's share (expert 0) on hover.
"use strict";

const EXPERT_COLOURS = 8; // studio.css has .expert-1 .. .expert-8; more experts reuse them in turn

const Sample = {
  reading: null, // the AbortController of the completion streaming in

  init() {
    document.getElementById("generate").addEventListener("click", () => this.generate());
    document.getElementById("evaluate").addEventListener("click", () => this.evaluate());
    document.getElementById("sample-checkpoint").addEventListener("change", () => this.showSwatch());
    this.refreshFiles();
  },

  showCheckpoints(runs) {
    const options = [];
    for (const row of runs.filter(r => r.step !== null && r.step !== undefined)) {
      if (!row.best_of) options.push([row.path, `${row.path} (step ${row.step})`]);
      if (row.best_checkpoint) options.push([row.best_checkpoint, `${row.best_checkpoint} (best validation, step ${row.best_step})`]);
    }
    setOptions(document.getElementById("sample-checkpoint"), options);
    const empty = document.getElementById("sample-empty");  // an empty state says what to do
    empty.hidden = options.length > 0;
    this.showSwatch();
  },

  // The chosen checkpoint's run colour, beside it (a -best copy is its run's).
  showSwatch() {
    const chosen = document.getElementById("sample-checkpoint").value;
    const swatch = document.getElementById("sample-swatch");
    swatch.style.background = chosen ? RunColours.of(chosen) : "transparent";
    swatch.dataset.run = chosen ? RunColours.runOf(chosen) : "";
  },

  async refreshFiles() {
    try {
      const {files} = await api("/api/files");
      setOptions(document.getElementById("eval-file"), files.map(f => [f, f]));
    } catch (err) {
      say(err.message, true);
    }
  },

  async generate() {
    if (this.reading) this.reading.abort();
    const reading = this.reading = new AbortController();
    const value = id => document.getElementById(id).value;
    const query = new URLSearchParams({checkpoint: value("sample-checkpoint"), prompt: value("prompt"),
      tokens: value("tokens"), temperature: value("temperature"), top_k: value("top-k"), top_p: value("top-p"),
      seed: value("seed"), backend: value("sample-backend")});
    const out = document.getElementById("completion");
    out.textContent = value("prompt"); // `microgpt sample` prints the continuation alone: the prompt leads it here
    out.className = "streaming";
    document.getElementById("routing-legend").replaceChildren();
    say("sampling...", false, "sample");
    try {
      await streamEvents("/api/sample?" + query, message => {
        if (message.text) out.textContent += message.text;
        if (message.error) throw new Error(message.error);
        if (message.done) out.className = "done";
      }, reading.signal);
      if (out.className !== "done") throw new Error("the sample stream ended before the completion did; try again");
      say("sampled", false, "sample");
      await this.colour(out, value("sample-checkpoint"), value("sample-backend"), value("prompt").length, reading);
    } catch (err) {
      if (err.name === "AbortError") return; // a newer Generate took over
      out.className = "failed";
      say(err.message, true, "sample");
    }
  },

  // Colour the completion by its routing, where the checkpoint is an ensemble (others have none: left plain).
  async colour(out, checkpoint, backend, promptLength, reading) {
    const shown = out.textContent;
    const text = shown.endsWith("\n") ? shown.slice(0, -1) : shown; // the newline `sample` ends with: not generated
    let routing;
    try {
      ({routing} = await api("/api/routing", {body: {checkpoint, text, backend}}));
    } catch (err) {
      if (this.reading === reading) say(`sampled; not coloured: ${err.message}`, true, "sample");
      return;
    }
    if (!routing || this.reading !== reading || routing.tokens.join("") !== text) return;
    let offset = 0;
    const pieces = routing.tokens.map((token, p) => {
      const start = offset;
      offset += token.length;
      if (start < promptLength) return document.createTextNode(token); // the prompt: not generated
      const dominant = routing.dominant[p];
      const weights = routing.weights[p].map((w, k) => `${routing.experts[k]} ${w.toFixed(3)}`);
      if (routing.prior_kind !== "none") {
        weights.push(`expert 0 (${routing.prior_kind}) share ${routing.prior[p].toFixed(3)}`);
      }
      return element("span", {class: `expert expert-${((dominant - 1) % EXPERT_COLOURS) + 1}`,
        "data-expert": dominant, title: `${JSON.stringify(token)} -> next: ${weights.join(", ")}`}, token);
    });
    out.replaceChildren(...pieces, shown.slice(text.length));
    document.getElementById("routing-legend").replaceChildren("each generated character in its dominant expert's " +
      "colour (hover for the weights): ", ...routing.experts.map((name, k) =>
      element("span", {class: `expert expert-${(k % EXPERT_COLOURS) + 1}`}, name)));
  },

  async evaluate() {
    const kind = document.querySelector('input[name="eval-kind"]:checked').value;
    const file = document.getElementById("eval-file").value;
    const out = document.getElementById("eval-result");
    const select = document.getElementById("sample-checkpoint");
    const checkpoint = select.value;
    const named = select.selectedOptions.length ? select.selectedOptions[0].textContent : checkpoint;
    out.textContent = `evaluating ${named} on ${file}...`;
    out.className = "evaluating";
    say("evaluating...", false, "eval"); // the status line follows it (an earlier view's error is not left there)
    try {
      const result = await api("/api/eval", {body: {checkpoint,
        backend: document.getElementById("sample-backend").value, [kind === "prompts" ? "prompts" : "file"]: file}});
      out.textContent = `${named}, ${kind === "prompts" ? "answering" : "scoring"} ${file}:\n` + (kind === "prompts"
        ? `${result.correct} of ${result.total} correct (accuracy ${result.accuracy.toFixed(3)})\n` +
          result.results.map(r => `${r.correct ? "right" : "wrong"}  ${JSON.stringify(r.prompt)} -> ${JSON.stringify(r.completion)}`).join("\n")
        : `${result.positions.toLocaleString()} tokens scored\nNLL ${result.nll.toFixed(4)} nats per token\n` +
          `perplexity ${result.perplexity.toPrecision(4)}\nbits per character ${result.bits_per_char === null ? "-" : result.bits_per_char.toFixed(4)}`);
      out.className = "done";
      say("evaluated", false, "eval");
    } catch (err) {
      out.textContent = err.message;
      out.className = "failed";
      say(err.message, true, "eval");
    }
  },
};

// A select's options made [value, label] pairs, rebuilt only where they changed (a refresh then keeps the
// element a user or a test holds), the chosen value kept while it is still offered.
function setOptions(select, pairs) {
  const now = [...select.options].map(o => [o.value, o.textContent]);
  if (JSON.stringify(now) === JSON.stringify(pairs)) return;
  const chosen = select.value;
  select.replaceChildren(...pairs.map(([value, label]) => element("option", {value}, label)));
  if (pairs.some(([value]) => value === chosen)) select.value = chosen;
}
