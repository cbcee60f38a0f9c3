// The Watch view: live curves of the followed runs, one chart per group of metrics, overlaid run on run.
// History comes from /api/metrics (already bucketed to at most POINTS, fewer each as more runs are followed:
// POINT_BUDGET over them all), then /api/stream appends each record as the run writes it; past twice its
// points a run's columns are halved (pairs averaged), so that 10 runs of 100k steps stay responsive. Which
// chart draws each figure is the server's word (metrics.charts_of), sent with the history and with each
// record. Smoothing (an exponential moving average) and log scales are applied here. Each run is drawn in its
// own colour (colours.js), the figures of one run on one chart in distinct dashes; the charts are our own SVG
// (linechart.js), redrawn whenever records arrive (at most every 200 ms), and share a crosshair (crosshair.js).
"use strict";

const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];

const Watch = {
  POINTS: 2000,
  POINT_BUDGET: 4000, // the points of every followed run's history together, down to MIN_POINTS a run
  MIN_POINTS: 400,
  runs: {},       // path -> {columns, charts, offset, inode, perStep, points}
  followed: [],   // paths, in the order they were chosen
  source: null,
  states: [],
  table: [],
  runsAsked: 0,   // how many /api/runs were asked (refreshRuns): only the latest answer is shown
  drawTimer: null,
  loading: false, // while followOnly reads the histories

  init() {
    for (const id of ["smoothing", "log-y", "x-axis"]) {
      document.getElementById(id).addEventListener("input", () => this.scheduleDraw());
      document.getElementById(id).addEventListener("change", () => this.scheduleDraw());
    }
    this.openStream();
    this.refreshRuns();
    Crosshair.init(document.getElementById("charts"));
    new ResizeObserver(() => this.scheduleDraw()).observe(document.getElementById("charts"));
  },

  async follow(path, on = true) {
    if (on && !this.followed.includes(path)) {
      this.followed.push(path);
      await this.loadHistory(path);
    } else if (!on) {
      this.followed = this.followed.filter(p => p !== path);
      delete this.runs[path];
    }
    PageState.save();
    this.openStream();
    RunList.draw();
    this.draw();
  },

  async followOnly(paths) {
    this.followed = [...paths];
    this.runs = {};
    PageState.save();
    this.loading = true;  // drawn once, when every history is in
    try {
      await Promise.all(paths.map(path => this.loadHistory(path)));
    } finally {
      this.loading = false;
    }
    PageState.save();
    this.openStream();
    RunList.draw();
    this.draw();
  },

  async loadHistory(path) {
    const points = Math.max(this.MIN_POINTS, Math.min(this.POINTS,
      Math.floor(this.POINT_BUDGET / Math.max(1, this.followed.length))));
    const history = await api(`/api/metrics?run=${encodeURIComponent(path)}&points=${points}`);
    this.runs[path] = {columns: history.columns, charts: history.charts, offset: history.offset, inode: history.inode,
      perStep: history.tokens_per_step, points};
  },

  openStream() {
    if (this.source) this.source.close();
    const query = this.followed.filter(p => this.runs[p])
      .map(p => "run=" + encodeURIComponent(`${p}|${this.runs[p].offset}|${this.runs[p].inode ?? ""}`))
      .concat("token=" + encodeURIComponent(studioToken)).join("&");  // an EventSource sends no header
    this.source = new EventSource("/api/stream?" + query);
    this.source.onmessage = event => this.receive(JSON.parse(event.data));
  },

  async receive(message) {
    for (const [path, update] of Object.entries(message.records)) {
      const run = this.runs[path];
      if (!run) continue;
      Object.assign(run.charts, update.charts);
      for (const row of update.rows) this.append(run, row);
      run.offset = update.offset;
      run.inode = update.inode;
    }
    const shape = s => JSON.stringify([s.name, s.running, s.returncode, s.stopping, s.pid]);
    const before = new Set(this.states.map(shape));
    const moved = message.states.filter(s => !before.has(shape(s)));
    const changed = moved.length > 0 || message.states.length !== this.states.length;
    this.states = message.states;
    if (message.replaced.length) {
      for (const path of message.replaced) await this.loadHistory(path);
      this.openStream();
    }
    for (const state of moved) { // a run's failure is news; its other changes update a message about it
      const about = `run:${state.name}`;
      if (state.error) say(`run ${state.name}: ${state.error}`, true, about);
      else if (saying(about)) say(`run ${state.name}: ${stateWord(state)}`, false, about);
    }
    if (changed) {
      await this.refreshRuns();
    } else {
      RunList.showProgress(message.states);
    }
    if (Object.keys(message.records).length || message.replaced.length) this.scheduleDraw();
  },

  append(run, row) {
    if (typeof row.time === "number" && row.time > 0 && run.perStep) {  // TOKENS_PER_S, as the server's
      row.tokens_per_s = row.step * run.perStep / row.time;
    }
    const columns = run.columns;
    const length = columns.step ? columns.step.length : 0;
    for (const key of Object.keys(row)) {
      if (!columns[key]) columns[key] = new Array(length).fill(null);
    }
    for (const key of Object.keys(columns)) {
      columns[key].push(key in row && typeof row[key] === "number" ? row[key] : null);
    }
    if (columns.step.length > 2 * run.points) this.halve(columns);
  },

  halve(columns) {
    for (const [key, values] of Object.entries(columns)) {
      const merged = [];
      for (let i = 0; i < values.length; i += 2) {
        const pair = values.slice(i, i + 2).filter(v => v !== null);
        if (key === "step") merged.push(Math.max(...pair));
        else merged.push(pair.length ? pair.reduce((a, b) => a + b, 0) / pair.length : null);
      }
      columns[key] = merged;
    }
  },

  // ---- drawing --------------------------------------------------------------------------------

  groups() {
    const groups = new Map(); // chart id -> [{path, key, label}]
    this.titles = {};
    this.followed.forEach(path => {
      const run = this.runs[path];
      if (!run) return;
      for (const key of Object.keys(run.columns).sort()) {
        const chart = run.charts[key];
        if (!chart) continue; // the step and the time: the x axes
        this.titles[chart.chart] = chart.title;
        if (!groups.has(chart.chart)) groups.set(chart.chart, []);
        groups.get(chart.chart).push({path, key, label: chart.label});
      }
    });
    const order = ["loss", "lr", "grad_norm", "tokens_per_s"];
    return [...groups.entries()].sort((a, b) => {
      const ia = order.indexOf(a[0]), ib = order.indexOf(b[0]);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a[0].localeCompare(b[0]);
    });
  },

  smooth(values, weight) {
    let average = null;
    return values.map(v => {
      if (v === null) return null;
      average = average === null ? v : weight * average + (1 - weight) * v;
      return average;
    });
  },

  scheduleDraw() {
    if (this.drawTimer) return;
    this.drawTimer = setTimeout(() => { this.drawTimer = null; this.draw(); }, 200);
  },

  draw() {
    clearTimeout(this.drawTimer);
    this.drawTimer = null;
    const area = document.getElementById("charts");
    if (!document.getElementById("watch").classList.contains("active") || this.loading) return;
    const weight = parseFloat(document.getElementById("smoothing").value);
    const logY = document.getElementById("log-y").checked;
    const xKey = document.getElementById("x-axis").value;
    const groups = this.groups();
    const wanted = new Set(groups.map(([group]) => "chart-" + group));
    area.querySelectorAll(".chart").forEach(div => { if (!wanted.has(div.id)) div.remove(); });
    if (!groups.length) {
      if (!area.querySelector(".empty")) {
        area.append(element("p", {class: "empty"}, "Tick a run on the left (or start one from Compose) to see its curves."));
      }
      return;
    }
    area.querySelectorAll(".empty").forEach(p => p.remove());
    groups.forEach(([group, series], index) => {
      let div = document.getElementById("chart-" + group);
      if (!div) div = element("div", {class: "chart", id: "chart-" + group, "data-group": group});
      if (group === "tokens_per_s") div.title = TOKENS_PER_S;
      const charts = area.querySelectorAll(".chart");
      if (charts[index] !== div) area.insertBefore(div, charts[index] || null);  // in order; left be when it is
      const traces = series.map(({path, key, label}) => {
        const run = this.runs[path];
        const own = series.filter(s => s.path === path);  // this run's figures on this chart: a dash each
        const ys = run.columns[key];
        const sparse = key === "val_loss";
        return {x: run.columns[xKey] || run.columns.step, y: sparse || key === "lr" ? ys : this.smooth(ys, weight),
          name: path.split("/").pop() + ": " + label, meta: path, color: RunColours.of(path),
          dash: DASHES[own.findIndex(s => s.key === key) % DASHES.length], markers: sparse, connectGaps: sparse};
      });
      LineChart.draw(div, traces, {title: this.titles[group], xTitle: xKey === "time" ? "seconds" : "step", logY,
        zoomKey: xKey + logY});
    });
  },

  // ---- the runs ---------------------------------------------------------------------------------

  async refreshRuns() {
    const asked = ++this.runsAsked;
    try {
      const answer = await api("/api/runs");
      if (asked !== this.runsAsked) return;  // a later answer is coming: an earlier one must not overwrite it
      this.table = answer.runs;
      RunColours.list(answer.runs.map(row => row.path));
      RunList.draw();
      Compare.show(answer);
      Sample.showCheckpoints(answer.runs);
    } catch (err) {
      say(err.message, true);
    }
  },

  async act(name, action) {
    try {
      const state = await api(`/api/runs/${encodeURIComponent(name)}/${action}`, {body: {}});
      // the stream may have told of this process already (a loaded machine answers late): its word stands
      const latest = this.states.find(s => s.name === name && s.pid === state.pid);
      say(`run ${name}: ${stateWord(latest || state)}`, false, `run:${name}`);
      if (action === "resume") await this.follow(state.checkpoint, true);
      await this.refreshRuns();
    } catch (err) {
      say(err.message, true, `run:${name}`);
    }
  },
};
