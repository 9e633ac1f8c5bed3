"""What tests and benchmarks share: tiny models built in seconds without network (a random Hugging
Face Marian model, a briefly trained Transformer), and a real `attnlab serve` on a free loopback port.

    folder = tiny_marian(tmp_path / "marian")                # tests/export's fixture
    tiny_marian(d, d_model=64, encoder_ffn_dim=256, ...)     # benchmarks/decoding/hf_decode.py's size
    run_dir = train_tiny(tmp_path / "tiny")                  # tests/serve, benchmarks/serving/serve_load.py
    proc, port = start_server(run_dir, "--workers", "2")     # a real `attnlab serve` on a free port
    stop_server(proc)

`tiny_marian` needs the [hf] extra (transformers, sentencepiece). The library never imports this module.
"""

from __future__ import annotations

import io
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import torch

from attnlab.data import sample_data_path
from attnlab.training.config import TrainConfig
from attnlab.training.launch import train_run
from attnlab.training.presets import get_preset

WORDS = (
    "the cat dog house river green small old walks sleeps sees eats quickly never always "
    "tree bird runs sings under over near my your their little big red blue"
).split()


def sentences(n: int = 300, seed: int = 0, marks: str = ".!?") -> list[str]:
    """`n` capitalised sentences of 3-9 random WORDS, each ending with one of `marks`."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
        out.append(s.capitalize() + (rng.choice(marks) if len(marks) > 1 else marks))  # one mark: no draw
    return out


def train_spm(texts: list[str], vocab_size: int = 80, **options) -> bytes:
    """A SentencePiece unigram model of `texts` (the serialized proto), trained in memory."""
    import sentencepiece as spm

    buf = io.BytesIO()
    settings = dict(model_type="unigram", character_coverage=1.0, minloglevel=2, num_threads=1)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=buf, vocab_size=vocab_size, **{**settings, **options}
    )
    return buf.getvalue()


# The tests' Marian: 2+2 layers, 4 heads, d_model 16. init_std: the default 0.02 makes a tiny model
# ignore its source.
MARIAN_SIZE = dict(
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=128,
    init_std=0.3,
)


def tiny_marian(
    folder: str | Path, *, lively: bool = True, marks: str = ".!?", spm_options: dict | None = None, **config
) -> Path:
    """Write a random MarianMTModel and its MarianTokenizer into `folder`, as `save_pretrained` does
    (config.json, model.safetensors, generation_config.json, source.spm, target.spm, vocab.json,
    tokenizer_config.json): one SentencePiece model (`train_spm(sentences(marks=marks), **spm_options)`)
    for both sides, numbered as Marian numbers its vocab.json; MARIAN_SIZE updated by `config`.

    `lively`: perturb the LayerNorms (so mapping errors show) and add a random output bias with <eos>
    made likelier (so sentences end at different lengths). <pad> is never emitted, as in OPUS-MT models.
    """
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    proto = train_spm(sentences(marks=marks), **(spm_options or {}))
    (d / "source.spm").write_bytes(proto)
    (d / "target.spm").write_bytes(proto)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if sp.IdToPiece(i) not in ("<unk>", "<s>", "</s>")]
    # Marian's numbering: </s>=0, <unk>=1, the pieces, <pad> last (also the decoder start token).
    tokens = ["</s>", "<unk>", *pieces, "<pad>"]
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    MarianTokenizer(str(d / "source.spm"), str(d / "target.spm"), str(d / "vocab.json")).save_pretrained(d)
    V = len(tokens)
    ids = dict(vocab_size=V, decoder_vocab_size=V, pad_token_id=V - 1, eos_token_id=0, decoder_start_token_id=V - 1)
    marian = dict(activation_function="swish", scale_embedding=True, forced_eos_token_id=None)
    torch.manual_seed(0)
    model = MarianMTModel(MarianConfig(**ids, **marian, **{**MARIAN_SIZE, **config})).eval()
    if lively:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "layer_norm" in name:  # not the identity LayerNorm of a fresh init
                    p.add_(0.1 * torch.randn_like(p))
            model.final_logits_bias.copy_(0.5 * torch.randn_like(model.final_logits_bias))
            model.final_logits_bias[0, 0] += 1.0
    model.generation_config.bad_words_ids = [[V - 1]]
    model.save_pretrained(d)
    return d


def train_tiny(run_dir: str | Path, steps: int = 20, model: str = "transformer", **overrides) -> Path:
    """A 2-layer, 2-head translator (the `tiny` preset; `model` "transformer" or "decoder-only", whose
    2 blocks form one stack) trained `steps` steps on attnlab's bundled sample pairs into `run_dir`
    (seconds): enough to emit words, for the server's tests and benchmarks. `overrides`: model fields
    (`decoder_layers=1`: a 2-block encoder under a 1-block decoder)."""

    preset = get_preset(model, "tiny")
    fast = {"max_steps": steps, "epochs": 100, "schedule": "constant", "lr": 1e-2, "eval_limit": 4}
    cfg = TrainConfig.from_dict({**preset["train"], **fast})
    data = {**preset["data"], "path": str(sample_data_path())}
    train_run(model, {**preset["model"], "num_layers": 2, **overrides}, cfg, data, run_dir, progress=False)
    return Path(run_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    checkpoint: str | Path, *flags: str, env: dict | None = None, capture: bool = False, timeout: float = 120.0
) -> tuple[subprocess.Popen, int]:
    """`python -m attnlab serve --checkpoint CHECKPOINT --port P --log-level warning *flags` on a free
    loopback port P (later `flags` win, e.g. "--log-level", "critical"); returns (process, P) once
    GET /healthz answers 200. `env`: the server's environment (default: this one). `capture`: keep
    the server's output in a pipe, shown in the RuntimeError raised when it exits or stays silent."""
    port = free_port()
    argv = ["serve", "--checkpoint", str(checkpoint), "--port", str(port), "--log-level", "warning", *flags]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnlab", *argv],
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    url, deadline = f"http://127.0.0.1:{port}/healthz", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"attnlab serve exited with {proc.returncode}:\n{output}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    output = proc.stdout.read() if proc.stdout else ""
    raise RuntimeError(f"attnlab serve did not answer on port {port} within {timeout:g} s:\n{output}")


def stop_server(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM (the server drains and exits), then SIGKILL after `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


__all__ = [
    "MARIAN_SIZE",
    "WORDS",
    "free_port",
    "sentences",
    "start_server",
    "stop_server",
    "tiny_marian",
    "train_spm",
    "train_tiny",
]
