// The page's start: the tabs between the views, and each view started once /api/canvas has answered.
"use strict";

function showView(name) {
  document.querySelectorAll(".view").forEach(v => v.classList.toggle("active", v.id === name));
  document.querySelectorAll(".tab").forEach(t => t.classList.toggle("active", t.dataset.view === name));
  if (name === "compose") Canvas.drawEdges();
  if (name === "watch") Watch.draw();
  if (name === "compare" || name === "sample") Watch.refreshRuns();
  if (name === "sample") Sample.refreshFiles();
}

document.querySelectorAll(".tab").forEach(tab => tab.addEventListener("click", () => showView(tab.dataset.view)));

(async () => {
  try {
    Canvas.init(await api("/api/canvas"));
    Watch.init();
    Compare.init();
    Sample.init();
    document.body.dataset.ready = "yes";
  } catch (err) {
    say(err.message, true);
  }
})();
