// The Sample view's Inspect panel: inside the chosen checkpoint's model, for the prompt above (its first seq_len
// tokens), the figures `microgpt inspect` draws, from the same code (studio/inspection.py): the chosen node's
// activations (each position's norm, a histogram), an attention node's maps, the logit lens of the final
// stream, and each head's ablation score on the prompt. The node list is the model's paths (docs/inspect.md).
"use strict";

const Inspect = {
  asking: 0, // the number of the latest request: an older answer arriving after it is dropped

  init() {
    document.getElementById("inspect").addEventListener("click", () => this.run());
    document.getElementById("sample-checkpoint").addEventListener("change", () => {
      setOptions(document.getElementById("inspect-node"), []); // another model, other paths
      document.getElementById("inspect-result").replaceChildren();
    });
  },

  async run() {
    const asking = ++this.asking;
    const value = id => document.getElementById(id).value;
    const out = document.getElementById("inspect-result");
    say("inspecting...", false, "inspect");
    let found;
    try {
      found = await api("/api/inspect", {body: {checkpoint: value("sample-checkpoint"), text: value("prompt"),
        node: value("inspect-node") || null, backend: value("sample-backend")}});
    } catch (err) {
      if (asking === this.asking) say(err.message, true, "inspect");
      return;
    }
    if (asking !== this.asking) return;
    unsay("inspect");
    const select = document.getElementById("inspect-node");
    setOptions(select, found.paths.map(([path, width]) => [path, `${path} (${width} wide)`]));
    if (found.node) select.value = found.node;
    if (!found.figures) {
      out.replaceChildren(element("p", {class: "note"}, "write a prompt above to inspect"));
      return;
    }
    const figure = (key, caption) => found.figures[key] ? [element("p", {class: "note"}, caption),
      element("img", {src: `data:image/png;base64,${found.figures[key]}`, alt: caption, style: "max-width: 100%",
                      "data-figure": key})] : [];
    const heads = found.heads ? [element("p", {class: "note"}, `each head ablated (zeroed) on the prompt: loss ` +
      `${found.heads.clean.toFixed(4)} nats per token without, the most harmful first`),
      element("table", {id: "inspect-heads"}, element("tr", {}, ...["head", "width", "loss", "change"].map(
        h => element("th", {}, h))), ...found.heads.ranked.map(([path, width, loss, delta]) => element("tr", {},
        element("td", {}, path), element("td", {}, String(width)), element("td", {}, loss.toFixed(4)),
        element("td", {}, (delta >= 0 ? "+" : "") + delta.toFixed(4)))))] : [];
    out.replaceChildren(...figure("activations", `${found.node}: each position's norm and its values`),
      ...figure("attention", `${found.node}: each head's attention weights`),
      ...figure("lens", "the logit lens: each point of the residual stream through the final norm and head"),
      ...heads);
  },
};
