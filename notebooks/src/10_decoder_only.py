# %% [markdown]
# # 11.9 Large-scale pretraining with Transformers: a decoder-only translator
#
# Section 11.9 sorts the pretrained Transformers into encoder-only (BERT), encoder–decoder (T5) and
# decoder-only (GPT) models. The decoder-only kind scales best and is what large language models are;
# here it translates. No encoder and no cross-attention: the source and its translation are one sequence,
# `x_1 .. x_S <eos> <bos> y_1 ..`, read by one stack of self-attention blocks, with the loss on the
# target part only. Causal masking lets every token see only what came before it; prefix-LM masking lets
# the source tokens see each other both ways, as an encoder would, and never a target token.

# %%
# %matplotlib inline
import os
import tempfile
from pathlib import Path

import torch

from attnlab.analysis.explanation import explain
from attnlab.data import sample_data_path
from attnlab.models import DecoderOnly, DecoderOnlyConfig
from attnlab.models.decoder_only import prefix_mask
from attnlab.runs.loading import load_translator
from attnlab.training.config import TrainConfig
from attnlab.training.launch import train_run
from attnlab.training.presets import get_preset
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
_ = torch.manual_seed(0)  # one seed for the whole notebook

# %% [markdown]
# ## The two masks
#
# Four source slots (the last one padding) and three target steps; True (1) = may attend.

# %%
slots = torch.arange(7)
for prefix_lm in (False, True):
    print("prefix-LM" if prefix_lm else "causal")
    print(prefix_mask(torch.tensor([3]), 4, slots, slots, prefix_lm)[0].int())

# %% [markdown]
# ## Cached decoding is the full forward
#
# `start_decoding` runs the source once into each block's key/value cache; every `decode_step` appends one
# target step.

# %%
model = DecoderOnly(
    DecoderOnlyConfig(20, 30, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64, prefix_lm=True)
).eval()
src, lens, tgt = torch.randint(3, 20, (2, 6)), torch.tensor([6, 4]), torch.randint(3, 30, (2, 5))
state = model.start_decoding(src, lens)
steps = torch.cat([model.decode_step(tgt[:, t : t + 1], state)[0] for t in range(5)], dim=1)
print("max difference:", float((steps - model(src, tgt, lens)).abs().max()))

# %% [markdown]
# ## Train a small one on the bundled sample
#
# The Transformer's presets, with its encoder's and decoder's blocks in one stack.

# %%
spec = get_preset("decoder-only", "tiny")
train_config = TrainConfig.from_dict(
    {**spec["train"], "max_steps": 30 if SMALL else 300, "epochs": 1000, "schedule": "constant", "lr": 1e-2}
)
run_dir = Path(tempfile.mkdtemp()) / "decoder-only"
result = train_run(
    "decoder-only",
    {**spec["model"], "prefix_lm": True},
    train_config,
    {**spec["data"], "path": str(sample_data_path())},
    run_dir,
    progress=False,
)
print(f"{result.step} steps, final training loss {result.train_loss:.3f}")

# %%
translator = load_translator(run_dir)
for sentence in ["go .", "i lost .", "he's calm .", "i'm home ."]:
    print(sentence, "=>", translator.translate([sentence], options=translator.options(beam=2))[0])

# %% [markdown]
# Where the encoder–decoder has cross-attention, this model's one self-attention has its target rows over
# the source columns (they need not sum to one: the rest of each row goes to the target so far). Look for
# how much of each output row's weight lands on the source at all.

# %%
ex = explain(translator, "i'm home .")
show_heatmaps(
    ex.cross,
    xlabel="source",
    ylabel="output",
    titles=[f"head {h + 1}" for h in range(ex.cross.shape[1])],
    xticklabels=ex.src_tokens,
    yticklabels=ex.tgt_tokens,
    row_labels=[f"layer {i + 1}" for i in range(ex.cross.shape[0])],
)

# %% [markdown]
# Rows that are pale over the whole source spend their attention on the target written so far: one stack
# has to share its attention between reading the source and continuing the translation, where an
# encoder–decoder has a separate cross-attention for the first.

# %% [markdown]
# ## Exercise 1: read the prefix-LM mask
#
# From the prefix-LM mask printed above (3 real source slots, one padding slot, 3 target steps), check in
# code: every real source slot sees exactly the real source slots, the padding slot is seen by nobody, and
# target step *t* sees the source plus target steps ≤ *t*.

# %% tags=["solution"]
mask = prefix_mask(torch.tensor([3]), 4, slots, slots, True)[0]  # (7, 7), True = may attend
source, pad, target = [0, 1, 2], 3, [4, 5, 6]
assert all(mask[i, source].all() and not mask[i, target].any() for i in source)
assert not mask[:, pad].any()
for t_i, row in enumerate(target):
    assert mask[row, source].all() and mask[row, target].tolist() == [j <= t_i for j in range(3)]
print("source: both ways; padding: unseen; targets: causal")

# %% [markdown]
# ## Exercise 2: the cache is exact
#
# Repeat the cached-decoding check with a *causal* (not prefix-LM) model, and with a batch of three
# sources of lengths 6, 2 and 5: the step-by-step logits must equal the full forward to 1e-5.

# %% tags=["solution"]
causal = DecoderOnly(
    DecoderOnlyConfig(20, 30, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64, prefix_lm=False)
).eval()
src3, lens3, tgt3 = torch.randint(3, 20, (3, 6)), torch.tensor([6, 2, 5]), torch.randint(3, 30, (3, 4))
with torch.no_grad():
    state = causal.start_decoding(src3, lens3)
    stepped = torch.cat([causal.decode_step(tgt3[:, t : t + 1], state)[0] for t in range(4)], dim=1)
    full = causal(src3, tgt3, lens3)
torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)
print("cached decoding == full forward, causal model, three source lengths")
