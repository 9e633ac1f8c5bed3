// attnlab attention explorer: no framework, no build step, no network beyond this server.
// Heatmaps and line views are SVG drawn by heatmap.js (window.AttnDraw); the Nadaraya–Watson heatmap is a canvas.
"use strict";

const { el, color, inkFor, short } = window.AttnDraw;  // heatmap.js: the drawing shared with the notebook views
const $ = (id) => document.getElementById(id);
const EXAMPLES = ["i'm home .", "go .", "i lost .", "he's calm .", "we are friends .", "i like apples ."];

// ───────────────────────── helpers ─────────────────────────
const isSpecial = (t) => /^<.*>$/.test(t);
const fmt = (w) => w.toFixed(4);

const tooltip = $("tooltip");
function showTip(html, x, y) {
  tooltip.innerHTML = html;
  tooltip.hidden = false;
  const r = tooltip.getBoundingClientRect();
  const left = Math.min(x + 14, window.innerWidth - r.width - 6);
  const top = y + 16 + r.height > window.innerHeight ? y - r.height - 10 : y + 16;
  tooltip.style.left = `${Math.max(4, left)}px`;
  tooltip.style.top = `${Math.max(4, top)}px`;
}
const hideTip = () => { tooltip.hidden = true; };
const esc = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

// ───────────────────────── tabs ─────────────────────────
document.querySelectorAll(".tab").forEach((tab) => tab.addEventListener("click", () => {
  document.querySelectorAll(".tab").forEach((t) => {
    const on = t === tab;
    t.classList.toggle("active", on);
    t.setAttribute("aria-selected", on);
    $(t.dataset.panel).hidden = !on;
  });
  if (tab.id === "tab-nw") nw.render();
}));

// ───────────────────────── translator state ─────────────────────────
const S = { data: null, layer: 0, head: "mean", step: 0, off: {} };  // off: kind -> Set of "layer,head"

// Beam and n-best choices up to the server's max_beam, starting at the run's decoding defaults (GET /api/model).
function beamChoices(maxBeam, defaults) {
  $("beam").innerHTML = ""; $("nbest").innerHTML = "";
  for (let b = 1; b <= maxBeam; b++) el("option", { value: b }, $("beam"), b === 1 ? "1 (greedy)" : String(b));
  for (let n = 1; n <= maxBeam; n++) el("option", { value: n }, $("nbest"), String(n));
  $("beam").value = String(Math.min(defaults.beam || 1, maxBeam));
  $("nbest").value = String(Math.min(defaults.n_best || 1, Number($("beam").value)));
}
beamChoices(8, { beam: 1, n_best: 1 });
// n-best hypotheses come from the beam: keep n-best <= beam, moving the other select when one moves.
$("nbest").addEventListener("change", () => {
  if (Number($("nbest").value) > Number($("beam").value)) $("beam").value = $("nbest").value;
});
$("beam").addEventListener("change", () => {
  if (Number($("nbest").value) > Number($("beam").value)) $("nbest").value = $("beam").value;
});
EXAMPLES.forEach((ex) => {
  const chip = el("button", { type: "button", class: "chip" }, $("examples"), ex);
  chip.addEventListener("click", () => { $("text").value = ex; translate(); });
});

const source = window.AttnSource;  // source.js (the server's API) or source-onnx.js (the browser, no server)
// Controls the source cannot serve are hidden, not left to fail.
const F = source.features;
document.querySelectorAll("[data-needs]").forEach((node) => { node.hidden = !F[node.dataset.needs]; });

