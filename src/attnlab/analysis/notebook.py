"""Attention views for Jupyter: `head_view` and `model_view` of an `attnlab.analysis.Explanation`.

Each returns an `AttentionView`: Jupyter (Lab, classic Notebook, VS Code) shows it inline through
`_repr_html_()`; `save_html(path)` writes a standalone page. The HTML is self-contained — the drawing
code (`attnlab/serve/static/heatmap.js`, shared with the explorer) and the weights are inlined, nothing
is fetched, so it works offline. Where JavaScript does not run, `figure()` gives a static matplotlib one.

    ex = explain(load_translator("runs/demo/transformer"), "i'm home .")
    head_view(ex)                   # lines from queries to keys, one colour per head, one layer at a time
    model_view(ex).save_html("m.html")  # every layer x head as small heatmaps

Weights are rounded to 3 decimals in the page, so 6 layers x 8 heads x 40 tokens stays a few hundred KB.
"""

from __future__ import annotations

import html
import itertools
import json
import os
from importlib import resources
from pathlib import Path

from attnlab.analysis.subwords import merge_subwords as merge
from attnlab.attention import ATTENTION_KINDS
from attnlab.utils.files import atomic_path
from attnlab.viz.heatmaps import show_heatmaps

# Query and key tokens of each attention kind, as Explanation fields.
AXES = {
    "cross": ("tgt_tokens", "src_tokens"),
    "encoder_self": ("src_tokens", "src_tokens"),
    "decoder_self": ("tgt_tokens", "tgt_input_tokens"),
}
HEAD_COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
]
_ids = itertools.count()

_STYLE = """
.attnlab-view{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;color:#1b2233}
.attnlab-view .layout{color:#5b6478}
.attnlab-view .controls{margin:4px 0 8px}.attnlab-view .controls label{margin-right:12px}
.attnlab-view .grid{display:grid;gap:6px;align-items:start}
.attnlab-view svg text{font:11px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;fill:#1b2233}
.attnlab-view .attn-title{font-weight:600}
.attnlab-view .heads span{display:inline-block;padding:0 6px;margin-right:4px;border-radius:3px;color:#fff;
  cursor:pointer}
.attnlab-view .heads span.off{opacity:.3}
"""

# The view code: reads its data, draws with window.AttnDraw, redraws on control changes.
_VIEW_JS = """
(function () {
  const root = document.getElementById(%(id)s), D = %(data)s, A = window.AttnDraw;
  const ctl = root.querySelector(".controls"), out = root.querySelector(".out");
  const kinds = Object.keys(D.attention).filter((k) => D.attention[k].length);
  const sel = (name, options) => {
    const lab = A.el("label", {}, ctl, name + " ");
    const s = A.el("select", {"data-control": name}, lab);
    options.forEach(([v, t]) => A.el("option", {value: v}, s, t));
    s.addEventListener("change", draw);
    return s;
  };
  const kindSel = sel("attention", kinds.map((k) => [k, k.replace("_", " ")]));
  kindSel.value = kinds.includes(D.kind) ? D.kind : kinds[0];
  let layerSel = null, heads = null;
  const nLayers = () => D.attention[kindSel.value].length;
  const nHeads = () => D.attention[kindSel.value][0].length;
  if (D.view === "head") {
    layerSel = sel("layer", Array.from({length: Math.max(...kinds.map((k) => D.attention[k].length))},
                                       (_, i) => [i, String(i + 1)]));
    layerSel.value = String(Math.min(D.layer, nLayers() - 1));
    heads = A.el("span", {class: "heads"}, ctl);
  }
  const on = new Set();
  function draw() {
    out.innerHTML = "";
    const M4 = D.attention[kindSel.value], [qs, ks] = D.axes[kindSel.value];
    if (D.view === "head") {
      const layer = Math.min(Number(layerSel.value), M4.length - 1);
      heads.innerHTML = "";
      if (on.size === 0) for (let h = 0; h < nHeads(); h++) on.add(h);
      for (let h = 0; h < nHeads(); h++) {
        const b = A.el("span", {style: "background:" + D.colors[h %% D.colors.length], class: on.has(h) ? "" : "off",
                                "data-head": h}, heads, String(h + 1));
        b.addEventListener("click", () => { on.has(h) ? on.delete(h) : on.add(h); draw(); });
      }
      const layers = M4[layer].map((M, h) => ({M, head: h, color: D.colors[h %% D.colors.length]}))
                              .filter((l) => on.has(l.head));
      A.lines(out, layers, qs, ks, {title: "layer " + (layer + 1)});
    } else {
      const grid = A.el("div", {class: "grid",
                                style: "grid-template-columns:repeat(" + nHeads() + ",max-content)"}, out);
      const cell = Math.max(4, Math.min(14, Math.floor(160 / Math.max(qs.length, ks.length, 1))));
      M4.forEach((layer, l) => layer.forEach((M, h) => {
        const box = A.el("div", {"data-layer": l, "data-head": h}, grid);
        A.heatmapCanvas(box, M, qs, ks, {cell, title: "L" + (l + 1) + " H" + (h + 1)});
      }));
    }
  }
  draw();
})();
"""


