"""Load any model of the course by name, on either track, with one function.

    load("lite-vit")                                        # bundled lite checkpoint (offline, CPU)
    load("vit_base_patch16_224.augreg_in21k_ft_in1k")       # pretrained timm model from the hub
    load("resnet50", weights="my_resnet50.safetensors")     # any timm name, weights from a local file

Tracks: `full` uses pretrained timm models (needs the Hugging Face hub, or cached weights);
`lite` uses the course's own small models in data/models. `choose_track()` picks one, once,
and says so; COURSE_TRACK=lite|full|auto forces it (the tests force lite).
"""

from __future__ import annotations

import difflib
import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import torch

from helpers import zoo
from helpers.course import DATA_DIR, pick_device

MODELS_DIR = DATA_DIR / "models"
TRACK_ENV = "COURSE_TRACK"

# The models each track uses for the paper's main comparisons (PAPER_SPEC.md §3 stand-ins).
# The "second run" of each model is the reference for how similar two trainings of the same
# architecture get; on the full track no second seed is public, so another training run of the
# same architecture stands in.
TRACK_MODELS = {
    "lite": {"vit": "lite-vit", "resnet": "lite-resnet", "vit_second_run": "lite-vit-seed1",
             "resnet_second_run": "lite-resnet-seed1", "images": "shapes",
             "vit_gap": "lite-vit-gap",  # no CLS token, average-pooled; trained like lite-vit
             # the same ViT trained on less data (F2, F9): label -> model, least data first
             "vit_by_data": {"3% of the data": "lite-vit-data03", "10%": "lite-vit-data10",
                             "30%": "lite-vit-data30", "100%": "lite-vit"}},
    "full": {"vit": "vit_base_patch16_224.augreg_in21k_ft_in1k", "resnet": "resnet50.tv_in1k",
             "vit_second_run": "vit_base_patch16_224.augreg2_in21k_ft_in1k", "resnet_second_run": "resnet50.tv2_in1k",
             "images": "imagenette",
             "vit_gap": "vit_medium_patch16_gap_256.sw_in12k_ft_in1k",  # not trained like the CLS ViT
             "vit_by_data": {"ImageNet-1k only": "vit_base_patch16_224.augreg_in1k",
                             "ImageNet-21k, then 1k": "vit_base_patch16_224.augreg_in21k_ft_in1k"}},
}


class WeightsUnavailableError(RuntimeError):
    """Pretrained weights cannot be had: not cached and the hub is unreachable."""


# --------------------------------------------------------------------------- the hub


def hub_reachable(timeout: float = 3.0) -> bool:
    """True when the Hugging Face hub answers a TCP connection within `timeout` seconds."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextmanager
def hub_offline():
    """Make huggingface_hub use its cache only (fails in milliseconds instead of retrying for ~46 s)."""
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved


def _offline_message(name: str) -> str:
    return (f"Pretrained weights for '{name}' are not cached and the Hugging Face hub cannot be reached.\n"
            f"  - Offline? Use the lite track: set {TRACK_ENV}=lite (models such as 'lite-vit', 'lite-resnet').\n"
            f"  - Have the weights as a file? load('{name}', weights='path/to/model.safetensors').\n"
            "  - Otherwise connect to the internet (or open the notebook on Colab) and try again.")


# --------------------------------------------------------------------------- tracks


def weights_cached(name: str) -> bool:
    """True when the hub weights of timm model `name` are already in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    if cfg is None or not cfg.hf_hub_id:
        return False
    names = [cfg.hf_hub_filename] if cfg.hf_hub_filename else ["model.safetensors", "pytorch_model.bin"]
    return any(isinstance(try_to_load_from_cache(cfg.hf_hub_id, f), str) for f in names)


