// How the Compose editor looks at its draft: the body that is open (the breadcrumbs' path of groups), the
// selection, and pan and zoom. Pan and zoom change one CSS transform, on the stage that holds the drawing (a
// layer of its own that the compositor moves without painting it again), and nothing else, so a graph of
// hundreds of nodes moves at the display's frame rate; the minimap follows. The drawing is painted sharp
// again once a zoom stops.
"use strict";

const MIN_ZOOM = 0.1, MAX_ZOOM = 3;
const READABLE_ZOOM = 1; // the canvas's smallest text is 11 px at zoom 1 (editor.css): Fit zooms out no further
const MINIMAP_FROM = 30; // nodes in the open body before the minimap shows
const MINIMAP_W = 180, MINIMAP_H = 120; // its size in the page (editor.css)
const MINIMAP_DELAY_MS = 120;
const STAGE_MARGIN = 600;  // drawing room around the nodes, for a node dragged past them
const SHARPEN_AFTER_MS = 200;

const EditorView = {
  path: [],              // the groups opened, outermost first: [] is the top level
  selection: new Set(),  // node ids of the open body
  transform: {x: 40, y: 40, k: 1},
  area: null,   // the visible box, which takes the pointer's events
  stage: null,  // what moves: the SVG drawing inside it
  sharpen: null,

  init(area, stage) {
    this.area = area;
    this.stage = stage;
  },

  bodyName() {
    return this.path.length ? this.path[this.path.length - 1] : "";
  },

  size() {
    const rect = this.area.getBoundingClientRect();
    return {width: rect.width || 800, height: rect.height || 500, left: rect.left, top: rect.top};
  },

  // A point of the page (clientX, clientY) in the canvas's own coordinates.
  toWorld(clientX, clientY) {
    const {left, top} = this.size(), {x, y, k} = this.transform;
    return {x: (clientX - left - x) / k, y: (clientY - top - y) / k};
  },

  // The middle of what is in view, in the canvas's coordinates.
  centre() {
    const {width, height, left, top} = this.size();
    return this.toWorld(left + width / 2, top + height / 2);
  },

  apply() {
    const {x, y, k} = this.transform;
    this.stage.style.transform = `translate(${x}px, ${y}px) scale(${k})`;
    Minimap.follow();
  },

  // The SVG drawing sized to what it holds (its own coordinates the canvas's), with room around it; set only
  // when it changes (a new viewBox lays out and paints the whole drawing again).
  frame(bounds) {
    const box = bounds || {x: 0, y: 0, width: 1, height: 1};
    const x = Math.floor(box.x - STAGE_MARGIN), y = Math.floor(box.y - STAGE_MARGIN);
    const width = Math.ceil(box.width + 2 * STAGE_MARGIN), height = Math.ceil(box.height + 2 * STAGE_MARGIN);
    const svg = this.stage.firstElementChild;
    const viewBox = `${x} ${y} ${width} ${height}`;
    if (svg.getAttribute("viewBox") === viewBox) return;
    svg.setAttribute("viewBox", viewBox);
    Object.assign(svg.style, {left: `${x}px`, top: `${y}px`, width: `${width}px`, height: `${height}px`});
  },

  // A scaled layer is painted at the scale it had: paint it again, once, when the zoom stops.
  zoomed() {
    clearTimeout(this.sharpen);
    this.sharpen = setTimeout(() => {
      this.stage.style.willChange = "auto";
      requestAnimationFrame(() => { this.stage.style.willChange = "transform"; });
    }, SHARPEN_AFTER_MS);
  },

  panBy(dx, dy) {
    this.transform.x += dx;
    this.transform.y += dy;
    this.apply();
  },

  // Zoom by `factor` keeping the point under (clientX, clientY) where it is.
  zoomAt(factor, clientX, clientY) {
    const before = this.toWorld(clientX, clientY);
    const k = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, this.transform.k * factor));
    const {left, top} = this.size();
    this.transform = {k, x: clientX - left - before.x * k, y: clientY - top - before.y * k};
    this.apply();
    this.zoomed();
  },

  zoomCentre(factor) {
    const {width, height, left, top} = this.size();
    this.zoomAt(factor, left + width / 2, top + height / 2);
  },

  // Everything drawn in view, with a margin (the Fit button, and a graph just drawn), zoomed out no further
  // than READABLE_ZOOM, where the text is still 11 px or more: a graph too big for that starts at its left
  // edge, where its inputs are, and the user pans (or zooms out with the wheel) to see the rest.
  fit() {
    const box = EditorRender.bounds();
    if (!box) return;
    const {width, height} = this.size(), margin = 30;
    const whole = Math.min((width - 2 * margin) / box.width, (height - 2 * margin) / box.height);
    const k = Math.min(MAX_ZOOM, 1.2, Math.max(READABLE_ZOOM, whole));
    const x = box.width * k <= width - 2 * margin ? (width - box.width * k) / 2 - box.x * k : margin - box.x * k;
    const y = box.height * k <= height - 2 * margin ? (height - box.height * k) / 2 - box.y * k : margin - box.y * k;
    this.transform = {k, x, y};
    this.apply();
    this.zoomed();
  },

  // Is a point of the canvas in the visible area?
  inView(point) {
    const {width, height} = this.size(), {x, y, k} = this.transform;
    const sx = point.x * k + x, sy = point.y * k + y;
    return sx >= 0 && sy >= 0 && sx <= width && sy <= height;
  },
};

