// The explorer's data source in the browser: the run's ONNX graphs (attnlab export --format onnx) on
// onnxruntime-web, the tokenizer of tokenizer.js, greedy decoding as attnlab's. It answers the calls of
// source.js (the server's API) with objects of the same shape, so app.js and positions.js draw either.
// Loaded by the static page `attnlab export --format web` writes: model/ holds the graphs, config.json and
// the vocabularies; static/ort/ holds onnxruntime-web's script and WebAssembly. Nothing else is fetched.
"use strict";
(function () {
  const MODEL = "model/", ORT = "static/ort/";
  const ort = window.ort;
  ort.env.wasm.wasmPaths = new URL(ORT, document.baseURI).href;  // beside the page, never a CDN
  ort.env.wasm.numThreads = window.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  const MAX_CHARS = 500;  // as attnlab.analysis.explanation.MAX_CHARS

  // A page opened from disk (file://) may not fetch its own files: say how to serve it instead of "Failed to fetch".
  const FROM_DISK = globalThis.location?.protocol === "file:" ? new Error("this page loads its model over HTTP: serve its " +
    "folder with `python -m http.server -d FOLDER 8000` and open http://localhost:8000/") : null;
  const getJSON = (name) => fetch(MODEL + name).then((r) => {
    if (!r.ok) throw new Error(`${MODEL}${name}: HTTP ${r.status}`);
    return r.json();
  });
  const session = (name) => ort.InferenceSession.create(MODEL + name, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });

  // Everything loads once, at once, as the page opens (the WebAssembly compiles while the JSON arrives).
  const ready = (async () => {
    if (FROM_DISK) throw FROM_DISK;  // before onnxruntime-web tries to fetch its WebAssembly
    const [config, srcJSON, tgtJSON, encoder, decoder, withPast] = await Promise.all([getJSON("config.json"),
      getJSON("src_vocab.json"), getJSON("tgt_vocab.json"), session("encoder_model.onnx"),
      session("decoder_model.onnx"), session("decoder_with_past_model.onnx")]);
    if (!Number.isInteger(config.max_len_a) || !Number.isInteger(config.max_len_b)) {
      throw new Error(`${MODEL}config.json has no max_len_a / max_len_b (an older export); export the run again with attnlab export --format web`);
    }
    return { config, src: window.AttnTokenizer.load(srcJSON), tgt: window.AttnTokenizer.load(tgtJSON), encoder, decoder, withPast };
  })();

  const ints = (ids, dims) => new ort.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), dims);
  // A (1, H, q, k) weights tensor -> [H][q][k] nested arrays.
  function heads(t) {
    const [, H, q, k] = t.dims, out = [];
    for (let h = 0; h < H; h++) {
      const rows = [];
      for (let i = 0; i < q; i++) rows.push(Array.from(t.data.subarray((h * q + i) * k, (h * q + i + 1) * k)));
      out.push(rows);
    }
    return out;
  }
  function argmaxLast(logits) {  // the first maximum of the last position's row, as torch's argmax
    const V = logits.dims[2], T = logits.dims[1], d = logits.data, base = (T - 1) * V;
    let best = 0;
    for (let v = 1; v < V; v++) if (d[base + v] > d[base + best]) best = v;
    return best;
  }

  function sourceIds(m, text) {
    if (typeof text !== "string" || !text.trim()) throw new Error('the text is empty; pass an English sentence such as "i\'m home ."');
    if (text.length > MAX_CHARS) throw new Error(`the text has ${text.length} characters; at most ${MAX_CHARS} are accepted`);
    const ids = m.src.encode(text), max = m.config.max_source_tokens;
    if (!ids.length) throw new Error(`${JSON.stringify(text.slice(0, 60))} has no tokens after preprocessing; pass some English words`);
    if (max && ids.length + 1 > max) {
      throw new Error(`the sentence has ${ids.length} tokens (+1 <eos>) but this model takes at most ${max} (its max_len); shorten it`);
    }
    return ids;
  }

  // attnlab's Translator.output_limit: the length rule config.json carries, or the run's max_len default
  function outputLimit(config, srcLen) {
    const rule = Math.min(config.max_output_tokens, config.max_len_a * srcLen + config.max_len_b);
    const limit = (config.generation || {}).max_len ?? rule, cap = config.max_target_positions;
    return cap ? Math.max(1, Math.min(limit, cap)) : limit;
  }

  // Greedy decoding with the key/value cache; every step's attention rows are kept for the maps.
  async function greedy(m, ids) {
    // L decoder blocks (their caches and maps), c.num_layers encoder blocks; older exports: as many
    const c = m.config, L = c.decoder_layers ?? c.num_layers, src = [...ids, c.special_tokens.source.eos.id], S = src.length;
    const mask = ints(src.map(() => 1), [1, S]);
    const enc = await m.encoder.run({ input_ids: ints(src, [1, S]), attention_mask: mask });
    let out = await m.decoder.run({ input_ids: ints([c.decoder_start_token_id], [1, 1]),
      encoder_hidden_states: enc.last_hidden_state, encoder_attention_mask: mask });
    const cross = Array.from({ length: L }, (_, i) => [out[`present.${i}.encoder.key`], out[`present.${i}.encoder.value`]]);
    const tokens = [], selfRows = [], crossRows = [], limit = outputLimit(c, S);
    let finished = false;
    for (let step = 0; step < limit; step++) {
      selfRows.push(Array.from({ length: L }, (_, i) => heads(out[`decoder_attentions.${i}`])));
      crossRows.push(Array.from({ length: L }, (_, i) => heads(out[`cross_attentions.${i}`])));
      const next = argmaxLast(out.logits);
      if (next === c.eos_token_id) { finished = true; break; }
      tokens.push(next);
      if (step + 1 === limit) break;
      const feeds = { input_ids: ints([next], [1, 1]), encoder_attention_mask: mask };
      for (let i = 0; i < L; i++) {
        feeds[`past_key_values.${i}.decoder.key`] = out[`present.${i}.decoder.key`];
        feeds[`past_key_values.${i}.decoder.value`] = out[`present.${i}.decoder.value`];
        [feeds[`past_key_values.${i}.encoder.key`], feeds[`past_key_values.${i}.encoder.value`]] = cross[i];
      }
      out = await m.withPast.run(feeds);
    }
    const encMaps = Array.from({ length: c.num_layers }, (_, i) => heads(enc[`encoder_attentions.${i}`]));
    return { src, tokens, finished, encMaps, selfRows, crossRows };
  }

  // Per-step rows [step][layer][head][1][k] -> [layer][head][step][k], decoder rows padded with zeros.
  function stitch(rows, width) {
    return rows[0].map((_, i) => rows[0][i].map((__, h) => rows.map((r) => {
      const row = r[i][h][0];
      return width ? row.concat(new Array(width - row.length).fill(0)) : row;
    })));
  }

  let queue = Promise.resolve();  // one decode at a time: a session runs one call at once
  async function translate(payload) {
    const m = await ready, t0 = performance.now();
    const ids = sourceIds(m, payload.text);
    const run = queue.then(() => greedy(m, ids));
    queue = run.catch(() => null);
    const g = await run;
    const Lt = g.selfRows.length, eos = m.config.special_tokens.target.eos.token;
    const produced = m.tgt.toTokens(g.tokens);
    return {
      text: payload.text, translation: m.tgt.decode(g.tokens),
      src_tokens: m.src.toTokens(g.src), tgt_tokens: g.finished ? [...produced, eos] : produced,
      tgt_input_tokens: [m.tgt.toTokens([m.config.decoder_start_token_id])[0], ...produced].slice(0, Lt),
      beam: 1, finished: g.finished, heads_off: {}, beam_trace: null, subwords: false, merged: false,
      importance: { source: "", values: {} }, nbest: [], alignment: null,
      attention: { encoder_self: g.encMaps, decoder_self: stitch(g.selfRows, Lt), cross: stitch(g.crossRows, 0) },
      elapsed_ms: Math.round(performance.now() - t0),
    };
  }

  // What this page cannot do of the run's decoding defaults (generation.json): it decodes greedily.
  function greedyNote(generation) {
    const g = generation || {}, beam = g.beam || 1;
    if (g.sample) return "; the run samples by default: this page decodes greedily (attnlab serve samples)";
    return beam > 1 ? `; the run decodes with beam ${beam} by default: this page decodes greedily (beam 1; attnlab serve uses beam ${beam})` : "";
  }

  async function model() {
    const m = await ready, c = m.config;
    return { model_type: c.model_type, model: c.model, parameters: c.parameters, positions: c.positions,
      num_kv_heads: c.model.num_kv_heads || c.model.num_heads, src_vocab_size: c.src_vocab_size,
      tgt_vocab_size: c.tgt_vocab_size, max_source_tokens: c.max_source_tokens, max_chars: MAX_CHARS,
      data_attribution: c.data_attribution,
      origin: `${c.origin}; running in this browser (onnxruntime-web ${ort.env.versions ? ort.env.versions.web : ""})${greedyNote(c.generation)}` };
  }

  // Only the schemes that add nothing per head are described here; the others' maps need the server.
  async function positions() {
    const m = await ready, scheme = m.config.positions;
    return ["sinusoidal", "learned", "none"].includes(scheme) ? { scheme } : null;
  }

  window.AttnSource = {
    kind: "browser",
    features: { beam: false, options: false, sampling: false, heads: false, docs: false },
    ready, model, translate, positions,
    samples: () => Promise.reject(new Error("sampling needs attnlab serve")),
  };
})();
