# %% [markdown]
# # The Transformer
#
# Encoder and decoder blocks of multi-head attention, position-wise FFNs and residual connections with
# layer normalization. First the normalization the Transformer chooses, then a small Transformer trained
# on attnlab's bundled English–French sample, and its attention in every layer and head.

# %%
import os
import tempfile
from pathlib import Path

import torch

from attnlab.analysis.explanation import explain
from attnlab.chapter.report import format_table
from attnlab.chapter.transformer import norm_comparison
from attnlab.data import sample_data_path
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.loading import load_translator
from attnlab.training.config import TrainConfig
from attnlab.training.launch import train_run
from attnlab.training.presets import get_preset
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)

# %% [markdown]
# ## Layer norm vs batch norm

# %%
result = norm_comparison()
print(format_table(*result.tables[0]))
print(result.paragraph)

# %% [markdown]
# ## Shapes

# %%
config = TransformerConfig(
    src_vocab_size=20, tgt_vocab_size=30, num_hiddens=32, num_layers=2, num_heads=4, ffn_num_hiddens=64
)
model = Transformer(config).eval()
src, tgt = torch.randint(0, 20, (2, 7)), torch.randint(0, 30, (2, 5))
print(model(src, tgt, torch.tensor([7, 4])).shape)  # (B, T, V)

# %% [markdown]
# ## Train a small one on the bundled sample
# (`attnlab demo` trains on the whole corpus and writes a report.)

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
# Encoder–decoder attention: one row per layer, one column per head.

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
# ## Interactive views
# `head_view` draws lines from each output token to the source tokens, one colour per head (click a head
# to hide it; hover a token to keep only its lines); `model_view` shows every layer and head at once.
# Both work offline; `.save_html("view.html")` writes a standalone page, `.figure()` a static one.

# %%
from attnlab.analysis.notebook import head_view, model_view

head_view(ex)

# %%
model_view(ex, kind="encoder_self")
