"""Forward passes in half precision on CUDA (torch.autocast); Grams and CKA sums stay float32 / float64.

    dtype = forward_dtype(device, amp)     # torch.float16 on CUDA by default; None (float32) on the CPU or when off
    with forward_context(dtype):
        model(x)                            # the hooks' Grams are float32 all the same (helpers.compare)

Why float16 and not bfloat16: a T4 (Colab's GPU) has float16 tensor cores and no bfloat16 ones, and
float16 keeps 10 bits of mantissa to bfloat16's 7, so features are closer to float32's; its range
(up to 65,504) is the risk, and autocast already runs softmax, layer norm and reductions in
float32. `benchmarks/gpu_check.py` compares CKA with autocast on and off on a GPU.

COURSE_AUTOCAST=off (or 0) turns it off everywhere, =bf16 picks bfloat16, =fp16 is the default.
An analysis's own amp= argument wins over the variable: False = off, True or None = the variable's
choice, "fp16" / "bf16" = that type. On the CPU nothing changes: no autocast, float32.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch

ENV = "COURSE_AUTOCAST"
DTYPES = {"fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
OFF = ("off", "0", "false", "no", "none")


def _named(text: str, where: str):
    text = text.strip().lower()
    if text in OFF:
        return None
    if text not in DTYPES:
        raise ValueError(f"{where}={text!r}: use 'fp16' (the default), 'bf16' or 'off'.")
    return DTYPES[text]


def forward_dtype(device, amp=None):
    """The dtype autocast runs forward passes in on `device`, or None for plain float32 (see the module docstring)."""
    if torch.device(device).type != "cuda" or amp is False:
        return None
    if isinstance(amp, str):
        return _named(amp, "amp")
    if amp is not None and amp is not True:
        raise TypeError(f"amp must be None, True, False, 'fp16' or 'bf16', got {amp!r}.")
    return _named(os.environ.get(ENV, "") or "fp16", ENV)


def forward_context(dtype, device_type: str = "cuda"):
    """torch.autocast in `dtype` (on CUDA: forward_dtype gives None elsewhere), or nothing for None."""
    return torch.autocast(device_type, dtype=dtype) if dtype is not None else nullcontext()


def dtype_name(dtype) -> str | None:
    """'float16' / 'bfloat16' for a result's .meta, None when autocast did not run."""
    return None if dtype is None else str(dtype).replace("torch.", "")
