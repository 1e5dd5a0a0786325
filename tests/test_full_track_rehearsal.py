"""Rehearsal of the full track: notebooks 05-17 run top to bottom on the full track's own code path.

No network and no GPU: every full-track model name is served from a temporary Hugging Face cache
holding RANDOM weights in the hub's own layout (tests/rehearsal.py), loaded by the course's real
route (models.load -> weights_cached -> timm -> huggingface_hub, HF_HUB_OFFLINE=1); the images
are real photographs in Imagenette's folder layout, read by torchvision's Imagenette class and
preprocessed by each model's own transform at its evaluation size. Each notebook runs from a
copy (the repository's files are never written) with

    COURSE_TRACK=full  COURSE_DEVICE=cpu  COURSE_MAX_IMAGES=4 (16 for 06, 07, 13 and 14, 2 for 10, 40 for 16, 48 for 17)
    COURSE_OUTPUT_DIR, COURSE_DOWNLOAD_DIR, HF_HOME, HF_HUB_CACHE -> temporary folders

All thirteen run in ONE kernel, one after the other, each in a fresh namespace (tests/shared_kernel.py):
importing torch and timm again for every notebook would cost about 5 s each.

Cells that only open an interactive widget (widgets.interact) are not run: the cell before each
draws the same figure by calling the same function, and nbclient waited forever on one of them
(05, cell 20) here, with the kernel idle, while the machine was busy.

Random weights cannot reproduce the paper: each findings notebook (06-15) judges its claims with
helpers.verdicts, prints the verdicts and saves them (COURSE_OUTPUT_DIR/verdicts/full/NN.json); no
claim stops a notebook. The test checks that every claim of the notebook got a saved verdict and
prints how many of each. Every assertion of shapes and values still raises.

Stand-ins (to stay within the suite's time budget on 2 CPU cores): notebook 05 runs the full
track's own ViT-B/16 and ResNet-50; in 06-17 a smaller model of the same family, under a real
pretrained tag of timm and through the same route, takes the place of each ViT (SMALL below),
    ViT-B/16 vit_base_patch16_224.augreg_in21k_ft_in1k  -> ViT-Ti/16 vit_tiny_patch16_224.augreg_in21k_ft_in1k
    ViT-B/16 vit_base_patch16_224.augreg2_in21k_ft_in1k -> ViT-Ti/16 vit_tiny_patch16_224.augreg_in21k
    ViT-B/16 vit_base_patch16_224.augreg_in1k           -> ViT-Ti/16 deit_tiny_patch16_224.fb_in1k (ImageNet-1k only)
    ViT-L/16 vit_large_patch16_224.augreg_in21k_ft_in1k -> ViT-S/16 vit_small_patch16_224.augreg_in21k_ft_in1k (14)
and each ResNet-50 by a ResNet-18 (BasicBlocks instead of Bottlenecks: 05 runs the real ResNet-50's; no notebook
names a layer inside a block):
    resnet50.tv_in1k -> ResNet-18 resnet18.tv_in1k,  resnet50.tv2_in1k -> ResNet-18 resnet18.a3_in1k
(like tv2, a recipe trained at a lower resolution and evaluated at 224 px with its own crop; a1 evaluates at 288 px,
1.65 times the pixels)
and in 16 only (its report's receptive fields: one backward pass per layer through 32 images), EfficientNet-B0,
by the smallest model of timm's EfficientNet class (106 px inputs; B0's fields took 36 s of the rehearsal's 73):
    efficientnet_b0.ra_in1k -> TinyNet-E tinynet_e.in1k
and the GAP ViT, ViT-M/16 at 256 px (256 tokens: the rehearsal's most costly model, half of 07's and 13's time), by
the smallest GAP ViT of timm's VisionTransformer class, the same input size and blocks with 64 tokens of 32 px
(it has no classifier head: no notebook reads the GAP ViT's logits):
    vit_medium_patch16_gap_256.sw_in12k_ft_in1k -> ViT-B/32 (GAP) vit_base_patch32_siglip_gap_256.v2_webli
The Mixer (mixer_b16_224) runs as itself.
test_every_full_track_name_is_a_hub_model checks the names
that only stand-ins run here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import rehearsal
from shared_kernel import fresh_namespace, shared_kernel

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
FINDINGS = sorted(p.stem for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb") if 5 <= int(p.stem[:2]) <= 17)
# images per notebook: 4 (the fewest unbiased HSIC takes); 07 needs both classes in its label CKA; 13 and 14
# split theirs into a probe pool and a
# test set; 10 backpropagates once per layer (and once per channel for two layers, skipped below 8 images), so its cost grows with each image
MAX_IMAGES = {"06": 16, "07": 16, "10": 2, "13": 16, "14": 16, "16": 40, "17": 48}  # 06, 07: four subsamples of 4 for their
# reference intervals; 16: two subsamples of 20 for its intervals; 17: four subsamples of 12 (mutual k-NN, k = 10)
DEFAULT_MAX_IMAGES = 4

SMALL = {"vit_base_patch16_224.augreg_in21k_ft_in1k": "vit_tiny_patch16_224.augreg_in21k_ft_in1k",
         "vit_base_patch16_224.augreg2_in21k_ft_in1k": "vit_tiny_patch16_224.augreg_in21k",
         "vit_base_patch16_224.augreg_in1k": "deit_tiny_patch16_224.fb_in1k",  # ViT-Ti/16 trained on ImageNet-1k only
         "vit_large_patch16_224.augreg_in21k_ft_in1k": "vit_small_patch16_224.augreg_in21k_ft_in1k"}
SMALLER_CNN = {"resnet50.tv_in1k": "resnet18.tv_in1k", "resnet50.tv2_in1k": "resnet18.a3_in1k"}
SMALLER_EFFICIENTNET = {"efficientnet_b0.ra_in1k": "tinynet_e.in1k"}
SMALLER_GAP_VIT = {"vit_medium_patch16_gap_256.sw_in12k_ft_in1k": "vit_base_patch32_siglip_gap_256.v2_webli"}
# 05 loads only TRACK_MODELS["full"]["vit"] and ["resnet"], both as themselves
AS_THEMSELVES_IN_05 = {k: v for k, v in SMALL.items() if k != "vit_base_patch16_224.augreg_in21k_ft_in1k"}
# notebook number -> {full-track name: the name that stands in for it}
STAND_INS = ({f"{n:02d}": SMALL | SMALLER_CNN | SMALLER_GAP_VIT for n in range(6, 18)}
             | {"05": AS_THEMSELVES_IN_05 | SMALLER_GAP_VIT, "16": SMALL | SMALLER_CNN | SMALLER_GAP_VIT | SMALLER_EFFICIENTNET})


def full_track_names() -> list:
    """Every timm name the full track loads with pretrained weights (TRACK_MODELS['full']), as it stands."""
    from helpers.models import model_names

    return model_names("full")


def rehearsed_names() -> list:
    """The names the rehearsal loads: each notebook's stand-ins for the full-track names."""
    return list(dict.fromkeys(s.get(n, n) for s in STAND_INS.values() for n in full_track_names()))


