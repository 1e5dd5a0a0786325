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
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import torch

from helpers import zoo
from helpers.course import DATA_DIR, checked_device, pick_device
from helpers.guards import check_flag

MODELS_DIR = DATA_DIR / "models"
TRACK_ENV = "COURSE_TRACK"

# The models each track uses for the paper's main comparisons (public stand-ins for the paper's models).
# The "reference" of each model says how similar two trainings of the same architecture get. On the
# lite track it is a second seed (same recipe, other initialisation and data order). On the full track
# no second seed of these models is public, so each reference is something else, and its label says what:
# the ViT's is a second fine-tune of the *same* ImageNet-21k pre-training (augreg2: shares everything
# learned in pre-training, so it is likely more alike than a second seed); the ResNet's is the same
# architecture trained with torchvision's other recipe (tv2: longer, heavier augmentation, so it mixes
# seed noise with a recipe change and is likely less alike than a second seed). Notebook 06 says what
# each can and cannot tell.
TRACK_MODELS = {
    "lite": {"vit": "lite-vit", "resnet": "lite-resnet", "vit_reference": "lite-vit-seed1",
             "resnet_reference": "lite-resnet-seed1", "images": "shapes",
             "vit_gap": "lite-vit-gap",  # no CLS token, average-pooled; trained like lite-vit
             # the same ViT trained on less data (F2, F9): label -> model, least data first
             "vit_by_data": {"3% of the data": "lite-vit-data03", "10%": "lite-vit-data10",
                             "30%": "lite-vit-data30", "100%": "lite-vit"},
             # repeats of one recipe, so a lite claim is a rate over seeds (same keys: same seed)
             "vit_seeds": {"seed 0": "lite-vit", "seed 1": "lite-vit-seed1", "seed 2": "lite-vit-seed2"},
             "vit_little_data_seeds": {"seed 0": "lite-vit-data03", "seed 1": "lite-vit-data03-seed1",
                                       "seed 2": "lite-vit-data03-seed2"},
             # 1% of the data (500 images), the same seeds: added when 3% did not remove local heads (08)
             "vit_least_data_seeds": {"seed 0": "lite-vit-data01", "seed 1": "lite-vit-data01-seed1",
                                      "seed 2": "lite-vit-data01-seed2"},
             # a 3% model from seed 3, whose initial weights no 100% model shares (14: the shared-start confound)
             "vit_little_data_no_twin": "lite-vit-data03-seed3",
             # the whole data series of each seed (least data first; seed 2 has no 30% model), so that
             # "more data, step by step" is read over seeds (14)
             "vit_by_data_seeds": {
                 "seed 0": {"3%": "lite-vit-data03", "10%": "lite-vit-data10", "30%": "lite-vit-data30", "100%": "lite-vit"},
                 "seed 1": {"3%": "lite-vit-data03-seed1", "10%": "lite-vit-data10-seed1",
                            "30%": "lite-vit-data30-seed1", "100%": "lite-vit-seed1"},
                 "seed 2": {"3%": "lite-vit-data03-seed2", "10%": "lite-vit-data10-seed2", "100%": "lite-vit-seed2"}},
             "resnet_seeds": {"seed 0": "lite-resnet", "seed 1": "lite-resnet-seed1"},
             "mixer": "lite-mixer", "efficientnet": "lite-efficientnet",  # F10 (15); your own comparison (16)
             "vit_large": None},  # one ViT size only: model scale (14) is a full-track section
    "full": {"vit": "vit_base_patch16_224.augreg_in21k_ft_in1k", "resnet": "resnet50.tv_in1k",
             "vit_reference": "vit_base_patch16_224.augreg2_in21k_ft_in1k", "resnet_reference": "resnet50.tv2_in1k",
             "images": "imagenette",
             "vit_gap": "vit_medium_patch16_gap_256.sw_in12k_ft_in1k",  # not trained like the CLS ViT
             "vit_by_data": {"ImageNet-1k only": "vit_base_patch16_224.augreg_in1k",
                             "ImageNet-21k, then 1k": "vit_base_patch16_224.augreg_in21k_ft_in1k"},
             # no seeds of one recipe are published: one run each, paired by the same key
             "vit_seeds": {"one run": "vit_base_patch16_224.augreg_in21k_ft_in1k"},
             "vit_little_data_seeds": {"one run": "vit_base_patch16_224.augreg_in1k"},
             "vit_least_data_seeds": None,  # no public ViT-B/16 of this recipe on less than ImageNet-1k
             "vit_by_data_seeds": None,  # one run per data setting: no series over seeds
             "vit_little_data_no_twin": None,  # the full track's two runs share no start anyway
             "resnet_seeds": {"one run": "resnet50.tv_in1k"},
             "mixer": "mixer_b16_224.goog_in21k_ft_in1k", "efficientnet": "efficientnet_b0.ra_in1k",
             "vit_large": "vit_large_patch16_224.augreg_in21k_ft_in1k"},
}