source.model().then((m) => {
  const c = m.model || {};
  const depth = c.decoder_layers != null && c.decoder_layers !== c.num_layers ? `${c.num_layers}+${c.decoder_layers}` : c.num_layers;
  const shape = c.num_layers ? `${depth} layers × ${c.num_heads} heads, d=${c.num_hiddens}` : "";
  $("model-info").textContent = `model: ${m.model_type} ${shape}, ${m.parameters.toLocaleString("en")} parameters, ` +
    `vocabularies ${m.src_vocab_size} / ${m.tgt_vocab_size}` +
    (m.max_source_tokens ? `, up to ${m.max_source_tokens - 1} source tokens` : "") + ` · ${m.origin}`;
  const opts = $("model-options");
  opts.innerHTML = "";
  for (const [k, v] of Object.entries(c)) el("span", { class: "opt" }, opts, `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`);
  $("text").maxLength = m.max_chars;
  $("model-layout").textContent = m.positions ? `· ${m.positions} positions, ${m.num_kv_heads} KV heads` : "";
  if (m.data_attribution) $("attribution").textContent = `Data: ${m.data_attribution}.`;  // what this model learned from
  beamChoices(m.max_beam, m.decoding || {});
}).catch((err) => { $("model-info").textContent = `model info unavailable (${err.message || err})`; }).finally(() => {
  // A newcomer sees attention at once: translate the sentence of the address (index.html?text=...), else the
  // first example (unless they already typed), with the run's default decoding, as `attnlab translate` would.
  const asked = new URLSearchParams(window.location.search).get("text");
  if (asked) $("text").value = asked;
  else if (!$("text").value.trim()) $("text").value = EXAMPLES[0];
  translate();
});

$("translate-form").addEventListener("submit", (e) => { e.preventDefault(); translate(); });

// The options object of POST /api/explain (attnlab.decoding.DecodeOptions); null when all are defaults.
function decodeOptions() {
  const o = {}, n = Number($("nbest").value), prefix = $("prefix").value.trim();
  const phrases = $("constraints").value.split("\n").map((p) => p.trim()).filter(Boolean);
  if (n > 1) o.n_best = n;
  if (prefix) o.prefix = prefix;
  if (phrases.length) o.constraints = phrases;
  if ($("align").checked) o.align = true;
  return Object.keys(o).length ? o : null;
}

// A few samples beside the beam's best (the source's samples: no maps), or null when sampling is off.
function samplesRequest(text) {
  if (!F.sampling || !$("sample").checked) return Promise.resolve(null);
  const options = { sample: true, n_best: Number($("samples").value) || 3, temperature: Number($("temperature").value),
    top_p: Number($("top-p").value), seed: Math.trunc(Number($("seed").value)) };
  return source.samples({ texts: [text], options }).then((b) => ({ options, nbest: b.results[0].nbest }));
}

async function translate() {
  const button = $("translate"), error = $("error");
  error.hidden = true;
  button.disabled = true;
  button.textContent = "Translating…";
  try {
    const payload = { text: $("text").value, beam: F.beam ? Number($("beam").value) : 1, heads_off: F.heads ? headsOff() : null,
      merge_subwords: $("merge").checked };
    const options = F.options ? decodeOptions() : null;
    if (options) payload.options = options;
    const [body, samples] = await Promise.all([source.translate(payload), samplesRequest(payload.text)]);
    body.samples = samples;
    body.options = options;
    show(body);
  } catch (err) {
    error.textContent = err.message || String(err);
    error.hidden = false;
  } finally {
    button.disabled = false;
    button.textContent = "Translate";
  }
}