def test_every_full_track_name_is_a_hub_model():
    """Each full-track name is a pretrained tag timm fetches from the hub (the route the rehearsal takes)."""
    from timm.models import get_pretrained_cfg

    from helpers import models

    for name in full_track_names() + rehearsed_names():
        models._check_tag(name)
        assert get_pretrained_cfg(name).hf_hub_id == f"timm/{name}", name


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One kernel for every notebook, started in the full-track environment; yields {'env', 'km', 'cwd'}."""
    root = tmp_path_factory.mktemp("full_track")
    rehearsal.hub_cache(root / "hf" / "hub", rehearsed_names())
    rehearsal.imagenette_folder(root / "downloads", per_class=24)  # 48 images: 17 takes them all
    # COURSE_REHEARSAL_DEVICE=cuda runs it on a GPU (benchmarks/gpu_check.py); the test suite runs it on the CPU
    env = {"COURSE_TRACK": "full", "COURSE_DEVICE": os.environ.get("COURSE_REHEARSAL_DEVICE", "cpu"), "HF_HUB_OFFLINE": "1",
           "HF_HOME": str(root / "hf"), "HF_HUB_CACHE": str(root / "hf" / "hub"),
           "COURSE_DOWNLOAD_DIR": str(root / "downloads"), "COURSE_OUTPUT_DIR": str(root / "unused")}
    with shared_kernel(root, env) as km:
        yield {"env": env, "cwd": root, "km": km}


def _setup_cell(number: str, outputs: Path, cwd: Path):
    """The copy's first cell: a fresh namespace, this notebook's image cap, output folder and stand-ins."""
    env = {"COURSE_MAX_IMAGES": str(MAX_IMAGES.get(number, DEFAULT_MAX_IMAGES)), "COURSE_OUTPUT_DIR": str(outputs)}
    return fresh_namespace(env, cwd, "\n".join([
        "import copy",
        "from helpers import models",
        "models.__dict__.setdefault('_rehearsal_full', copy.deepcopy(models.TRACK_MODELS['full']))",
        f"_stand_ins = {STAND_INS[number]!r}",
        "_remap = lambda v: {k: _remap(x) for k, x in v.items()} if isinstance(v, dict) else _stand_ins.get(v, v)",
        "models.TRACK_MODELS['full'] = _remap(models._rehearsal_full)",
        "del _stand_ins, _remap",
        COUNTING]))


# Counts of images through each model (forward) and through torch.autograd.grad (backward), kept on the
# course module so that %reset leaves them: the cost estimates of README's full-track table use them
COUNTING = """
import collections, torch
from helpers import course
if not hasattr(course, '_rehearsal_counts'):  # once per kernel; the hooks name only modules, never the namespace
    course._rehearsal_counts, course._rehearsal_grad = collections.Counter(), torch.autograd.grad
    def _count_forward(module, args, output):
        from helpers import course
        arch = (getattr(module, 'pretrained_cfg', None) or {}).get('architecture')
        if arch and args and hasattr(args[0], 'shape') and type(module).__name__ in (
                'VisionTransformer', 'ResNet', 'MlpMixer', 'EfficientNet'):
            course._rehearsal_counts['forward ' + arch] += int(args[0].shape[0])
            course._rehearsal_last = arch  # a backward pass that follows belongs to this model
    def _counted_grad(outputs, inputs, *args, **kwargs):
        from helpers import course
        first = inputs[0] if isinstance(inputs, (tuple, list)) else inputs
        course._rehearsal_counts['backward ' + getattr(course, '_rehearsal_last', '?')] += int(first.shape[0])
        return course._rehearsal_grad(outputs, inputs, *args, **kwargs)
    torch.nn.modules.module.register_module_forward_hook(_count_forward)
    torch.autograd.grad = _counted_grad
