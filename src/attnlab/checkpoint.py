"""Run folders: atomic writes, checkpoints, averaging, and `load_translator` (the one way in for
the CLI, the demo and the web explorer).

    run_dir/
      config.json          {"model_type", "model": {...}, "train": {...}, "data": {...}, "attnlab_version"}
      src_vocab.json, tgt_vocab.json
      model.safetensors    final weights
      checkpoints/step_0000500/{model.safetensors, trainer_state.pt, meta.json}
      log.jsonl            one JSON object per event (train / eval / end)

Every file is written to a temp name in its folder and renamed into place, and a checkpoint folder is
filled under a temp name and renamed as a whole, so a crash never leaves half a checkpoint. Loading
never unpickles code: weights are safetensors, trainer state is read with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from attnlab._io import atomic_path

import torch
from torch import Tensor, nn

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"
SRC_VOCAB_FILE, TGT_VOCAB_FILE = "src_vocab.json", "tgt_vocab.json"
CHECKPOINTS = "checkpoints"
DEFAULT_RUN = Path("runs") / "demo" / "transformer"


# --------------------------------------------------------------------------- atomic files
def _atomic_write(path: Path, write) -> None:
    """Call write(tmp_path) on a temp file beside `path`, then rename it into place."""
    with atomic_path(path) as tmp:
        write(tmp)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    _atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from exc


def append_jsonl(path: str | os.PathLike, obj: dict) -> None:
    """Append one event; a single short write per line keeps lines whole even if killed."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- weights
def save_weights(model: nn.Module, path: str | os.PathLike) -> None:
    """safetensors, atomically; tied parameters (shared embeddings) are stored once."""
    from safetensors.torch import save_model

    _atomic_write(Path(path), lambda tmp: save_model(model, tmp))


def read_weights(path: str | os.PathLike) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the weights file {path.name} was not found in {path.parent}")
    return load_file(path)


def load_weights(model: nn.Module, path: str | os.PathLike, what: str = "the config") -> None:
    """Load safetensors weights into `model`, checking names and shapes first so a mismatch says
    which tensor and which two shapes (rather than a bare RuntimeError deep in load_state_dict)."""
    from safetensors.torch import load_model

    weights = read_weights(path)
    expected = model.state_dict()
    for name, tensor in weights.items():
        if name in expected and tuple(expected[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"{path}: tensor {name!r} has shape {tuple(tensor.shape)} but the model built from {what} "
                f"expects {tuple(expected[name].shape)}; the weights and the config/vocabularies come from "
                f"different runs — load them from the same run folder"
            )
    missing, unexpected = load_model(model, path, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path} does not match the model built from {what}: missing tensors {missing[:5]}, "
                         f"unexpected tensors {unexpected[:5]}")


# --------------------------------------------------------------------------- checkpoints
def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{step:07d}"


