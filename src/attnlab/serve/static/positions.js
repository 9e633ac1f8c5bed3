// attnlab explorer: what the model's position scheme adds to the selected head (the data source's positions: GET /api/positions, or computed in the browser), drawn
// after each translation (app.js dispatches "attn:shown") and on every head change. ALiBi and T5: the bias
// heatmaps of encoder and decoder self-attention for this sentence's lengths; RoPE: each feature pair's
// rotation angle at each position; other schemes: one line saying nothing is added per head.
"use strict";
(function () {
  const { el, color } = window.AttnDraw;
  const $ = (id) => document.getElementById(id);
  let maps = null;

  // Heatmap of M (null = hidden key) coloured from its min (light) to its max (dark); titles carry the values.
  function grid(box, M, title, unit) {
    const vals = M.flat().filter((v) => v !== null);
    const lo = Math.min(...vals), hi = Math.max(...vals), span = hi - lo || 1;
    const rows = M.length, cols = rows ? M[0].length : 0;
    const cell = Math.max(6, Math.min(28, Math.floor(320 / Math.max(rows, cols, 1))));
    const fig = el("div", { class: "pos-map" }, box);
    el("div", { class: "muted small" }, fig, `${title} (${lo.toFixed(3)} … ${hi.toFixed(3)} ${unit})`);
    const svg = el("svg:svg", { width: cols * cell, height: rows * cell, role: "img", "aria-label": title, class: "pos-svg" }, fig);
    M.forEach((row, i) => row.forEach((v, j) => {
      const r = el("svg:rect", { x: j * cell, y: i * cell, width: cell, height: cell, class: "cell",
        fill: v === null ? "#eeeeee" : color((v - lo) / span), "data-row": i, "data-col": j }, svg);
      el("svg:title", {}, r, v === null ? `query ${i}, key ${j}: hidden (causal)` : `query ${i}, key ${j}: ${v.toFixed(4)} ${unit}`);
    }));
  }

  function draw() {
    const box = $("positions-map"), note = $("positions-note");
    if (!box || !maps) return;
    box.innerHTML = "";
    $("positions-card").hidden = false;
    const sel = $("head").value, head = sel === "mean" ? 0 : Number(sel);
    const which = sel === "mean" ? `head 1 (pick a head to see another)` : `head ${head + 1}`;
    if (maps.scheme === "alibi" || maps.scheme === "t5") {
      const what = maps.scheme === "alibi" ? `slope ${maps.slopes[head].toPrecision(3)}: bias = −slope × |i − j|`
        : `learned bias of each relative-position bucket (${maps.num_buckets} buckets, up to ${maps.max_distance})`;
      note.textContent = `${maps.scheme} · ${which} · ${what}`;
      grid(box, maps.encoder_self[head], "encoder self-attention: query × key", "bias");
      grid(box, maps.decoder_self[head], "decoder self-attention (causal)", "bias");
    } else if (maps.scheme === "rope") {
      note.textContent = `rope · rot_dim ${maps.rot_dim}, base ${maps.base} · the same rotation for every head: ` +
        "rows = positions, columns = feature pairs, colour = angle mod 2π";
      grid(box, maps.angles.map((row) => row.map((a) => a % (2 * Math.PI))), "rotation angle: position × feature pair", "rad");
    } else {
      note.textContent = maps.scheme ? `${maps.scheme} positions: nothing is added per head` : "no position scheme";
    }
  }

  document.addEventListener("attn:shown", (e) => {
    const d = e.detail;
    window.AttnSource.positions(d.src_tokens.length, d.tgt_tokens.length)
      .then((m) => { maps = m; if (m) draw(); else $("positions-card").hidden = true; })
      .catch(() => { $("positions-card").hidden = true; });
  });
  $("head").addEventListener("change", draw);
})();
