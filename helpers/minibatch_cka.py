"""Streaming minibatch CKA for whole layer-by-layer matrices (Nguyen et al. 2021).

For k minibatches of m_1, ..., m_k examples, with K_i, L_i the linear Grams of batch i and
U(.) the U-centering of the unbiased HSIC estimator (HSIC_1(K, L) = <U(K), U(L)> / (m(m-3))):

    CKA_mb(A, B) = sum_i <U(K_i), U(L_i)> / sqrt( sum_i <U(K_i), U(K_i)> * sum_i <U(L_i), U(L_i)> )

that is, each batch's HSIC_1 weighted by m_i(m_i - 3). With equal batches the weights cancel
and this is Nguyen et al.'s formula (sum of HSIC_1 over batches). With unequal batches (260
images in batches of 256 leave a last batch of 4) an unweighted sum would let the 4 images count
as much as the 256; weighting by m(m-3), which grows like the number of example pairs, makes a
small batch count little, as its noisy estimate deserves. It is also exactly the cosine between
the stacked U-centred Grams of A and B, so Cauchy-Schwarz bounds it by 1 (it can be negative).

Per batch, each layer's Gram is formed once and U-centered (in float64); stacking them as rows
of G (one row per layer, m*m columns) gives every pair's sum in one matrix product G_a @ G_b^T,
in float64, the same arithmetic as the self terms (formed a block of Gram rows at a time, so that
the float64 numbers never leave the processor's cache: hsic_sums). Only these sums are kept, never the
activations, so memory does not grow with the number of images, and two accumulators that saw
different images can be merged exactly (or summed across processes/GPUs).

    acc = MinibatchCKA(["block0", "block1"], ["layer1", "layer2"])
    for images in loader:
        acc.update({"block0": f0, "block1": f1}, {"layer1": g1, "layer2": g2})
    result = acc.result()      # CKAMatrix: rows = A's layers, columns = B's layers
"""

from __future__ import annotations

import difflib
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from helpers.guards import check_int

ESTIMATOR = "minibatch linear CKA, unbiased HSIC, batches weighted by m(m-3) (Nguyen et al. 2021)"


# --------------------------------------------------------------------------- the result


