"""Greedy decoding of an exported ONNX folder with onnxruntime, as attnlab's greedy decodes.

    from attnlab.export.onnx import OnnxTranslator
    tr = OnnxTranslator("onnx-model", threads=2)
    tr.translate(["i'm home ."])                     # -> ["je suis à la maison ."]
    out = tr.greedy([tr.encode("i'm home .")], attentions=True)[0]
    out.tokens, out.attentions["cross"].shape        # target ids; (N, H, Lt, Ls)

Each source gets `<eos>` appended; decoding starts from `decoder_start_token_id`, picks the most likely
token at every step and stops at `<eos>` or at min(max_output_tokens, max_len_a * S + max_len_b) tokens (the
numbers config.json holds; the run's `max_len` default where its generation.json sets one), S the batch's
padded source length with `<eos>`: the limit attnlab's Translator uses for a batch. Finished rows leave the
batch once they are `Greedy.compact` of it, as in attnlab's generator. The attention maps are
those attnlab's `explain` returns: encoder_self (N, H, Ls, Ls), decoder_self (N, H, Lt, Lt) (zeros above the
diagonal) and cross (N, H, Lt, Ls), Lt = the tokens produced with their `<eos>`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnlab.data import load_vocab
from attnlab.decoding.search import Greedy
from attnlab.decoding.translator import MAX_LEN_A, MAX_LEN_B
from attnlab.export.onnx.exporter import CONFIG, DECODER, DECODER_WITH_PAST, ENCODER, require_onnx
from attnlab.runs.layout import SRC_VOCAB_FILE, TGT_VOCAB_FILE


@dataclass
class OnnxOutput:
    """One decoded sentence: target ids (no start token, no <eos>), whether it ended with <eos>, and
    with `attentions=True` the maps by kind, (N, H, Lq, Lk) float32 each."""

    tokens: list[int]
    finished: bool
    attentions: dict[str, np.ndarray] = field(default_factory=dict)


class OnnxTranslator:
    """onnxruntime sessions over an ONNX folder written by `attnlab export --format onnx`.

    Args:
        folder: the export.
        threads: onnxruntime's intra-op threads (None: its default, every core).
    """

    def __init__(self, folder: str | os.PathLike, threads: int | None = None):
        _, ort = require_onnx()
        self.folder = Path(folder)
        self.config = json.loads((self.folder / CONFIG).read_text())
        self.src_vocab = load_vocab(self.folder / SRC_VOCAB_FILE)
        self.tgt_vocab = load_vocab(self.folder / TGT_VOCAB_FILE)
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self.encoder, self.decoder, self.decoder_with_past = (
            ort.InferenceSession(str(self.folder / name), options, providers=providers)
            for name in (ENCODER, DECODER, DECODER_WITH_PAST)
        )
        self.num_layers = int(self.config["num_layers"])  # encoder blocks
        # decoder blocks (each with its caches); exports without the key have as many as the encoder
        self.decoder_layers = int(self.config.get("decoder_layers", self.num_layers))
        self.bos = int(self.config["decoder_start_token_id"])
        self.eos = int(self.config["eos_token_id"])
        self.src_eos = int(self.config["special_tokens"]["source"]["eos"]["id"])
        self.pad = int(self.config["pad_token_id"])
        # the length rule; exports made before config.json carried it used attnlab's own (the same numbers)
        self.max_len_a = int(self.config.get("max_len_a", MAX_LEN_A))
        self.max_len_b = int(self.config.get("max_len_b", MAX_LEN_B))
        self.max_len = (self.config.get("generation") or {}).get("max_len")  # the run's default, if it sets one

    def encode(self, sentence: str) -> list[int]:
        """attnlab's source ids of `sentence` (no <eos>)."""
        return list(self.src_vocab.encode(sentence))

    def output_limit(self, src_len: int) -> int:
        """Most tokens decoded for a source of `src_len` tokens (<eos> included), as attnlab's Translator."""
        rule = min(int(self.config["max_output_tokens"]), self.max_len_a * src_len + self.max_len_b)
        limit = rule if self.max_len is None else int(self.max_len)
        capacity = self.config.get("max_target_positions")
        return max(1, min(limit, capacity)) if capacity else limit

    def translate(self, sentences: Sequence[str], batch_size: int = 64) -> list[str]:
        """Sentences -> detokenized greedy translations."""
        ids = [self.encode(s) for s in sentences]
        out: list[str] = []
        for start in range(0, len(ids), batch_size):
            out += [self.tgt_vocab.decode(o.tokens) for o in self.greedy(ids[start : start + batch_size])]
        return out

    def greedy(self, src_ids: Sequence[Sequence[int]], attentions: bool = False) -> list[OnnxOutput]:
        """Source id lists (no <eos>) -> one OnnxOutput each, decoded side by side as one padded batch."""
        rows = [list(r) + [self.src_eos] for r in src_ids]
        B, S = len(rows), max(len(r) for r in rows)
        src = np.full((B, S), self.pad, dtype=np.int64)
        mask = np.zeros((B, S), dtype=np.int64)
        for b, r in enumerate(rows):
            src[b, : len(r)], mask[b, : len(r)] = r, 1
        limit = self.output_limit(S)  # of the padded batch, as attnlab's batches
        L = self.decoder_layers
        weights = (
            [f"{k}.{i}" for k in ("decoder_attentions", "cross_attentions") for i in range(L)] if attentions else []
        )
        enc_maps = [f"encoder_attentions.{i}" for i in range(self.num_layers)] if attentions else []
        enc_names = ["last_hidden_state", *enc_maps]
        kv = [f"present.{i}.decoder.{w}" for i in range(L) for w in ("key", "value")]
        first = ["logits", *kv, *(f"present.{i}.encoder.{w}" for i in range(L) for w in ("key", "value")), *weights]
        later = ["logits", *kv, *weights]
        enc_out = self.encoder.run(enc_names, {"input_ids": src, "attention_mask": mask})
        feeds = {"input_ids": np.full((B, 1), self.bos, dtype=np.int64), "encoder_hidden_states": enc_out[0]}
        outs = dict(zip(first, self.decoder.run(first, {**feeds, "encoder_attention_mask": mask})))
        cross = {
            f"past_key_values.{i}.encoder.{w}": outs[f"present.{i}.encoder.{w}"]
            for i in range(L)
            for w in ("key", "value")
        }
        steps = [outs] if attentions else []
        tokens: list[list[int]] = [[] for _ in range(B)]
        finished = np.zeros(B, dtype=bool)
        alive = np.arange(B)  # original rows still in the batch
        for step in range(limit):
            nxt = outs["logits"][:, -1].argmax(-1)  # the first maximum, as torch's argmax
            for j, row in enumerate(alive):
                if not finished[row]:
                    if nxt[j] == self.eos:
                        finished[row] = True
                    else:
                        tokens[row].append(int(nxt[j]))
            if bool(finished.all()) or step + 1 == limit:
                break
            past = {f"past_key_values.{n[len('present.') :]}": outs[n] for n in kv}
            keep = ~finished[alive]
            if not attentions and (~keep).sum() >= max(1, Greedy.compact * len(alive)):  # finished rows leave
                alive, nxt, mask = alive[keep], nxt[keep], mask[keep]
                past = {n: t[keep] for n, t in past.items()}
                cross = {n: t[keep] for n, t in cross.items()}
            feeds = {"input_ids": nxt[:, None].astype(np.int64), "encoder_attention_mask": mask, **past, **cross}
            outs = dict(zip(later, self.decoder_with_past.run(later, feeds)))
            if attentions:
                steps.append(outs)
        results = []
        for b in range(B):
            out = OnnxOutput(tokens[b], bool(finished[b]))
            if attentions:
                out.attentions = _maps(enc_out[1:], steps, L, b, len(rows[b]), len(tokens[b]) + int(out.finished))
            results.append(out)
        return results


def _maps(enc_w, steps: list[dict], L: int, b: int, Ls: int, Lt: int) -> dict[str, np.ndarray]:
    """Row b's maps cut to its Ls source tokens and Lt produced tokens, stacked over layers; steps[t] holds
    step t's `decoder_attentions.{i}` (B, H, 1, t + 1) and `cross_attentions.{i}` (B, H, 1, S)."""
    dec = np.zeros((L, steps[0]["decoder_attentions.0"].shape[1], Lt, Lt), dtype=np.float32)
    for t in range(Lt):
        for i in range(L):
            dec[i, :, t, : t + 1] = steps[t][f"decoder_attentions.{i}"][b, :, 0, : t + 1]
    cross = np.stack(
        [np.concatenate([steps[t][f"cross_attentions.{i}"][b, :, :, :Ls] for t in range(Lt)], axis=1) for i in range(L)]
    )
    return {"encoder_self": np.stack([w[b, :, :Ls, :Ls] for w in enc_w]), "decoder_self": dec, "cross": cross}


__all__ = ["OnnxOutput", "OnnxTranslator"]
