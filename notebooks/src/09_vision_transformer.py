# %% [markdown]
# # The Vision Transformer
#
# An image becomes a sequence: cut it into p x p patches, project each one linearly, prepend a class
# token and add 2-D positions; then the Transformer's own encoder blocks run unchanged, and the class
# token's output is classified. Here on scikit-learn's 8x8 digits (16 patches of 2x2), beside a
# logistic regression trained on the same fixed split, then its attention drawn on the image.

# %%
import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression

from attnlab.analysis.rollout import explain_image
from attnlab.data.images import load_digits_data
from attnlab.models import ViT, ViTConfig
from attnlab.training.config import TrainConfig
from attnlab.training.images import accuracy, load_image_run, train_image_run
from attnlab.training.presets import get_preset
from attnlab.viz.images import image_attention_figures

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)

# %% [markdown]
# ## Patches are tokens
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
# The split is fixed (a hash of each image's index): 70% train, 15% validation, 15% test.

# %%
data = load_digits_data()
print(len(data.train), "train /", len(data.valid), "valid /", len(data.test), "test images")
spec = get_preset("vit", "tiny" if SMALL else "digits")
run_dir = Path(tempfile.mkdtemp()) / "vit"
result = train_image_run(
    "vit", spec["model"], TrainConfig.from_dict(spec["train"]), spec["data"], run_dir, progress=False
)
print(f"{result.step} steps in {result.seconds:.0f} s, validation accuracy {result.valid_accuracy:.3f}")

# %%
vit, cfg = load_image_run(run_dir)


def flat(split):
    return split.images.reshape(len(split), -1)  # (N, 64) pixels


logreg = LogisticRegression(max_iter=2000).fit(flat(data.train), data.train.labels)
print(f"ViT test accuracy {accuracy(vit, data.test):.3f}")
print(f"logistic regression test accuracy {logreg.score(flat(data.test), data.test.labels):.3f}")

# %% [markdown]
# ## Where it looks
# Attention rollout (Abnar & Zuidema 2020) multiplies the layers' head-averaged attention, each mixed
# with the identity for the residual connection: how much each patch flows into the class token. Then
# each head's own class-token row, per layer. (`attnlab attention --checkpoint RUN --image N` saves both.)

# %%
exp = explain_image(vit, torch.from_numpy(data.test.images[3]))
print("predicted", exp.label, "label", data.test.labels[3])
figures = dict(image_attention_figures(exp, data.classes))
figures["rollout"]

# %%
figures["class_token_heads"]
