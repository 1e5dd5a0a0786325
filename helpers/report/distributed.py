"""The report on several processes (torchrun): the images sharded by whole minibatches, the sums added up.

    torchrun --nproc_per_node 4 -m helpers.report vit_base_patch16_224.augreg_in1k resnet50.tv_in1k --images ...

or, from Python, helpers.report.run(settings) in every process of an initialised torch.distributed group.

How the work is split. The minibatch CKA estimator sums each minibatch's unbiased HSIC, so its value depends on
how the images are cut into minibatches. Each process therefore gets WHOLE minibatches, exactly those one process
would form: the batches of every image set (all images, then each disjoint subsample of helpers.intervals) are
numbered on, across the sets, and batch k goes to process k mod N. Every image is seen by exactly one process,
none twice (no padding, unlike torch's DistributedSampler), and every minibatch is the same as in one process; a
last batch of 1-3 images, which one process skips, is skipped here too. Each process accumulates its shard's sums
(helpers.compare.cka_state), MinibatchCKA.all_reduce adds them, and every process turns the same sums into CKA:
the result equals one process's up to the order of float64 additions (about 1e-16), not each process's CKA of its
own shard (which is what averaging per-process CKA values would give, and is wrong).

What runs where. Every CKA part (within, cross, labels, the image-statistics audit, on the trained models, the
untrained twins and the references) is sharded and summed. The rest is cheap and runs on process 0 only: the
attention distances (the first --attention-count images), the receptive fields (32 images), the other measures
(helpers.report.measures, a fixed subsample of images), the verdicts and the bundle. Process 0 alone reads and
writes <out>/cache: it says which parts are finished and sends them to the others, so a resume needs no shared disk
and every process takes the same path. Device: each process uses cuda:LOCAL_RANK when CUDA exists (backend nccl),
else the CPU (backend gloo); COURSE_DEVICE=cpu puts every process on the CPU (gloo) even on a GPU machine.

Waiting. Process 0 works alone at two points while the others wait: before anything, it downloads and extracts the
images (the others then read the same folder), and after the CKA parts it computes what is not sharded and writes the
bundle. torch's default timeout (10 minutes for nccl) is too short for that at ImageNet scale or on a slow network, so
the group gets COURSE_DIST_TIMEOUT_MINUTES (default 180) instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch

from helpers.report.settings import ReportError


@dataclass(frozen=True)
class World:
    """This process's place in the group: rank, size (1 when not distributed) and the device its sums live on."""

    rank: int = 0
    size: int = 1
    device: str = "cpu"

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        """True on the process that reads the cache and writes the bundle (rank 0)."""
        return self.rank == 0


def world() -> World:
    """The current torch.distributed group (World() when none is initialised)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return World()
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    return World(dist.get_rank(), dist.get_world_size(), device)


TIMEOUT_ENV = "COURSE_DIST_TIMEOUT_MINUTES"
DEFAULT_TIMEOUT_MINUTES = 180  # process 0's download and its unsharded work at ImageNet scale, with room to spare


def group_timeout() -> timedelta:
    """How long a process waits for the others at a collective: COURSE_DIST_TIMEOUT_MINUTES, default 180."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        minutes = float(text) if text else DEFAULT_TIMEOUT_MINUTES
    except ValueError:
        minutes = -1.0
    if not minutes > 0:  # also NaN
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: give how many minutes a process may wait for the others "
                         f"(e.g. {DEFAULT_TIMEOUT_MINUTES}), or unset it.")
    return timedelta(minutes=minutes)


def process_device() -> torch.device:
    """This process's device under torchrun: cuda:LOCAL_RANK on a GPU machine, the CPU when there is none or when
    COURSE_DEVICE=cpu. An explicit GPU (COURSE_DEVICE=cuda:1) would put every process on one GPU: refused."""
    from helpers.course import pick_device

    device = pick_device()
    if device.type != "cuda":
        return torch.device("cpu")
    if device.index is not None:
        raise RuntimeError(f"COURSE_DEVICE={os.environ.get('COURSE_DEVICE')!r} under torchrun would put every process "
                           "on one GPU: set COURSE_DEVICE=cuda (each process then takes cuda:LOCAL_RANK) or unset it.")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= torch.cuda.device_count():
        raise RuntimeError(f"LOCAL_RANK {local} but this machine has {torch.cuda.device_count()} GPU(s): "
                           "give torchrun --nproc_per_node at most the number of GPUs.")
    return torch.device("cuda", local)


