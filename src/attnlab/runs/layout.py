"""What a run folder holds, by name.

run_dir/
  config.json          {"model_type", "model": {...}, "train": {...}, "data": {...}, "attnlab_version"}
  src_vocab.json, tgt_vocab.json
  model.safetensors    final weights
  checkpoints/step_0000500/{model.safetensors, trainer_state.pt, meta.json, manifest.json}
  log.jsonl            one JSON object per event (train / eval / end)
  alignment.json       the cross-attention head `attnlab heads` chose for word alignments (runs.alignment)
  generation.json      a translator's decoding defaults: beam 4 unless changed (runs.generation)
  attnlab-output.json  the marker: this folder is an attnlab run (runs.outputs)
"""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"
MANIFEST_FILE = "manifest.json"
SRC_VOCAB_FILE, TGT_VOCAB_FILE = "src_vocab.json", "tgt_vocab.json"
CHECKPOINTS = "checkpoints"
LOG_FILE = "log.jsonl"
ALIGNMENT_FILE = "alignment.json"
GENERATION_FILE = "generation.json"
MARKER_FILE = "attnlab-output.json"  # what kind of attnlab output a folder is (runs.outputs)
DEFAULT_RUN = Path("runs") / "demo" / "transformer"
# What a run folder may hold besides what its marker lists (`runs.outputs`: --force replaces only these).
RUN_ENTRIES = {
    CONFIG_FILE,
    SRC_VOCAB_FILE,
    TGT_VOCAB_FILE,
    WEIGHTS_FILE,
    CHECKPOINTS,
    LOG_FILE,
    MARKER_FILE,
    ALIGNMENT_FILE,
    GENERATION_FILE,
}