# What each track's reference model is, for labels ("ViT, second seed"; "ResNet, other recipe").
REFERENCE_LABELS = {"lite": {"vit": "second seed", "resnet": "second seed"},
                    "full": {"vit": "re-fine-tuned", "resnet": "other recipe"}}


def model_names(track: str) -> list:
    """Every model name the notebooks load on `track` (TRACK_MODELS[track], nested series flattened), once each."""
    def names(value):
        if isinstance(value, dict):
            return [n for v in value.values() for n in names(v)]
        return [] if value is None else [value]
    return list(dict.fromkeys(n for role, v in TRACK_MODELS[track].items() if role != "images" for n in names(v)))


class WeightsUnavailableError(RuntimeError):
    """Pretrained weights cannot be had: not cached and the hub is unreachable."""


# --------------------------------------------------------------------------- the hub


def offline_forced() -> bool:
    """True when HF_HUB_OFFLINE asks huggingface_hub (and so the course) never to use the network."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout: float = 3.0) -> bool:
    """True when the Hugging Face hub answers a TCP connection within `timeout` seconds.

    Always False when HF_HUB_OFFLINE is set: the network is not to be used.
    """
    if offline_forced():
        return False
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
    """'full' when pretrained weights can be had (cached, or the hub answers within 3 s) and a GPU is
    present, else 'lite'.

    COURSE_TRACK=lite|full forces a track. Prints one line saying which track runs, why, and how to switch.
    """
    wanted = os.environ.get(TRACK_ENV, "auto").strip().lower()
    if wanted not in ("auto", "lite", "full"):
        raise ValueError(f"{TRACK_ENV}={wanted!r}: use 'lite', 'full' or 'auto'.")
    missing = [] if wanted != "auto" else [n for n in model_names("full") if not weights_cached(n)]
    if wanted != "auto":
        track, why = wanted, f"forced by {TRACK_ENV}={wanted}"
    elif missing and not hub_reachable():
        cached = len(model_names("full")) - len(missing)
        track, why = "lite", ("no pretrained weights cached and the hub is unreachable" if not cached else
                              f"the hub is unreachable and only {cached} of the {cached + len(missing)} full-track "
                              f"models are cached (missing: {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    elif pick_device().type != "cuda":
        track, why = "lite", ("pretrained weights can be had, but there is no GPU: the full track pushes thousands of "
                              "224-px images through ViT-B/16 and ResNet-50 several times per notebook, hours on a CPU "
                              f"(about 0.2 s per image for ViT-B on 2 cores); on Colab choose a GPU runtime, or set "
                              f"{TRACK_ENV}=full to run it here anyway")
    else:
        track, why = "full", "pretrained weights can be had and a GPU is present"
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


def check_finite_weights(model: torch.nn.Module, source: str) -> None:
    """Refuse weights holding NaN or inf: every number computed from them would be meaningless."""
    bad = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
           if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        raise ValueError(f"The weights from {source} hold NaN or inf values in {bad[:5]}{' ...' if len(bad) > 5 else ''}. "
                         "The file is damaged or was saved after training diverged: use another checkpoint.")


def _saved_name(path: Path):
    """The model name a safetensors file records in its metadata ('name'), or None."""
    if path.suffix != ".safetensors":
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            return (f.metadata() or {}).get("name")
    except Exception:  # unreadable metadata: the loader reports the file itself
        return None


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
    saved = _saved_name(path)
    if saved is not None and saved != name:
        raise ValueError(f"The checkpoint {path} says it holds '{saved}', not '{name}'. Restore the right file from git "
                         f"or retrain it: python -m helpers.train {name}")
    model = zoo.build(name)
    expected = model.state_dict()
    try:
        model.load_state_dict({k: v.to(expected[k].dtype) if k in expected else v for k, v in state.items()})
    except RuntimeError as error:
        raise ValueError(f"The checkpoint {path} does not fit the '{name}' architecture: {error}") from None
    check_finite_weights(model, str(path))
    return model


def _check_tag(name: str) -> None:
    """A name with a pretrained tag ('resnet50.tv_in1k') must name a tag timm knows; suggest the real ones."""
    import timm

    if "." not in name:
        return
    arch = name.split(".")[0]
    tags = timm.list_pretrained(f"{arch}.*")
    if name not in tags:
        close = difflib.get_close_matches(name, tags, n=5, cutoff=0.5)
        listed = ", ".join(close or tags[:8]) or "(none: this architecture has no pretrained weights in timm)"
        raise ValueError(f"timm has no pretrained weights '{name}'. {'Did you mean' if close else 'Its tags are'}: {listed}? "
                         f"All of them: timm.list_pretrained('{arch}.*').")


def _warn_new_head(name: str, kwargs: dict) -> None:
    """num_classes that differs from the checkpoint's replaces the trained classifier by a random one: say so."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    wanted = kwargs.get("num_classes")
    if cfg is not None and wanted is not None and wanted != getattr(cfg, "num_classes", wanted):
        warnings.warn(f"'{name}' was trained with {cfg.num_classes} classes; num_classes={wanted} gives it a NEW, randomly "
                      "initialised classifier head. Every layer before the head keeps its pretrained weights; the head's "
                      "outputs mean nothing until you train it. Leave num_classes out to keep the trained head.")


