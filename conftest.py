"""Test-wide environment: the suite always runs the offline lite track, on the CPU.

Here at the repository's root (not in tests/) so that it holds for every pytest run, including one
notebook alone (`pytest notebooks/07_vit_vs_resnet.ipynb`). It is set before any test or notebook
kernel starts, so plain `pytest` needs no flags, and nbval's notebook kernels inherit it.
"""

import atexit
import os
import shutil
import tempfile

os.environ["COURSE_TRACK"] = "lite"
os.environ.setdefault("COURSE_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait on the network in tests
# decoded images of the tests' temporary folders go to a temporary cache, not the repository's outputs/; the
# process that makes it (pytest's main process: its workers inherit the variable) removes it when it exits, or
# every run would leave about 60 MB in the temporary folder
if "COURSE_IMAGE_CACHE_DIR" not in os.environ:
    os.environ["COURSE_IMAGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="course_image_cache_")
    atexit.register(shutil.rmtree, os.environ["COURSE_IMAGE_CACHE_DIR"], ignore_errors=True)
if os.environ.get("PYTEST_XDIST_WORKER"):
    # two test workers share the machine's cores: one torch thread each (and in each notebook kernel, which
    # inherits this), since two workers of several threads each oversubscribe the cores and run slower
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