@dataclass
class CKAMatrix:
    """A labelled CKA matrix: values[i, j] compares row layer i (model A) with column layer j (model B)."""

    values: np.ndarray
    rows: list
    cols: list
    estimator: str = ESTIMATOR
    n_examples: int = 0
    n_batches: int = 0
    meta: dict = field(default_factory=dict)  # free-form: model names, token policy, images, ...

    def __post_init__(self):
        self.values = np.asarray(self.values, dtype=np.float64)
        # counts that the title and the saved file report: -1 images or 2.5 batches would be printed as facts
        self.n_examples = check_int(self.n_examples, "n_examples", 0, "It counts the images the matrix was computed on.")
        self.n_batches = check_int(self.n_batches, "n_batches", 0, "It counts the minibatches the matrix was computed on.")
        if self.values.shape != (len(self.rows), len(self.cols)):
            raise ValueError(f"values have shape {self.values.shape} but there are {len(self.rows)} row and {len(self.cols)} column names.")
        for names, what in ((self.rows, "row"), (self.cols, "column")):
            repeated = sorted({str(n) for n in names if list(names).count(n) > 1})
            if repeated:  # cell() could not tell them apart
                raise ValueError(f"{what} name(s) {repeated} appear twice: give each layer one name.")
        if not np.isfinite(self.values).all():  # argmax and max read NaN as the best match: a silent wrong pick
            raise ValueError(f"values hold {int((~np.isfinite(self.values)).sum())} NaN or inf entries: a CKA matrix has a "
                             "number for every pair of layers. Recompute the missing pairs, or leave those layers out.")

    def __repr__(self):
        return (f"CKAMatrix({len(self.rows)} x {len(self.cols)}, {self.estimator}, "
                f"{self.n_examples} examples in {self.n_batches} batches)")

    def cell(self, row: str, col: str) -> float:
        """The CKA value of one named pair (row: a layer of model A, col: a layer of model B)."""
        return float(self.values[_index_of(row, self.rows, "row"), _index_of(col, self.cols, "column")])

    def save(self, path) -> Path:
        """Write values and labels to an .npz file (metadata stored as JSON inside); returns the path written.

        ".npz" is added when `path` does not end with it (numpy would add it anyway).
        """
        path = Path(path)
        if path.is_dir():  # "results/" would have become results.npz beside the folder
            raise IsADirectoryError(f"{path} is a folder: give a file name in it, e.g. {path / 'cka.npz'}.")
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        path.parent.mkdir(parents=True, exist_ok=True)
        info = dict(rows=self.rows, cols=self.cols, estimator=self.estimator,
                    n_examples=self.n_examples, n_batches=self.n_batches, meta=self.meta)
        np.savez(path, values=self.values, info=np.array(json.dumps(info)))
        return path

    @classmethod
    def load(cls, path) -> "CKAMatrix":
        """Read a matrix written by `save` (never unpickles anything)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No file {path}. CKAMatrix.load reads the .npz files written by CKAMatrix.save.")
        not_ours = (f"{path} is not a CKA matrix written by CKAMatrix.save (an .npz with 'values' and 'info'). "
                    "Recompute it, or check the path.")
        try:
            f = np.load(path, allow_pickle=False)
        except ValueError:  # pickled content: refused, never loaded
            raise ValueError(not_ours) from None
        except (OSError, EOFError, zipfile.BadZipFile):
            raise ValueError(f"{path} is corrupt or truncated: it cannot be read as a CKA matrix. Recompute it.") from None
        if not isinstance(f, np.lib.npyio.NpzFile):  # a plain .npy array
            raise ValueError(not_ours)
        with f:
            if {"values", "info"} - set(f.files):
                raise ValueError(not_ours)
            try:
                info, values = json.loads(str(f["info"])), f["values"]
            except (OSError, EOFError, zipfile.BadZipFile, json.JSONDecodeError):
                raise ValueError(f"{path} is corrupt or truncated: it cannot be read as a CKA matrix. Recompute it.") from None
        try:
            return cls(values=values, **info)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path} does not hold a valid CKA matrix ({error}). Recompute it.") from None


def _index_of(name, names: list, what: str) -> int:
    if name in names:
        return names.index(name)
    close = difflib.get_close_matches(str(name), [str(n) for n in names], n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise KeyError(f"No {what} named {name!r}.{hint} The {what}s are: {names}.")


# --------------------------------------------------------------------------- per-batch math


def flatten_examples(features: torch.Tensor, name: str) -> torch.Tensor:
    """(m, ...) activations -> (m, p) rows in float32 (or float64)."""
    if not isinstance(features, torch.Tensor):
        features = torch.as_tensor(np.asarray(features))
    if features.ndim < 2:
        raise ValueError(f"Layer '{name}': expected (examples, features...) but got shape {tuple(features.shape)}.")
    X = features.detach().reshape(features.shape[0], -1)
    if not X.is_floating_point() or X.dtype in (torch.float16, torch.bfloat16):
        X = X.float()  # Grams of half-precision features lose too many digits
    return X


def check_finite(self_terms: torch.Tensor, names, which: str = "") -> None:
    """A NaN or inf anywhere in a layer's features makes its Gram, and so its self term <U(K), U(K)>,
    non-finite: checking the (L,) self terms finds every such layer at no extra cost."""
    bad = ~torch.isfinite(self_terms)
    if bad.any():
        layers = [n for n, b in zip(names, bad.tolist()) if b]
        raise ValueError(f"{which}Layer(s) {layers} produced NaN or inf values in this batch. "
                         "Check the model and its inputs (e.g. a mixed-precision overflow).")


# Relative size below which a feature's half range counts as rounding residue (the feature as constant):
# 8 float32 epsilons (9.5e-7), about 4 times the residue that centering identical float32 rows leaves
# (measured: 2.3-2.8e-7; half the range is never more than that). Not larger: features varying by +-1 on
# an offset of 1e6 (16 float32 steps) are real variation and must be kept.
CONSTANT_TOLERANCE = 8 * torch.finfo(torch.float32).eps


def centered_gram(X: torch.Tensor) -> torch.Tensor:
    """(m, p) features -> (m, m) linear Gram of the column-centered features.

    Centering first is what keeps float32 exact enough: HSIC_1 ignores a shared offset in
    exact arithmetic, but with a large offset (say mean 50) the Gram's entries are huge and
    the U-centering cancels away every significant digit. The mean need not be exact: the
    U-centering that follows (in float64) removes any offset that is left, so the float32 mean
    is enough. (Its rounding, a few float32 steps of the offset, is far below the variation of any
    feature that float32 can still resolve: features near 1e6 varying by +-1 keep an offset of
    0.04 of that variation on average, 0.2 at most (measured over 256 images), which costs the Gram
    no significant digit.)

    Features that are the same for every example (a ViT's CLS token before attention has touched
    it) keep only rounding residue, about 1e-7 of their size, and that residue would pass for a
    tiny real variance and give CKA values that mean nothing. So each feature (column) whose
    values all lie within CONSTANT_TOLERANCE of its own largest value of one number (half its
    range) is set to exactly zero: a layer of such features gets a zero Gram, and the accumulator
    reports it as having zero variance, while a constant feature beside varying ones cannot hide
    them. (No host sync: no `if`.)

    Cost: three column reductions, one pass that centers and masks, and the product (symmetric_gram,
    about 0.65 of a full X X^T); measured by benchmarks/bench_accumulator.py.
    """
    high, low = X.amax(0), X.amin(0)  # (p,) each; one read of X each
    scale = torch.maximum(high.abs(), low.abs())  # each feature's size, against which rounding residue is judged
    varies = (high - low) > 2 * CONSTANT_TOLERANCE * scale  # (p,)
    keep = varies.to(X.dtype)
    centered = (X - X.mean(0)).mul_(keep)  # (an addcmul with broadcast rows was 4x slower on the CPU)
    return symmetric_gram(centered)


# Rows per block of symmetric_gram. With m = 256, 4 blocks: 10 of the 16 block products, measured at
# 0.62-0.69 of a full X @ X.T on one thread for 768 to 8,192 features (64-row blocks keep BLAS efficient).
GRAM_BLOCK = 64


def symmetric_gram(X: torch.Tensor) -> torch.Tensor:
    """(m, p) -> (m, m) X X^T, forming only the row blocks on and above the diagonal (a blocked SYRK).

    A Gram is symmetric, but X @ X.T computes both triangles. Here each block of GRAM_BLOCK rows is
    multiplied by the rows from itself on, into the upper part of the result, and the lower part is
    copied from it. For m <= GRAM_BLOCK it is one product, and
    off the CPU too: the blocks were measured on CPUs only, and on a GPU the Grams are a small share.
    """
    m = X.shape[0]
    if m <= GRAM_BLOCK or X.device.type != "cpu" or (X.requires_grad and torch.is_grad_enabled()):
        return X @ X.T  # (out= below records no gradients)
    G = X.new_empty(m, m)
    for s in range(0, m, GRAM_BLOCK):
        e = s + GRAM_BLOCK
        torch.mm(X[s:e], X[s:].T, out=G[s:e, s:])
        G[s:e, :s] = G[:s, s:e].T
    return G


def u_center_means(grams: torch.Tensor) -> torch.Tensor:
    """(L, m, m) symmetric Grams -> (L, m) float64: what U-centering subtracts from each row and column.

    U(K)_ij = K_ij - mu_i - mu_j off the diagonal, 0 on it, with mu_i = S_i / (m - 2) - S / (2 (m-1)(m-2)),
    S_i the row sums of K without its diagonal and S their total. The sums are formed in the Grams'
    own precision: a rounding error in mu adds delta_i + delta_j to the entries of U(K), and that
    pattern is orthogonal to every U-centred matrix (their rows sum to zero), so it changes no HSIC
    but at second order. (A float64 copy of every Gram just for these sums would cost more than the
    whole U-centering.)
    """
    m = grams.shape[-1]
    sums = (grams.sum(1) - grams.diagonal(dim1=1, dim2=2)).to(torch.float64)  # (L, m): symmetric, so row sums
    means = sums / (m - 2)
    return means - means.sum(1, keepdim=True) / (2 * (m - 1))


def u_center_rows(grams: torch.Tensor, means: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows start:stop of every U-centered Gram, in float64: (L, m, m) Grams, (L, m) u_center_means
    -> (L, (stop - start) * m). Row l dotted with row l' of another, summed over all row ranges, is <U(K), U(L)>."""
    L, m, _ = grams.shape
    U = grams[:, start:stop] - means[:, start:stop, None]  # float64: the Grams are promoted exactly
    U -= means[:, None, :]
    U.diagonal(offset=start, dim1=1, dim2=2).zero_()  # entries (i, i) of these rows
    return U.reshape(L, (stop - start) * m)


