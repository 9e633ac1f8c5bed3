# %% [markdown]
# # 11.8 Transformers for vision
#
# Nothing in a Transformer's encoder is specific to words. Dosovitskiy et al. (2021) made an image a
# sequence: cut it into p x p patches, project each one linearly, prepend a class
# token and add 2-D positions; then the Transformer's own encoder blocks run unchanged, and the class
# token's output is classified. Here on scikit-learn's 8x8 digits (16 patches of 2x2), beside a
# logistic regression trained on the same fixed split, then its attention drawn on the image.
#
# The lesson of the section is about data: without the convolution's built-in locality a ViT needs many
# images to beat a CNN. On 1,797 tiny digits, look at how close it comes to a linear model.

# %%
# %matplotlib inline
import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression

from attnlab.analysis.rollout import attention_rollout, explain_image
from attnlab.data.images import load_digits_data
from attnlab.models import ViT, ViTConfig
from attnlab.runs.loading import load_model
from attnlab.training.config import TrainConfig
from attnlab.training.launch import train_run
from attnlab.training.presets import get_preset
from attnlab.training.tasks import accuracy
from attnlab.viz.images import image_attention_figures

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
_ = torch.manual_seed(0)  # one seed for the whole notebook

# %% [markdown]
# ## Patches are tokens
#
# The patch embedding is a convolution whose kernel and stride are the patch size: the same as unfolding
# the patches and applying one linear layer to each.

# %%
model = ViT(ViTConfig(num_classes=10, patch_size=2, num_hiddens=32, num_heads=2, num_layers=1, ffn_num_hiddens=64))
images = torch.rand(2, 1, 8, 8)
proj = model.patch_embedding.proj
unfolded = F.linear(F.unfold(images, 2, stride=2).transpose(1, 2), proj.weight.flatten(1), proj.bias)
print(
    model.patch_embedding(images).shape,
    "equal to unfold + linear:",
    torch.allclose(model.patch_embedding(images), unfolded, atol=1e-6),
)
print(model(images).shape)  # (B, classes)

# %% [markdown]
# ## Train on the digits
#
# The split is fixed (a hash of each image's index): 70% train, 15% validation, 15% test.

# %%
data = load_digits_data()
print(len(data.train), "train /", len(data.valid), "valid /", len(data.test), "test images")
spec = get_preset("vit", "tiny" if SMALL else "digits")
run_dir = Path(tempfile.mkdtemp()) / "vit"
result = train_run("vit", spec["model"], TrainConfig.from_dict(spec["train"]), spec["data"], run_dir, progress=False)
print(f"{result.step} steps in {result.seconds:.0f} s, validation accuracy {result.scores['valid_accuracy']:.3f}")

# %%
vit, cfg = load_model(run_dir)  # the same loader as a translator's run


def flat(split):
    return split.images.reshape(len(split), -1)  # (N, 64) pixels


logreg = LogisticRegression(max_iter=2000).fit(flat(data.train), data.train.labels)
print(f"ViT test accuracy {accuracy(vit, data.test):.3f}")
print(f"logistic regression test accuracy {logreg.score(flat(data.test), data.test.labels):.3f}")

# %% [markdown]
# The two accuracies side by side: on so little data the ViT is in the linear model's range rather than
# far above it (at `ATTNLAB_SMALL=1` it trains only briefly and stays below it).
#
# ## Where it looks
#
# Attention rollout (Abnar & Zuidema 2020) multiplies the layers' head-averaged attention, each mixed
# with the identity for the residual connection: how much each patch flows into the class token. Then
# each head's own class-token row, per layer. (`attnlab attention --checkpoint RUN --image N` saves both.)
# Look for the bright patches: on a digit they should sit on the strokes, not on the empty border.

# %%
exp = explain_image(vit, torch.from_numpy(data.test.images[3]))
print("predicted", exp.label, "label", data.test.labels[3])
figures = dict(image_attention_figures(exp, data.classes))
figures["rollout"]

# %%
figures["class_token_heads"]

# %% [markdown]
# The rollout and the per-head maps show which patches reach the class token; where they fall on the dark
# background rather than the strokes, the model has not yet learned to ignore the border (a briefly
# trained model often has not).

# %% [markdown]
# ## Exercise 1: how many tokens?
#
# An 8×8 image cut into p×p patches gives (8/p)² patch tokens, plus the class token. Check the patch
# embedding's output for p = 2 and p = 4, and the classifier's output shape for each.

# %% tags=["solution"]
for p in (2, 4):
    vit_p = ViT(ViTConfig(num_classes=10, patch_size=p, num_hiddens=32, num_heads=2, num_layers=1, ffn_num_hiddens=64))
    tokens = vit_p.patch_embedding(images)
    assert tokens.shape[1] == (8 // p) ** 2 and vit_p(images).shape == (2, 10)
    print(f"patch {p}: {tokens.shape[1]} patch tokens (+1 class token) of {tokens.shape[-1]} features")

# %% [markdown]
# ## Exercise 2: rollout is a distribution
#
# `attention_rollout` multiplies per-layer maps mixed with the identity. Apply it to the recorded maps of
# `exp` (one `(1, heads, L, L)` tensor per layer) and check every row of the result sums to 1 and is
# non-negative, as a product of row-stochastic matrices must be.

# %% tags=["solution"]
rolled = attention_rollout([layer[None] for layer in exp.maps])  # (1, L, L)
torch.testing.assert_close(rolled.sum(-1), torch.ones(rolled.shape[:2]))
assert bool((rolled >= 0).all())
print(f"rollout over {exp.maps.shape[0]} layer(s): {rolled.shape[-1]} tokens, rows sum to 1")
