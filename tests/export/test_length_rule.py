"""The output-limit rule and the run's decoding defaults travel in an ONNX export's config.json: onnxruntime's
runtime (Python) and the browser's (serve/static/source-onnx.js, run in node over stub sessions) stop where
attnlab's Translator does for every source length, follow a config's own numbers, and the page says when
the run decodes with a beam it cannot (it decodes greedily)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.decoding import DecodeOptions
from attnlab.export.onnx import OnnxTranslator
from attnlab.runs import read_generation, write_generation
from attnlab.runs.loading import load_translator
from attnlab.testing import train_tiny

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

STATIC = Path(__file__).resolve().parents[2] / "src" / "attnlab" / "serve" / "static"
# source-onnx.js in node: the page's globals stubbed; sessions whose logits never pick <eos>, so a sentence
# runs to the limit; prints the produced token counts, the model's origin line, or the error it raised.
RUNNER = """
const fs = require("fs"), path = require("path");
const [script, tokenizer, folder] = process.argv.slice(1);
const input = JSON.parse(fs.readFileSync(0, "utf8"));
const config = JSON.parse(fs.readFileSync(path.join(folder, "config.json"), "utf8"));
const T = (dims) => ({ dims, data: new Float32Array(dims.reduce((a, b) => a * b, 1)) });
const V = config.tgt_vocab_size, word = (config.eos_token_id + 1) % V;
function session() {
  return { run: async (feeds) => {
    const S = feeds.input_ids.dims[1], out = {}, L = config.decoder_layers;
    if (feeds.attention_mask) {  // the encoder
      out.last_hidden_state = T([1, S, 1]);
      for (let i = 0; i < config.num_layers; i++) out[`encoder_attentions.${i}`] = T([1, 1, S, S]);
      return out;
    }
    const Ls = feeds.encoder_attention_mask.dims[1], logits = T([1, 1, V]);
    logits.data[word] = 1;
    out.logits = logits;
    for (let i = 0; i < L; i++) {
      for (const w of ["key", "value"]) {
        out[`present.${i}.decoder.${w}`] = T([1, 1, 1, 1]);
        out[`present.${i}.encoder.${w}`] = T([1, 1, Ls, 1]);
      }
      out[`decoder_attentions.${i}`] = T([1, 1, 1, 1]);
      out[`cross_attentions.${i}`] = T([1, 1, 1, Ls]);
    }
    return out;
  } };
}
globalThis.window = { ort: { env: { wasm: {} }, Tensor: function (t, d, dims) { this.dims = dims; },
  InferenceSession: { create: async () => session() } }, AttnTokenizer: require(tokenizer) };
globalThis.document = { baseURI: "http://localhost/" };
const read = (url) => JSON.parse(fs.readFileSync(path.join(folder, url.slice("model/".length)), "utf8"));
globalThis.fetch = async (url) => ({ ok: true, json: async () => read(url) });
require(script);
(async () => {
  try {
    const counts = [];
    for (const text of input.texts) counts.push((await window.AttnSource.translate({ text })).tgt_tokens.length);
    process.stdout.write(JSON.stringify({ counts, origin: (await window.AttnSource.model()).origin }));
  } catch (e) { process.stdout.write(JSON.stringify({ error: e.message })); }
})();
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("rule") / "tiny", steps=2)


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    write_generation(run, DecodeOptions(beam=3))
    out = tmp_path_factory.mktemp("rule-out") / "model"
    assert main(["export", "--format", "onnx", "--checkpoint", str(run), "--out", str(out)]) == 0
    return out


def _with_config(exported: Path, folder: Path, **changes) -> Path:
    """A copy of the export whose config.json has `changes` (a value None: the key removed)."""
    shutil.copytree(exported, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return folder


def _node(folder: Path, texts: list[str]) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node (Node.js) to run the page's decoding (CI machines have it)")
    args = [node, "-e", RUNNER, str(STATIC / "source-onnx.js"), str(STATIC / "tokenizer.js"), str(folder)]
    done = subprocess.run(args, input=json.dumps({"texts": texts}), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_both_runtimes_stop_where_the_translator_does(run, exported):
    translator = load_translator(run)
    assert read_generation(run).beam == 3 and json.loads((exported / "config.json").read_text())["generation"] == {
        **json.loads((run / "generation.json").read_text())
    }
    onnx_tr = OnnxTranslator(exported, threads=1)
    assert [onnx_tr.output_limit(S) for S in range(1, 120)] == [translator.output_limit(S) for S in range(1, 120)]
    texts = ["go .", "i'm home .", " ".join(["go"] * 13) + " ."]
    got = _node(exported, texts)
    want = [translator.output_limit(len(translator.encode([t])[0]) + 1) for t in texts]  # + <eos>
    assert got["counts"] == want and len(set(want)) == 3
    assert "the run decodes with beam 3 by default: this page decodes greedily" in got["origin"]


def test_a_configs_own_numbers_and_max_len_rule(run, exported, tmp_path):
    folder = _with_config(exported, tmp_path / "rule", max_len_a=1, max_len_b=3)
    assert OnnxTranslator(folder, threads=1).output_limit(5) == 8
    S = len(load_translator(run).encode(["i'm home ."])[0]) + 1  # + <eos>
    assert _node(folder, ["i'm home ."])["counts"] == [1 * S + 3]
    capped = _with_config(exported, tmp_path / "capped", generation={"beam": 1, "max_len": 2})
    assert OnnxTranslator(capped, threads=1).output_limit(50) == 2
    got = _node(capped, ["i'm home ."])
    assert got["counts"] == [2] and "greedily" not in got["origin"]  # beam 1: nothing the page cannot do


def test_exports_without_the_rule(run, exported, tmp_path):
    """Python reads attnlab's own numbers (the rule those exports used); the page, always exported with its
    config, refuses a mismatched one in one line."""
    older = _with_config(exported, tmp_path / "older", max_len_a=None, max_len_b=None, generation=None)
    translator = load_translator(run)
    assert OnnxTranslator(older, threads=1).output_limit(7) == translator.output_limit(7)
    error = _node(older, ["go ."])["error"]
    assert "has no max_len_a / max_len_b" in error and "attnlab export --format web" in error and "\n" not in error
