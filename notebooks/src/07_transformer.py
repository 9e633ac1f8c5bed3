# %% [markdown]
# # 11.7 The Transformer architecture
#
# Vaswani et al. (2017) built a translator from attention alone. The encoder is a stack of blocks, each a
# multi-head self-attention (11.5, 11.6) and a position-wise feed-forward network (the same two-layer MLP at
# every position), each wrapped in a residual connection and layer normalization. The decoder's blocks add
# a second attention whose queries are the decoder's states and whose keys and values are the encoder's
# outputs — Bahdanau's idea (11.4) with multi-head dot-product attention — and its self-attention is
# *causal*: position *t* sees only positions ≤ *t*, so training can feed the whole target at once.
#
# This notebook shows why layer norm, checks the shapes, trains a small Transformer on the bundled
# English–French sample, and draws its attention in every layer and head.

# %%
# %matplotlib inline
import os
import tempfile
from pathlib import Path

import torch

from attnlab.analysis.explanation import explain
from attnlab.chapter import TableView
from attnlab.chapter.transformer import norm_comparison
from attnlab.data import sample_data_path
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.loading import load_translator
from attnlab.training.config import TrainConfig
from attnlab.training.launch import train_run
from attnlab.training.presets import get_preset
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
_ = torch.manual_seed(0)  # one seed for the whole notebook

# %% [markdown]
# ## Layer norm, not batch norm
#
# The book's 2×2 example: layer norm normalises each example over its features, batch norm each feature
# over the batch. Look at the rows: layer norm gives every example the same normalised pattern, whatever
# else is in the batch — what a model that sees sentences of every length in batches of every size needs.

# %%
result = norm_comparison()
TableView(*result.tables[0])

# %% [markdown]
# Layer norm's rows are the same for both examples: each example is standardised on its own. Batch norm's
# columns are standardised instead, so each example's output depends on the other one. The chapter's
# summary:

# %%
print(result.paragraph)

# %% [markdown]
# ## Shapes
#
# Two layers of 4 heads over 32 features; a batch of two source sentences of 7 tokens and two target
# prefixes of 5: the model returns one score per target-vocabulary word at each target position.

# %%
config = TransformerConfig(
    src_vocab_size=20, tgt_vocab_size=30, num_hiddens=32, num_layers=2, num_heads=4, ffn_num_hiddens=64
)
model = Transformer(config).eval()
src, tgt = torch.randint(0, 20, (2, 7)), torch.randint(0, 30, (2, 5))
print(model(src, tgt, torch.tensor([7, 4])).shape)  # (B, T, V)

# %% [markdown]
# ## Train a small one on the bundled sample
#
# Two layers, a constant learning rate, a few hundred steps (30 at `ATTNLAB_SMALL=1`). `attnlab demo`
# trains the `cpu-small` preset on the whole corpus in four minutes and reaches a test BLEU around 30.

# %%
spec = get_preset("transformer", "tiny")
steps = 30 if SMALL else 300
train_config = TrainConfig.from_dict(
    {**spec["train"], "max_steps": steps, "epochs": 1000, "schedule": "constant", "lr": 1e-2}
)
run_dir = Path(tempfile.mkdtemp()) / "transformer"
result = train_run(
    "transformer",
    {**spec["model"], "num_layers": 2},
    train_config,
    {**spec["data"], "path": str(sample_data_path())},
    run_dir,
    progress=False,
)
print(f"{result.step} steps, final training loss {result.train_loss:.3f}")

# %%
translator = load_translator(run_dir)
for sentence in ["go .", "i lost .", "he's calm .", "i'm home ."]:
    print(sentence, "=>", translator.translate([sentence])[0])

# %% [markdown]
# ## Encoder–decoder attention
#
# One row of heatmaps per decoder layer, one column per head; in each, rows are output tokens and columns
# source tokens. Look for heads that differ from each other, and for a layer whose heads are sharper than
# the other's.

# %%
ex = explain(translator, "i'm home .")
heads = ex.cross.shape[1]
show_heatmaps(
    ex.cross,
    xlabel="source",
    ylabel="output",
    titles=[f"head {h + 1}" for h in range(heads)],
    xticklabels=ex.src_tokens,
    yticklabels=ex.tgt_tokens,
    row_labels=[f"layer {i + 1}" for i in range(ex.cross.shape[0])],
)

# %% [markdown]
# Even this briefly trained model has heads with distinct patterns — some spread over the sentence, some
# fixed on the final `.` or `<eos>` (a common "no-op" place to park attention). Trained on the full corpus
# (the demo's report), heads of the upper layer align output words with the source words they translate.
#
# ## Decoder self-attention is causal
#
# The decoder's self-attention maps are lower-triangular: step *t* sees the tokens produced before it, never
# after. Expect the upper-right half of every heatmap to be blank.

# %%
show_heatmaps(
    ex.maps["decoder_self"],
    xlabel="earlier outputs",
    ylabel="output",
    titles=[f"head {h + 1}" for h in range(heads)],
    xticklabels=ex.tgt_input_tokens,
    yticklabels=ex.tgt_tokens,
    row_labels=[f"layer {i + 1}" for i in range(ex.maps["decoder_self"].shape[0])],
)

# %% [markdown]
# Blank above the diagonal in every head: the mask that lets training feed whole target sentences at once
# without letting a position peek at the word it must predict.
#
# ## Interactive views
#
# `head_view` draws lines from each output token to the source tokens, one colour per head (click a head to
# hide it; hover a token to keep only its lines); `model_view` shows every layer and head at once. Both work
# offline; `.save_html("view.html")` writes a standalone page, `.figure()` a static one.

# %%
from attnlab.analysis.notebook import head_view, model_view

head_view(ex)

# %%
model_view(ex, kind="encoder_self")

# %% [markdown]
# ## Exercise 1: the future never leaks
#
# Take the untrained `model` from the shapes section. Change the last two tokens of a target prefix and
# show that the logits of the first three positions do not change at all — causality, checked numerically.

# %% tags=["solution"]
tgt_a = torch.randint(0, 30, (1, 5))
tgt_b = tgt_a.clone()
tgt_b[0, 3:] = (tgt_a[0, 3:] + 1) % 30
src1, lens1 = torch.randint(0, 20, (1, 7)), torch.tensor([7])
with torch.no_grad():
    a, b = model(src1, tgt_a, lens1), model(src1, tgt_b, lens1)
torch.testing.assert_close(a[:, :3], b[:, :3], atol=1e-6, rtol=0)
assert float((a[:, 3:] - b[:, 3:]).abs().max()) > 0
print("positions 0-2 unchanged, positions 3-4 changed")

# %% [markdown]
# ## Exercise 2: counting an encoder block
#
# Predict the number of parameters of one encoder block of `model` from `d = 32` and the FFN's hidden size
# `f = 64`: four `d×d` attention projections with biases, the FFN's two layers, and two layer norms
# (a gain and a bias each). Check against PyTorch's count.

# %% tags=["solution"]
d, f = config.num_hiddens, config.ffn_num_hiddens
predicted = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * (2 * d)
block = model.encoder.blocks[0]
counted = sum(p.numel() for p in block.parameters())
assert counted == predicted, (counted, predicted)
print(f"one encoder block: {counted:,} parameters, as predicted; `attnlab params` scales this to the paper's 63M")
