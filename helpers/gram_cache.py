"""Per-batch Grams kept for reuse: each model runs over a given set of images once, not once per comparison.

    source = BatchGrams(model, images, capture, batch_size)   # before the capture's hooks are registered
    with capture:
        for grams in source:                                   # (L, B, B) for each batch of >= 4 images
            accumulator.update_grams(grams, ...)

Why: notebook 07 compares one ResNet with three ViTs, with a second ResNet and with the class labels,
and the report compares each model with itself, with the other model and with the labels on every
subsample. Each of those comparisons used to run the same model over the same images again, to get
the same Grams. helpers.compare now takes them from here the second time.

A set of Grams is reused only when everything it depends on is the same as when it was computed:
  - what the model computes with: every parameter and buffer, checked by value (a CRC-32 of their
    bytes, so an optimiser step, load_state_dict or an edit through .data all make it a new model),
    its class, its modules' names and classes, their plain settings (fused_attn, global_pool, ...)
    and the hooks registered on them;
  - the layers as resolved (module names, output or input) and the token policy;
  - the very same ImageSet object (for one held as a tensor, that tensor unchanged) and the batch size;
  - the device, and the autocast type of the forward passes (none, float16 or bfloat16).
One forward pass also serves the pooled token policies: while a model runs for one policy ("all", say), the
same activations give the Grams of "mean" and (for a model with a CLS token) "cls" too, kept as entries of their
own. Notebook 07 reads a ResNet and a ViT two ways (all positions, and where the classifier reads: the CLS token,
the mean over positions), and the second reading then runs no model. A Gram of the same activations is the same
Gram, so the values are the same bit for bit. A pooled row has D features instead of N*D, so its Gram costs
about 1/N of the flattened one ("all" and "spatial", whose Grams cost as much as a small model's forward pass,
are computed only when asked for). The Grams asked for are kept as the most recently used, after those.
The Grams are kept on the CPU, MAX_BYTES in all at most (the least recently used are dropped first); a
set too big to fit alone is never kept. clear() empties the cache. Inside `with pinned(models, images):`
the Grams of those models on those images are kept whatever their size and never dropped, until the
block ends: the report pins the full image set's, which its highest-norm audit reads after every
subsample has run (at Imagenette's 3,925 images MAX_BYTES alone would have dropped them). Results are the same with or without
it (tests/test_gram_cache.py compares them bit for bit).
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
import zlib
from collections import OrderedDict
from contextlib import ExitStack, contextmanager

import torch

from helpers.autocast import guarded
from helpers.capture import Capture
from helpers.data import ImageSet, batches

MAX_BYTES = 512 * 2**20  # 512 MiB: about 20 sets of a ViT's 13 layers on 2,048 images in batches of 256
MIN_BATCH = 4  # unbiased HSIC needs at least 4 examples; a smaller last batch is skipped (helpers.compare)

_CACHE: OrderedDict = OrderedDict()  # key -> (weak reference to the ImageSet, [(L, B, B) CPU tensors], their bytes)
_PINS: list = []  # (model ids, ImageSet ids) of each pinned() block now open
_PINNED: set = set()  # the keys kept by an open pinned() block: never dropped while it is open


def clear() -> None:
    """Forget every kept Gram (the memory is freed; later analyses run their models again)."""
    _CACHE.clear()
    _PINNED.clear()


def kept_bytes() -> int:
    """How much memory the kept Grams take now, in bytes."""
    return sum(entry[2] for entry in _CACHE.values())


@contextmanager
def pinned(models: list, images: list):
    """Inside the block, the Grams computed (or found) for any of `models` on any of `images` (ImageSets, by
    identity) are kept whatever MAX_BYTES says; when the block ends they become ordinary entries again (the least
    recently used dropped down to MAX_BYTES)."""
    _PINS.append(({id(m) for m in models}, {id(i) for i in images if i is not None}))
    try:
        yield
    finally:
        _PINS.pop()
        if not _PINS:
            _PINNED.clear()
            _trim()


def _is_pinned(model, images) -> bool:
    return any(id(model) in models and id(images) in sets for models, sets in _PINS)


def _size(grams: list) -> int:
    return sum(g.numel() * g.element_size() for g in grams)


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a tensor of any dtype (bfloat16 too), read on the CPU."""
    flat = tensor.detach().reshape(-1).contiguous()
    return memoryview(flat.view(torch.uint8).cpu().numpy())


