"""Where a fused pass may stand in for a Transformer decoder's modules: which decoders int8's fused step
(`attnlab.inference.int8_step`) computes, block by block, and whether anything watches the modules now.

    int8_step(decoder)   -> the fused step, or None where a block is not one the passes compute (or no C passes)
    unwatched(modules)   -> eval mode, no autograd, no recording, head masks or forward hooks

The model's structure is this package's to know, so the check lives beside the layers it names; the step
itself only runs the passes over the layers it was given.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from attnlab.attention import MultiHeadAttention
from attnlab.attention.heads import head_masks_active
from attnlab.attention.recording import recording_active
from attnlab.inference.int8_step import Int8DecoderStep
from attnlab.inference.quantize import Int8Linear
from attnlab.kernels import loader as native
from attnlab.kernels.layer_norm import takes_layer_norm

from .transformer_layers import PositionWiseFFN, Sublayer, TransformerDecoder, TransformerDecoderBlock

__all__ = ["int8_step", "unwatched"]


def int8_step(decoder: nn.Module) -> Int8DecoderStep | None:
    """`decoder`'s int8 fused step where every block is one it computes, else None (the modules decode)."""
    if type(decoder) is not TransformerDecoder:
        return None
    covered = _blocks_covered(decoder, Int8DecoderStep.ATTENTIONS, Int8DecoderStep.LINEARS)
    return Int8DecoderStep.build(decoder) if covered else None


def _blocks_covered(stack: TransformerDecoder, attentions: tuple[str, ...], linears: tuple[str, ...]) -> bool:
    """Whether every block of `stack` is one the fused passes compute: the named attention modules plain
    `MultiHeadAttention`s, the named linear layers (dotted names in a block) `Int8Linear`s, a ReLU FFN, and
    post-norm LayerNorms over the model width; a float embedding and positions added to it."""
    emb = stack.embedding
    if type(emb) is not nn.Embedding or emb.max_norm is not None or not native.takes(torch.float32, emb.weight):
        return False  # (a max_norm embedding renormalizes its rows as it reads them)
    if stack.pos_encoding is None or stack.relative_bias is not None or type(stack.final_norm) is not nn.Identity:
        return False
    for block in stack.blocks:
        if type(block) is not TransformerDecoderBlock:
            return False
        for name in attentions:
            mha = getattr(block, name)
            if (
                type(mha) is not MultiHeadAttention
                or mha.rotary is not None
                or mha.window is not None
                or not mha.num_heads
            ):
                return False
        if any(type(_submodule(block, name)) is not Int8Linear for name in linears):
            return False
        if type(block.ffn) is not PositionWiseFFN or type(block.ffn.activation) is not nn.ReLU:
            return False
        for sub in (m for m in block.children() if isinstance(m, Sublayer)):
            if type(sub) is not Sublayer or sub.norm_first or not takes_layer_norm(sub.ln, stack.num_hiddens):
                return False
    return True


def _submodule(block: nn.Module, name: str) -> nn.Module | None:
    """block.get_submodule(name), or None where the block has no such module."""
    try:
        return block.get_submodule(name)
    except AttributeError:
        return None


def unwatched(modules: list[nn.Module]) -> bool:
    """Whether a fused pass may stand in for these modules' forward: eval mode, no autograd, and nothing
    watching them that their forward would serve (recording, head masks, forward hooks)."""
    if torch.is_grad_enabled() or head_masks_active() or recording_active() or _global_hooks():
        return False
    return not any(m.training or m._forward_hooks or m._forward_pre_hooks for m in modules)


def _global_hooks() -> bool:
    """Whether a forward hook is registered for every module (`nn.modules.module.register_module_forward_hook`)."""
    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)
