// attnlab attention drawing: SVG heatmaps and bertviz-style line views, with no dependency on any page.
// Shared by the notebook views (attnlab.analysis.notebook, which inlines this file) and the explorer (app.js,
// loaded after this file by index.html). Defines window.AttnDraw once, however many times the file is included.
"use strict";
window.AttnDraw = window.AttnDraw || (function () {
  const SVG_NS = "http://www.w3.org/2000/svg";

  function el(tag, attrs = {}, parent = null, text = null) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== null) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  // Sequential blue scale (light = 0, dark = 1), interpolated between a few stops.
  const STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  function color(w) {
    const t = Math.max(0, Math.min(1, w)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(t)), f = t - i;
    const c = STOPS[i].map((a, k) => Math.round(a + (STOPS[i + 1][k] - a) * f));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }
  const inkFor = (w) => (w > 0.55 ? "#ffffff" : "#1b2233");
  const short = (s, n = 12) => (s.length > n ? s.slice(0, n - 1) + "…" : s);

  // Heatmap of M (rows x cols) into box: one <rect class="cell" data-row data-col data-weight> per pair.
  // opts: cell (px, default fitted to 400 px), labels (false hides token labels), title, onCell(i, j, w, event).
  function heatmap(box, M, rowLabels, colLabels, opts = {}) {
    const rows = M.length, cols = rows ? M[0].length : colLabels.length;
    const cell = opts.cell || Math.max(18, Math.min(40, Math.floor(400 / Math.max(rows, cols, 1))));
    const labels = opts.labels !== false, numbers = labels && cell >= 30;
    const cw = 7.3;  // approximate glyph width of the 12px monospace labels
    const rowText = labels ? Math.max(...rowLabels.map((l) => short(l).length), 1) * cw : 0;
    const colText = labels ? Math.max(...colLabels.map((l) => short(l).length), 1) * cw : 0;
    const sin = Math.sin(Math.PI * 55 / 180), cos = Math.cos(Math.PI * 55 / 180);
    const left = rowText + (labels ? 12 : 2), top = colText * sin + (labels ? 14 : 2) + (opts.title ? 16 : 0);
    const W = Math.ceil(left + cols * cell + (labels ? Math.max(8, colText * cos - cell / 2) : 2));
    const H = Math.ceil(top + rows * cell + 4);
    const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
      "aria-label": opts.title || `attention ${rows} by ${cols}`, class: "attn-heatmap" }, box);
    if (opts.title) el("svg:text", { x: 2, y: 12, class: "attn-title" }, svg, opts.title);
    if (labels) {
      rowLabels.forEach((t, i) => el("svg:text", { x: left - 6, y: top + i * cell + cell / 2 + 4, "text-anchor": "end",
        "data-row": i, class: "rlabel" }, svg, short(t)));
      colLabels.forEach((t, j) => el("svg:text", { transform: `translate(${left + j * cell + cell / 2 + 4},${top - 6}) rotate(-55)`,
        "data-col": j, class: "clabel" }, svg, short(t)));
    }
    const g = el("svg:g", {}, svg);
    M.forEach((row, i) => row.forEach((w, j) => {
      const r = el("svg:rect", { x: left + j * cell, y: top + i * cell, width: cell, height: cell, fill: color(w),
        class: "cell", "data-row": i, "data-col": j, "data-weight": w.toFixed(4) }, g);
      el("svg:title", {}, r, `${rowLabels[i]} → ${colLabels[j]}: ${w.toFixed(4)}`);
      if (numbers && w >= 0.005) {
        el("svg:text", { x: left + j * cell + cell / 2, y: top + i * cell + cell / 2 + 3.5, "text-anchor": "middle",
          class: "num", style: `fill:${inkFor(w)}` }, g, w.toFixed(2).replace(/^0/, ""));
      }
    }));
    if (opts.onCell) svg.addEventListener("mousemove", (e) => {
      const c = e.target.closest("rect.cell");
      if (c) opts.onCell(Number(c.dataset.row), Number(c.dataset.col), Number(c.dataset.weight), e);
    });
    return svg;
  }

  // The same heatmap as one <canvas class="attn-canvas"> (no per-cell nodes): for grids of many heads, where
  // tens of thousands of SVG cells would make the page slow (6 layers x 8 heads x 40 x 40 = 76,800 cells).
  // The weight under the pointer is shown in the canvas's title.
  function heatmapCanvas(box, M, rowLabels, colLabels, opts = {}) {
    const rows = M.length, cols = rows ? M[0].length : 0, cell = opts.cell || 8;
    if (opts.title) el("div", { class: "attn-title" }, box, opts.title);
    const c = el("canvas", { width: cols * cell, height: rows * cell, class: "attn-canvas",
      "data-rows": rows, "data-cols": cols }, box);
    const ctx = c.getContext("2d");
    M.forEach((row, i) => row.forEach((w, j) => { ctx.fillStyle = color(w); ctx.fillRect(j * cell, i * cell, cell, cell); }));
    c.addEventListener("mousemove", (e) => {
      const r = c.getBoundingClientRect(), i = Math.floor((e.clientY - r.top) / cell), j = Math.floor((e.clientX - r.left) / cell);
      if (i >= 0 && i < rows && j >= 0 && j < cols) c.title = `${rowLabels[i]} → ${colLabels[j]}: ${M[i][j].toFixed(3)}`;
    });
    return c;
  }

  // Lines from queries (left) to keys (right), opacity = weight; hovering a query keeps only its lines.
  // layers: [{M, color}] drawn on top of each other (bertviz's head view: one colour per head).
  // opts: title, gap (px), headers ([left, right] column names), focus (a query row drawn strong, the
  // others faint), onQuery(i) (a click on query label i).
  function lines(box, layers, queries, keys, opts = {}) {
    const rowH = 22, colW = Math.max(...queries.concat(keys).map((t) => short(t).length), 3) * 7.3 + 8;
    const gap = opts.gap || 160, n = Math.max(queries.length, keys.length);
    const focus = opts.focus === undefined ? null : opts.focus;
    const W = Math.ceil(colW * 2 + gap + 8), H = n * rowH + 26;
    const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
      "aria-label": opts.title || "attention lines", class: "attn-lines" }, box);
    if (opts.title) el("svg:text", { x: 2, y: 12, class: "attn-title" }, svg, opts.title);
    if (opts.headers) {
      el("svg:text", { x: colW, y: 12, "text-anchor": "end", class: "muted" }, svg, opts.headers[0]);
      el("svg:text", { x: colW + gap, y: 12, class: "muted" }, svg, opts.headers[1]);
    }
    const y = (i) => 26 + i * rowH + rowH / 2;
    const g = el("svg:g", {}, svg);
    layers.forEach(({ M, color: stroke, head }) => {
      const hg = el("svg:g", { "data-head": head }, g);
      M.forEach((row, i) => row.forEach((w, j) => {
        if (w < 0.01) return;
        const hot = focus === null || i === focus;
        el("svg:line", { x1: colW + 4, y1: y(i), x2: colW + gap - 4, y2: y(j), stroke: hot ? stroke : "#8a94a8",
          "stroke-width": hot ? 2 : 1.5, "stroke-opacity": (hot ? 1 : 0.25) * w, "data-row": i, "data-col": j }, hg);
      }));
    });
    const q = queries.map((t, i) => el("svg:text", { x: colW, y: y(i) + 4, "text-anchor": "end", "data-row": i,
      class: "rlabel" + (i === focus ? " on" : "") }, svg, short(t)));
    keys.forEach((t, j) => el("svg:text", { x: colW + gap, y: y(j) + 4, "data-col": j, class: "clabel" }, svg, short(t)));
    q.forEach((node, i) => {
      node.addEventListener("mouseenter", () => g.querySelectorAll("line").forEach((l) => {
        l.style.display = Number(l.dataset.row) === i ? "" : "none";
      }));
      node.addEventListener("mouseleave", () => g.querySelectorAll("line").forEach((l) => { l.style.display = ""; }));
      if (opts.onQuery) node.addEventListener("click", () => opts.onQuery(i));
    });
    return svg;
  }

  return { el, color, inkFor, short, heatmap, heatmapCanvas, lines };
})();
