# %% [markdown]
# # A decoder-only translator
#
# No encoder and no cross-attention: the source and its translation are one sequence,
# `x_1 .. x_S <eos> <bos> y_1 ..`, read by one stack of self-attention blocks, with the loss on the
# target part only. Causal masking lets every token see only what came before it; prefix-LM masking lets
# the source tokens see each other both ways, as an encoder would, and never a target token.

# %%
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
torch.manual_seed(0)

# %% [markdown]
# ## The two masks
# Four source slots (the last one padding) and three target steps; True (1) = may attend.

# %%
slots = torch.arange(7)
for prefix_lm in (False, True):
    print("prefix-LM" if prefix_lm else "causal")
    print(prefix_mask(torch.tensor([3]), 4, slots, slots, prefix_lm)[0].int())

# %% [markdown]
# ## Cached decoding is the full forward
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
    print(sentence, "=>", translator.translate([sentence], beam=2)[0])

# %% [markdown]
# Where the encoder–decoder has cross-attention, this model's one self-attention has its target rows over
# the source columns (they need not sum to one: the rest of each row goes to the target so far).

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
