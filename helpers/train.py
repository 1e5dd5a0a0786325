"""Train a lite-zoo model from its recipe and write its checkpoint and model card.

    python -m helpers.train lite-vit                 # reproduces data/models/lite-vit.*
    python -m helpers.train lite-vit --steps 500 --out /tmp/try    # a quick experiment

The checkpoint is safetensors in float16 (data/models/<name>.safetensors); the card
(<name>.json) records the recipe, parameter count, test accuracy, training time, the per-head
attention distances of ViTs, and the exact command that reproduces it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm.auto import tqdm

from helpers import attention, shapes, zoo
from helpers.course import DATA_DIR, torch_threads
from helpers.data import image_set, tensor_set

MODELS_DIR = DATA_DIR / "models"


def normalise(images_uint8: torch.Tensor) -> torch.Tensor:
    """(B, 3, 32, 32) uint8 -> float input with the lite models' mean/std."""
    mean = torch.tensor(zoo.LITE_MEAN)[None, :, None, None]
    std = torch.tensor(zoo.LITE_STD)[None, :, None, None]
    return (images_uint8.float() / 255 - mean) / std


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random horizontal flips and translations of up to 4 px (reflect padding). images: (B, C, H, W)."""
    B, _, H, W = images.shape
    flip = torch.rand(B, generator=generator) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    padded = F.pad(images, (4, 4, 4, 4), mode="reflect")
    dy, dx = torch.randint(0, 9, (2, B), generator=generator)
    rows = (dy[:, None] + torch.arange(H))[:, :, None]  # (B, H, 1)
    cols = (dx[:, None] + torch.arange(W))[:, None, :]  # (B, 1, W)
    return padded.permute(0, 2, 3, 1)[torch.arange(B)[:, None, None], rows, cols].permute(0, 3, 1, 2)


def cutmix(images: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Paste one box from a shuffled copy of the batch into every image (Yun et al. 2019).

    images: (B, C, H, W). The box's area fraction is drawn from Beta(1, 1), i.e. uniform; its centre is
    uniform and it is clipped at the borders. Returns (mixed images, the permutation whose labels fill
    the box, the fraction of each image that keeps its own label). Why it is in the recipe: with whole
    images the task is solved from global cues; a box of another class makes local evidence matter,
    which is what lets local attention heads form in small ViTs (see data/README.md).
    """
    B, _, H, W = images.shape
    area = float(torch.rand((), generator=generator))  # Beta(1, 1)
    cut_h, cut_w = round(H * math.sqrt(area)), round(W * math.sqrt(area))
    cy, cx = (int(torch.randint(0, n, (), generator=generator)) for n in (H, W))
    top, bottom = max(cy - cut_h // 2, 0), min(cy + cut_h - cut_h // 2, H)
    left, right = max(cx - cut_w // 2, 0), min(cx + cut_w - cut_w // 2, W)
    order = torch.randperm(B, generator=generator)
    mixed = images.clone()
    mixed[:, :, top:bottom, left:right] = images[order, :, top:bottom, left:right]
    return mixed, order, 1.0 - (bottom - top) * (right - left) / (H * W)


def lr_at(step: int, recipe: zoo.Recipe) -> float:
    """Linear warm-up, then cosine decay to zero."""
    warmup = max(1, int(recipe.warmup_frac * recipe.steps))
    if step < warmup:
        return recipe.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, recipe.steps - warmup)
    return recipe.lr * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def accuracy(model, images_uint8: torch.Tensor, labels: torch.Tensor, batch: int = 500) -> float:
    model.eval()
    correct = 0
    for s in range(0, len(images_uint8), batch):
        logits = model(normalise(images_uint8[s:s + batch]))
        correct += int((logits.argmax(-1) == labels[s:s + batch]).sum())
    return correct / len(images_uint8)


def train(model, recipe: zoo.Recipe, progress: bool = True, probe_every: int = 0) -> dict:
    """Train in place. Returns a small log (steps, seconds, last loss).

    probe_every > 0 (ViTs): every that many steps, measure the per-head attention distances on
    held-out images and keep them in the log's "attention_history", so one can see when (and
    whether) local heads appear during training.
    """
    torch.manual_seed(recipe.seed)
    generator = torch.Generator().manual_seed(recipe.seed)
    images, labels = shapes.load_split("train", recipe.data_fraction, variant=recipe.shapes_variant)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim > 1 and "pos_embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and (p.ndim <= 1 or "pos_embed" in n)]
    optimiser = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr)
    model.train()
    start, loss_ema, history = time.time(), None, []
    bar = tqdm(range(recipe.steps), desc="training", disable=not progress, mininterval=5)
    for step in bar:
        idx = torch.randint(0, len(images), (recipe.batch_size,), generator=generator)
        x, y = augment(images[idx], generator), labels[idx]
        if recipe.cutmix:
            x, order, own = cutmix(x, generator)
            logits = model(normalise(x))
            loss = (own * F.cross_entropy(logits, y, label_smoothing=recipe.label_smoothing)
                    + (1 - own) * F.cross_entropy(logits, y[order], label_smoothing=recipe.label_smoothing))
        else:
            loss = F.cross_entropy(model(normalise(x)), y, label_smoothing=recipe.label_smoothing)
        for group in optimiser.param_groups:
            group["lr"] = lr_at(step, recipe)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss_ema:.3f}")
        if probe_every and (step + 1) % probe_every == 0:
            model.eval()
            distances = attention_distances(model, count=256, variant=recipe.shapes_variant)
            model.train()
            history.append({"step": step + 1, "loss": round(loss_ema, 4), "attention_distance_px": distances})
            bar.write(f"step {step + 1}: lowest head in blocks 0-1 {min(distances[0] + distances[1]):.1f} px, "
                      f"last block {min(distances[-1]):.1f}-{max(distances[-1]):.1f} px, loss {loss_ema:.3f}")
    model.eval()
    log = {"steps": recipe.steps, "train_seconds": round(time.time() - start, 1), "final_loss": round(loss_ema, 4)}
    if history:
        log["attention_history"] = history
    return log