// A small picture of the open body with the visible area on it; click or drag it to look elsewhere.
const Minimap = {
  svg: null,
  box: null,   // the bounds it draws
  timer: null,
  drawn: null, // the boxes it drew, as text

  init(svg) {
    this.svg = svg;
    const goTo = event => {
      if (!this.box) return;
      const rect = svg.getBoundingClientRect();
      const scale = this.scale();
      const wx = this.box.x + (event.clientX - rect.left) / scale, wy = this.box.y + (event.clientY - rect.top) / scale;
      const {width, height} = EditorView.size(), k = EditorView.transform.k;
      EditorView.transform.x = width / 2 - wx * k;
      EditorView.transform.y = height / 2 - wy * k;
      EditorView.apply();
    };
    svg.addEventListener("pointerdown", event => {
      event.stopPropagation();
      goTo(event);
      const move = e => goTo(e);
      const up = () => { document.removeEventListener("pointermove", move); document.removeEventListener("pointerup", up); };
      document.addEventListener("pointermove", move);
      document.addEventListener("pointerup", up);
    });
  },

  scale() {
    return Math.min(MINIMAP_W / this.box.width, MINIMAP_H / this.box.height);
  },

  // Redrawn a little after an edit (not in the way of the edit's own drawing), never on a pan.
  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.draw([...EditorRender.geometry.values()]), MINIMAP_DELAY_MS);
  },

  // Drawn again only when a box moved, came or went (an edit of params changes nothing here).
  draw(nodes) {
    const drawn = nodes.length > MINIMAP_FROM ? nodes.map(n => `${n.x},${n.y},${n.width},${n.height}`).join(";") : "";
    if (drawn === this.drawn) return this.follow();
    this.drawn = drawn;
    this.svg.parentElement.classList.toggle("shown", nodes.length > MINIMAP_FROM);
    this.box = null;
    this.svg.replaceChildren();
    if (nodes.length <= MINIMAP_FROM) return this.follow();
    const bounds = EditorRender.bounds();
    this.box = {x: bounds.x - 40, y: bounds.y - 40, width: bounds.width + 80, height: bounds.height + 80};
    const scale = this.scale();
    const group = svgElement("g", {transform: `scale(${scale}) translate(${-this.box.x},${-this.box.y})`});
    for (const {x, y, width, height} of nodes) group.append(svgElement("rect", {x, y, width, height, class: "mini-node"}));
    this.svg.append(group);
    this.follow();
  },

  // The visible area's frame: a box over the picture, so that a pan repaints neither the picture nor the graph.
  follow() {
    const view = document.getElementById("minimap-view");
    view.hidden = !this.box;
    if (!this.box) return;
    const {width, height} = EditorView.size(), {x, y, k} = EditorView.transform, scale = this.scale();
    const left = (-x / k - this.box.x) * scale, top = (-y / k - this.box.y) * scale;
    view.style.transform = `translate(${left}px, ${top}px)`;
    view.style.width = `${width / k * scale}px`;
    view.style.height = `${height / k * scale}px`;
  },
};
