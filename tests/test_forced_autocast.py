"""Every same-value comparison, under the precision a GPU really runs in.

On CUDA the analyses run their forward passes under float16 autocast by default (helpers.autocast); on the CPU,
where the suite runs, they do not. helpers.autocast.emulated_on_cpu makes the CPU run them as CUDA would (CPU
autocast rounds matrix products to float16 or bfloat16 as CUDA's does), so these tests see what a GPU would:
notebook 15's check of its joint pass against cka_matrix, the Gram cache's reuse, and a float16 overflow.
"""

import json
import re
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import compare, gram_cache, models
from helpers.autocast import emulated_on_cpu, forward_dtype, guarded
from helpers.data import image_set

ROOT = Path(__file__).resolve().parents[1]
HALF = [pytest.param(torch.float16, id="float16"), pytest.param(torch.bfloat16, id="bfloat16")]


@pytest.fixture(autouse=True)
def _one_thread_and_no_kept_grams():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    gram_cache.clear()
    yield
    gram_cache.clear()
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def mixer():
    return models.load("lite-mixer", device="cpu")


def _cells(notebook: str) -> list:
    return ["".join(c["source"]) for c in json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]]


@pytest.mark.parametrize("dtype", HALF)
def test_emulation_runs_the_forward_passes_in_half_precision(mixer, dtype):
    images = image_set("shapes", count=64)
    plain = compare.cka_matrix(mixer, images, "blocks", batch_size=32, progress=False)
    with emulated_on_cpu(dtype):
        assert forward_dtype("cpu") is dtype and forward_dtype("cpu", amp=False) is None
        half = compare.cka_matrix(mixer, images, "blocks", batch_size=32, progress=False)
    assert half.meta["amp_dtype"] == str(dtype).replace("torch.", "") and plain.meta["amp_dtype"] is None
    # rounded activations move CKA by far more than float32's rounding (the size notebook 15's check must allow for)
    assert np.abs(half.values - plain.values).max() > 1e-6
    assert forward_dtype("cpu") is None  # the emulation ends with the block


@pytest.mark.parametrize("dtype", HALF)
def test_notebook_15_checks_its_joint_pass_in_the_same_precision(mixer, dtype):
    """Notebook 15's joint pass and the check after it (against cka_matrix) on the lite Mixer, under
    the autocast a GPU runs: cka_matrix must be asked for the float32 pass the joint one makes."""
    from helpers.capture import Capture
    from helpers.compare import cka_matrix
    from helpers.data import batches
    from helpers.intervals import subsample_interval
    from helpers.minibatch_cka import CKAMatrix, MinibatchCKA, centered_gram

    cells = _cells("15_mlp_mixer.ipynb")
    at = next(i for i, c in enumerate(cells) if "cka_matrix(" in c and "np.allclose" in c)  # the check (cell 4 until
    check = cells[at]  # 2026-12-06, when the answer moved before the set-up), and before it the joint pass
    namespace = dict(np=np, torch=torch, ExitStack=ExitStack, Capture=Capture, cka_matrix=cka_matrix, batches=batches,
                     subsample_interval=subsample_interval, CKAMatrix=CKAMatrix, MinibatchCKA=MinibatchCKA,
                     centered_gram=centered_gram, device=torch.device("cpu"), track="lite", BATCH=32,
                     nets={"Mixer": mixer}, images=image_set("shapes", count=64))
    exec(compile(cells[at - 1], "notebook 15's joint pass", "exec"), namespace)  # the joint pass (float32: plain net(x))
    with emulated_on_cpu(dtype):
        exec(compile(check, "notebook 15's check", "exec"), namespace)  # raises AssertionError on a mismatch
        # the same check with cka_matrix in its default precision fails: the test can tell the two apart
        unfixed = re.sub(r",\s*amp=False\)", ")", check)
        assert unfixed != check
        with pytest.raises(AssertionError):
            exec(compile(unfixed, "notebook 15's check, without amp=False", "exec"), namespace)