def held_out_images(count: int, variant: str = "standard"):
    """The first `count` held-out shapes images of a variant, as an ImageSet (standard: image_set('shapes'))."""
    if variant == "standard":
        return image_set("shapes", count=count)
    return tensor_set(*shapes.load_split("test", count=count, variant=variant), name=f"shapes ({variant})")


def attention_distances(model, count: int = 500, variant: str = "standard") -> list:
    """Per block, per head mean attention distance (px) on the first `count` held-out images (of the variant)."""
    table = attention.attention_distance_table(model, held_out_images(count, variant), batch_size=count)
    return [[round(float(d), 2) for d in heads] for heads in table]


CHECK_IMAGES = 2000  # the held-out images the test suite re-evaluates every checkpoint on


def check_accuracy(model, variant: str = "standard") -> float:
    """Accuracy on the first CHECK_IMAGES test images: recorded in the card, re-checked by the tests."""
    images, labels = _check_split(variant)
    return round(accuracy(model, images, labels), 4)


@lru_cache(maxsize=2)
def _check_split(variant: str) -> tuple:
    """The check images, rendered once per process (6 MB; the tests check 24 checkpoints on them). Read only."""
    return shapes.load_split("test", count=CHECK_IMAGES, variant=variant)


def to_fp16_and_back(model) -> None:
    """Round the weights through float16, as stored, so the card reports the accuracy users get."""
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.copy_(t.half().float())


