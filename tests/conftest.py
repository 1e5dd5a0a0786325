"""Shared fixtures, and one torch thread per test worker. The environment every run needs (the lite track, the
CPU, offline, one thread per worker for notebook kernels too) is set in the repository's root conftest.py, which
pytest loads first."""

import os

import pytest
import torch

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