def save_checkpoint(run_dir: str | os.PathLike, step: int, model: nn.Module, trainer_state: dict,
                    meta: dict) -> Path:
    """Write checkpoints/step_NNNNNNN/ as a whole: filled under a temp name, then renamed."""
    final = checkpoint_dir(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        save_weights(model, tmp / WEIGHTS_FILE)
        torch.save(trainer_state, tmp / STATE_FILE)
        write_json(tmp / META_FILE, meta)
        if final.exists():
            # Same step saved again (the end of a run that was just checkpointed): swap, then delete.
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint folders of a run, oldest first (temp folders start with '.' and are ignored)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and p.name[5:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def load_trainer_state(ckpt: str | os.PathLike) -> dict:
    path = Path(ckpt) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: checkpoint {Path(ckpt).name} has no trainer state")
    return torch.load(path, map_location="cpu", weights_only=True)


def prune_checkpoints(run_dir: str | os.PathLike, keep_last: int, keep_best: int) -> list[Path]:
    """Delete checkpoints that are neither among the newest `keep_last` nor the `keep_best` best by
    validation BLEU (meta.json). The newest is always kept (it is what --resume continues from)."""
    ckpts = list_checkpoints(run_dir)
    keep = set(ckpts[-max(keep_last, 1):])
    scored = []
    for p in ckpts:
        try:
            bleu = read_json(p / META_FILE).get("valid_bleu")
        except (FileNotFoundError, ValueError):
            bleu = None
        if bleu is not None:
            scored.append((-bleu, int(p.name[5:]), p))
    keep.update(p for _, _, p in sorted(scored)[:keep_best])
    removed = [p for p in ckpts if p not in keep]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> dict[str, Tensor]:
    """Element-wise mean of the weights of several checkpoints (folders or .safetensors files), in
    float64 then cast back, as fairseq's average_checkpoints.py / OpenNMT's average_models.py."""
    if not paths:
        raise ValueError("average_checkpoints: no checkpoints given")
    total: dict[str, Tensor] | None = None
    dtypes = {}
    for p in paths:
        p = Path(p)
        weights = read_weights(p / WEIGHTS_FILE if p.is_dir() else p)
        if total is None:
            total = {k: v.double() for k, v in weights.items()}
            dtypes = {k: v.dtype for k, v in weights.items()}
            continue
        if set(weights) != set(total):
            raise ValueError(f"{p} holds different tensors than {paths[0]}: cannot average checkpoints "
                             f"of different models")
        for k, v in weights.items():
            if v.shape != total[k].shape:
                raise ValueError(f"{p}: tensor {k!r} has shape {tuple(v.shape)}, {paths[0]} has "
                                 f"{tuple(total[k].shape)}")
            total[k] += v.double()
    return {k: (v / len(paths)).to(dtypes[k]) for k, v in total.items()}


def save_tensors(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file

    _atomic_write(Path(path), lambda tmp: save_file({k: v.contiguous() for k, v in tensors.items()}, tmp,
                                                    metadata=metadata))


# --------------------------------------------------------------------------- run config
def write_run_config(run_dir: str | os.PathLike, model_type: str, model_config: dict, train_config: dict,
                     data_config: dict, src_vocab, tgt_vocab) -> None:
    from attnlab import __version__

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    src_vocab.save(run_dir / SRC_VOCAB_FILE)
    tgt_vocab.save(run_dir / TGT_VOCAB_FILE)
    write_json(run_dir / CONFIG_FILE, {"model_type": model_type, "model": model_config, "train": train_config,
                                       "data": data_config, "attnlab_version": __version__})


def read_run_config(run_dir: str | os.PathLike) -> dict:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist; train one with `attnlab train --out {run_dir}`")
    cfg = read_json(run_dir / CONFIG_FILE)
    for key in ("model_type", "model"):
        if key not in cfg:
            raise ValueError(f"{run_dir / CONFIG_FILE} lacks the key {key!r}; it was not written by attnlab train")
    return cfg


# --------------------------------------------------------------------------- translating
def reference_text(text: str, vocab) -> str:
    """A corpus sentence in the form decoded hypotheses take (the book's lowercased tokenization,
    detokenized with the vocabulary's language rules), so BLEU compares like with like."""
    from attnlab.data import detokenize, tokenize

    return detokenize(tokenize(text), lang=getattr(vocab, "lang", None))


@dataclass
class Translation:
    """One translated sentence, with the tokens the model actually saw and produced (for the explorer)."""

    source: str
    src_tokens: list[str]     # source tokens after the vocabulary (unknown words -> <unk>), + <eos>
    tgt_tokens: list[str]     # produced target tokens, without <bos>/<eos>
    text: str                 # detokenized translation


class Translator:
    """A trained model with its vocabularies: sentences in, translations out.

    Args:
        model, src_vocab, tgt_vocab: what `load_translator` reads from a run folder.
        config: the run's config.json contents.
        max_len: longest source (tokens, <eos> included) accepted; None = no limit.
        max_output_len: hard cap on a translation's length in tokens (default 200); within it a
            sentence of S source tokens may produce at most 2 * S + 10 (fairseq's max_len_a/b), so an
            undertrained model that never says <eos> still stops soon.
    """

    def __init__(self, model: nn.Module, src_vocab, tgt_vocab, config: dict | None = None, device="cpu",
                 max_len: int | None = None, max_output_len: int | None = None):
        self.model = model.to(device).eval()
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.config = config or {}
        self.device = torch.device(device)
        self.max_len = max_len
        self.max_output_len = max_output_len or 200

    def output_limit(self, src_len: int) -> int:
        """Most tokens decoded for a source of `src_len` tokens (<eos> included)."""
        return min(self.max_output_len, 2 * src_len + 10)

    def _encode(self, sentences: Sequence[str], truncate: bool) -> list[list[int]]:
        if isinstance(sentences, str):
            raise ValueError("translate expects a list of sentences, got one string; wrap it in a list")
        out = []
        for s in sentences:
            if not isinstance(s, str) or not s.strip():
                raise ValueError(f"cannot translate an empty sentence (got {s!r}); pass some English text")
            ids = self.src_vocab.encode(s)
            if not ids:
                raise ValueError(f"{s!r} has no tokens after preprocessing; pass some English text")
            out.append(self._check_length(ids, s, truncate))
        return out

    def _check_length(self, ids: list[int], sentence: str, truncate: bool) -> list[int]:
        if self.max_len is None or len(ids) + 1 <= self.max_len:
            return ids
        if not truncate:
            raise ValueError(
                f"the sentence {sentence[:60]!r} has {len(ids)} tokens (+1 <eos>) but this model takes at most "
                f"{self.max_len} (its max_len); shorten it, or pass truncate=True (--truncate) to cut it")
        warnings.warn(f"truncating a {len(ids)}-token sentence to the model's max_len {self.max_len}", stacklevel=3)
        return ids[: self.max_len - 1]

    def translate_ids(self, src_ids: Sequence[Sequence[int]], beam: int = 1, batch_size: int = 128) -> list[str]:
        """Source id lists (no <eos>) -> detokenized translations; batched, longest first."""
        return [self.tgt_vocab.decode(ids) for ids in self.decode_ids(src_ids, beam, batch_size)]

    def decode_ids(self, src_ids: Sequence[Sequence[int]], beam: int = 1, batch_size: int = 128) -> list[list[int]]:
        """Source id lists (no <eos>) -> target id lists (no <bos>/<eos>)."""
        from attnlab.decode import beam_search, greedy

        if beam < 1:
            raise ValueError(f"beam must be >= 1, got {beam}")
        eos, pad = self.src_vocab.eos, self.src_vocab.pad
        # Sorting by length keeps padding (wasted work) low; results go back to input order.
        order = sorted(range(len(src_ids)), key=lambda i: -len(src_ids[i]))
        results: list[list[int]] = [[] for _ in src_ids]
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            seqs = [list(src_ids[i]) + [eos] for i in idx]   # the source ends with <eos>, as in training
            S = max(len(s) for s in seqs)
            src = torch.tensor([s + [pad] * (S - len(s)) for s in seqs], dtype=torch.long, device=self.device)
            lens = torch.tensor([len(s) for s in seqs], device=self.device)
            tgt = self.tgt_vocab
            if beam == 1:
                hyps = greedy(self.model, src, lens, tgt.bos, tgt.eos, self.output_limit(S))
            else:
                hyps = beam_search(self.model, src, lens, tgt.bos, tgt.eos, beam=beam, max_len=self.output_limit(S))
            for i, h in zip(idx, hyps):
                results[i] = h
        return results

    def translate(self, sentences: Sequence[str], beam: int = 1, truncate: bool = False) -> list[str]:
        """English sentences -> French translations (detokenized, lowercase as the corpus is trained)."""
        return self.translate_ids(self._encode(sentences, truncate), beam)

    def translate_tokens(self, sentences: Sequence[str], beam: int = 1, truncate: bool = False) -> list[Translation]:
        """Like `translate`, also returning the source and target tokens (axis labels for attention maps)."""
        src_ids = self._encode(sentences, truncate)
        out_ids = self.decode_ids(src_ids, beam)
        return [Translation(s, self.src_vocab.to_tokens(ids) + ["<eos>"], self.tgt_vocab.to_tokens(out),
                            self.tgt_vocab.decode(out))
                for s, ids, out in zip(sentences, src_ids, out_ids)]


def _model_max_len(cfg: dict) -> int | None:
    """Longest source (tokens, <eos> included) the model accepts: the size of a learned position
    table, the book's fixed sequence length (`num_steps`) for runs trained that way, else the
    Transformer's `max_len`. Sinusoidal positions extend to any length, so sentences longer than the
    training ones are accepted (quality falls off gradually, which the explorer lets you watch);
    an RNN (Bahdanau) without fixed lengths has no limit (None)."""
    model, train = cfg.get("model", {}), cfg.get("train", {})
    if model.get("learned_positions"):
        return int(model["max_len"])
    if train.get("num_steps"):
        return int(train["num_steps"])
    return model.get("max_len")


def load_translator(run_dir: str | os.PathLike = DEFAULT_RUN, device: str | torch.device = "cpu",
                    weights: str | os.PathLike | None = None, precision: str = "fp32") -> Translator:
    """Rebuild the model of a run folder and load its final weights (or `weights`: a checkpoint
    folder or an averaged .safetensors file), prepared to decode in `precision` ('auto', 'fp32',
    'bf16', 'int8'; see attnlab.precision); `translator.precision` says what runs and why.

    Raises FileNotFoundError naming a missing file, ValueError when config, vocabularies and
    weights disagree.
    """
    from attnlab.data import load_vocab
    from attnlab.models import build_model

    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    for name in (SRC_VOCAB_FILE, TGT_VOCAB_FILE):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir / name} is missing: the run folder lacks its vocabulary {name}")
    src_vocab, tgt_vocab = load_vocab(run_dir / SRC_VOCAB_FILE), load_vocab(run_dir / TGT_VOCAB_FILE)
    model_cfg = cfg["model"]
    for side, vocab, fname in (("src", src_vocab, SRC_VOCAB_FILE), ("tgt", tgt_vocab, TGT_VOCAB_FILE)):
        size = model_cfg.get(f"{side}_vocab_size")
        if size is not None and size != len(vocab):
            raise ValueError(f"{run_dir / CONFIG_FILE} says {side}_vocab_size={size} but {run_dir / fname} holds "
                             f"{len(vocab)} tokens; the files come from different runs")
    model = build_model(cfg["model_type"], model_cfg)
    if weights is None:
        weights_path = run_dir / WEIGHTS_FILE
        if not weights_path.is_file():
            ckpts = list_checkpoints(run_dir)
            hint = (f"; the run has checkpoints (latest {ckpts[-1].name}): resume it with "
                    f"`attnlab train --resume {run_dir}` or pass that checkpoint") if ckpts else ""
            raise FileNotFoundError(f"{weights_path} is missing: the run folder has no final weights "
                                    f"{WEIGHTS_FILE}{hint}")
    else:
        weights_path = Path(weights)
        if weights_path.is_dir():
            weights_path = weights_path / WEIGHTS_FILE
    load_weights(model, weights_path, what=f"{run_dir / CONFIG_FILE} and its vocabularies")
    from attnlab.precision import prepare_for_inference, resolve_precision

    choice = resolve_precision(precision, device)
    model = prepare_for_inference(model.to(device), choice, device)
    translator = Translator(model, src_vocab, tgt_vocab, cfg, device=device, max_len=_model_max_len(cfg))
    translator.precision = choice
    return translator