def reproducing_command(argv: list) -> str:
    """The command line that retrains this model, less --out (where the files go does not change them)."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--out="):
            skip = False
            continue
        if arg == "--out":
            skip = True
            continue
        kept.append(arg)
    return "python -m helpers.train " + " ".join(kept)


def experiment(recipe: zoo.Recipe, steps=None, seed=None, cutmix=None, heads=None, shapes_variant=None) -> zoo.Recipe:
    """The recipe with the command line's overrides (None keeps the recipe's value)."""
    changes = {k: v for k, v in dict(steps=steps, seed=seed, cutmix=cutmix, shapes_variant=shapes_variant).items()
               if v is not None}
    if heads is not None:
        if recipe.arch != "vit":
            raise SystemExit(f"--heads is for ViTs; this recipe's architecture is {recipe.arch!r}.")
        changes["vit"] = {**recipe.vit, "num_heads": heads}
    return replace(recipe, **changes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=sorted(zoo.ZOO), help="which zoo model to train")
    parser.add_argument("--steps", type=int, help="override the recipe's number of steps (experiments)")
    parser.add_argument("--seed", type=int, help="override the recipe's seed (experiments)")
    parser.add_argument("--cutmix", action=argparse.BooleanOptionalAction, default=None,
                        help="override the recipe's CutMix setting (experiments)")
    parser.add_argument("--heads", type=int, help="ViTs: override the number of attention heads per block (experiments)")
    parser.add_argument("--shapes-variant", choices=shapes.VARIANTS,
                        help="train and test on a variant of the shapes images (R&D of a harder task)")
    parser.add_argument("--probe-every", type=int, default=0, metavar="N",
                        help="ViTs: measure attention distances every N steps and keep them in the card")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for torch (default 2)")
    parser.add_argument("--attention", choices=("fused", "explicit"), default="fused",
                        help="ViTs: timm's fused attention kernel (default; a card's command names --attention when a model used the other) "
                             "or the explicit softmax(q k^T) v: the same maths with other rounding, and faster on "
                             "CPU for these small heads (python benchmarks/bench_training.py measures by how much)")
    parser.add_argument("--out", type=Path, default=MODELS_DIR, help="folder for <name>.safetensors and <name>.json")
    args = parser.parse_args(argv)
    problem = _bad_argument(args)
    if problem:
        parser.error(problem)  # exit code 2 with the usage, before anything is trained
    with torch_threads(args.threads):  # called in-process (a test, a notebook), it leaves torch's threads as it found them
        return _train_and_save(args, argv)


def _bad_argument(args) -> str:
    """What is wrong with the command line ('' when nothing): each of these failed later with a raw error
    (steps 0: a TypeError after training; heads 0 or 5: ZeroDivisionError or timm's AssertionError; threads 0:
    torch's RuntimeError, 100000: a segmentation fault; --out '': the files written into the current folder)."""
    most = max(2, os.cpu_count() or 1)  # the default, 2, stays valid on a 1-core machine
    if args.steps is not None and args.steps < 1:
        return f"--steps {args.steps}: give at least 1 training step (or leave it out for the recipe's)."
    recipe = zoo.ZOO[args.name]
    width = recipe.vit["embed_dim"]
    if args.heads is not None and recipe.arch == "vit" and (args.heads < 1 or width % args.heads):
        divisors = [h for h in range(1, width + 1) if width % h == 0]
        return f"--heads {args.heads}: the lite ViT's width {width} must split into equal heads; give one of {divisors}."
    if args.probe_every < 0:
        return f"--probe-every {args.probe_every}: give a number of steps, or 0 (the default) for no probes."
    if not 1 <= args.threads <= most:
        return f"--threads {args.threads}: give 1 to {most} (this machine has {os.cpu_count()} CPU cores)."
    if not str(args.out).strip() or str(args.out) == ".":
        return "--out: give the folder for <name>.safetensors and <name>.json (the default is data/models)."
    if args.out.exists() and not args.out.is_dir():
        return f"--out {args.out} is a file: give a folder (it is created if it does not exist)."
    return ""


def _train_and_save(args, argv) -> int:
    """main's work once the arguments are parsed: train, write <name>.safetensors and <name>.json, print a summary."""
    recipe = experiment(zoo.ZOO[args.name], steps=args.steps, seed=args.seed, cutmix=args.cutmix, heads=args.heads,
                        shapes_variant=args.shapes_variant)
    if args.attention == "explicit" and recipe.arch != "vit":
        raise SystemExit(f"--attention is for ViTs; this recipe's architecture is {recipe.arch!r}: drop the flag to train it.")
    torch.manual_seed(recipe.seed)  # the initial weights, too, follow from the recipe's seed
    model = zoo.build(recipe)
    kernel = attention.explicit_attention(model) if args.attention == "explicit" else nullcontext()
    with kernel:  # the model is saved with timm's default (fused) either way: loading it does not depend on this
        log = train(model, recipe, probe_every=args.probe_every if recipe.arch == "vit" else 0)
    to_fp16_and_back(model)
    test_images, test_labels = shapes.load_split("test", variant=recipe.shapes_variant)
    card = {
        "name": args.name,
        "architecture": f"timm {type(model).__name__}",
        "parameters": sum(p.numel() for p in model.parameters()),
        "recipe": recipe.describe(),
        "test_accuracy": round(accuracy(model, test_images, test_labels), 4),
        "test_images": len(test_labels),
        "check_accuracy": check_accuracy(model, recipe.shapes_variant),
        "check_images": CHECK_IMAGES,
        **log,
        "threads": args.threads,
        "command": reproducing_command(argv if argv is not None else sys.argv[1:]),
        "versions": {"torch": torch.__version__, "timm": timm.__version__, "python": platform.python_version()},
        "weights": "float16 safetensors; load with helpers.models.load",
    }
    if recipe.arch == "vit":
        grid = shapes.IMAGE_SIZE // recipe.vit["patch_size"]
        card["attention_distance_px"] = attention_distances(model, variant=recipe.shapes_variant)
        card["uniform_attention_distance_px"] = round(attention.uniform_attention_distance(grid, recipe.vit["patch_size"]), 2)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()}, str(args.out / f"{args.name}.safetensors"),
              metadata={"name": args.name})
    (args.out / f"{args.name}.json").write_text(json.dumps(card, indent=2) + "\n")
    print(json.dumps({k: card[k] for k in ("name", "test_accuracy", "train_seconds")}))
    if "attention_distance_px" in card:
        for b, heads in enumerate(card["attention_distance_px"]):
            print(f"block {b}: " + " ".join(f"{d:5.1f}" for d in heads) + f"   (uniform {card['uniform_attention_distance_px']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