def choose_track(verbose: bool = True) -> str:
    """'full' when pretrained weights can be had (cached, or the hub answers within 3 s), else 'lite'.

    COURSE_TRACK=lite|full forces a track. Prints one line saying which track runs and how to switch.
    """
    wanted = os.environ.get(TRACK_ENV, "auto").strip().lower()
    if wanted not in ("auto", "lite", "full"):
        raise ValueError(f"{TRACK_ENV}={wanted!r}: use 'lite', 'full' or 'auto'.")
    if wanted != "auto":
        track, why = wanted, f"forced by {TRACK_ENV}={wanted}"
    elif weights_cached(TRACK_MODELS["full"]["vit"]):
        track, why = "full", "pretrained weights are cached"
    elif hub_reachable():
        track, why = "full", "the Hugging Face hub is reachable"
    else:
        track, why = "lite", "no pretrained weights cached and the hub is unreachable"
    if verbose:
        other = "lite" if track == "full" else "full"
        print(f"Track: {track} ({why}). To switch, set the environment variable {TRACK_ENV}={other} "
              f"before importing helpers (in a notebook: os.environ['{TRACK_ENV}'] = '{other}').")
    return track


# --------------------------------------------------------------------------- loading


def lite_card(name: str) -> dict:
    """The model card of a bundled lite model (recipe, accuracy, command that reproduces it)."""
    path = MODELS_DIR / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"No card for '{name}' at {path}. Train it with: python -m helpers.train {name}")
    return json.loads(path.read_text())


def _load_lite(name: str) -> torch.nn.Module:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = MODELS_DIR / f"{name}.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"The checkpoint of '{name}' is missing ({path}). Restore it with "
                                f"`git checkout -- {path.relative_to(MODELS_DIR.parent.parent)}` or retrain it: "
                                f"python -m helpers.train {name}")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"The checkpoint {path} is corrupt or truncated ({error}). Restore it from git or "
                         f"retrain it: python -m helpers.train {name}") from None
    model = zoo.build(name)
    expected = model.state_dict()
    try:
        model.load_state_dict({k: v.to(expected[k].dtype) if k in expected else v for k, v in state.items()})
    except RuntimeError as error:
        raise ValueError(f"The checkpoint {path} does not fit the '{name}' architecture: {error}") from None
    return model


def _load_timm(name: str, weights, pretrained: bool, **kwargs) -> torch.nn.Module:
    import timm

    if weights is not None:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(f"Weights file {path} does not exist.")
        # timm reads the file exactly as a hub download (safetensors, or torch.load with weights_only=True)
        try:
            return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **kwargs)
        except (RuntimeError, ValueError, OSError, EOFError) as error:
            if "size mismatch" in str(error) or "Missing key" in str(error):
                raise ValueError(f"The weights in {path} do not fit timm model '{name}': {str(error)[:300]}") from None
            raise ValueError(f"Could not read weights file {path}: it may be corrupt or truncated, or not a "
                             f"state dict ({type(error).__name__}: {str(error)[:200]})") from None
    if not pretrained:
        return timm.create_model(name, pretrained=False, **kwargs)
    if weights_cached(name):
        with hub_offline():  # never wait on the network for weights we already have
            return timm.create_model(name, pretrained=True, **kwargs)
    if not hub_reachable():
        raise WeightsUnavailableError(_offline_message(name))
    return timm.create_model(name, pretrained=True, **kwargs)


def suggest(name: str) -> list:
    """Close matches of a model name among the lite zoo and timm's architectures and pretrained tags."""
    import timm

    candidates = list(zoo.ZOO) + timm.list_models() + timm.list_pretrained()
    return difflib.get_close_matches(name, candidates, n=5, cutoff=0.6)


def load(name: str, weights=None, pretrained: bool = True, device=None, **timm_kwargs) -> torch.nn.Module:
    """Any model of the course, in eval() mode, on `device` (default: CUDA when present).

    name: a lite zoo name ('lite-vit') or a timm name ('resnet50', 'vit_base_patch16_224.augreg_in1k').
    weights: optional local weights file (.safetensors or .pth) for a timm name; no network is used.
    pretrained: False gives a randomly initialised timm model (a reference point for CKA).
    """
    import timm

    if name in zoo.ZOO:
        model = _load_lite(name) if pretrained else zoo.build(name)
    elif timm.is_model(name.split(".")[0]):
        model = _load_timm(name, weights, pretrained, **timm_kwargs)
    else:
        close = suggest(name)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(f"Unknown model '{name}'.{hint} Lite models: {', '.join(zoo.ZOO)}; "
                         "any timm name works on the full track (timm.list_models()).")
    return model.eval().to(device if device is not None else pick_device())
