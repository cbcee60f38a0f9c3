// A crosshair shared by the Watch view's charts: hovering a point of one chart draws a vertical line at its x
// (a step, or seconds) on every chart, and leaving it takes the line away.
"use strict";

const Crosshair = {
  x: null,
  area: null,
  pending: false,

  init(area) {
    this.area = area;
  },

  shapes() {
    if (this.x === null) return [];
    return [{type: "line", xref: "x", yref: "paper", x0: this.x, x1: this.x, y0: 0, y1: 1,
      line: {color: "#555", width: 1, dash: "dot"}}];
  },

  // Listen to a chart's hovers (once per chart: react keeps its listeners).
  watch(div) {
    if (div.dataset.crosshair) return;
    div.dataset.crosshair = "on";
    div.on("plotly_hover", event => this.move(event.points.length ? event.points[0].x : null));
    div.on("plotly_unhover", () => this.move(null));
  },

  move(x) {
    this.x = x;
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {  // one redraw of the lines a frame, however fast the mouse
      this.pending = false;
      for (const div of this.area.querySelectorAll(".chart")) {
        if (div.data) Plotly.relayout(div, {shapes: this.shapes()});
      }
    });
  },
};