function show(data) {
  S.data = data;
  const A = data.attention;
  // The stacks may differ in depth (a deep encoder, a shallow decoder): the selector spans the deepest,
  // and a shallower stack shows its last layer past its depth (`pick`).
  const layers = Math.max(A.cross.length, A.encoder_self.length, A.decoder_self.length);
  const heads = A.cross.length ? A.cross[0].length : 0;
  S.layer = Math.min(S.layer, Math.max(0, layers - 1));
  if (S.head !== "mean" && S.head >= heads) S.head = "mean";
  fillSelect($("layer"), Array.from({ length: layers }, (_, i) => [i, `${i + 1} of ${layers}`]), S.layer);
  fillSelect($("head"), [["mean", "mean over heads"], ...Array.from({ length: heads }, (_, h) => [h, `head ${h + 1}`])], S.head);
  $("translation").textContent = data.translation || "(empty translation)";
  const o = data.options || {};
  const extra = [o.n_best ? `n-best ${o.n_best}` : "", o.prefix ? `prefix “${o.prefix}”` : "",
    o.constraints ? `${o.constraints.length} constraint${o.constraints.length > 1 ? "s" : ""}` : ""].filter(Boolean);
  $("meta").textContent = `${data.beam === 1 ? "greedy" : `beam ${data.beam}`}${extra.map((x) => ` · ${x}`).join("")} · ` +
    `${data.src_tokens.length} source tokens → ` +
    `${data.tgt_tokens.length} output tokens${data.finished ? "" : " (stopped at the length limit)"} · ${data.elapsed_ms} ms`;
  $("enc-card").hidden = !A.encoder_self.length;
  $("dec-card").hidden = !A.decoder_self.length;
  const step = $("step");
  step.max = Math.max(0, data.tgt_tokens.length - 1);
  S.step = 0;
  step.value = 0;
  $("merge-label").hidden = !data.subwords;
  $("result").hidden = false;
  renderHeads();
  renderBeam();
  renderSamples();
  renderMaps();
  document.dispatchEvent(new CustomEvent("attn:shown", { detail: data }));  // positions.js draws its card
}

// One <li class="hyp"> per hypothesis: its text and score, and whether it holds every constraint phrase.
function hypList(list, items, best) {
  list.innerHTML = "";
  items.forEach((h, i) => {
    const li = el("li", { class: "hyp" + (best && i === 0 ? " best" : "") }, list);
    el("span", { class: "hyp-text" }, li, h.text || "(empty)");
    el("span", { class: "hyp-score" }, li, h.score === null || h.score === undefined ? "" : h.score.toFixed(3));
    if (h.constraints_met === true) el("span", { class: "badge met", title: "holds every constraint phrase" }, li, "constrained ✓");
    if (h.constraints_met === false) el("span", { class: "badge unmet", title: "cut at the length limit before holding every phrase" }, li, "a phrase missing");
    if (h.finished === false) el("span", { class: "badge unmet" }, li, "length limit");
  });
}

function renderSamples() {
  const d = S.data, box = $("samples-box");
  box.hidden = !d.samples;
  if (!d.samples) return;
  const o = d.samples.options;
  $("samples-meta").textContent = `(temperature ${o.temperature}, top-p ${o.top_p}, seed ${o.seed}; the beam's best is above)`;
  hypList($("samples-list"), d.samples.nbest, false);
}

// Word alignment over the encoder–decoder heatmap: one <rect class="align-link"> around the cells of each
// linked (target word, source word) pair, and the pairs as text below it.
function renderAlignment() {
  const d = S.data, box = $("alignment"), al = d.alignment;
  box.hidden = !al;
  box.innerHTML = "";
  if (!al) return;
  el("span", {}, box, al.pairs.length ? "word alignment: " : "word alignment: no links");
  al.pairs.forEach(([i, j]) => el("span", { class: "pair" }, box, `${al.target_words[j]} → ${al.source_words[i]}`));
  const svg = $("cross-heatmap").querySelector("svg"), first = svg && svg.querySelector("rect.cell");
  if (!first || d.merged) return;  // the token → word indices are those of unmerged tokens
  const x0 = Number(first.getAttribute("x")), y0 = Number(first.getAttribute("y")), cell = Number(first.getAttribute("height"));
  const span = (index, w) => index.reduce((acc, v, t) => (v === w ? [Math.min(acc[0], t), Math.max(acc[1], t)] : acc), [Infinity, -1]);
  al.pairs.forEach(([i, j]) => {
    const [c0, c1] = span(al.source_token_words, i), [r0, r1] = span(al.target_token_words, j);
    if (c1 < 0 || r1 < 0) return;
    const link = el("svg:rect", { x: x0 + c0 * cell, y: y0 + r0 * cell, width: (c1 - c0 + 1) * cell, height: (r1 - r0 + 1) * cell,
      class: "align-link", "data-src-word": i, "data-tgt-word": j }, svg);
    el("svg:title", {}, link, `${al.target_words[j]} → ${al.source_words[i]}`);
  });
}

function fillSelect(sel, options, value) {
  sel.innerHTML = "";
  for (const [v, label] of options) el("option", { value: v }, sel, label);
  sel.value = String(value);
}

