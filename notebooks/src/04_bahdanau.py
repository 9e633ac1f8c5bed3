# %% [markdown]
# # 11.4 The Bahdanau attention mechanism
#
# An RNN encoder–decoder squeezes the whole source sentence into one final hidden state, and the decoder
# has to translate from that single vector. Bahdanau, Cho and Bengio (2014) let the decoder look back:
# at every output step its previous hidden state is the *query*, the encoder's states at every source
# position are the *keys and values*, and additive attention (section 11.3) pools them into a context
# vector fed to the decoder alongside the previous output token.
#
# This notebook checks the model's shapes, trains a small one on attnlab's bundled English–French sample,
# and draws where its decoder looked while translating.

# %%
# %matplotlib inline
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
_ = torch.manual_seed(0)  # one seed for the whole notebook

# %% [markdown]
# ## Shapes
#
# A batch of 4 source sentences of 7 tokens each, a vocabulary of 10: the decoder returns one score per
# vocabulary word at each target position, `(B, T, V)`.

# %%
vocab_size, embed_size, num_hiddens, num_layers = 10, 8, 16, 2
batch_size, num_steps = 4, 7
encoder = Seq2SeqEncoder(vocab_size, embed_size, num_hiddens, num_layers)
decoder = Seq2SeqAttentionDecoder(vocab_size, embed_size, num_hiddens, num_layers)
model = EncoderDecoder(encoder, decoder)
X = torch.zeros((batch_size, num_steps), dtype=torch.long)
print(model(X, X).shape)  # (B, T, V)

# %% [markdown]
# ## Train on the bundled sample
#
# A few hundred sentence pairs: enough to see attention form, not to translate well (`attnlab demo` and
# `attnlab train --model bahdanau --preset d2l` train on the full corpus). `train_run` is what
# `attnlab train` calls: it writes a run folder with the config, vocabularies, weights and `log.jsonl`.

# %%
spec = get_preset("bahdanau", "tiny")
steps = 30 if SMALL else 300
config = TrainConfig.from_dict({**spec["train"], "max_steps": steps, "epochs": 1000, "lr": 1e-2})
run_dir = Path(tempfile.mkdtemp()) / "bahdanau"
result = train_run(
    "bahdanau", spec["model"], config, {**spec["data"], "path": str(sample_data_path())}, run_dir, progress=False
)
print(f"{result.step} steps, final training loss {result.train_loss:.3f}")

# %% [markdown]
# The book's four test sentences. After a few hundred steps on a tiny corpus expect short, frequent
# French words rather than correct translations; `attnlab evaluate` measures a real run's BLEU.

# %%
translator = load_translator(run_dir)
for sentence in ["go .", "i lost .", "he's calm .", "i'm home ."]:
    print(sentence, "=>", translator.translate([sentence])[0])

# %% [markdown]
# ## Where the decoder looked
#
# `explain` translates one sentence and records the attention weights of every step: one row per output
# token, one column per source token (ending in `<eos>`). A well-trained model shows a roughly diagonal
# path, English and French word order being similar; look for how sharp or diffuse the rows are.

# %%
ex = explain(translator, "i'm home .")
show_heatmaps(ex.cross[:1, :1], xlabel="source", ylabel="output", xticklabels=ex.src_tokens, yticklabels=ex.tgt_tokens)

# %% [markdown]
# Each row is one decoding step's distribution over the source. With this little training the rows are
# diffuse, often leaning on the final tokens; with the full corpus (the demo's report shows it) they
# sharpen into a path that follows the source word by word.

# %% [markdown]
# ## Exercise 1: every step pools a distribution
#
# Check on the recorded map that each output step's weights over the source are non-negative and sum
# to 1, and that the map has one row per output token and one column per source token.

# %% tags=["solution"]
cross = ex.cross[0, 0]  # (Lt, Ls)
assert cross.shape == (len(ex.tgt_tokens), len(ex.src_tokens))
assert bool((cross >= 0).all())
torch.testing.assert_close(cross.sum(-1), torch.ones(len(ex.tgt_tokens)))
print(f"{cross.shape[0]} steps x {cross.shape[1]} source tokens; every row sums to 1")

# %% [markdown]
# ## Exercise 2: what attention costs
#
# How many of the trained model's parameters does the attention add? Count the parameters of the
# decoder's `AdditiveAttention` and compare them with the whole model. Then check the count by hand:
# `W_q` and `W_k` are `num_hiddens × num_hiddens` matrices and `w_v` a vector of `num_hiddens`.

# %% tags=["solution"]
net = translator.model
attention_params = sum(p.numel() for p in net.decoder.attention.parameters())
total = sum(p.numel() for p in net.parameters())
h = spec["model"]["num_hiddens"]
assert attention_params == 2 * h * h + h
print(f"attention: {attention_params:,} of {total:,} parameters ({attention_params / total:.1%})")
