"""Test-wide environment: the suite always runs the offline lite track, on the CPU.

Here at the repository's root (not in tests/) so that it holds for every pytest run, including one
notebook alone (`pytest notebooks/07_vit_vs_resnet.ipynb`). It is set before any test or notebook
kernel starts, so plain `pytest` needs no flags, and nbval's notebook kernels inherit it.
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