// The selected layer's [q][k] matrix: one head, or the mean over heads.
function pick(maps) {
  if (!maps || !maps.length) return [];
  const perHead = maps[Math.min(S.layer, maps.length - 1)];
  if (S.head !== "mean") return perHead[S.head];
  return perHead[0].map((row, q) => row.map((_, k) => perHead.reduce((s, h) => s + h[q][k], 0) / perHead.length));
}

$("layer").addEventListener("change", (e) => { S.layer = Number(e.target.value); renderMaps(); });
$("head").addEventListener("change", (e) => { S.head = e.target.value === "mean" ? "mean" : Number(e.target.value); renderMaps(); });
$("lines-kind").addEventListener("change", renderLines);
$("step").addEventListener("input", (e) => setStep(Number(e.target.value)));
$("prev").addEventListener("click", () => setStep(S.step - 1));
$("next").addEventListener("click", () => setStep(S.step + 1));

function setStep(s) {
  if (!S.data) return;
  S.step = Math.max(0, Math.min(S.data.tgt_tokens.length - 1, s));
  $("step").value = S.step;
  renderStep();
}

function renderMaps() {
  const d = S.data, A = d.attention;
  const who = { src: "source", out: "output", in: "decoder input" };
  heatmap($("cross-heatmap"), pick(A.cross), d.tgt_tokens, d.src_tokens, [who.out, who.src], true);
  renderAlignment();
  if (A.encoder_self.length) heatmap($("enc-heatmap"), pick(A.encoder_self), d.src_tokens, d.src_tokens, [who.src, who.src], false);
  if (A.decoder_self.length) heatmap($("dec-heatmap"), pick(A.decoder_self), d.tgt_tokens, d.tgt_input_tokens, [who.out, who.in], true);
  renderLines();
  renderStep();
}

// ───────────────────────── heatmap (AttnDraw.heatmap + the page's tooltip and stepping) ─────────────────────────
// One <rect class="cell" data-row=q data-col=k data-weight=w> per (query, key) pair.
function heatmap(box, M, rowLabels, colLabels, names, stepRows) {
  box.innerHTML = "";
  const svg = window.AttnDraw.heatmap(box, M, rowLabels, colLabels);
  svg.setAttribute("aria-label", `${names[0]} × ${names[1]} attention, ${M.length} by ${M.length ? M[0].length : 0}`);
  svg.querySelectorAll("rect.cell > title").forEach((t) => t.remove());  // the page's tooltip replaces them
  const first = svg.querySelector("rect.cell");
  if (stepRows && first) {
    const x = Number(first.getAttribute("x")), y0 = Number(first.getAttribute("y")), cell = Number(first.getAttribute("height"));
    el("svg:rect", { x: x - 1, y: y0 + S.step * cell - 1, width: M[0].length * cell + 2, height: cell + 2, class: "row-outline" }, svg);
  }
  const label = (sel, idx) => svg.querySelector(`${sel}[data-${sel === ".rlabel" ? "row" : "col"}="${idx}"]`);
  let lit = [];
  const hover = (e) => {
    const c = e.target.closest("rect.cell");
    lit.forEach((n) => n.classList.remove("on"));
    if (!c) { hideTip(); lit = []; return; }
    const i = Number(c.dataset.row), j = Number(c.dataset.col);
    lit = [label(".rlabel", i), label(".clabel", j)].filter(Boolean);
    lit.forEach((n) => n.classList.add("on"));
    showTip(`${names[0]} <b>${esc(rowLabels[i])}</b> (#${i + 1})<br>→ ${names[1]} <b>${esc(colLabels[j])}</b> (#${j + 1})` +
      `<br>weight <b>${c.dataset.weight}</b>`, e.clientX, e.clientY);
  };
  svg.addEventListener("mousemove", hover);
  svg.addEventListener("mouseleave", () => { hideTip(); lit.forEach((n) => n.classList.remove("on")); });
  svg.addEventListener("click", (e) => {
    hover(e);
    const c = e.target.closest("rect.cell");
    if (c && stepRows) setStep(Number(c.dataset.row));  // clicking a row steps the decoder there
  });
}