def init_from_environment() -> bool:
    """Start the process group when launched by torchrun (WORLD_SIZE > 1 in the environment) and none is running:
    nccl on cuda:LOCAL_RANK when CUDA is used, else gloo on the CPU (process_device), with group_timeout().
    Returns True when it started one."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    device, timeout = process_device(), group_timeout()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # models.load's "cuda" (pick_device) is then this process's GPU
        dist.init_process_group("nccl", timeout=timeout)
    else:  # no GPU, or COURSE_DEVICE=cpu: the models load on the CPU (pick_device) and gloo sums CPU tensors
        dist.init_process_group("gloo", timeout=timeout)
    return True


def main_first(w: World, load, what: str, others: bool = True):
    """load() on process 0 first (a download or an extraction: one process writes the folder), then on the others
    once it is done (others=False: on process 0 only, the others wait for it). An error on process 0 is raised on
    every process, with its message (never a silent exit).

    Returns load()'s value on this process (None where it did not run). On one process: load()."""
    if not w.distributed:
        return load()
    error, value = None, None
    if w.main:
        try:
            value = load()
        except Exception as caught:  # noqa: BLE001 (sent to the others, then raised again here)
            error = caught
    message = share_from_main(None if error is None else str(error), w)
    if error is not None:
        raise error
    if message is not None:
        raise ReportError(f"{what} failed on process 0: {message}")  # printed on this process too (bundle.main)
    if w.main:
        return value
    return load() if others else None


def n_batches(n_images: int, batch_size: int) -> int:
    """The minibatches one process forms from n images: full ones, and a last one of at least 4 (gram_cache.MIN_BATCH)."""
    from helpers.gram_cache import MIN_BATCH

    return n_images // batch_size + (n_images % batch_size >= MIN_BATCH)


def shard_indices(n_images: int, batch_size: int, rank: int, size: int, offset: int = 0) -> list:
    """Positions (into the image set) of the images in this process's minibatches, in order.

    Batch k (images k*batch_size ... , as one process cuts them) goes to the process with rank (offset + k) mod size.
    Only the last batch may be short, and it stays last, so the shard cut into batches of batch_size gives exactly
    these minibatches. offset: the batches of the image sets before this one, so the load stays even."""
    out = []
    for k in range(n_batches(n_images, batch_size)):
        if (offset + k) % size == rank:
            out.extend(range(k * batch_size, min((k + 1) * batch_size, n_images)))
    return out


def shards(image_sets: list, batch_size: int, w: World) -> list:
    """This process's shard of each image set (an ImageSet, or None when it got no batch of it)."""
    from helpers.data import subset

    if not w.distributed:
        return list(image_sets)
    out, offset = [], 0
    for images in image_sets:
        idx = shard_indices(len(images), batch_size, w.rank, w.size, offset)
        out.append(subset(images, idx) if idx else None)
        offset += n_batches(len(images), batch_size)
    return out


def reduce_state(accumulator, info: dict | None, w: World) -> tuple:
    """(MinibatchCKA, meta) summed over every process of the group; (accumulator, info) as they are on one process.

    A process whose shard held no batch passes (None, None): it learns the layer names and meta from the first
    process that has them and joins with zero sums. Lists under info['summed'] (e.g. the audit's top-PC share sums)
    are summed too. Every process gets the same sums back.
    """
    import torch.distributed as dist

    from helpers.minibatch_cka import MinibatchCKA

    if not w.distributed:
        return accumulator, info
    own = info
    mine = None if accumulator is None else (accumulator.names_a, None if accumulator.within else accumulator.names_b, info)
    everyone = [None] * w.size
    dist.all_gather_object(everyone, mine)
    found = [x for x in everyone if x is not None]
    if not found:
        raise RuntimeError("No process had a batch of these images: too few images for the batch size.")
    names_a, names_b, info = found[0]
    info = dict(info)
    if accumulator is None:
        accumulator = MinibatchCKA(names_a, names_b).zero_sums(w.device)
    accumulator.all_reduce()
    if "summed" in info:  # a process without a batch adds zeros
        info["summed"] = {key: sum_over_processes(own["summed"][key] if own is not None else [0.0] * len(values), w)
                          for key, values in info["summed"].items()}
    return accumulator, info


def sum_over_processes(values: list, w: World) -> list:
    """A list of numbers summed over the group (a process that saw none of it passes zeros of the same length)."""
    import torch.distributed as dist

    tensor = torch.tensor(values, dtype=torch.float64, device=w.device)
    dist.all_reduce(tensor)
    return tensor.cpu().tolist()


def gather_batches(mine: list, w: World) -> list | None:
    """Per-batch results of the first image set (offset 0 in shards()) from every process, on process 0 in the order
    one process forms the batches: batch k is process (k mod N)'s (k // N)-th. None on the other processes; `mine`
    itself on one process. mine: this process's list, one item per batch of its shard, in order."""
    import torch.distributed as dist

    if not w.distributed:
        return mine
    everyone = [None] * w.size if w.main else None
    dist.gather_object(mine, everyone, dst=0)
    if not w.main:
        return None
    total = sum(len(x) for x in everyone)
    return [everyone[k % w.size][k // w.size] for k in range(total)]


def share_from_main(value, w: World):
    """Process 0's value (any picklable object) on every process; the value itself on one process."""
    import torch.distributed as dist

    if not w.distributed:
        return value
    box = [value if w.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(w: World) -> None:
    """Wait for every process (no-op on one)."""
    import torch.distributed as dist

    if w.distributed:
        dist.barrier()