def _tensor_shapes(path: Path) -> dict:
    """{key: shape} of the tensors in a weights file (safetensors, or a state dict read with weights_only=True).

    Unwraps {'state_dict': ...} / {'model': ...} and a 'module.' prefix, as timm's loader does. {} when unreadable
    (the loader then reports the file itself).
    """
    try:
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), "pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - unreadable: timm's loader gives the message
        return {}
    for key in ("state_dict_ema", "model_ema", "state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict):
        return {}
    return {k.removeprefix("module."): tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}


def file_head_classes(name: str, path) -> int | None:
    """How many classes the classifier head stored in weights file `path` has (None: the file holds no head).

    The head is the module timm's pretrained config names for architecture `name` ('fc' for a ResNet, 'head'
    for a ViT, 'classifier' for an EfficientNet, 'head.fc' for ConvNeXt and Swin).
    """
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name.split(".")[0]) or get_pretrained_cfg(name)
    heads = cfg.classifier if cfg is not None and cfg.classifier else ("head", "fc", "classifier", "head.fc")
    shapes = _tensor_shapes(Path(path))
    for head in ([heads] if isinstance(heads, str) else list(heads)):
        shape = shapes.get(f"{head}.weight")
        if shape:
            return int(shape[0])
    return None


def _from_file(name: str, path: Path, **kwargs) -> torch.nn.Module:
    """timm model `name` with the weights of a local file, its own classifier head kept.

    timm drops a file's head whenever num_classes differs from the *published* checkpoint's (1,000 for
    ImageNet), so a fine-tuned 10-class head would be replaced by a random one. We read the head's size
    from the file and tell timm that the file has that many classes: the trained head is loaded. Asking for
    another num_classes than the file's head is an error, never a silent new head.
    """
    import timm

    if path.is_dir():
        raise FileNotFoundError(f"{path} is a folder, not a weights file: give the .safetensors (or torch.save) file in it.")
    if not path.is_file():
        raise FileNotFoundError(f"Weights file {path} does not exist.")
    saved = _saved_name(path)
    if saved is not None and saved.split(".")[0] != name.split(".")[0]:
        raise ValueError(f"The weights file {path} says it holds '{saved}', not '{name}': load it as load('{saved}', "
                         f"weights=...) or give the file that belongs to '{name}'.")
    overlay = dict(file=str(path))
    classes = file_head_classes(name, path)
    if classes is not None:
        wanted = kwargs.get("num_classes")
        if wanted is not None and wanted != classes:
            raise ValueError(f"The weights file {path} holds a trained classifier head with {classes} classes, but "
                             f"num_classes={wanted} was asked for. Leave num_classes out (or give num_classes={classes}) "
                             "to keep the trained head; to train a new head, load the file first and replace the head "
                             "yourself (model.reset_classifier(n)).")
        kwargs["num_classes"] = classes
        overlay["num_classes"] = classes  # timm keeps the file's head only when this matches num_classes
    # timm reads the file exactly as a hub download (safetensors, or torch.load with weights_only=True)
    try:
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)
    except TypeError:
        raise  # an unknown keyword argument for this architecture: timm's message names it
    except Exception as error:  # noqa: BLE001 - whatever the file holds, the learner gets one clear message
        text = str(error)
        if "size mismatch" in text or "Missing key" in text or "Unexpected key" in text:
            raise ValueError(f"The weights in {path} do not fit timm model '{name}': {text[:300]}") from None
        raise ValueError(f"Could not read weights file {path}: it is corrupt or truncated, or holds something other "
                         "than a state dict (the course loads only safetensors files and state dicts saved with "
                         "torch.save(model.state_dict(), path), never pickled objects). Save the weights with "
                         f"safetensors.torch.save_file(model.state_dict(), path) and try again ({type(error).__name__}).") from None
    check_finite_weights(model, str(path))
    return model