course._rehearsal_counts.clear()
"""


def run_notebook(path: Path, kernel: dict, outputs: Path) -> dict:
    """Execute a copy of the notebook at `path` cell by cell in the shared kernel.

    Returns {'seconds': {cell index: s}, 'counts': images through each model, 'skipped': widget cells}.
    A failing cell fails the test
    with the notebook's name and the cell's index in the repository's notebook.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, _setup_cell(path.stem[:2], outputs, kernel["cwd"]))
    nb.cells.append(nbformat.v4.new_code_cell("import json; print('COUNTS', json.dumps(course._rehearsal_counts))"))
    client = NotebookClient(nb, km=kernel["km"], timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(kernel["cwd"])}})
    seconds, skipped = {}, []
    with client.setup_kernel(cleanup_kc=False):  # starts the kernel if none runs (the first notebook, or after a crash)
        try:
            for index, cell in enumerate(nb.cells):
                if "widgets.interact(" in cell.source:
                    skipped.append(index - 1)  # see the module docstring
                    continue
                start = time.time()
                try:
                    client.execute_cell(cell, index)
                except CellExecutionError as error:
                    pytest.fail(f"{path.name}, cell {index - 1} (rehearsal of the full track, after "
                                f"{sum(seconds.values()):.0f} s): {error.ename}: {error.evalue}\n"
                                f"{''.join(cell.source)[:400]}", pytrace=False)
                if index < len(nb.cells) - 1:  # not the counting cell
                    seconds[index - 1] = time.time() - start
        finally:
            client.kc.stop_channels()
    counts = [line[7:] for line in nb.cells[-1].outputs[0].get("text", "").splitlines() if line.startswith("COUNTS ")]
    return {"seconds": seconds, "counts": counts[0] if counts else "{}", "skipped": skipped}


def saved_verdicts(number: str, outputs: Path) -> str:
    """The full-track verdicts a findings notebook saved, counted by kind ('' for 05 and 16, which judge no claim;
    for 17, which judges claims of 06 and 07 again under other measures, the size of its survival table)."""
    import collections
    import json

    from helpers.claims import claims_of
    from helpers.verdicts import load

    if number == "17":
        rows = json.loads((outputs / "other_measures" / "17_survival_full.json").read_text())["rows"]
        return f"survival table: {len(rows)} claims x {len(rows[0]) - 2} measures; "
    claims = claims_of(number)
    if not claims:
        return ""
    saved = load("full", root=outputs / "verdicts")
    missing = sorted(set(claims) - set(saved))
    assert not missing, f"notebook {number} saved no full-track verdict for {missing}"
    kinds = collections.Counter("holds in k of n" if saved[c].verdict.startswith("holds in") else saved[c].verdict
                                for c in claims)
    return "verdicts: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + "; "


@pytest.mark.parametrize("name", FINDINGS)
def test_full_track_rehearsal(name, kernel, tmp_path):
    repo_outputs = NOTEBOOKS_DIR.parent / "outputs"
    # only full-track files (the notebooks name what they save by track: ..._full): the other test worker's
    # nbval notebooks write their lite-track files (..._lite) into outputs/ at the same time
    listing = lambda: sorted(str(p) for p in repo_outputs.rglob("*full*")) if repo_outputs.exists() else []
    before = listing()
    outputs = tmp_path / "outputs"
    result = run_notebook(NOTEBOOKS_DIR / f"{name}.ipynb", kernel, outputs)
    judged = saved_verdicts(name[:2], outputs)
    seconds = result["seconds"]
    slowest = sorted(seconds.items(), key=lambda kv: -kv[1])[:3]
    print(f"\n{name}: {sum(seconds.values()):.1f} s (set-up {seconds[-1]:.1f} s); slowest cells "
          + ", ".join(f"{k}: {v:.1f} s" for k, v in slowest) + f"; {judged}widget cells not run: {result['skipped']}; "
          f"images through: {result['counts']}")
    assert listing() == before, f"{name} wrote into the repository's outputs/ during the rehearsal"
    assert any(p.is_file() for p in outputs.rglob("*")), f"{name}: nothing saved under COURSE_OUTPUT_DIR"