// ───────────────────────── lines view (AttnDraw.lines, bertviz-like head view) ─────────────────────────
function renderLines() {
  const d = S.data;
  if (!d) return;
  const kind = $("lines-kind").value, A = d.attention;
  const box = $("lines");
  box.innerHTML = "";
  if (!A[kind] || !A[kind].length) { box.textContent = "this model has no such attention"; return; }
  const [qs, ks] = kind === "cross" ? [d.tgt_tokens, d.src_tokens]
    : kind === "encoder_self" ? [d.src_tokens, d.src_tokens] : [d.tgt_tokens, d.tgt_input_tokens];
  const focus = kind === "encoder_self" ? null : S.step;
  window.AttnDraw.lines(box, [{ M: pick(A[kind]), color: "#1f5fd6", head: S.head }], qs, ks, {
    gap: 200, focus,
    headers: [kind === "encoder_self" ? "source" : "output", kind === "decoder_self" ? "decoder input" : "source"],
    onQuery: kind === "encoder_self" ? null : (i) => setStep(i),
  });
}

// ───────────────────────── heads: importance strip and on/off switches ─────────────────────────
const KIND_NAMES = { encoder_self: "encoder self", decoder_self: "decoder self", cross: "encoder–decoder" };

function headsOff() {
  const out = {};
  for (const [kind, set] of Object.entries(S.off)) if (set.size) out[kind] = [...set].map((k) => k.split(",").map(Number));
  return Object.keys(out).length ? out : null;
}

// One small grid per attention kind: rows = layers, columns = heads; colour = importance (scaled within
// the kind), a crossed-out head is switched off. Clicking a head toggles it and translates again.
function renderHeads() {
  const d = S.data, box = $("heads-grid");
  box.innerHTML = "";
  const imp = d.importance || { values: {}, source: "" };
  for (const kind of ["encoder_self", "decoder_self", "cross"]) {
    const maps = d.attention[kind];
    if (!maps || !maps.length) continue;
    const vals = imp.values[kind] || [];
    const flat = vals.flat().filter((v) => Number.isFinite(v));
    const lo = Math.min(...flat, 0), hi = Math.max(...flat, 1e-12);
    const group = el("div", { class: "head-kind" }, box);
    el("div", { class: "head-kind-name" }, group, KIND_NAMES[kind]);
    const table = el("div", { class: "head-table", role: "group", "aria-label": `${KIND_NAMES[kind]} heads` }, group);
    const off = S.off[kind] || new Set();
    maps.forEach((perHead, layer) => {
      const row = el("div", { class: "head-row" }, table);
      el("span", { class: "head-layer muted" }, row, `L${layer + 1}`);
      perHead.forEach((_, h) => {
        const v = vals[layer] ? vals[layer][h] : null, key = `${layer},${h}`;
        const t = v === null || v === undefined ? 0 : (v - lo) / (hi - lo || 1);
        const isOff = off.has(key);
        const b = el("button", { type: "button", class: "head" + (isOff ? " off" : ""), "data-kind": kind,
          "data-layer": layer, "data-head": h, "aria-pressed": String(!isOff),
          title: `${KIND_NAMES[kind]}, layer ${layer + 1}, head ${h + 1}: importance ${v === null || v === undefined ? "?" : v.toPrecision(3)}` +
            (isOff ? " (off: click to switch on)" : " (click to switch off)"),
          style: `background:${color(t)};color:${inkFor(t)}` }, row, String(h + 1));
        b.addEventListener("click", () => {
          const set = S.off[kind] || (S.off[kind] = new Set());
          if (set.has(key)) set.delete(key); else set.add(key);
          translate();
        });
      });
    });
  }
  const n = Object.values(S.off).reduce((a, s) => a + s.size, 0);
  $("heads-reset").hidden = !n;
  $("importance-source").textContent = `importance: ${imp.source}` + (n ? ` · ${n} head${n > 1 ? "s" : ""} off` : "");
}

