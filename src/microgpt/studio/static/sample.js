// The Sample view: a completion streamed from any checkpoint as `microgpt sample` makes it, and `microgpt
// eval` of a workspace file (bits per character) or of a prompts file (exact-match accuracy).
"use strict";

const Sample = {
  reading: null, // the AbortController of the completion streaming in

  init() {
    document.getElementById("generate").addEventListener("click", () => this.generate());
    document.getElementById("evaluate").addEventListener("click", () => this.evaluate());
    this.refreshFiles();
  },

  showCheckpoints(runs) {
    const select = document.getElementById("sample-checkpoint");
    const chosen = select.value;
    const options = [];
    for (const row of runs.filter(r => r.step !== null && r.step !== undefined)) {
      if (!row.best_of) options.push(element("option", {value: row.path}, row.path));
      if (row.best_checkpoint) {
        options.push(element("option", {value: row.best_checkpoint},
          `${row.best_checkpoint} (best validation, step ${row.best_step})`));
      }
    }
    select.replaceChildren(...options);
    if (options.some(option => option.value === chosen)) select.value = chosen;
  },

  async refreshFiles() {
    try {
      const {files} = await api("/api/files");
      document.getElementById("eval-file").replaceChildren(...files.map(f => element("option", {value: f}, f)));
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
    out.textContent = "";
    out.className = "streaming";
    say("sampling...", false, "sample");
    try {
      await streamEvents("/api/sample?" + query, message => {
        if (message.text) out.textContent += message.text;
        if (message.error) throw new Error(message.error);
        if (message.done) out.className = "done";
      }, reading.signal);
      if (out.className !== "done") throw new Error("the sample stream ended before the completion did; try again");
      say("sampled", false, "sample");
    } catch (err) {
      if (err.name === "AbortError") return; // a newer Generate took over
      out.className = "failed";
      say(err.message, true, "sample");
    }
  },

  async evaluate() {
    const kind = document.querySelector('input[name="eval-kind"]:checked').value;
    const file = document.getElementById("eval-file").value;
    const out = document.getElementById("eval-result");
    out.textContent = "evaluating...";
    try {
      const result = await api("/api/eval", {body: {checkpoint: document.getElementById("sample-checkpoint").value,
        backend: document.getElementById("sample-backend").value, [kind === "prompts" ? "prompts" : "file"]: file}});
      out.textContent = kind === "prompts"
        ? `${result.correct} of ${result.total} correct (accuracy ${result.accuracy.toFixed(3)})\n` +
          result.results.map(r => `${r.correct ? "right" : "wrong"}  ${JSON.stringify(r.prompt)} -> ${JSON.stringify(r.completion)}`).join("\n")
        : `${result.positions.toLocaleString()} tokens scored\nNLL ${result.nll.toFixed(4)} nats per token\n` +
          `perplexity ${result.perplexity}\nbits per character ${result.bits_per_char === null ? "-" : result.bits_per_char.toFixed(4)}`;
      out.className = "done";
    } catch (err) {
      out.textContent = err.message;
      out.className = "failed";
    }
  },
};
