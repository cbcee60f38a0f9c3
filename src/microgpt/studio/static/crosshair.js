// A crosshair shared by the Watch view's charts: the pointer over one chart (linechart.js) puts a vertical line
// at the x it is nearest (a step, or seconds) on every chart, and leaving it takes the lines away.
"use strict";

const Crosshair = {
  x: null,
  area: null,

  init(area) {
    this.area = area;
  },

  move(x) {
    if (x === this.x) return;
    this.x = x;
    for (const div of this.area.querySelectorAll(".chart")) LineChart.crosshair(div, x);
  },
};
