"""Closed-form linear probes: how much of the label a representation holds linearly (F8, F9).

    acc = few_shot_accuracy(pool_X, pool_y, test_X, test_y, shots=10, repeats=5)   # (repeats,) or (repeats, T)
    hit = few_shot_correct(pool_X, pool_y, test_X, test_y, shots=10, repeats=5)    # (repeats, [T,] k) per test image
    fit = ridge_probe(train_X, train_y, val_X, val_y, test_X, test_y)             # one probe, lambda on val

The paper (Raghu et al. 2021, Fig. 11, 13) fits regularised least squares from features to
{-1, +1} one-hot targets, W = (Phi^T Phi + lambda I)^-1 Phi^T T, and tunes lambda on held-out
training images. Here one SVD of the (centred) training features, Phi = U S V^T, gives
W(lambda) = V diag(s / (s^2 + lambda)) U^T T for every lambda at the cost of a matrix product,
in the primal (p < n) and the dual (p > n) regime alike. lambda is given relative to the mean
squared singular value, so one grid fits features of any scale. A bias is fitted by centring
(features and targets by their training means).

Every function accepts a batch of representations at once: features (n, p) for one, or
(n, T, p) for T of them (e.g. every token of a layer, each probed on its own), so per-token
probes are one batched SVD. Accuracies come back with shape () or (T,).
"""

from __future__ import annotations

import numpy as np
import torch

from helpers.guards import check_int

LAMBDAS = tuple(10.0 ** k for k in range(-5, 4))  # relative to mean(s^2): 1e-5 ... 1e3


def pm1_targets(labels, num_classes: int) -> torch.Tensor:
    """(n,) integer labels -> (n, C) float64 targets: +1 for the class, -1 elsewhere."""
    labels = torch.as_tensor(np.asarray(labels))
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must be class indices 0..{num_classes - 1} for num_classes={num_classes}; got values from "
                         f"{int(labels.min())} to {int(labels.max())}.")
    targets = -torch.ones(len(labels), num_classes, dtype=torch.float64)
    targets[torch.arange(len(labels)), labels.long()] = 1.0
    return targets


TOKEN_CHUNK_MIB = 256  # float64 test features probed at once: representations are fitted this many MiB at a time


def _features(X, name: str) -> torch.Tensor:
    """(n, p) or (n, T, p) -> (T, n, p) view in X's dtype (T = 1 for a single representation).

    No float64 copy here: _ridge_fit converts a chunk of representations at a time (a ViT-B layer of
    2,000 test images is 1.2 GB in float32, 2.4 GB in float64, and its centred copy as much again).
    """
    X = torch.as_tensor(np.asarray(X)) if not isinstance(X, torch.Tensor) else X.detach().cpu()
    if X.ndim not in (2, 3):
        raise ValueError(f"{name} must be (n, p) or (n, T, p) features, one row per image; got shape {tuple(X.shape)}.")
    # the sum is finite when every value is (one read, no mask); only a non-finite sum, or finite values whose sum
    # overflows, looks at each value: the few-shot draws check the same test features once per draw
    if not torch.isfinite(X.sum()) and not torch.isfinite(X).all():
        raise ValueError(f"{name} contains {int((~torch.isfinite(X)).sum())} NaN or inf value(s). Check the layer's output.")
    if not X.is_floating_point():
        X = X.to(torch.float64)
    return X[None] if X.ndim == 2 else X.transpose(0, 1)


def _labels(y, n: int, name: str) -> torch.Tensor:
    array = np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer class labels (indices 0..C-1), got {array.dtype} values. For class names, "
                         "map them once for all splits: names, y = np.unique(all_labels, return_inverse=True).")
    y = torch.as_tensor(array)
    if y.ndim != 1 or y.dtype.is_floating_point or y.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D array of integer class labels; got {y.dtype} of shape {tuple(y.shape)}.")
    if len(y) != n:
        raise ValueError(f"{name} has {len(y)} labels for {n} feature rows: give one label per image, in the same order.")
    if (y < 0).any():
        raise ValueError(f"{name} has negative labels; use class indices 0..C-1.")
    return y.long()


