"""bf16 training on the CPU: the bf16 compute copy with fp32 masters, and the attention kernel it runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from train_helpers import DATA, needs_data

from attnlab.inference.precision import autocast, bf16_attention, resolve_precision
from attnlab.models import Transformer, TransformerConfig
from attnlab.models.seq2seq import EncoderDecoder, Seq2SeqAttentionDecoder, Seq2SeqEncoder
from attnlab.training.mixed import Bf16Compute, compute_copy

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        src_vocab_size=30,
        tgt_vocab_size=30,
        num_hiddens=32,
        num_heads=2,
        num_layers=2,
        ffn_num_hiddens=64,
        dropout=0.0,
        share_embeddings=True,
    )
    return Transformer(cfg).train()


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(3, 30, (6, 9), generator=g), torch.randint(3, 30, (6, 8), generator=g)
    return src, tgt[:, :-1], tgt[:, 1:], torch.tensor([9, 8, 7, 5, 9, 3])


def loss_of(model, src, tgt_in, tgt_out, lens):
    logits = model(src, tgt_in, lens)
    return F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten())


def test_the_copy_is_bf16_keeps_ties_and_the_masters_stay_fp32():
    master = tiny()
    mixed = Bf16Compute(master)
    copy = mixed.model
    assert all(p.dtype == torch.bfloat16 for p in copy.parameters())
    assert all(p.dtype == torch.float32 for p in master.parameters())
    # shared embeddings and the tied output layer: one tensor in the copy as in the master
    assert copy.decoder.dense.weight is copy.decoder.embedding.weight is copy.encoder.embedding.weight
    assert len(list(copy.parameters())) == len(list(master.parameters()))


def test_gradients_reach_the_masters_in_fp32_and_match_fp32_autograd():
    master, reference = tiny(), tiny()
    mixed = Bf16Compute(master)
    mixed.refresh()
    with bf16_attention("cpu"):
        loss = loss_of(mixed.model, *batch())
    loss.backward()
    mixed.grads_to_masters()
    loss_of(reference, *batch()).backward()  # PyTorch's fp32 gradients of the same weights
    got = torch.cat([p.grad.flatten() for p in master.parameters()])
    want = torch.cat([r.grad.flatten() for r in reference.parameters()])
    assert (got - want).norm() / want.norm() < 0.08  # bf16 rounding, not a wrong or missing gradient (~1)
    for (name, p), r in zip(master.named_parameters(), reference.parameters()):
        assert p.grad is not None and p.grad.dtype == torch.float32, name
        # relative to the tensor's own gradient, or to the whole gradient where that is ~0 (key biases)
        err = (p.grad - r.grad).norm() / torch.maximum(r.grad.norm(), 0.01 * want.norm())
        assert err < 0.2, f"{name}: relative gradient error {err:.3f}"


def test_refresh_copies_the_current_masters_and_drops_old_gradients():
    master = tiny()
    mixed = Bf16Compute(master)
    with torch.no_grad():
        for p in master.parameters():
            p.add_(torch.randn_like(p))  # an optimizer step, a reload: anything that moves the masters
    for p in mixed.model.parameters():
        p.grad = torch.ones_like(p)
    mixed.refresh()
    for m, c in zip(master.parameters(), mixed.model.parameters()):
        assert torch.equal(c, m.to(torch.bfloat16)) and c.grad is None


def test_the_compute_copy_is_used_for_cpu_bf16_transformers_only():
    bf16, fp32 = resolve_precision("bf16", training=True), resolve_precision("fp32", training=True)
    cpu = torch.device("cpu")
    assert isinstance(compute_copy(tiny(), bf16, cpu, 1), Bf16Compute)
    assert compute_copy(tiny(), fp32, cpu, 1) is None
    assert compute_copy(tiny(), bf16, torch.device("cuda"), 1) is None  # autocast there
    assert compute_copy(tiny(), bf16, cpu, 2) is None  # DDP wraps the fp32 model under autocast
    gru = EncoderDecoder(Seq2SeqEncoder(20, 8, 16, 1), Seq2SeqAttentionDecoder(20, 8, 16, 1))
    assert compute_copy(gru, bf16, cpu, 1) is None


def test_bf16_attention_restricts_cpu_sdpa_to_the_math_kernel():
    flash_before = torch.backends.cuda.flash_sdp_enabled()
    with bf16_attention("cpu"):
        assert not torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
    with autocast(resolve_precision("bf16", training=True), "cpu"):
        assert not torch.backends.cuda.flash_sdp_enabled()
        assert torch.is_autocast_enabled("cpu")
    assert torch.backends.cuda.flash_sdp_enabled() == flash_before
    with bf16_attention("cuda"), autocast(resolve_precision("fp32"), "cpu"):
        assert torch.backends.cuda.flash_sdp_enabled() == flash_before


@needs_data
def test_bf16_training_follows_fp32_and_repeats_itself():
    from attnlab.data import load_data
    from attnlab.models import build_model
    from attnlab.training.config import TrainConfig
    from attnlab.training.presets import get_preset
    from attnlab.training.trainer import Trainer
    from attnlab.utils.runtime import seed_everything

    preset = get_preset("transformer", "tiny")
    data = load_data({**preset["data"], "path": DATA})
    model_cfg = {**preset["model"], "src_vocab_size": len(data.src_vocab), "tgt_vocab_size": len(data.tgt_vocab)}

    def train(precision: str):
        seed_everything(0)
        cfg = {**preset["train"], "max_steps": 6, "precision": precision, "eval_limit": 1, "device": "cpu"}
        trainer = Trainer(build_model("transformer", model_cfg), data, TrainConfig.from_dict(cfg), None, progress=False)
        return trainer, trainer.fit().losses

    trainer, bf16 = train("bf16")
    assert trainer.mixed is not None
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert all(v.dtype == torch.float32 for s in trainer.optimizer.state.values() for v in s.values() if v.dim())
    _, fp32 = train("fp32")
    assert bf16 != fp32  # bf16 did run
    for a, b in zip(bf16, fp32):
        assert a == pytest.approx(b, rel=0.02)
    assert train("bf16")[1] == bf16  # same seed, same losses
