# %% [markdown]
# # 07 · ViT against ResNet: which layers compute alike? (finding F1, cross-model)
#
# **The paper's claims** (Raghu et al. 2021, §4, Fig. 2 and B.1), comparing every ResNet layer
# with every ViT layer:
# 1. the **lower** ResNet layers are similar to the **lower** ViT layers (the lower half of a
#    ResNet-50 matches roughly the lowest quarter of a ViT);
# 2. the match **climbs with depth**: higher ResNet layers match higher ViT layers;
# 3. the **final** ViT layers are dissimilar to every ResNet layer (the paper suspects they mostly
#    work on the CLS token).
#
# **What we compare.** The ResNet's stem and residual blocks (rows) against the ViT's six sublayers
# per block (columns), minibatch linear CKA with unbiased HSIC, all ViT tokens flattened (policy
# `all`), ResNet maps flattened, batches of 256. Reference points: the same comparison for
# **untrained** models, and the CKA between two training runs of each model (the ceiling).
#
# **Learning goals:** read a cross-model CKA matrix; turn it into "for each layer, its best match";
# judge a number against its ceiling and its untrained control.
#
# **Prerequisites:** notebook 06. **Time:** about 25 minutes.
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/vit-cnn-course/vit-cnn-course/blob/main/notebooks/07_vit_vs_resnet.ipynb) [![Binder](https://mybinder.org/badge_logo.svg)](https://mybinder.org/v2/gh/vit-cnn-course/vit-cnn-course/main?labpath=notebooks%2F07_vit_vs_resnet.ipynb)

# %%
# Set-up: run me first. On Colab this fetches the course and its helpers (torch is never reinstalled).
import sys
if "google.colab" in sys.modules:
    import os, subprocess
    if not os.path.exists("vit-cnn-course"):
        subprocess.run(["git", "clone", "-q", "https://github.com/vit-cnn-course/vit-cnn-course"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "vit-cnn-course"], check=True)
    sys.path.insert(0, "vit-cnn-course")

import numpy as np
import matplotlib.pyplot as plt
import ipywidgets as widgets
import torch
from helpers import course, models, plots
from helpers.compare import cka_matrix
from helpers.data import image_set

device = course.start(seed=0)
plots.use_style()
track = models.choose_track()
MODELS = models.TRACK_MODELS[track]
N_IMAGES = 2048 if track == "lite" else 5000
images = image_set(MODELS["images"], count=N_IMAGES)
print(f"{len(images)} images from '{images.name}'; models: {MODELS['resnet']} (rows), {MODELS['vit']} (columns)")

# %% [markdown]
# ## 1. The cross-model matrix, trained and untrained

# %%
torch.manual_seed(0)
vit = models.load(MODELS["vit"], device=device)
resnet = models.load(MODELS["resnet"], device=device)
vit_untrained = models.load(MODELS["vit"], pretrained=False, device=device)
resnet_untrained = models.load(MODELS["resnet"], pretrained=False, device=device)

trained = cka_matrix(resnet, images, "sublayers", model_b=vit, layers_b="sublayers", progress=False,
                     meta={"track": track})
untrained = cka_matrix(resnet_untrained, images, "sublayers", model_b=vit_untrained, layers_b="sublayers",
                       progress=False, meta={"track": track, "untrained": True})
print(trained)

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
plots.cka_heatmap(trained, ax=axes[0], title="trained", xlabel="ViT sublayer", ylabel="ResNet layer")
plots.cka_heatmap(untrained, ax=axes[1], title="untrained (random initialisation)", xlabel="ViT sublayer", ylabel="ResNet layer")
plt.tight_layout()
plt.show()

# %% [markdown]
# The untrained pair is similar almost everywhere: with random weights both networks mostly pass
# their input along, so every layer of one resembles every layer of the other. Whatever structure
# the trained matrix shows beyond that was learned.
#
# ## 2. For each ResNet layer, its best-matching ViT layer
# The paper reads Fig. 2 this way. To compare the ViT's residual stream with the ResNet's, we
# match against the ViT's **block outputs** (the branch outputs, `attn` and `mlp`, are a different
# kind of representation: see notebook 06's grid).

# %%
block_cols = [j for j, name in enumerate(trained.cols) if name.endswith(".out")]
block_names = [trained.cols[j] for j in block_cols]
blocks_only = trained.values[:, block_cols]
best = blocks_only.argmax(1)
for row, b in zip(trained.rows, best):
    print(f"ResNet {row:9s} -> best ViT block output {block_names[b]:7s} (CKA {blocks_only[trained.rows.index(row), b]:.3f})")

resnet_depth = np.arange(len(trained.rows)) / (len(trained.rows) - 1)
vit_depth = best / (len(block_cols) - 1)
fig, ax = plt.subplots(figsize=(4.8, 4))
ax.plot(resnet_depth, vit_depth, "o-")
ax.plot([0, 1], [0, 1], ":", color="grey", label="equal relative depth")
ax.set(xlabel="ResNet layer (relative depth)", ylabel="best-matching ViT block (relative depth)",
       title="ResNet depth vs matched ViT depth", xlim=(-0.05, 1.05), ylim=(-0.05, 1.05))
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. How similar could they be at most?
# Two training runs of the *same* architecture give the ceiling for each layer; a ViT-ResNet value
# near the ceiling means "as similar as two runs of one model".

# %%
second_vit = models.load(MODELS["vit_second_run"], device=device)
second_resnet = models.load(MODELS["resnet_second_run"], device=device)
ceiling_vit = np.diag(cka_matrix(vit, images, "blocks", model_b=second_vit, layers_b="blocks", progress=False).values)
ceiling_resnet = np.diag(cka_matrix(resnet, images, "blocks", model_b=second_resnet, layers_b="blocks", progress=False).values)
print("ceiling, ViT blocks:   ", " ".join(f"{v:.2f}" for v in ceiling_vit))
print("ceiling, ResNet blocks:", " ".join(f"{v:.2f}" for v in ceiling_resnet))
print("best ViT match of each ResNet block:", " ".join(f"{v:.2f}" for v in blocks_only.max(1)[1:]))

# %% [markdown]
# ## 4. Explore: one layer against the other model
# Pick a layer of either model and see its CKA with every layer of the other (trained and
# untrained). Everything is precomputed.

# %%
def show_profile(model="ResNet", layer=0):
    """CKA of one layer (index into that model's layer list) with every layer of the other model."""
    source = trained.rows if model == "ResNet" else trained.cols
    layer = min(layer, len(source) - 1)
    if model == "ResNet":
        profile, untrained_profile, axis = trained.values[layer], untrained.values[layer], trained.cols
    else:
        profile, untrained_profile, axis = trained.values[:, layer], untrained.values[:, layer], trained.rows
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(profile, "o-", label="trained")
    ax.plot(untrained_profile, "o-", alpha=0.4, label="untrained")
    step = max(1, len(axis) // 18)
    ax.set_xticks(range(0, len(axis), step))
    ax.set_xticklabels(axis[::step], rotation=90, fontsize=7)
    ax.set(ylim=(0, 1.02), ylabel="CKA", title=f"{model} layer {source[layer]} against every layer of the other model")
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()

show_profile("ResNet", 0)

# %%
# NBVAL_IGNORE_OUTPUT
widgets.interact(show_profile, model=["ResNet", "ViT"], layer=(0, len(trained.cols) - 1));

# %% [markdown]
# ## 5. Do the claims hold on this track?
# Each check follows one claim:
# 1. the ResNet's first representation (its stem) matches best in the **lower half** of the ViT;
# 2. the match **climbs**: the rank correlation between ResNet depth and matched ViT depth is positive;
# 3. the ViT's **final** block output is the least similar to the ResNet: its best CKA with any
#    ResNet layer is lower than that of every other ViT block output.

# %%
def rank_correlation(a, b):
    """Spearman's rank correlation (ties get their mean rank)."""
    def ranks(x):
        x = np.asarray(x, dtype=float)
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for value in np.unique(x):
            r[x == value] = r[x == value].mean()
        return r
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])

best_per_vit_block = blocks_only.max(0)
climb = rank_correlation(np.arange(len(best)), best)
print(f"1. the stem's best ViT match: {block_names[best[0]]} (relative depth {vit_depth[0]:.2f})")
print(f"2. rank correlation of ResNet depth and matched ViT depth: {climb:.2f}")
print("3. best CKA with any ResNet layer, per ViT block output: " + " ".join(f"{v:.2f}" for v in best_per_vit_block))

# %%
assert vit_depth[0] <= 0.5, "claim 1 does not hold: the lowest ResNet layer matches the upper half of the ViT"
assert climb > 0, "claim 2 does not hold: the matched ViT depth does not climb with ResNet depth"
assert best_per_vit_block[-1] < best_per_vit_block[:-1].min(), "claim 3 does not hold: the last ViT block is not the least similar"

# %%
trained.save(course.OUTPUT_DIR / f"07_resnet_vs_vit_{track}.npz")
untrained.save(course.OUTPUT_DIR / f"07_resnet_vs_vit_untrained_{track}.npz")
print("saved to", course.OUTPUT_DIR.relative_to(course.REPO_ROOT))

# %% [markdown]
# ## Our result next to the paper's
# Read the numbers above with the paper's Fig. 2 in mind. On the lite track the three claims are
# checked by the cell before; the comparison with the ceiling (section 3) says how strong the
# similarities are in absolute terms, and the untrained matrix says how much of them is
# architecture rather than learning. Differences to expect from the scale: our ViT has six blocks
# and our ResNet eight residual blocks, so "the lowest quarter of the ViT" is one or two blocks,
# and our images are 32 x 32 shapes rather than JFT photos.
#
# ## Questions to think about
# 1. Why is the untrained matrix so uniformly bright, and why does that make it a necessary control?
# 2. The ViT's branch outputs (`attn`, `mlp`) are excluded from the best-match analysis. What
#    would including them change, and why?
# 3. If the ViT's last block works mostly on the CLS token, which token policy (notebook 05) would
#    make it look *more* similar to the ResNet's last layer, and would that be a fair comparison?
#
# **Next:** 08 · local and global attention (F2), once the lite ViT has local heads (see the README).
