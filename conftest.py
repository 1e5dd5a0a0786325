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


# The slowest test files and notebooks, slowest first (seconds each in a 2-core run of the whole suite, rounded).
# pytest-xdist gives each worker one whole file at a time (--dist loadscope), and its own order (by number of tests,
# turned off in pyproject.toml) started the 290 s rehearsal late (at 400 s of a 700 s run), and whichever worker got
# it ran on alone at the end. Longest first, the two workers end within seconds of each other. Every other file
# follows, in collection order. Re-measure when a file's time changes a lot (a timeline of a whole run).
SLOWEST_FIRST = [
    "tests/test_full_track_rehearsal.py",          # 290
    "notebooks/07_vit_vs_resnet.ipynb",            # 110
    "tests/test_student_copies.py",                # 90
    "notebooks/06_representation_structure.ipynb", # 80
    "notebooks/16_compare_your_models.ipynb",      # 70
    "tests/test_report.py",                        # 70
    "notebooks/13_linear_probes.ipynb",            # 65
    "tests/test_browser.py",                       # 55
    "notebooks/14_data_and_model_scale.ipynb",     # 55
    "tests/test_models.py",                        # 50
    "notebooks/10_receptive_fields.ipynb",         # 50
    "tests/test_report_distributed.py",            # 50
    "notebooks/08_local_and_global_attention.ipynb",  # 50
    "notebooks/12_spatial_localization.ipynb",     # 45
    "notebooks/11_skip_connections.ipynb",         # 45
    "notebooks/17_when_cka_misleads.ipynb",        # 40
    "notebooks/09_local_heads_vs_convolutions.ipynb",  # 30
    "tests/test_grade.py",                         # 15
    "notebooks/15_mlp_mixer.ipynb",                # 15
    "tests/test_report_gram_reuse.py",             # 12
    "notebooks/05_hooking_vit_and_resnet.ipynb",   # 10
]


def pytest_collection_modifyitems(config, items):
    """Run the files of SLOWEST_FIRST first, in its order (a stable sort: the tests inside a file keep theirs)."""
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