$("heads-reset").addEventListener("click", () => { S.off = {}; translate(); });
$("merge").addEventListener("change", () => translate());

// ───────────────────────── beam search, step by step ─────────────────────────
// One column per decoding step: the 2 × beam best continuations, best first; the winner's path is marked.
function renderBeam() {
  const d = S.data, card = $("beam-card"), box = $("beam-steps");
  const tr = d.beam_trace, nbest = d.nbest || [];
  const listed = nbest.length > 1 || nbest.some((h) => h.constraints_met !== null);
  // The trace records plain beam search only: a constrained, n-best or prefixed search is said untraced.
  const o = d.options || {}, searched = [o.constraints ? "constrained" : "", o.n_best ? "n-best" : "",
    o.prefix ? "prefixed" : ""].filter(Boolean);
  const untraced = !tr && d.beam > 1 && searched.length > 0;
  $("trace-note").hidden = !untraced;
  $("trace-note").textContent = untraced ? `No step-by-step view: it traces plain beam search only, and this ` +
    `${searched.join(", ")} search is not plain (the hypotheses above are what it found).` : "";
  card.hidden = !tr && !listed && !untraced;
  $("nbest-box").hidden = !listed;
  if (listed) hypList($("nbest-list"), nbest, true);
  $("trace-box").hidden = !tr;
  box.innerHTML = "";
  if (!tr) return;
  const onPath = new Set(tr.path.map(([s, i]) => `${s},${i}`));
  tr.steps.forEach((st) => {
    const col = el("div", { class: "beam-step" }, box);
    el("div", { class: "beam-step-name muted" }, col, `step ${st.step + 1}`);
    st.candidates.forEach((c, i) => {
      if (c.status === "impossible") return;
      const win = onPath.has(`${st.step},${i}`);
      const node = el("div", { class: `cand ${c.status}` + (win ? " win" : ""), "data-step": st.step, "data-index": i,
        title: `${c.status}${c.slot !== null ? ` (beam slot ${c.slot + 1})` : ""}; extends slot ${c.parent + 1}; ` +
          `log p(token) = ${c.logprob.toFixed(3)}, total ${c.score.toFixed(3)}` }, col);
      el("span", { class: "cand-tok" }, node, c.text);
      el("span", { class: "cand-score" }, node, c.norm_score.toFixed(2));
    });
  });
}

// ───────────────────────── step-through ─────────────────────────
function renderStep() {
  const d = S.data;
  if (!d) return;
  const s = S.step, M = pick(d.attention.cross), w = M[s] || [];
  const produced = d.tgt_tokens[s];
  let best = 0;
  w.forEach((x, j) => { if (x > w[best]) best = j; });
  $("step-label").innerHTML = `step <b>${s + 1}</b> of ${d.tgt_tokens.length}: the decoder read ` +
    `<b>${esc(d.tgt_input_tokens[s])}</b> and produced <b>${esc(produced)}</b>` +
    (w.length ? `, attending most to <b>${esc(d.src_tokens[best])}</b> (${fmt(w[best])})` : "");
  const src = $("step-source");
  src.innerHTML = "";
  d.src_tokens.forEach((t, j) => {
    const x = w[j] || 0;
    el("span", { class: "tok" + (isSpecial(t) ? " special" : ""), title: `weight ${fmt(x)}`, "data-col": j,
      style: `background:${color(x)};color:${inkFor(x)}` }, src, t);
  });
  const out = $("step-output");
  out.innerHTML = "";
  d.tgt_tokens.forEach((t, i) => {
    const node = el("span", { class: "tok" + (i === s ? " current" : i > s ? " future" : "") + (isSpecial(t) ? " special" : ""),
      "data-row": i }, out, t);
    node.addEventListener("click", () => setStep(i));
  });
  // Move the row outlines to the current step without redrawing the maps.
  document.querySelectorAll(".heatmap .row-outline").forEach((r) => {
    const svg = r.ownerSVGElement, first = svg.querySelector("rect.cell");
    if (first) r.setAttribute("y", Number(first.getAttribute("y")) + s * Number(first.getAttribute("height")) - 1);
  });
  if ($("lines-kind").value !== "encoder_self") renderLines();
}