def _plain(value) -> bool:
    return isinstance(value, (bool, int, float, str, type(None))) or (
        isinstance(value, (tuple, list, dict)) and len(repr(value)) < 10_000)


def model_fingerprint(model: torch.nn.Module) -> tuple:
    """What the model's output depends on, as a hashable value (see the module docstring): (a SHA-256 of the
    structure's description, a CRC-32 of the weights).

    Reads every weight once (a CRC-32 runs at about 3 GB/s: 0.03 s for a ResNet-50). The structure is kept as a
    digest, not as the tuple itself: every lookup hashes the key again, and a tuple of a few hundred modules'
    settings made the cache's own bookkeeping cost seconds in a notebook with many models.
    """
    structure = []
    for name, module in model.named_modules():
        settings = tuple(sorted((k, repr(v)) for k, v in vars(module).items()
                                if not k.startswith("_") and k != "training" and _plain(v)))
        hooks = tuple(id(h) for hooks in (module._forward_pre_hooks, module._forward_hooks) for h in hooks.values())
        structure.append((name, type(module).__qualname__, settings, hooks))
    crc = 0
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        structure.append((tuple(tensor.shape), str(tensor.dtype)))
        crc = zlib.crc32(_tensor_bytes(tensor), crc)
    return hashlib.sha256(repr(structure).encode()).hexdigest(), crc


def _images_token(images: ImageSet) -> tuple:
    """The ImageSet object (by identity; its entry holds a weak reference to check it), and its tensor's state."""
    tensor = images.tensor
    held = None if tensor is None else (tensor.data_ptr(), tensor._version, tuple(tensor.shape))
    return id(images), len(images), held


class BatchGrams:
    """The (L, B, B) Grams of a Capture's layers for each batch of `images` (of >= MIN_BATCH images), in order.

    model: the torch module the capture records (in the caller's eval and no_grad contexts).
    capture: a helpers.capture.Capture whose transform turns each layer's rows into a centered Gram.
    Create it BEFORE entering the capture: the fingerprint must not see the capture's own hooks.
    Iterating runs one forward pass per batch (Grams on the model's device) unless the same Grams are
    kept; computed ones are kept when the last batch is done, if they fit in MAX_BYTES.
    amp: the dtype the forward passes run in under torch.autocast (helpers.autocast.forward_dtype),
    or None for float32.
    """

    def __init__(self, model, images: ImageSet, capture, batch_size: int, amp=None):
        self.model, self.images, self.capture, self.batch_size = model, images, capture, batch_size
        self.device = next(model.parameters(), torch.empty(0)).device
        taps = tuple((t.label, t.module, t.where) for t in capture.taps)
        self.amp = None if amp is False else amp  # False: an older caller's "off"
        self.key = (model_fingerprint(model), taps, capture.policy, _images_token(images), batch_size, str(self.amp),
                    str(self.device))
        self.n_batches = len(images) // batch_size + (len(images) % batch_size >= MIN_BATCH)
        self.pin = _is_pinned(model, images)
        entry = _CACHE.get(self.key) if MAX_BYTES > 0 or self.pin else None
        self.kept = None
        if entry is not None and entry[0]() is images:
            _CACHE.move_to_end(self.key)
            self.kept = entry[1]
            if self.pin:
                _PINNED.add(self.key)

    def __len__(self):
        return self.n_batches

    def __iter__(self):
        if self.kept is not None:
            for grams in self.kept:
                yield grams.to(self.device)
            return
        computed = []
        others = _other_readings(self.capture, self.key)  # the other policies' Grams, from the same passes
        stream = batches(self.images, self.model, self.batch_size)
        for _ in range(self.n_batches):
            x = next(stream)

            def forward(x=x):
                with ExitStack() as hooked:  # the other readings' hooks are on during this pass only
                    for other in others:
                        hooked.enter_context(other)
                    self.model(x)
                for other in others:
                    other.take_grams()
                return torch.stack(list(self.capture.take().values()))

            # a float16 overflow (inf in the Grams) runs the batch again in float32 (helpers.autocast)
            grams = guarded(forward, self.amp, f"{type(self.model).__name__}'s forward pass")
            computed.append(grams.cpu())
            for other in others:
                other.batches.append(other.last)
                if not other.failed and _size(other.batches) > MAX_BYTES:  # could never be kept: stop holding it
                    other.failed, other.batches = True, []
            if len(computed) == self.n_batches:  # before the last yield: a consumer may stop after it
                for other in others:
                    if not other.failed:
                        _keep(other.key, self.images, other.batches)
                _keep(self.key, self.images, computed, self.pin)  # after those: the most recently used
            yield grams


