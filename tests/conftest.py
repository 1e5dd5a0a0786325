"""Test-wide settings: the suite always runs the offline lite track, on the CPU.

Set here (before any test or notebook kernel starts) so that plain `pytest` needs no flags;
nbval's notebook kernels inherit this environment.
"""

import os
import tempfile

os.environ["COURSE_TRACK"] = "lite"
os.environ.setdefault("COURSE_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait on the network in tests
# decoded images of the tests' temporary folders go to a temporary cache, not the repository's outputs/
os.environ.setdefault("COURSE_IMAGE_CACHE_DIR", tempfile.mkdtemp(prefix="course_image_cache_"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    # two test workers share the machine's cores: one torch thread each (and in each notebook kernel, which
    # inherits this), since two workers of several threads each oversubscribe the cores and run slower
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"


import pytest  # noqa: E402  (after the environment is set, before any helpers import)
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def vit():
    """An untrained lite ViT (seeded), in eval mode: one per test module, shared by its tests."""
    from helpers import zoo
    torch.manual_seed(0)
    return zoo.build("lite-vit").eval()


@pytest.fixture(scope="module")
def resnet():
    """An untrained lite ResNet (seeded), in eval mode: one per test module."""
    from helpers import zoo
    torch.manual_seed(0)
    return zoo.build("lite-resnet").eval()