@pytest.mark.parametrize("dtype", HALF)
def test_kept_grams_are_reused_only_in_their_own_precision(mixer, dtype):
    images = image_set("shapes", count=64)
    with emulated_on_cpu(dtype):
        first = compare.cka_matrix(mixer, images, "blocks", batch_size=32, progress=False)
        again = compare.cka_matrix(mixer, images, "blocks", batch_size=32, progress=False)  # from the cache
    gram_cache.clear()
    with emulated_on_cpu(dtype):
        fresh = compare.cka_matrix(mixer, images, "blocks", batch_size=32, progress=False)
    plain = compare.cka_matrix(mixer, images, "blocks", batch_size=32, progress=False)  # not the half-precision Grams
    np.testing.assert_array_equal(again.values, first.values)
    np.testing.assert_array_equal(fresh.values, first.values)
    np.testing.assert_array_equal(plain.values, compare.cka_matrix(mixer, images, "blocks", batch_size=32,
                                                                   progress=False, amp=False).values)
    assert np.abs(plain.values - first.values).max() > 0


def test_a_float16_overflow_runs_the_batch_again_in_float32(mixer, capsys):
    """A layer whose values pass float16's 65,504: without the fallback its Gram is inf and the analysis stops."""
    images = image_set("shapes", count=64)
    loud = models.load("lite-mixer", device="cpu")
    with torch.no_grad():
        loud.blocks[-1].mlp_channels.fc2.weight.mul_(1e5)  # the last block's output leaves float16's range
    expected = compare.cka_matrix(loud, images, "blocks", batch_size=32, progress=False, amp=False)
    assert np.isfinite(expected.values).all()
    with emulated_on_cpu(torch.float16):
        result = compare.cka_matrix(loud, images, "blocks", batch_size=32, progress=False)
    assert "overflowed float16" in capsys.readouterr().out
    np.testing.assert_allclose(result.values, expected.values, rtol=0, atol=1e-12)  # every batch fell back
    with emulated_on_cpu(torch.bfloat16):  # bfloat16 has float32's range: no overflow, no note
        compare.cka_matrix(loud, images, "blocks", batch_size=32, progress=False)
    assert "overflowed" not in capsys.readouterr().out


def test_guarded_returns_the_half_precision_result_when_it_is_finite():
    x = torch.randn(8, 4)
    layer = torch.nn.Linear(4, 3)
    with emulated_on_cpu(torch.bfloat16):
        out = guarded(lambda: layer(x), torch.bfloat16, "a test")
    assert out.dtype == torch.bfloat16
    assert guarded(lambda: layer(x), None).dtype == torch.float32


# Every same-value comparison in the notebooks, and why autocast cannot move it. A new one fails this test until
# it is added here, with its reason (and, if it compares an autocast pass, a test above).
COMPARISONS = {
    "01_gram_matrices": "numpy Grams of numpy arrays: no model runs",
    "02_hsic": "numpy HSIC and centring of numpy arrays: no model runs",
    "07_vit_vs_resnet": "a learner's function of a fixed numpy matrix",
    "10_receptive_fields": "a learner's function of gradient maps computed once, compared with the helper on the same maps",
    "11_skip_connections": "helpers.residuals and the learner's function both run the ViT in float32 (no autocast)",
    "12_spatial_localization": "synthetic maps of float64 tensors: no model runs",
    "13_linear_probes": "two ridge solvers on the same float64 features",
    "14_data_and_model_scale": "two gap functions on the same CKA values",
    "15_mlp_mixer": "the check after the joint pass: cka_matrix(amp=False) against the float32 pass (tested above); "
                    "the exercise check compares the learner's numbers with the helper's on the same matrices",
    "16_compare_your_models": "a bundle's CSV against its own .npz: the same numbers written twice",
}


def test_every_same_value_comparison_in_the_notebooks_is_accounted_for():
    pattern = re.compile(r"allclose|isclose|assert_allclose|atol=")
    found = set()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for source in _cells(path.name):
            if pattern.search(source):
                found.add(path.stem)
    assert found, "no comparison found: the pattern is wrong"
    unexplained = sorted(found - set(COMPARISONS))
    assert not unexplained, (f"notebooks {unexplained} compare values: say in COMPARISONS why autocast cannot move "
                             "them, or test them under emulated_on_cpu")


def test_the_reports_fingerprint_and_methods_say_the_precision(tmp_path):
    """A report resumed under another precision recomputes its parts instead of mixing float16 and float32 ones."""
    from helpers import report

    settings = report.Settings()
    plain = settings.fingerprint()
    with emulated_on_cpu(torch.float16):
        half = settings.fingerprint()
        with emulated_on_cpu(torch.bfloat16):
            assert settings.fingerprint() not in (plain, half)
    assert half != plain and settings.fingerprint() == plain