def _load_timm(name: str, weights, pretrained: bool, **kwargs) -> torch.nn.Module:
    import timm

    if weights is not None:
        if not pretrained:
            raise ValueError("weights=... and pretrained=False contradict each other: leave out pretrained to load the file, "
                             "or leave out weights for a randomly initialised model.")
        return _from_file(name, Path(weights), **kwargs)
    if not pretrained:
        return timm.create_model(name, pretrained=False, **kwargs)
    _check_tag(name)
    _warn_new_head(name, kwargs)
    if weights_cached(name):
        with hub_offline():  # never wait on the network for weights we already have
            model = timm.create_model(name, pretrained=True, **kwargs)
    elif not hub_reachable():
        raise WeightsUnavailableError(_offline_message(name))
    else:
        try:
            model = timm.create_model(name, pretrained=True, **kwargs)
        except TypeError:
            raise
        except (OSError, RuntimeError) as error:  # the hub answered a connection but could not serve the file
            raise WeightsUnavailableError(f"{_offline_message(name)}\n  (The hub answered but the download failed: "
                                          f"{type(error).__name__}.)") from None
    check_finite_weights(model, f"the hub ({name})")
    return model


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

    if not isinstance(name, str):
        raise TypeError(f"name must be a model name (a string such as 'lite-vit' or 'resnet50'), got {type(name).__name__}. "
                        "A model you already have needs no loading: pass the module itself.")
    pretrained = check_flag(pretrained, "pretrained")  # "no" would have fetched the pretrained weights
    device = checked_device(device) if device is not None else pick_device()  # before minutes of downloading
    if weights is not None and not isinstance(weights, (str, os.PathLike)):
        raise TypeError(f"weights must be the path of a .safetensors or .pth file, got {type(weights).__name__}. "
                        "For a state dict you hold: model = load(name, pretrained=False); model.load_state_dict(sd).")
    if name in zoo.ZOO:
        ignored = [f"weights={weights!r}"] * (weights is not None) + [f"{k}=..." for k in timm_kwargs]
        if ignored:
            raise ValueError(f"'{name}' is a bundled lite model: {', '.join(ignored)} cannot apply to it (it always loads "
                             f"data/models/{name}.safetensors, architecture fixed by its recipe). Leave them out, or use "
                             "a timm name for a model of your own choice.")
        model = _load_lite(name) if pretrained else zoo.build(name)
    elif timm.is_model(name.split(".")[0]):
        model = _load_timm(name, weights, pretrained, **timm_kwargs)
    else:
        close = suggest(name)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(f"Unknown model '{name}'.{hint} Lite models: {', '.join(zoo.ZOO)}; "
                         "any timm name works on the full track (timm.list_models()).")
    return model.eval().to(device)