// legend
$("legend-bar").style.background = `linear-gradient(to right, ${[0, 0.25, 0.5, 0.75, 1].map(color).join(", ")})`;

// ───────────────────────── Nadaraya–Watson playground ─────────────────────────
// Training data as in the book: x ~ U(0, 5) sorted, y = 2 sin x + x^0.8 + N(0, 0.5²), from a seeded PRNG.
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const f = (x) => 2 * Math.sin(x) + Math.pow(x, 0.8);

const KERNELS = {
  gaussian: (u) => Math.exp(-u * u / 2),
  boxcar: (u) => (Math.abs(u) < 1 ? 1 : 0),
  epanechnikov: (u) => Math.max(0, 1 - u * u),
  constant: () => 1,
};

const nw = {
  query: 2.5, dragging: false, xs: [], ys: [],
  data() {
    const n = Math.max(5, Math.min(200, Number($("nw-n").value) || 50));
    const rand = mulberry32(Number($("nw-seed").value) || 0);
    const xs = Array.from({ length: n }, () => rand() * 5).sort((a, b) => a - b);
    const ys = xs.map((x) => {
      const u1 = Math.max(rand(), 1e-12), u2 = rand();  // Box–Muller
      return f(x) + 0.5 * Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
    });
    this.xs = xs; this.ys = ys;
  },
  // Attention weights of one query over the training points (softmax of the kernel's log-scores).
  weights(x) {
    const sigma = Number($("bandwidth").value), k = KERNELS[$("kernel").value];
    const raw = this.xs.map((xi) => k((x - xi) / sigma));
    const total = raw.reduce((a, b) => a + b, 0);
    return total > 0 ? raw.map((r) => r / total) : null;  // null: no point inside the window
  },
  predict(x) {
    const w = this.weights(x);
    return w ? w.reduce((s, wi, i) => s + wi * this.ys[i], 0) : null;
  },
  render() {
    if ($("panel-nw").hidden) return;
    $("bandwidth-value").textContent = Number($("bandwidth").value).toFixed(2);
    this.plot();
    this.heat();
  },
  plot() {
    const box = $("nw-plot"), W = 640, H = 400, pad = { l: 36, r: 10, t: 10, b: 84 }, barH = 56;
    box.innerHTML = "";
    const ylo = Math.min(-1.5, ...this.ys) - 0.2, yhi = Math.max(5.5, ...this.ys) + 0.2;
    const plotB = H - pad.b;
    const sx = (x) => pad.l + (x / 5) * (W - pad.l - pad.r), sy = (y) => pad.t + (yhi - y) / (yhi - ylo) * (plotB - pad.t);
    const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "kernel regression plot" }, box);
    for (let y = Math.ceil(ylo); y <= yhi; y += 1) {
      el("svg:line", { x1: pad.l, x2: W - pad.r, y1: sy(y), y2: sy(y), stroke: "#e6e9f0" }, svg);
      el("svg:text", { x: pad.l - 6, y: sy(y) + 4, "text-anchor": "end" }, svg, String(y));
    }
    for (let x = 0; x <= 5; x++) el("svg:text", { x: sx(x), y: H - 4, "text-anchor": "middle" }, svg, String(x));
    const path = (fn) => {
      let d = "", pen = false;
      for (let i = 0; i <= 250; i++) {
        const x = (5 * i) / 250, y = fn(x);
        if (y === null) { pen = false; continue; }
        d += `${pen ? "L" : "M"}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
        pen = true;
      }
      return d;
    };
    el("svg:path", { d: path(f), fill: "none", stroke: "#8a94a8", "stroke-dasharray": "5 4", "stroke-width": 1.5 }, svg);
    const w = this.weights(this.query) || this.xs.map(() => 0);
    const wmax = Math.max(...w, 1e-9);
    this.xs.forEach((x, i) => el("svg:circle", { cx: sx(x), cy: sy(this.ys[i]), r: 2.5 + 7 * Math.sqrt(w[i] / wmax),
      fill: "#e8590c", "fill-opacity": 0.25 + 0.6 * (w[i] / wmax), stroke: "#b8430a", "stroke-width": 0.6 }, svg));
    el("svg:path", { d: path((x) => this.predict(x)), fill: "none", stroke: "#1f5fd6", "stroke-width": 2.5 }, svg);
    // The query: a vertical rule, its prediction, and its weights as bars along the bottom strip.
    const qx = sx(this.query), yq = this.predict(this.query);
    el("svg:line", { x1: qx, x2: qx, y1: pad.t, y2: plotB + barH, stroke: "#17213a", "stroke-dasharray": "3 3" }, svg);
    if (yq !== null) el("svg:circle", { cx: qx, cy: sy(yq), r: 5.5, fill: "#1f5fd6", stroke: "#fff", "stroke-width": 2 }, svg);
    const base = plotB + barH;
    el("svg:line", { x1: pad.l, x2: W - pad.r, y1: base, y2: base, stroke: "#c8cfdc" }, svg);
    el("svg:text", { x: pad.l - 6, y: plotB + 18, "text-anchor": "end" }, svg, "α");
    this.xs.forEach((x, i) => {
      const h = (barH - 14) * (w[i] / wmax);
      if (h > 0.2) el("svg:rect", { x: sx(x) - 2, y: base - h, width: 4, height: h, fill: "#e8590c", "data-weight": fmt(w[i]) }, svg);
    });
    el("svg:text", { x: pad.l, y: plotB + 12 }, svg, `attention weights α(x=${this.query.toFixed(2)}, xᵢ), tallest ${fmt(wmax)}`);
    $("nw-readout").textContent = `query x = ${this.query.toFixed(2)} → prediction ` +
      (yq === null ? "undefined (no training point inside the window)" : `${yq.toFixed(3)} (true f(x) = ${f(this.query).toFixed(3)})`);
    this.geom = { W, pad };
  },
  // Pointer x (client pixels) -> data x in [0, 5], through the SVG's current on-screen scale.
  toX(e) {
    const svg = $("nw-plot").querySelector("svg"), { W, pad } = this.geom;
    const r = svg.getBoundingClientRect();
    const px = ((e.clientX - r.left) / r.width) * W;
    return Math.max(0, Math.min(5, ((px - pad.l) / (W - pad.l - pad.r)) * 5));
  },
  setQuery(x) {
    this.query = x;
    // Redraw on the next frame only: pointermove fires faster than the SVG needs to be rebuilt.
    if (!this.pending) {
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.plot(); });
    }
  },
  heat() {
    const canvas = $("nw-heatmap"), n = this.xs.length, q = 100;
    canvas.width = n; canvas.height = q;
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(n, q);
    for (let r = 0; r < q; r++) {
      const w = this.weights((5 * r) / (q - 1)) || new Array(n).fill(0);
      const wmax = Math.max(...w, 1e-9);
      w.forEach((wi, c) => {
        const m = /rgb\((\d+),(\d+),(\d+)\)/.exec(color(wi / wmax));
        const o = 4 * (r * n + c);
        img.data[o] = +m[1]; img.data[o + 1] = +m[2]; img.data[o + 2] = +m[3]; img.data[o + 3] = 255;
      });
    }
    ctx.putImageData(img, 0, 0);
    canvas.title = "each row scaled to its largest weight";
  },
};

["bandwidth", "kernel", "nw-n", "nw-seed"].forEach((id) => $(id).addEventListener("input", () => {
  if (id === "nw-n" || id === "nw-seed") nw.data();
  nw.render();
}));
// Listeners on the persistent container: the SVG inside is rebuilt on every redraw.
const plotBox = $("nw-plot");
plotBox.addEventListener("pointerdown", (e) => { nw.dragging = true; plotBox.setPointerCapture(e.pointerId); nw.setQuery(nw.toX(e)); });
plotBox.addEventListener("pointermove", (e) => { if (nw.dragging) nw.setQuery(nw.toX(e)); });
["pointerup", "pointercancel"].forEach((t) => plotBox.addEventListener(t, () => { nw.dragging = false; }));
nw.data();
