// The Watch view's list of runs: a row per run, with its colour's swatch, a box to follow it, Stop or Resume,
// its status, and its progress, live while it trains (step of total, ETA, tokens/s and the latest validation
// loss, from the states the stream sends: progress.py); a failed run's error inline, with the tail of its log
// one click away (/api/log). The words for a run's state are here too (Compare uses them).
"use strict";

const RunList = {
  logsOpen: new Set(), // the runs whose log tail is shown

  draw() {
    const list = document.getElementById("run-list");
    list.replaceChildren(element("h3", {}, "Runs"));
    for (const row of Watch.table) list.append(this.rowOf(row));
  },

  rowOf(row) {
    const studio = row.studio;
    const status = runStatus(row);
    const box = element("input", {type: "checkbox", "data-run": row.path, "aria-label": `follow ${row.path}`});
    box.checked = Watch.followed.includes(row.path);
    box.addEventListener("change", () => Watch.follow(row.path, box.checked).catch(err => say(err.message, true)));
    const actions = element("span", {class: "actions"});
    const name = row.path.split("/").pop();
    if (studio && studio.running) {
      actions.append(element("button", {class: "stop", "data-run": row.path,
        onclick: () => Watch.act(name, "stop")}, "Stop"));
    } else if (!row.finished && row.step !== null && row.step !== undefined && !row.best_of && status !== "failed") {
      actions.append(element("button", {class: "resume", "data-run": row.path,
        onclick: () => Watch.act(name, "resume")}, "Resume"));
    }
    const made = element("div", {class: "run-row", "data-run": row.path},
      element("label", {}, RunColours.swatch(row.path), box, " " + row.path), actions,
      element("span", {class: "status " + status.split(" ")[0]}, status),
      element("span", {class: "progress", "data-run": row.path, title: TOKENS_PER_S},
        this.progressText(row, studio && studio.progress)));
    const error = (studio && studio.error) || (row.status === "failed" ? row.error : null);
    if (error) made.append(this.errorOf(row, name, error, Boolean(studio && studio.error)));
    return made;
  },

  // A failed run's one line, and (for a run this studio started) a button that shows the tail of its log.
  errorOf(row, name, error, started) {
    const box = element("div", {class: "run-error"}, element("span", {class: "run-error-line"}, error));
    if (!started) return box;
    const tail = element("pre", {class: "log-tail", "data-run": row.path});
    const toggle = element("button", {class: "show-log", "data-run": row.path, "aria-expanded": "false"}, "log");
    const show = async () => {
      try {
        const {lines} = await api(`/api/log?name=${encodeURIComponent(name)}`);
        tail.textContent = lines.join("\n");
        tail.hidden = false;
        toggle.setAttribute("aria-expanded", "true");
        toggle.textContent = "hide log";
        this.logsOpen.add(row.path);
      } catch (err) {
        say(err.message, true, `run:${name}`);
      }
    };
    toggle.addEventListener("click", () => {
      if (tail.hidden) { show(); return; }
      tail.hidden = true;
      toggle.setAttribute("aria-expanded", "false");
      toggle.textContent = "log";
      this.logsOpen.delete(row.path);
    });
    tail.hidden = true;
    if (this.logsOpen.has(row.path)) show();
    box.append(" ", toggle, tail);
    return box;
  },

  // "step 120 of 100,000 · ETA 3m 20s · 1,234 tokens/s · val 2.3456": live figures where the run trains here.
  progressText(row, live) {
    const step = live && live.step !== null ? live.step : row.step;
    const steps = (live && live.steps) || row.steps;
    const parts = [];
    if (step !== null && step !== undefined) {
      parts.push(steps ? `step ${step.toLocaleString()} of ${steps.toLocaleString()}` : `step ${step.toLocaleString()}`);
    }
    if (live && live.eta_s !== null && live.eta_s !== undefined && row.studio.running) parts.push(`ETA ${duration(live.eta_s)}`);
    const speed = live && live.tokens_per_s ? live.tokens_per_s : row.tokens_per_sec;
    if (speed) parts.push(`${Math.round(speed).toLocaleString()} tokens/s`);
    const val = live && live.val_loss !== null && live.val_loss !== undefined ? live.val_loss : row.val_loss;
    if (val !== null && val !== undefined) parts.push(`val ${val.toFixed(4)}`);
    return parts.join(" · ");
  },

  // The stream's states, in place (no redraw: a click on the list is not lost to it).
  showProgress(states) {
    for (const state of states) {
      const row = Watch.table.find(r => r.path === state.checkpoint);
      if (!row) continue;
      row.studio = state;
      const span = document.querySelector(`#run-list .progress[data-run="${CSS.escape(row.path)}"]`);
      if (span) span.textContent = this.progressText(row, state.progress);
    }
  },
};

function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`;
}

function stateWord(state) {
  if (state.running) return state.stopping ? "stopping (it saves first)" : "training";
  return state.returncode === 0 ? "finished" : "stopped (saved)";
}

function runStatus(row) {
  const studio = row.studio;
  if (row.damaged) return "damaged";
  if (row.best_of) return `best copy of ${row.best_of}`;
  if (studio && studio.elsewhere) return `training (process ${studio.pid}, not started here)`;
  if (studio && studio.running) return studio.stopping ? "stopping" : "training";
  if ((studio && studio.error) || row.status === "failed") return "failed";
  if (row.finished) return "finished";
  if (studio) return "stopped";
  return row.step !== null && row.step !== undefined ? "unfinished" : "";
}
