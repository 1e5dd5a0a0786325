"""Shared fixtures, and one torch thread per test worker. The environment every run needs (the lite track, the
CPU, offline, one thread per worker for notebook kernels too) is set in the repository's root conftest.py, which
pytest loads first."""

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def torch_threads_unchanged():
    """A test may not leave torch with another number of threads. A worker left with two threads fights the
    other worker for the two cores, and every later test in it runs several times slower: helpers.train.main
    once did this, and tests of small tensor operations took 5 to 25 times as long in the suite as alone."""
    before = torch.get_num_threads()
    yield
    after = torch.get_num_threads()
    if after != before:
        torch.set_num_threads(before)
        pytest.fail(f"the test left torch with {after} threads instead of {before}: restore them in a finally block "
                    "(with helpers.course.torch_threads(n): ...).", pytrace=False)


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
