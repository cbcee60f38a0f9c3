// Line charts drawn as plain SVG, for the Watch view: a title, axes with rounded ticks (linear or log y), one
// path per trace in its colour and dash (markers for sparse figures), a legend whose entries hide and show
// their trace, a tooltip of every trace's value at the pointer's step, drag across to zoom into a range of x
// and double-click to go back, and a crosshair line that another chart can move (crosshair.js).
// A chart keeps what it drew on its element: `div.data` (the traces it draws, as given) and `div.drawn` (the ranges,
// and the map from an x value to its pixel), read by the crosshair and the browser tests.
"use strict";

const DASH_ARRAYS = {solid: "", dash: "6 4", dot: "2 3", dashdot: "7 3 2 3", longdash: "12 4", longdashdot: "12 3 2 3"};

const LineChart = {
  HEIGHT: 240,
  NEAR_PX: 20,     // a line's value is in the tooltip when its nearest point is this close to the pointer
  TIP_ROWS: 12,    // the most lines the tooltip lists
  TICK_GAP_PX: 18, // the least room between two ticks of a log axis
  MARGIN: {left: 58, right: 14, top: 28, bottom: 36},
  OUTLIER_SPREAD: 10, // a value this many interquartile ranges past the quartiles is clipped off a linear axis

  // Draw `traces` ([{x, y, name, meta, color, dash, markers, connectGaps}], x and y arrays of numbers or null)
  // into `div`, with options {title, xTitle, logY, zoomKey}; a zoom survives redraws while zoomKey stays.
  draw(div, traces, options) {
    if (!div.chartState || div.chartState.zoomKey !== options.zoomKey) {
      div.chartState = {zoomKey: options.zoomKey, zoom: null, hidden: new Set(), crosshair: null};
      div.replaceChildren();
      this.build(div);
    }
    div.data = traces;
    div.chartOptions = options;
    this.render(div);
  },

  build(div) {
    const svg = svgElement("svg", {class: "plot", height: this.HEIGHT, role: "img"});
    const area = svgElement("rect", {class: "plot-area", fill: "transparent"});
    const clip = svgElement("clipPath", {id: `${div.id}-clip`});
    clip.append(svgElement("rect", {class: "clip"}));
    const defs = svgElement("defs");
    defs.append(clip);
    svg.append(defs, svgElement("g", {class: "axes"}), svgElement("g", {class: "lines", "clip-path": `url(#${div.id}-clip)`}),
      svgElement("line", {class: "crosshair", visibility: "hidden"}), svgElement("rect", {class: "zoom-box", visibility: "hidden"}),
      area, svgElement("text", {class: "title", x: 8, y: 17}));
    const legend = element("div", {class: "legend"});
    const tip = element("div", {class: "tip", hidden: ""});
    div.append(svg, legend, tip);
    this.listen(div, area);
  },

  // ---- scales -------------------------------------------------------------------------------------

  visible(div) {
    return div.data.filter(t => !div.chartState.hidden.has(t.name));
  },

  // [lo, hi] of the finite values, or null
  extent(values, keep = () => true) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) {
      if (v === null || !Number.isFinite(v) || !keep(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    return lo <= hi ? [lo, hi] : null;
  },

  ranges(div) {
    const traces = this.visible(div);
    const xs = traces.map(t => this.extent(t.x)).filter(Boolean);
    let xRange = xs.length ? [Math.min(...xs.map(e => e[0])), Math.max(...xs.map(e => e[1]))] : [0, 1];
    if (div.chartState.zoom) xRange = div.chartState.zoom;
    if (xRange[0] === xRange[1]) xRange = [xRange[0] - 0.5, xRange[1] + 0.5];
    const logY = div.chartOptions.logY;
    const ys = traces.map(t => this.extent(t.y.filter((_, i) => t.x[i] !== null && t.x[i] >= xRange[0] && t.x[i] <= xRange[1]),
      v => !logY || v > 0)).filter(Boolean);
    let yRange = ys.length ? [Math.min(...ys.map(e => e[0])), Math.max(...ys.map(e => e[1]))] : (logY ? [1, 10] : [0, 1]);
    const clipped = logY ? null : this.fences(traces, xRange);  // a blown-up run does not flatten the others
    if (clipped) yRange = [Math.max(yRange[0], clipped.lo), Math.min(yRange[1], clipped.hi)];
    if (logY) yRange = yRange.map(Math.log10);
    const flat = yRange[1] - yRange[0] <= 1e-9 * Math.max(Math.abs(yRange[0]), Math.abs(yRange[1]));  // rounding
    const pad = !flat ? (yRange[1] - yRange[0]) * 0.05 : logY ? 0.05 : Math.abs(yRange[0]) * 0.05 || 0.5;
    return {xRange, yRange: [yRange[0] - pad, yRange[1] + pad], logY, outliers: clipped ? clipped.outside : 0};
  },

  // On a linear axis, the values past OUTLIER_SPREAD interquartile ranges beyond the quartiles of every
  // visible value in x's range are outliers: {lo, hi} the range of the rest and how many are left outside, or
  // null where there are none (log y shows them all).
  fences(traces, xRange) {
    const values = traces.flatMap(t => t.y.filter((v, i) => v !== null && Number.isFinite(v) && t.x[i] !== null
      && t.x[i] >= xRange[0] && t.x[i] <= xRange[1])).sort((a, b) => a - b);
    if (values.length < 8) return null;
    const q1 = values[Math.floor(values.length / 4)], q3 = values[Math.floor(3 * values.length / 4)];
    const spread = Math.max(q3 - q1, 1e-9 * Math.abs(q3));
    const inside = values.filter(v => v >= q1 - this.OUTLIER_SPREAD * spread && v <= q3 + this.OUTLIER_SPREAD * spread);
    if (inside.length === values.length) return null;
    return {lo: inside[0], hi: inside[inside.length - 1], outside: values.length - inside.length};
  },

  // about `count` ticks at 1, 2 or 5 times a power of ten
  linearTicks(lo, hi, count) {
    const rough = (hi - lo) / count;
    const power = 10 ** Math.floor(Math.log10(rough));
    const step = power * ([1, 2, 5, 10].find(m => rough <= power * m));
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
    return [...new Set(ticks)];
  },

  // log axis (in log10 units, `pixels` tall): the powers of ten and the most of their multiples (every digit,
  // or 2, 3 and 5, or 2 and 5) that stay TICK_GAP_PX apart; a range inside one step gets linear ticks instead
  logTicks(lo, hi, pixels) {
    let ticks = [];
    for (const multiples of [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 5], [1, 2, 5], [1]]) {
      ticks = [];
      for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
        for (const m of multiples) {
          const value = Math.log10(m) + e;
          if (value >= lo && value <= hi) ticks.push(value);
        }
      }
      const closest = Math.min(...ticks.slice(1).map((v, i) => v - ticks[i]));
      if (closest * pixels / (hi - lo) >= this.TICK_GAP_PX) break;
    }
    return ticks.length >= 2 ? ticks : this.linearTicks(10 ** lo, 10 ** hi, 4).map(Math.log10);
  },

  format(value, digits = 3) {
    if (value === 0) return "0";
    const size = Math.abs(value);
    if (size >= 1e15) return value.toExponential(digits - 1).replace(/\.?0+e\+?/, "e").replace("e+", "e");
    if (size >= 1e4) return new Intl.NumberFormat("en", {notation: "compact", maximumSignificantDigits: digits}).format(value);
    if (size < 1e-3) return value.toExponential(digits - 1).replace(/\.?0+e/, "e");
    return String(Number(value.toPrecision(digits)));
  },

  // the ticks' labels, with the fewest digits that tell them all apart (a narrow range needs more)
  tickLabels(values) {
    for (let digits = 2; digits < 8; digits++) {
      const labels = values.map(v => this.format(v, digits));
      if (new Set(labels).size === labels.length) return labels;
    }
    return values.map(v => this.format(v, 8));
  },

  // ---- drawing ------------------------------------------------------------------------------------

  render(div) {
    const width = Math.max(200, div.clientWidth);
    const {left, right, top, bottom} = this.MARGIN;
    const plotWidth = width - left - right, plotHeight = this.HEIGHT - top - bottom;
    const {xRange, yRange, logY, outliers} = this.ranges(div);
    const xPixel = x => left + (x - xRange[0]) / (xRange[1] - xRange[0]) * plotWidth;
    const yPixel = y => top + (1 - ((logY ? Math.log10(y) : y) - yRange[0]) / (yRange[1] - yRange[0])) * plotHeight;
    div.drawn = {xRange, yRange, logY, xPixel, outliers, xValue: p => xRange[0] + (p - left) / plotWidth * (xRange[1] - xRange[0]),
      left, top, plotWidth, plotHeight};
    const svg = div.querySelector("svg.plot");
    svg.setAttribute("width", width);
    svg.setAttribute("aria-label", div.chartOptions.title);
    // the outliers said in the title: their lines run off the top (or bottom) of the plot
    svg.querySelector(".title").textContent = div.chartOptions.title + (outliers
      ? ` (${outliers} outlier${outliers === 1 ? "" : "s"} off the scale; log y shows them)` : "");
    const area = svg.querySelector(".plot-area");
    for (const rect of [area, svg.querySelector("rect.clip")]) {
      for (const [key, value] of Object.entries({x: left, y: top, width: plotWidth, height: plotHeight})) rect.setAttribute(key, value);
    }
    this.drawAxes(svg.querySelector(".axes"), div.drawn, yPixel);
    this.drawLines(svg.querySelector(".lines"), this.visible(div), div.drawn, yPixel);
    this.drawLegend(div);
    this.crosshair(div, div.chartState.crosshair);
  },

  drawAxes(group, drawn, yPixel) {
    const {xRange, yRange, logY, xPixel, left, top, plotWidth, plotHeight} = drawn;
    const parts = [svgElement("rect", {class: "frame", x: left, y: top, width: plotWidth, height: plotHeight})];
    const xTicks = this.linearTicks(xRange[0], xRange[1], Math.max(2, Math.floor(plotWidth / 90)));
    this.tickLabels(xTicks).forEach((text, i) => {
      const p = xPixel(xTicks[i]);
      parts.push(svgElement("line", {class: "grid", x1: p, x2: p, y1: top, y2: top + plotHeight}));
      const label = svgElement("text", {class: "tick", x: p, y: top + plotHeight + 14, "text-anchor": "middle"});
      label.textContent = text;
      parts.push(label);
    });
    const yTicks = (logY ? this.logTicks(yRange[0], yRange[1], plotHeight) : this.linearTicks(yRange[0], yRange[1], 5))
      .map(y => logY ? 10 ** y : y);
    this.tickLabels(yTicks).forEach((text, i) => {
      const p = yPixel(yTicks[i]);
      parts.push(svgElement("line", {class: "grid", x1: left, x2: left + plotWidth, y1: p, y2: p}));
      const label = svgElement("text", {class: "tick", x: left - 5, y: p + 4, "text-anchor": "end"});
      label.textContent = text;
      parts.push(label);
    });
    const xTitle = svgElement("text", {class: "axis-title", x: left + plotWidth / 2, y: top + plotHeight + 30, "text-anchor": "middle"});
    xTitle.textContent = group.closest(".chart").chartOptions.xTitle;
    parts.push(xTitle);
    group.replaceChildren(...parts);
  },

  // One path a trace (a gap in y breaks it, unless the trace connects its gaps), circles where it has markers;
  // the group is clipped to the plot area, so a zoom's lines end at its edges.
  drawLines(group, traces, drawn, yPixel) {
    const {xRange, logY, xPixel} = drawn;
    const parts = [];
    for (const trace of traces) {
      let d = "", pen = "M";
      const dots = [];
      for (let i = 0; i < trace.x.length; i++) {
        const x = trace.x[i], y = trace.y[i];
        if (x === null || y === null || !Number.isFinite(y) || (logY && y <= 0)) {
          if (!trace.connectGaps) pen = "M";
          continue;
        }
        const px = xPixel(x), py = yPixel(y);
        d += `${pen}${px.toFixed(1)},${py.toFixed(1)}`;
        pen = "L";
        if (trace.markers && x >= xRange[0] && x <= xRange[1]) dots.push([px, py]);
      }
      const path = svgElement("path", {class: "line", d: d || "M0,0", stroke: trace.color,
        "stroke-dasharray": DASH_ARRAYS[trace.dash] || "", "data-meta": trace.meta});
      parts.push(path);
      for (const [px, py] of dots) parts.push(svgElement("circle", {class: "marker", cx: px, cy: py, r: 2.5, fill: trace.color}));
    }
    group.replaceChildren(...parts);
  },

  drawLegend(div) {
    const legend = div.querySelector(".legend");
    const shown = JSON.stringify(div.data.map(t => [t.name, t.color, t.dash, div.chartState.hidden.has(t.name)]));
    if (legend.dataset.shown === shown) return;  // a redraw for new records leaves it be
    legend.dataset.shown = shown;
    const entries = div.data.map(trace => {
      const hidden = div.chartState.hidden.has(trace.name);
      const swatch = svgElement("svg", {class: "key", width: 22, height: 8});
      swatch.append(svgElement("line", {x1: 0, x2: 22, y1: 4, y2: 4, stroke: trace.color, "stroke-width": 2,
        "stroke-dasharray": DASH_ARRAYS[trace.dash] || ""}));
      const entry = element("button", {class: "entry", type: "button", "aria-pressed": String(!hidden),
        title: hidden ? "show this line" : "hide this line"}, trace.name);
      entry.prepend(swatch);
      entry.addEventListener("click", () => {
        if (hidden) div.chartState.hidden.delete(trace.name); else div.chartState.hidden.add(trace.name);
        this.render(div);
      });
      return entry;
    });
    legend.replaceChildren(...entries);
  },

  // The vertical line at x (null: none), as a step or seconds on this chart's x axis; its data-x says where it
  // stands even while x is outside this chart's range (and the line hidden).
  crosshair(div, x) {
    div.chartState.crosshair = x;
    const line = div.querySelector("line.crosshair");
    if (!line || !div.drawn) return;
    if (x === null) {
      line.setAttribute("visibility", "hidden");
      line.removeAttribute("data-x");
      return;
    }
    const {xRange, xPixel, top, plotHeight} = div.drawn;
    const p = xPixel(x), inside = x >= xRange[0] && x <= xRange[1];
    for (const [key, value] of Object.entries({x1: p, x2: p, y1: top, y2: top + plotHeight, "data-x": x,
      visibility: inside ? "visible" : "hidden"})) {
      line.setAttribute(key, value);
    }
  },

  // ---- the pointer ------------------------------------------------------------------------------

  // each visible trace's point nearest the pointer's x (the traces' x differ: each run's log is sampled on its
  // own), and the x nearest of them all
  pointsAt(div, value) {
    let best = null;
    const rows = [];
    for (const trace of this.visible(div)) {
      let nearest = -1;
      for (let i = 0; i < trace.x.length; i++) {  // the x are in order, but may hold gaps (null)
        if (trace.x[i] === null || trace.y[i] === null) continue;
        if (nearest < 0 || Math.abs(trace.x[i] - value) < Math.abs(trace.x[nearest] - value)) nearest = i;
        else if (trace.x[i] > value) break;
      }
      if (nearest < 0) continue;
      if (best === null || Math.abs(trace.x[nearest] - value) < Math.abs(best - value)) best = trace.x[nearest];
      rows.push({trace, x: trace.x[nearest], y: trace.y[nearest]});
    }
    const near = Math.abs(div.drawn.xValue(div.drawn.left + this.NEAR_PX) - div.drawn.xValue(div.drawn.left));
    return {x: best, rows: rows.filter(row => Math.abs(row.x - value) <= Math.max(near, Math.abs(best - value)))};
  },

  showTip(div, event, found) {
    const tip = div.querySelector(".tip");
    if (found.x === null) {
      tip.hidden = true;
      return;
    }
    const heading = element("div", {class: "tip-x"}, `${div.chartOptions.xTitle} ${this.format(found.x)}`);
    const rows = found.rows.slice(0, this.TIP_ROWS).map(({trace, y}) => {
      const row = element("div", {}, `${trace.name}: ${Number(y.toPrecision(4))}`);
      row.prepend(element("span", {class: "swatch", style: `background: ${trace.color}`}));
      return row;
    });
    const more = found.rows.length - rows.length;
    tip.replaceChildren(heading, ...rows, ...(more > 0 ? [element("div", {class: "tip-x"}, `and ${more} more`)] : []));
    tip.hidden = false;
    const box = div.getBoundingClientRect();
    const x = event.clientX - box.left, flip = x > box.width / 2;
    tip.style.left = flip ? "" : `${x + 14}px`;
    tip.style.right = flip ? `${box.width - x + 14}px` : "";
    tip.style.top = `${event.clientY - box.top + 10}px`;
  },

  listen(div, area) {
    let dragFrom = null;
    const box = div.querySelector(".zoom-box");
    const localX = event => event.clientX - div.querySelector("svg.plot").getBoundingClientRect().left;
    area.addEventListener("pointermove", event => {
      if (!div.drawn) return;
      const x = localX(event);
      if (dragFrom !== null) {
        const {top, plotHeight} = div.drawn;
        for (const [key, value] of Object.entries({x: Math.min(dragFrom, x), y: top, width: Math.abs(x - dragFrom),
          height: plotHeight, visibility: "visible"})) box.setAttribute(key, value);
      }
      const found = this.pointsAt(div, div.drawn.xValue(x));
      this.showTip(div, event, found);
      Crosshair.move(found.x);
    });
    area.addEventListener("pointerleave", () => {
      div.querySelector(".tip").hidden = true;
      Crosshair.move(null);
    });
    area.addEventListener("pointerdown", event => {
      dragFrom = localX(event);
      area.setPointerCapture(event.pointerId);
    });
    area.addEventListener("pointerup", event => {
      if (dragFrom === null) return;
      const to = localX(event);
      box.setAttribute("visibility", "hidden");
      if (Math.abs(to - dragFrom) > 5) {
        div.chartState.zoom = [div.drawn.xValue(Math.min(dragFrom, to)), div.drawn.xValue(Math.max(dragFrom, to))];
        this.render(div);
      }
      dragFrom = null;
    });
    area.addEventListener("dblclick", () => {
      div.chartState.zoom = null;
      this.render(div);
    });
  },
};
