// How the Compose editor looks at its draft: the body that is open (the breadcrumbs' path of groups), the
// selection, and pan and zoom. Pan and zoom change one SVG transform on the viewport group and nothing else,
// so a graph of hundreds of nodes moves at the display's frame rate; the minimap follows.
"use strict";

const MIN_ZOOM = 0.1, MAX_ZOOM = 3;
const MINIMAP_FROM = 30; // nodes in the open body before the minimap shows

const EditorView = {
  path: [],              // the groups opened, outermost first: [] is the top level
  selection: new Set(),  // node ids of the open body
  transform: {x: 40, y: 40, k: 1},
  svg: null,
  viewport: null,

  init(svg) {
    this.svg = svg;
    this.viewport = svg.querySelector("#viewport");
  },

  bodyName() {
    return this.path.length ? this.path[this.path.length - 1] : "";
  },

  size() {
    const rect = this.svg.getBoundingClientRect();
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
    this.viewport.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
    Minimap.follow();
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
  },

  zoomCentre(factor) {
    const {width, height, left, top} = this.size();
    this.zoomAt(factor, left + width / 2, top + height / 2);
  },

  // Everything drawn in view, with a margin.
  fit() {
    const box = EditorRender.bounds();
    if (!box) return;
    const {width, height} = this.size(), margin = 30;
    const k = Math.min(MAX_ZOOM, 1.2, Math.max(MIN_ZOOM,
      Math.min((width - 2 * margin) / box.width, (height - 2 * margin) / box.height)));
    this.transform = {k, x: (width - box.width * k) / 2 - box.x * k, y: (height - box.height * k) / 2 - box.y * k};
    this.apply();
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

  init(svg) {
    this.svg = svg;
    const goTo = event => {
      if (!this.box) return;
      const rect = svg.getBoundingClientRect();
      const scale = this.scale(rect);
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

  scale(rect) {
    return Math.min(rect.width / this.box.width, rect.height / this.box.height);
  },

  // Redrawn after an edit (the nodes), never on a pan.
  draw(nodes) {
    this.svg.classList.toggle("shown", nodes.length > MINIMAP_FROM);
    this.box = null;
    this.svg.replaceChildren();
    if (nodes.length <= MINIMAP_FROM) return;
    const bounds = EditorRender.bounds();
    this.box = {x: bounds.x - 40, y: bounds.y - 40, width: bounds.width + 80, height: bounds.height + 80};
    const scale = this.scale(this.svg.getBoundingClientRect());
    const group = svgElement("g", {transform: `scale(${scale}) translate(${-this.box.x},${-this.box.y})`});
    for (const {x, y, width, height} of nodes) group.append(svgElement("rect", {x, y, width, height, class: "mini-node"}));
    group.append(svgElement("rect", {id: "minimap-view", class: "mini-view", "vector-effect": "non-scaling-stroke"}));
    this.svg.append(group);
    this.follow();
  },

  follow() {
    const view = this.svg && this.svg.querySelector("#minimap-view");
    if (!view) return;
    const {width, height} = EditorView.size(), {x, y, k} = EditorView.transform;
    view.setAttribute("x", -x / k);
    view.setAttribute("y", -y / k);
    view.setAttribute("width", width / k);
    view.setAttribute("height", height / k);
  },
};

function svgElement(tag, attributes = {}, text = null) {
  const made = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) made.setAttribute(key, value);
  }
  if (text !== null) made.textContent = text;
  return made;
}