def _keep(key, images: ImageSet, grams: list, pin: bool = False) -> None:
    if _size(grams) > MAX_BYTES and not pin:
        return
    _CACHE[key] = (weakref.ref(images), grams, _size(grams))
    _CACHE.move_to_end(key)
    if pin:
        _PINNED.add(key)
    _trim()


POOLED = ("mean", "cls")  # the policies whose Grams are kept from every pass (module docstring)


class _OtherReading(Capture):
    """The capture's layers and Gram transform under another (pooled) token policy, recorded beside it in the
    same passes.

    A layer this policy cannot read (a CLS token before it exists, say) only marks the reading as failed: the
    pass and the Grams asked for go on (a policy the caller asks for itself still raises its clear error).
    """

    def __init__(self, capture: Capture, policy: str, key: tuple):
        vars(self).update(vars(capture))  # the same model, taps, transform, prefix and patch counts, on_repeat
        self.policy, self._store, self._counts, self._handles, self._whole_pass = policy, {}, {}, [], False
        self.key, self.batches, self.last, self.failed = key, [], None, False

    def _record(self, tap, value):
        if self.failed:
            return
        try:
            super()._record(tap, value)
        except (ValueError, RuntimeError, TypeError):
            self.failed = True

    def take_grams(self) -> None:
        """Keep the (L, B, B) Grams of the pass that just ran in .last (on the CPU); not finite ones fail the reading
        (a float16 overflow: the Grams asked for would have been computed again in float32)."""
        try:
            self.last = None if self.failed else torch.stack(list(self.take().values())).cpu()
        except RuntimeError:  # a hook that never fired
            self.failed = True
        if self.last is not None and not torch.isfinite(self.last).all():
            self.failed = True


def _other_readings(capture: Capture, key: tuple) -> list:
    """An _OtherReading for each pooled policy the capture's model allows whose Grams are not kept yet."""
    if capture.transform is None or MAX_BYTES <= 0:
        return []
    others = []
    for policy in POOLED:
        other_key = key[:2] + (policy,) + key[3:]
        if policy == capture.policy or other_key in _CACHE or (policy == "cls" and capture.num_prefix_tokens == 0):
            continue
        others.append(_OtherReading(capture, policy, other_key))
    return others


def _trim() -> None:
    """Drop the least recently used unpinned sets until the kept Grams fit in MAX_BYTES (pinned ones may exceed it)."""
    total = kept_bytes()
    if total <= MAX_BYTES:
        return
    for key in [k for k in _CACHE if k not in _PINNED]:
        total -= _CACHE.pop(key)[2]
        if total <= MAX_BYTES:
            break
