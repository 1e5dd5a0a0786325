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

Overflow. float16 tops out at 65,504. A ViT's residual stream is float32 (its float32 position embedding
promotes it), but a Mixer's, a ResNet's or an EfficientNet's stays float16 from block to block, and a trained
activation above the limit would become inf. guarded() runs a forward pass under autocast and, when what it
gives is not finite, runs it again in float32 and prints a note once: the numbers are then float32's, never inf.

Testing without a GPU: `with emulated_on_cpu(torch.float16):` makes forward_dtype answer on the CPU what it
answers on CUDA, and forward_context autocast on the CPU, so every same-value comparison can be checked
against the precision a GPU really runs in (tests/test_forced_autocast.py).
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext

import torch

ENV = "COURSE_AUTOCAST"
DTYPES = {"fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
OFF = ("off", "0", "false", "no", "none")
_EMULATED = []  # the dtype emulated_on_cpu set (a stack, for nesting); empty: the real rule (CUDA only)
_NOTED = set()  # the analyses whose float16 overflow was already reported (one note each)


def _named(text: str, where: str):
    text = text.strip().lower()
    if text in OFF:
        return None
    if text not in DTYPES:
        raise ValueError(f"{where}={text!r}: use 'fp16' (the default), 'bf16' or 'off'.")
    return DTYPES[text]


def forward_dtype(device, amp=None):
    """The dtype autocast runs forward passes in on `device`, or None for plain float32 (see the module docstring)."""
    # checked on every device: amp='yes' passed on the CPU (where autocast never runs) and failed only on a GPU
    if isinstance(amp, str):
        named = _named(amp, "amp")
    elif amp is not None and not isinstance(amp, bool):
        raise TypeError(f"amp must be None, True, False, 'fp16' or 'bf16', got {amp!r}.")
    on_gpu = torch.device(device).type == "cuda" or bool(_EMULATED)
    if not on_gpu or amp is False:
        return None
    if isinstance(amp, str):
        return named
    if _EMULATED:
        return _EMULATED[-1]
    return _named(os.environ.get(ENV, "") or "fp16", ENV)


def forward_context(dtype, device_type: str = "cuda"):
    """torch.autocast in `dtype` (on CUDA: forward_dtype gives None elsewhere), or nothing for None."""
    if dtype is None:
        return nullcontext()
    return torch.autocast("cpu" if _EMULATED else device_type, dtype=dtype)


@contextmanager
def emulated_on_cpu(dtype):
    """Inside the block the CPU runs forward passes as CUDA would by default: under autocast in `dtype`
    (torch.float16 or torch.bfloat16; CPU autocast rounds matrix products to it as CUDA's does). For tests."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"emulated_on_cpu needs torch.float16 or torch.bfloat16, got {dtype!r}.")
    _EMULATED.append(dtype)
    try:
        yield dtype
    finally:
        _EMULATED.pop()


def _finite(value) -> bool:
    """True when every tensor in `value` (a tensor, or a list, tuple or dict of them) holds no NaN or inf."""
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def guarded(forward, dtype, what: str = "the forward pass"):
    """forward() under autocast in `dtype`; when its result is not finite (a float16 overflow), forward() again
    in float32, with a note printed once per `what`. forward: () -> a tensor or a list / dict of tensors,
    safe to call twice (it must take its own hooks' records). dtype None: forward() as it is, float32."""
    with forward_context(dtype):
        out = forward()
    if dtype is None or _finite(out):
        return out
    if what not in _NOTED:
        _NOTED.add(what)
        print(f"Note: {what} overflowed {dtype_name(dtype)} under autocast (a value above its range became inf or "
              "NaN); that batch ran again in float32. To run everything in float32: COURSE_AUTOCAST=off.")
    return forward()


def dtype_name(dtype) -> str | None:
    """'float16' / 'bfloat16' for a result's .meta, None when autocast did not run."""
    return None if dtype is None else str(dtype).replace("torch.", "")
