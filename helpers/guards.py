"""Checks of what a learner passes to the helpers, with messages that say what to do.

Each check raises at once, naming the argument, instead of letting a wrong type travel deep
into torch or timm (a raw library error) or, worse, give a plausible but wrong number.

    check_flag(debiased, "debiased")              # True or False, not a string
    check_batch_size(batch_size)                  # an int, at least 4
    check_images(images)                          # a helpers.data.ImageSet
    check_model(model, "model_b")                 # a torch module (names are loaded by the caller)
    with evaluating(model): ...                   # eval mode inside, the caller's mode restored after
"""

from __future__ import annotations

import numbers
from contextlib import contextmanager

import numpy as np
import torch

from helpers.image_types import ImageSet


def check_int(value, name: str, minimum: int, hint: str = "") -> int:
    """`value` as an int >= minimum; bools, floats and strings are refused. `hint`: what to do, for the message."""
    advice = f" {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a whole number (an int), got {value!r} of type {type(value).__name__}.{advice}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}.{advice}")
    return int(value)


def check_finite_array(values, name: str, redo: str) -> np.ndarray:
    """`values` as a float64 array with no NaN or inf. Summaries of similarities or distances need it: a NaN makes a
    mean NaN, and argmax/argmin/argsort read it as the largest or the smallest. `redo`: how to compute them again."""
    values = np.asarray(values, dtype=np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"{name} holds {int((~np.isfinite(values)).sum())} NaN or inf value(s): {redo}")
    return values


def check_flag(value, name: str) -> bool:
    """A True/False option: a string such as 'no' would count as True, so only real booleans pass."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r} of type {type(value).__name__}.")
    return bool(value)


def check_batch_size(batch_size) -> int:
    """Images per minibatch: an int >= 4 (unbiased HSIC needs 4 examples; 64 or more give useful values)."""
    return check_int(batch_size, "batch_size", 4, "Unbiased HSIC needs 4 images per batch; use 64-256 for useful values.")


def check_images(images, name: str = "images"):
    """`images` must be a helpers.data.ImageSet (what image_set() returns)."""
    if isinstance(images, ImageSet):
        return images
    hint = ""
    if isinstance(images, (torch.Tensor, np.ndarray)):
        hint = " For a tensor of uint8 images (N, 3, H, W), wrap it: helpers.data.tensor_set(images, labels=None)."
    elif isinstance(images, str):
        hint = f" For a source name or folder, call helpers.data.image_set({images!r}) first."
    raise TypeError(f"{name} must be a helpers.data.ImageSet (from helpers.data.image_set('shapes'), a folder path, "
                    f"'imagenette' or 'cifar10'), got {type(images).__name__}.{hint}")


def check_model(model, name: str = "model") -> torch.nn.Module:
    """`model` must be a torch module (callers load names with helpers.models.load first)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(model).__name__}. Load a model by name first: "
                        "helpers.models.load('lite-vit') (or any timm name such as 'resnet50').")
    return model


def check_input_size(model, images: torch.Tensor) -> None:
    """A ViT's patch embedding takes one input size: say which, instead of timm's bare AssertionError.

    images: (B, C, H, W). Models without a fixed size (CNNs, or timm's dynamic_img_size) pass."""
    embed = getattr(model, "patch_embed", None)
    size = getattr(embed, "img_size", None)
    if size is None or not getattr(embed, "strict_img_size", False) or getattr(embed, "dynamic_img_size", False):
        return
    if tuple(images.shape[-2:]) != tuple(size):
        raise ValueError(f"{type(model).__name__} takes {size[0]}x{size[1]} inputs (model.patch_embed.img_size); these "
                         f"images are {images.shape[-2]}x{images.shape[-1]}. Preprocess them for this model: "
                         "helpers.data.batches(image_set, model).")


@contextmanager
def evaluating(model: torch.nn.Module):
    """Put `model` in eval mode for the block; afterwards every submodule is back in its own mode.

    The analyses must run in eval mode (dropout off, batch-norm statistics frozen), but a
    learner's model that came in training mode must go back in training mode.
    """
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training