def u_center_stack(grams: torch.Tensor) -> torch.Tensor:
    """(L, m, m) Grams -> (L, m*m) float64: each U-centered and flattened into one row.

    Row l of the result dotted with row l' of another, divided by m(m-3), is HSIC_1.
    Done in float64: it costs O(L m^2), nothing next to forming the Grams, and keeps the
    pair products below exact to float64 rounding on every machine. (MinibatchCKA forms the
    same rows a few at a time: see u_center_rows.)
    """
    return u_center_rows(grams, u_center_means(grams), 0, grams.shape[-1])


# Float64 numbers per block of U-centred rows in MinibatchCKA.update_grams: 1 MiB, so that each block is
# formed, multiplied and dropped while it is still in the processor's cache. The whole (L, m*m) float64
# stack (35 MiB for 68 layers at m = 256) cost more in fresh memory alone than the products.
U_BLOCK_NUMBERS = 2**17


def hsic_sums(grams_a: torch.Tensor, grams_b: torch.Tensor | None = None):
    """One batch's sums for every pair: (La, m, m) Grams of A, (Lb, m, m) of B (None: A with itself)
    -> cross (La, Lb), self_a (La,), self_b (Lb,), float64, with cross[i, j] = <U(K_i), U(L_j)> = m(m-3) HSIC_1.

    All pairs come from one matrix product per block of U-centred rows (u_center_rows), in float64,
    the same arithmetic for cross and self terms; A with itself takes its self terms from the diagonal.
    """
    La, m, _ = grams_a.shape
    within = grams_b is None
    means_a = u_center_means(grams_a)
    means_b = means_a if within else u_center_means(grams_b)
    Lb = La if within else grams_b.shape[0]
    cross = torch.zeros(La, Lb, dtype=torch.float64, device=grams_a.device)
    self_a = torch.zeros(La, dtype=torch.float64, device=grams_a.device)
    self_b = torch.zeros(Lb, dtype=torch.float64, device=grams_a.device)
    step = max(1, U_BLOCK_NUMBERS // ((La + (0 if within else Lb)) * m))  # rows per block
    for start in range(0, m, step):
        U_a = u_center_rows(grams_a, means_a, start, min(m, start + step))
        U_b = U_a if within else u_center_rows(grams_b, means_b, start, min(m, start + step))
        cross += U_a @ U_b.T
        if not within:
            self_a += (U_a * U_a).sum(1)
            self_b += (U_b * U_b).sum(1)
    if within:  # the same numbers as the cross terms, so the diagonal of the CKA matrix is exactly 1
        self_a = self_b = cross.diagonal().clone()
    return cross, self_a, self_b


# --------------------------------------------------------------------------- the accumulator


def _check_names(names: Sequence[str], which: str) -> list:
    if isinstance(names, str):  # "blocks" became the layers 'b', 'l', 'o', ...
        raise TypeError(f"{which}: give a list of layer names, e.g. [{names!r}], not one string.")
    names = list(names)
    if not names:
        raise ValueError(f"{which}: give at least one layer name.")
    seen = set()
    for n in names:
        if n in seen:
            raise ValueError(f"{which}: layer name '{n}' is given twice. Each layer must appear once.")
        seen.add(n)
    return names


class MinibatchCKA:
    """Accumulates minibatch CKA for every (layer of A, layer of B) pair.

    names_a: layer names of model A (matrix rows).
    names_b: layer names of model B (matrix columns); None compares A's layers with each other,
             forming each Gram once.
    """

    def __init__(self, names_a: Sequence[str], names_b: Sequence[str] | None = None):
        self.names_a = _check_names(names_a, "names_a")
        self.within = names_b is None
        self.names_b = self.names_a if self.within else _check_names(names_b, "names_b")
        self.cross = None    # (La, Lb) float64: sum over batches of <U(K_a), U(L_b)> = m(m-3) HSIC_1(K_a, L_b)
        self.self_a = None   # (La,) float64: sum of <U(K_a), U(K_a)>
        self.self_b = None   # (Lb,) float64
        self.n_examples = 0
        self.n_batches = 0

    # -- feeding batches

    def _grams(self, features, names, which) -> torch.Tensor:
        """Features for one batch (dict name -> tensor, or a list in `names` order) -> (L, m, m) Grams."""
        if isinstance(features, Mapping):
            missing = [n for n in names if n not in features]
            if missing:
                raise KeyError(f"{which}: no features for layer(s) {missing}; got {list(features)}. Pass one tensor per layer name.")
            features = [features[n] for n in names]
        elif len(features) != len(names):
            raise ValueError(f"{which}: got {len(features)} feature tensors for {len(names)} layer names.")
        rows = [flatten_examples(f, n) for f, n in zip(features, names)]
        sizes = {r.shape[0] for r in rows}
        if len(sizes) > 1:
            raise ValueError(f"{which}: layers have different numbers of examples in this batch ({sorted(sizes)}). Every layer must see the same images.")
        dtype = torch.promote_types(rows[0].dtype, torch.float32)
        return torch.stack([centered_gram(r.to(dtype)) for r in rows])

    def update(self, features_a, features_b=None) -> None:
        """Add one minibatch.

        features_a: dict layer name -> (m, ...) activations of model A (or a list in names_a order).
        features_b: the same for model B, for the same m images in the same order;
                    leave it None when comparing A with itself.
        """
        grams_b = None if features_b is None else self._grams(features_b, self.names_b, "model B")
        self.update_grams(self._grams(features_a, self.names_a, "model A"), grams_b)

    def update_grams(self, grams_a: torch.Tensor, grams_b: torch.Tensor | None = None) -> None:
        """Add one minibatch given each layer's Gram of column-centered features (see `centered_gram`).

        grams_a: (La, m, m), in names_a order; grams_b: (Lb, m, m) or None when comparing A with itself.
        Use this when Grams are formed as activations appear (helpers.compare), so that no
        activations need to be kept.
        """
        m = grams_a.shape[-1]
        if m < 4:
            raise ValueError(f"A batch of {m} examples is too small: unbiased HSIC needs at least 4 per batch (use 64 or more for a useful estimate).")
        if grams_a.shape[0] != len(self.names_a):
            raise ValueError(f"Got {grams_a.shape[0]} Grams for model A's {len(self.names_a)} layers.")
        if not self.within:
            if grams_b is None:
                raise ValueError("This accumulator compares two models: pass features_b for the same images.")
            if grams_b.shape[-1] != m:
                raise ValueError(f"Model A saw {m} examples in this batch, model B {grams_b.shape[-1]}. Feed both the same images.")
            if grams_b.shape[0] != len(self.names_b):
                raise ValueError(f"Got {grams_b.shape[0]} Grams for model B's {len(self.names_b)} layers.")
            grams_b = grams_b.to(grams_a.device)
        elif grams_b is not None:
            raise ValueError("This accumulator compares model A with itself (names_b=None); do not pass features_b.")
        cross, self_a, self_b = hsic_sums(grams_a, None if self.within else grams_b)
        check_finite(self_a, self.names_a, "" if self.within else "Model A: ")
        if not self.within:
            check_finite(self_b, self.names_b, "Model B: ")
        self._add(cross, self_a, self_b, m, 1)

    def _add(self, cross, self_a, self_b, n_examples, n_batches):
        if self.cross is None:
            self.cross, self.self_a, self.self_b = cross.clone(), self_a.clone(), self_b.clone()
        else:
            self.cross += cross.to(self.cross.device)
            self.self_a += self_a.to(self.self_a.device)
            self.self_b += self_b.to(self.self_b.device)
        self.n_examples += n_examples
        self.n_batches += n_batches

    # -- combining accumulators

    def merge(self, other: "MinibatchCKA") -> "MinibatchCKA":
        """Add the sums of another accumulator that saw *different* images. Returns self."""
        if not isinstance(other, MinibatchCKA):
            raise TypeError(f"merge takes another MinibatchCKA, got {type(other).__name__}.")
        if other is self:  # its batches would count twice
            raise ValueError("An accumulator cannot merge itself: merge one that saw other images.")
        if (other.names_a, other.names_b, other.within) != (self.names_a, self.names_b, self.within):
            raise ValueError("Can only merge accumulators over the same layer names.")
        if other.cross is not None:
            self._add(other.cross, other.self_a, other.self_b, other.n_examples, other.n_batches)
        return self

    def zero_sums(self, device="cpu") -> "MinibatchCKA":
        """Set every sum to zero, as if batches had been seen that add nothing. Returns self.

        For a process whose shard of the images held no batch: it still has to join all_reduce."""
        if self.cross is not None:
            raise RuntimeError("zero_sums is for an accumulator that has seen no batch; this one has sums already.")
        zeros = lambda *shape: torch.zeros(shape, dtype=torch.float64, device=device)  # noqa: E731
        self.cross, self.self_a, self.self_b = zeros(len(self.names_a), len(self.names_b)), zeros(len(self.names_a)), zeros(len(self.names_b))
        return self

    def all_reduce(self, group=None) -> "MinibatchCKA":
        """Sum the state over all processes of torch.distributed (each saw its own images)."""
        import torch.distributed as dist

        if self.cross is None:
            raise RuntimeError("all_reduce before any update: every process must see at least one batch.")
        packed = torch.cat([self.cross.reshape(-1), self.self_a, self.self_b,
                            torch.tensor([self.n_examples, self.n_batches], dtype=torch.float64, device=self.cross.device)])
        dist.all_reduce(packed, op=dist.ReduceOp.SUM, group=group)
        La, Lb = len(self.names_a), len(self.names_b)
        self.cross = packed[: La * Lb].reshape(La, Lb)
        self.self_a = packed[La * Lb: La * Lb + La]
        self.self_b = packed[La * Lb + La: La * Lb + La + Lb]
        self.n_examples, self.n_batches = int(packed[-2]), int(packed[-1])
        return self

    # -- the answer

    def result(self, meta: dict | None = None) -> CKAMatrix:
        """The CKA matrix so far: rows = A's layers, columns = B's layers."""
        if self.cross is None:
            raise RuntimeError("No batches yet: call update() with at least one batch of features first.")
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict (e.g. {{'images': 'shapes'}}), got {type(meta).__name__}.")
        for sums, names in ((self.self_a, self.names_a), (self.self_b, self.names_b)):
            dead = [n for n, s in zip(names, sums.tolist()) if s <= 0]
            if dead:
                raise ValueError(f"Layer(s) {dead} have zero variance over the images seen (every image gives the same "
                                 "representation), so CKA is undefined. Drop them or check what they compute.")
        values = self.cross / torch.sqrt(self.self_a[:, None] * self.self_b[None, :])
        return CKAMatrix(values.cpu().numpy(), list(self.names_a), list(self.names_b), ESTIMATOR,
                         self.n_examples, self.n_batches, dict(meta or {}))
