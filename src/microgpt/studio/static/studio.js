// The page's start: the tabs between the views (ARIA tabs: arrow keys, Home and End move between them), the
// page's state kept in the URL's hash and in localStorage (the view, the runs followed in Watch), so that a
// reload or a second tab opens as the page was, and each view started once /api/graph/settings has answered.
"use strict";

const VIEWS = ["compose", "watch", "compare", "sample"];

const PageState = {
  STORE: "microgpt-studio-page",
  view: "compose",

  // {view, runs}: the URL's hash first (#view=watch&runs=a,b), else what this origin's last page kept.
  read() {
    const hash = new URLSearchParams(location.hash.slice(1));
    let kept = {};
    try { kept = JSON.parse(localStorage.getItem(this.STORE) || "{}") || {}; } catch (err) { kept = {}; }
    const view = hash.get("view") || kept.view;
    const runs = hash.has("runs") ? hash.get("runs").split(",").filter(Boolean) : kept.runs;
    return {view: VIEWS.includes(view) ? view : "compose", runs: Array.isArray(runs) ? runs : []};
  },

  save() {
    const runs = Watch.followed;
    const hash = new URLSearchParams({view: this.view});
    if (runs.length) hash.set("runs", runs.join(","));
    history.replaceState(null, "", "#" + hash.toString().replaceAll("%2C", ",").replaceAll("%2F", "/"));
    try { localStorage.setItem(this.STORE, JSON.stringify({view: this.view, runs})); } catch (err) { /* off */ }
  },
};

function showView(name) {
  // a message about what was done in the view left goes with it; one about a run stays while its state lasts
  if (PageState.view !== name && !(document.getElementById("message").dataset.about || "").startsWith("run:")) say("");
  PageState.view = name;
  document.querySelectorAll(".view").forEach(v => v.classList.toggle("active", v.id === name));
  document.querySelectorAll(".tab").forEach(t => {
    const chosen = t.dataset.view === name;
    t.classList.toggle("active", chosen);
    t.setAttribute("aria-selected", String(chosen));
    t.tabIndex = chosen ? 0 : -1;
  });
  PageState.save();
  if (name === "watch") Watch.draw();
  if (name === "compare" || name === "sample") Watch.refreshRuns();
  if (name === "sample") Sample.refreshFiles();
}

document.querySelectorAll(".tab").forEach(tab => tab.addEventListener("click", () => showView(tab.dataset.view)));
document.querySelector("nav[role=tablist]").addEventListener("keydown", event => {
  const tabs = [...document.querySelectorAll(".tab")];
  const at = tabs.indexOf(document.activeElement);
  if (at < 0) return;
  const to = {ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1}[event.key];
  if (to === undefined) return;
  event.preventDefault();
  const tab = tabs[(to + tabs.length) % tabs.length];
  tab.focus();
  showView(tab.dataset.view);
});

(async () => {
  try {
    const state = PageState.read();
    Compare.init();
    Sample.init();
    Inspect.init();
    Watch.init();
    const following = state.runs.length ? Watch.followOnly(state.runs).catch(err => say(err.message, true)) : null;
    // the view opened first loads first: elsewhere, the editor's family graph and its check (the server's
    // compiler) wait until the followed runs' histories are in
    const openEditor = async () => Canvas.init(await api("/api/graph/settings"));
    if (state.view === "compose") await openEditor();
    showView(state.view);
    await following;
    if (state.view !== "compose") await openEditor();
    document.body.dataset.ready = "yes";
  } catch (err) {
    say(err.message, true);
  }
})();