def _ridge_fit(train_X, train_y, val_X, val_y, test_X, test_y, lambdas, num_classes, every_lambda: bool = True):
    """Every lambda's probe: (single, val accuracy (R, L), test correctness, lambdas (L,), choice (R,)).

    The shared work of ridge_probe and ridge_probe_correct (their docstrings); `choice` is the index
    of the largest lambda among those tied for the best validation accuracy. Test correctness is
    (R, k, L) bool for every lambda, or with every_lambda=False (R, k) for the chosen one only,
    which scores the test images with C instead of L * C columns (the same probes, several times cheaper).
    """
    Xtr, Xva, Xte = _features(train_X, "train_X"), _features(val_X, "val_X"), _features(test_X, "test_X")
    single = np.asarray(train_X).ndim == 2 if not isinstance(train_X, torch.Tensor) else train_X.ndim == 2
    if not (Xtr.shape[0] == Xva.shape[0] == Xte.shape[0] and Xtr.shape[2] == Xva.shape[2] == Xte.shape[2]):
        raise ValueError(f"train, val and test features must share their trailing shape; got "
                         f"{tuple(Xtr.shape[:1] + Xtr.shape[2:])}, {tuple(Xva.shape[:1] + Xva.shape[2:])}, "
                         f"{tuple(Xte.shape[:1] + Xte.shape[2:])} (representations, features).")
    ytr, yva, yte = _labels(train_y, Xtr.shape[1], "train_y"), _labels(val_y, Xva.shape[1], "val_y"), _labels(test_y, Xte.shape[1], "test_y")
    classes = int(num_classes or 1 + max(int(ytr.max()), int(yva.max()), int(yte.max())))
    if len(torch.unique(ytr)) < 2:
        raise ValueError("The training images hold a single class: a probe needs at least two.")
    if Xtr.shape[1] < 2 or Xva.shape[1] < 1 or Xte.shape[1] < 1:
        raise ValueError(f"Too few images: {Xtr.shape[1]} train, {Xva.shape[1]} validation, {Xte.shape[1]} test "
                         "(need at least 2 train and 1 of each other).")
    lambdas = torch.as_tensor(np.asarray(lambdas, dtype=np.float64))
    if lambdas.ndim != 1 or len(lambdas) == 0 or (lambdas <= 0).any():
        raise ValueError("lambdas must be a non-empty 1-D sequence of positive numbers.")

    # each representation is probed on its own, so a chunk of them at a time gives the same numbers
    # with a float64 copy of only that chunk (the largest split sets the chunk)
    step = max(1, TOKEN_CHUNK_MIB * 2 ** 20 // (8 * Xtr.shape[2] * max(Xtr.shape[1], Xva.shape[1], Xte.shape[1])))
    parts = [_ridge_fit_chunk(*(X[start:start + step].to(torch.float64) for X in (Xtr, Xva, Xte)), ytr, yva, yte,
                              lambdas, classes, every_lambda) for start in range(0, Xtr.shape[0], step)]
    val, test_correct, choice = (torch.cat(results) for results in zip(*parts))
    return single, val, test_correct, lambdas, choice


def _ridge_fit_chunk(Xtr, Xva, Xte, ytr, yva, yte, lambdas, classes, every_lambda):
    """_ridge_fit for (R, n, p) float64 features: (val accuracy (R, L), test correctness, choice (R,))."""
    T = pm1_targets(ytr, classes)
    mean_x, mean_t = Xtr.mean(1, keepdim=True), T.mean(0)
    U, s, Vh = torch.linalg.svd(Xtr - mean_x, full_matrices=False)      # (R, n, k), (R, k), (R, k, p)
    UtT = U.transpose(1, 2) @ (T - mean_t)                                 # (R, k, C)
    scale = (s ** 2).mean(1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)  # (R, 1)
    shrink = s[:, None] / (s[:, None] ** 2 + lambdas[None, :, None] * scale[:, None])  # (R, L, k)

    # every lambda's weights are W = V (shrink * U^T T), (R, L, p, C); they are applied as (X V) (shrink * U^T T),
    # so that nothing of size p x C is formed per lambda (k <= n is small in few-shot probes)
    coefficients = shrink[..., None] * UtT[:, None]                         # (R, L, k, C)
    R, L, k, C = coefficients.shape
    side_by_side = coefficients.permute(0, 2, 1, 3).reshape(R, k, L * C)   # one matrix product serves every lambda

    def correct(X, y):
        """(R, m, p) -> (R, m, L) whether every lambda's probe gets each image right."""
        scores = (((X - mean_x) @ Vh.transpose(1, 2)) @ side_by_side).reshape(R, -1, L, C)  # (R, m, L, C)
        return scores.argmax(-1) == y[:, None]

    val = correct(Xva, yva).double().mean(1)
    # the largest lambda among those tied for the best validation accuracy
    best = (val == val.max(1, keepdim=True).values).double() * torch.arange(1, len(lambdas) + 1)
    choice = best.argmax(1)
    if every_lambda:
        return val, correct(Xte, yte), choice
    chosen = coefficients[torch.arange(R), choice]                         # (R, k, C): the chosen lambda's only
    # one probe per representation: its weights W = V chosen, (R, p, C), are formed once, and the many test images
    # are scored as X W - mean W (p * C per image, instead of p * k + k * C through (X - mean) V, and no centred copy)
    weights = Vh.transpose(1, 2) @ chosen                                  # (R, p, C)
    scores = Xte @ weights - mean_x @ weights                              # (R, m, C)
    return val, scores.argmax(-1) == yte, choice


def ridge_probe(train_X, train_y, val_X, val_y, test_X, test_y, lambdas=LAMBDAS, num_classes: int | None = None) -> dict:
    """Fit ridge probes for every lambda, keep the one best on the validation images, score it on test.

    train_X: (n, p) or (n, T, p); val_X: (m, ...), test_X: (k, ...) with the same trailing shape.
    *_y: (n,), (m,), (k,) integer labels. lambdas: relative to the mean squared singular value.
    Returns {"test_accuracy": (T,) or (), "val_accuracy": same, "lambda": the chosen relative lambdas}
    as numpy arrays. Ties on validation go to the larger lambda (the simpler probe).
    """
    single, val, test_correct, lambdas, choice = _ridge_fit(train_X, train_y, val_X, val_y, test_X, test_y, lambdas, num_classes)
    test = test_correct.double().mean(1)
    picked = {"test_accuracy": test.gather(1, choice[:, None])[:, 0], "val_accuracy": val.gather(1, choice[:, None])[:, 0],
              "lambda": lambdas[choice]}
    return {k: (v[0] if single else v).cpu().numpy() for k, v in picked.items()}


def ridge_probe_correct(train_X, train_y, val_X, val_y, test_X, test_y, lambdas=LAMBDAS, num_classes: int | None = None) -> dict:
    """ridge_probe's probe, image by image: which test images it classifies correctly.

    Arguments as in ridge_probe. Returns {"correct": (k,) or (T, k) bool, "lambda": () or (T,)}
    as numpy arrays; correct.mean(-1) is ridge_probe's test accuracy. Per-image outcomes let an
    accuracy (or a difference of two) be recomputed on any subsample of the test images without
    refitting, e.g. for an interval over test images (helpers.intervals.statistic_interval).
    """
    single, _, test_correct, lambdas, choice = _ridge_fit(train_X, train_y, val_X, val_y, test_X, test_y, lambdas, num_classes,
                                                         every_lambda=False)
    picked = {"correct": test_correct, "lambda": lambdas[choice]}
    return {k: (v[0] if single else v).cpu().numpy() for k, v in picked.items()}


def few_shot_split(labels, shots: int | None, val_per_class: int, seed: int) -> tuple:
    """Class-balanced random split of a pool of training images: (train indices, validation indices).

    labels: (n,) integer labels of the pool. shots: training images per class (None: every image
    not used for validation, i.e. many-shot). val_per_class: held-out images per class for lambda.
    """
    if shots is not None:  # 0 used to mean None
        check_int(shots, "shots", 1, "Give training images per class, or None for every pool image not held out.")
    check_int(val_per_class, "val_per_class", 1, "Hold out at least one pool image per class to choose lambda.")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        need = val_per_class + (shots or 1)
        if len(members) < need:
            raise ValueError(f"Class {c} has {len(members)} images in the pool; {shots or 'at least 1'} shot(s) + "
                             f"{val_per_class} for validation need {need}. Use a larger pool or fewer shots.")
        val += list(members[:val_per_class])
        train += list(members[val_per_class:val_per_class + shots] if shots else members[val_per_class:])
    return np.sort(train), np.sort(val)


def fit_shots(labels, shots: int, val_per_class: int) -> tuple:
    """(shots, val_per_class) shrunk, with a printed note, until the smallest class of the pool has enough images.

    labels: (n,) integer labels of the pool. A pool smaller than planned (COURSE_MAX_IMAGES, a small
    folder) then still gives probes, with fewer shots; unchanged when every class has shots + val_per_class.
    """
    counts = np.unique(np.asarray(labels), return_counts=True)[1]
    smallest = int(counts.min())
    if smallest >= shots + val_per_class:
        return shots, val_per_class
    if smallest < 2:
        raise ValueError(f"A class has {smallest} image(s) in the pool: a probe needs at least 1 shot and 1 validation "
                         "image per class. Use more images.")
    val = max(1, min(val_per_class, smallest // 2))
    fitted = min(shots, smallest - val)
    print(f"Note: the pool's smallest class has {smallest} images, too few for {shots} shots + {val_per_class} for lambda: "
          f"using {fitted} shot(s) + {val}.")
    return fitted, val


def few_shot_accuracy(pool_X, pool_y, test_X, test_y, shots: int | None = 10, repeats: int = 5,
                      val_per_class: int = 10, lambdas=LAMBDAS, seed: int = 0) -> np.ndarray:
    """Test accuracy of ridge probes trained on `shots` images per class, over `repeats` random draws.

    pool_X: (n, p) or (n, T, p) features of a pool of training images, pool_y: (n,) labels;
    each repeat draws `shots` per class to fit and `val_per_class` others to choose lambda.
    test_X, test_y: held-out images. Returns (repeats,) or (repeats, T) accuracies in [0, 1].
    """
    return _over_draws(ridge_probe, "test_accuracy", pool_X, pool_y, test_X, test_y, shots, repeats, val_per_class,
                       lambdas, seed)


def few_shot_correct(pool_X, pool_y, test_X, test_y, shots: int | None = 10, repeats: int = 5,
                     val_per_class: int = 10, lambdas=LAMBDAS, seed: int = 0) -> np.ndarray:
    """few_shot_accuracy's probes, image by image: (repeats, k) or (repeats, T, k) bool, True where correct.

    The same draws of the shots and the same probes as few_shot_accuracy with the same arguments,
    so few_shot_correct(...).mean(-1) equals few_shot_accuracy(...). Keeping each test image's
    outcome lets an accuracy be re-read on a subsample of the test images: `correct[..., idx].mean(-1)`.
    """
    return _over_draws(ridge_probe_correct, "correct", pool_X, pool_y, test_X, test_y, shots, repeats, val_per_class,
                       lambdas, seed)


def _over_draws(probe, key: str, pool_X, pool_y, test_X, test_y, shots, repeats, val_per_class, lambdas, seed):
    """probe(...)[key] for each of `repeats` draws of the shots (seeds seed, seed + 1, ...), stacked."""
    check_int(repeats, "repeats", 1, "Give how many draws of the shots to average over, e.g. 5.")
    if len(pool_y) != (pool_X.shape[0]):
        raise ValueError(f"pool_X has {pool_X.shape[0]} rows but pool_y {len(pool_y)} labels.")
    # checked as labels here (torch tensors too: np.max of a tensor raised torch's "argument 'dim' must be int")
    pool_y = _labels(pool_y, pool_X.shape[0], "pool_y").cpu().numpy()
    num_classes = int(max(pool_y.max(), _labels(test_y, test_X.shape[0], "test_y").max())) + 1
    results = []
    for r in range(repeats):
        train, val = few_shot_split(pool_y, shots, val_per_class, seed + r)
        results.append(probe(pool_X[train], pool_y[train], pool_X[val], pool_y[val], test_X, test_y, lambdas,
                             num_classes=num_classes)[key])
    return np.stack(results)
