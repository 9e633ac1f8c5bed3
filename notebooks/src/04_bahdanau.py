# %% [markdown]
# # Bahdanau attention
#
# An RNN encoder–decoder whose decoder attends (additively) over every encoder state at each step,
# instead of squeezing the source into one vector. Here: shapes, then a small model trained on
# attnlab's bundled English–French sample, and its attention over the source.

# %%
import os
import tempfile
from pathlib import Path

import torch

from attnlab.analysis.explanation import explain
from attnlab.data import sample_data_path
from attnlab.models import EncoderDecoder, Seq2SeqAttentionDecoder, Seq2SeqEncoder
from attnlab.runs.loading import load_translator
from attnlab.training.config import TrainConfig
from attnlab.training.launch import train_run
from attnlab.training.presets import get_preset
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)

# %%
vocab_size, embed_size, num_hiddens, num_layers = 10, 8, 16, 2
batch_size, num_steps = 4, 7
encoder = Seq2SeqEncoder(vocab_size, embed_size, num_hiddens, num_layers)
decoder = Seq2SeqAttentionDecoder(vocab_size, embed_size, num_hiddens, num_layers)
model = EncoderDecoder(encoder, decoder)
X = torch.zeros((batch_size, num_steps), dtype=torch.long)
print(model(X, X).shape)  # (B, T, V)

# %% [markdown]
# Train on the bundled sample (a few hundred pairs: enough to see attention form, not to translate well;
# `attnlab demo` trains on the full corpus).

# %%
spec = get_preset("bahdanau", "tiny")
steps = 30 if SMALL else 300
config = TrainConfig.from_dict({**spec["train"], "max_steps": steps, "epochs": 1000, "lr": 1e-2})
run_dir = Path(tempfile.mkdtemp()) / "bahdanau"
result = train_run(
    "bahdanau", spec["model"], config, {**spec["data"], "path": str(sample_data_path())}, run_dir, progress=False
)
print(f"{result.step} steps, final training loss {result.train_loss:.3f}")

# %%
translator = load_translator(run_dir)
for sentence in ["go .", "i lost .", "he's calm .", "i'm home ."]:
    print(sentence, "=>", translator.translate([sentence])[0])

# %%
ex = explain(translator, "i'm home .")
show_heatmaps(ex.cross[:1, :1], xlabel="source", ylabel="output", xticklabels=ex.src_tokens, yticklabels=ex.tgt_tokens)
