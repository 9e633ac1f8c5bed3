// Where the explorer's data comes from: this file, the attnlab server's JSON API. The static page that
// `attnlab export --format web` writes loads source-onnx.js instead, which answers the same calls in the
// browser (onnxruntime-web). app.js and positions.js read everything through window.AttnSource:
//   model() -> GET /api/model's object; translate(payload) -> POST /api/explain's;
//   samples(payload) -> POST /api/translations'; positions(sourceLen, targetLen) -> GET /api/positions' or null;
//   features: which controls the source can serve (a browser source has no beam search, head switches...).
"use strict";
(function () {
  // Every route the page calls, in one place: a renamed route is one line here.
  const API = { model: "/api/model", translate: "/api/explain", translations: "/api/translations",
    positions: "/api/positions", docs: "/docs" };

  async function postJSON(url, payload) {
    const resp = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(payload) });
    const body = await resp.json().catch(() => ({ detail: `HTTP ${resp.status}` }));
    if (!resp.ok) throw new Error(typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail));
    return body;
  }

  window.AttnSource = {
    kind: "server",
    routes: API,
    features: { beam: true, options: true, sampling: true, heads: true, docs: true },
    model: () => fetch(API.model).then((r) => r.json()),
    translate: (payload) => postJSON(API.translate, payload),
    samples: (payload) => postJSON(API.translations, payload),
    positions: (sourceLen, targetLen) => fetch(`${API.positions}?source_len=${sourceLen}&target_len=${targetLen}`)
      .then((r) => (r.ok ? r.json() : null)),
  };
})();
