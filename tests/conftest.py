"""Test-wide settings: the suite always runs the offline lite track, on the CPU.

Set here (before any test or notebook kernel starts) so that plain `pytest` needs no flags;
nbval's notebook kernels inherit this environment.
"""

import os

os.environ["COURSE_TRACK"] = "lite"
os.environ.setdefault("COURSE_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait on the network in tests