def layout_caption(explanation) -> str:
    """One line naming the model's position scheme and its key/value heads, e.g. "transformer · positions:
    rope · 2 key/value heads for 8 query heads (grouped-query)"; the model type alone where neither is known."""
    parts = [explanation.model_type]
    if explanation.positions is not None:
        parts.append(f"positions: {explanation.positions}")
    H, kv = explanation.num_heads, explanation.num_kv_heads
    if H is not None and kv is not None:
        if kv == H:
            parts.append(f"{H} heads, each with its own keys/values (multi-head)")
        elif kv == 1:
            parts.append(f"1 key/value head shared by {H} query heads (multi-query)")
        else:
            parts.append(f"{kv} key/value heads for {H} query heads (grouped-query)")
    return " · ".join(parts)


def _drawing_js() -> str:
    return resources.files("attnlab.serve").joinpath("static/heatmap.js").read_text(encoding="utf-8")


class AttentionView:
    """An interactive attention view: shown inline by Jupyter, or written out with `save_html`."""

    def __init__(self, view: str, explanation, kind: str = "cross", layer: int = 0, merge_subwords: bool = False):
        if merge_subwords:  # SentencePiece pieces -> words (attnlab.analysis.merge_subwords; the explorer's switch)
            explanation = merge(explanation)
        if view not in ("head", "model"):
            raise ValueError(f"view must be 'head' or 'model', got {view!r}")
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
        weights = {k: getattr(explanation, k) for k in ATTENTION_KINDS}
        if not len(weights[kind]):
            have = [k for k in ATTENTION_KINDS if len(weights[k])]
            raise ValueError(f"this model has no {kind} attention; choose kind from {', '.join(have)}")
        if not 0 <= layer < len(weights[kind]):
            raise ValueError(f"layer must be in 0..{len(weights[kind]) - 1} for {kind} attention, got {layer}")
        self.view, self.kind, self.layer, self.explanation = view, kind, layer, explanation
        # (N, H, Lq, Lk) -> nested lists rounded to 3 decimals: the page stays small at 6 x 8 x 40 x 40.
        self.data = {
            "view": view,
            "kind": kind,
            "layer": layer,
            "colors": HEAD_COLORS,
            "text": explanation.text,
            "translation": explanation.translation,
            "attention": {k: (weights[k].float() * 1000).round().div(1000).tolist() for k in ATTENTION_KINDS},
            "axes": {k: [getattr(explanation, q), getattr(explanation, kk)] for k, (q, kk) in AXES.items()},
        }

    def _fragment(self) -> str:
        view_id = f"attnlab-view-{os.getpid()}-{next(_ids)}"
        data = json.dumps(self.data, ensure_ascii=False).replace("</", "<\\/")  # no early </script>
        script = _drawing_js() + _VIEW_JS % {"id": json.dumps(view_id), "data": data}
        caption = html.escape(f"{self.explanation.text} → {self.explanation.translation}")
        layout = html.escape(layout_caption(self.explanation))
        return (
            f'<div class="attnlab-view" id="{view_id}" data-view="{self.view}"><style>{_STYLE}</style>'
            f'<div class="caption">{caption}</div><div class="layout">{layout}</div>'
            f'<div class="controls"></div><div class="out"></div>'
            f"<script>{script}</script></div>"
        )

    def _repr_html_(self) -> str:
        return self._fragment()

    def save_html(self, path: str | os.PathLike) -> Path:
        """A standalone page (no network needed); written atomically. Returns the path."""

        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(path))
        page = (
            f'<!doctype html><html><head><meta charset="utf-8"><title>attnlab {self.view} view</title></head>'
            f"<body>{self._fragment()}</body></html>\n"
        )
        with atomic_path(path) as tmp:
            Path(tmp).write_text(page, encoding="utf-8")
        return path

    def figure(self):
        """Static fallback (no JavaScript): the chosen kind as a matplotlib grid, layers x heads."""

        W = getattr(self.explanation, self.kind)
        q, k = AXES[self.kind]
        if self.view == "head":
            W = W[self.layer : self.layer + 1]
        return show_heatmaps(
            W,
            xlabel="keys",
            ylabel="queries",
            titles=[f"head {h + 1}" for h in range(W.shape[1])],
            xticklabels=getattr(self.explanation, k),
            yticklabels=getattr(self.explanation, q),
        )


def head_view(explanation, kind: str = "cross", layer: int = 0, merge_subwords: bool = False) -> AttentionView:
    """bertviz-style head view: lines from query to key tokens, one colour per head (click a head to hide
    it), one layer at a time (a selector switches layer and attention kind). A caption line names the
    position scheme and the key/value heads (`layout_caption`). merge_subwords: show words instead of
    SentencePiece pieces (keys summed over a word's pieces, queries averaged)."""
    return AttentionView("head", explanation, kind, layer, merge_subwords)


def model_view(explanation, kind: str = "cross", merge_subwords: bool = False) -> AttentionView:
    """Every layer x head of one attention kind as small heatmaps (a selector switches the kind), under the
    same caption as `head_view`; merge_subwords as in `head_view`."""
    return AttentionView("model", explanation, kind, merge_subwords=merge_subwords)
