"""Stage 3 of the report: every CKA matrix (with its subsamples), attention distances and receptive fields, each
cached under <out>/cache so that a rerun resumes; then the numbers derived from them (matched depth, curves)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from helpers import intervals, zoo
from helpers.capture import HookNeverFiredError
from helpers.course import torch_threads  # noqa: F401  (helpers.report re-exports it)
from helpers.data import subset
from helpers.report.distributed import World, main_first, n_batches, reduce_state, share_from_main, shards, world
from helpers.report.cached import arrays_saved, cached, cached_arrays  # noqa: F401  (helpers.report re-exports cached)
from helpers.report.loading import control_models, has_attention
from helpers.report.settings import ReportError, Settings, layers_arg


@dataclass
class Part:
    """One CKA result: the full-data matrix, and the same matrix on each disjoint subsample."""

    name: str
    full: object                                   # CKAMatrix
    subsamples: list = field(default_factory=list)  # CKAMatrix per subsample
    level: float = 0.9

    @property
    def sub_values(self) -> np.ndarray:
        """(R, rows, cols) values on the subsamples (R = 0 without intervals)."""
        return np.stack([s.values for s in self.subsamples]) if self.subsamples else np.zeros((0,) + self.full.values.shape)

    def interval_of(self, statistic):
        """(value, low, high) of statistic(values matrix) -> number or array; low = high = NaN without subsamples."""
        value = np.asarray(statistic(self.full.values), dtype=np.float64)
        if len(self.subsamples) < 2:
            return value, np.full_like(value, np.nan), np.full_like(value, np.nan)
        low, high = intervals.subsample_interval(value, [statistic(s.values) for s in self.subsamples], self.level)
        return value, low, high

    def interval(self):
        """(values, low, high) for every cell of the matrix."""
        return self.interval_of(lambda v: v)


def _jobs(settings: Settings, model_a, model_b, images, controls: dict | None = None):
    """[(part name, state(ImageSet) -> (MinibatchCKA, meta), finish(MinibatchCKA, meta) -> CKAMatrix)] for everything
    the report computes with CKA (the sums of a shard of images, and how the summed ones become the CKAMatrix).

    Cross-model and label CKA under both readings (suffix '_head': the classifier reading; none: --policy, all
    tokens by default), for the trained models, their untrained twins ('twin_') and the references ('ref_').
    """
    from helpers.compare import cka_state, label_cka_state
    from helpers.report.audit import statistics_result, statistics_state
    from helpers.report.controls import classifier_policy

    def result(accumulator, info):
        return accumulator.result(info)

    s, la, lb = settings, layers_arg(settings.layers_a), layers_arg(settings.layers_b)
    common = dict(batch_size=s.batch_size, progress=False)
    # the classes of all images: a shard (helpers.report.distributed) then builds the same one-hot labels
    classes = None if images.labels is None else np.unique(np.asarray(list(images.labels)))
    jobs = [("within_a", lambda im: cka_state(model_a, im, la, policy_a=s.policy_a, **common), result),
            ("within_b", lambda im: cka_state(model_b, im, lb, policy_a=s.policy_b, **common), result)]

    sets = [("", model_a, model_b)] + [(f"{k}_", ma, mb) for k, (ma, mb) in (controls or {}).items()]
    for w, m, layers in (("a", model_a, la), ("b", model_b, lb)):  # the image-statistics audit (helpers.report.audit)
        for x, policy in (("", getattr(s, f"policy_{w}")), ("_head", classifier_policy(m))):
            jobs.append((f"stats_{w}{x}", lambda im, m=m, layers=layers, policy=policy: statistics_state(
                m, im, layers, policy=policy, batch_size=s.batch_size), statistics_result))
    for prefix, ma, mb in sets:
        readings = {"": (s.policy_a, s.policy_b), "_head": (classifier_policy(ma), classifier_policy(mb))}
        for x, (pa, pb) in readings.items():
            jobs.append((f"{prefix}cross{x}", lambda im, ma=ma, mb=mb, pa=pa, pb=pb: cka_state(
                ma, im, la, model_b=mb, layers_b=lb, policy_a=pa, policy_b=pb, **common), result))
            if images.labels is not None:
                jobs += [(f"{prefix}labels_a{x}", lambda im, ma=ma, pa=pa: label_cka_state(ma, im, la, policy=pa, classes=classes, **common),
                          result),
                         (f"{prefix}labels_b{x}", lambda im, mb=mb, pb=pb: label_cka_state(mb, im, lb, policy=pb, classes=classes, **common),
                          result)]
    return jobs


def thread_count(settings: Settings, model_a, model_b) -> int:
    """The torch CPU threads to use: --threads, or for 0 one thread when both models are lite models on the CPU."""
    import torch

    if settings.threads > 0:
        return settings.threads
    on_cpu = all(next(m.parameters()).device.type == "cpu" for m in (model_a, model_b))
    lite = settings.model_a in zoo.ZOO and settings.model_b in zoo.ZOO
    return 1 if on_cpu and lite else torch.get_num_threads()


def compute(settings: Settings, model_a, model_b, images, plan: dict, progress: bool = True) -> dict:
    """Every result of the report (see _compute), with torch's CPU threads set by thread_count."""
    with torch_threads(thread_count(settings, model_a, model_b)):
        return _compute(settings, model_a, model_b, images, plan, progress)


def _compute(settings: Settings, model_a, model_b, images, plan: dict, progress: bool = True) -> dict:
    """Every result of the report: {'parts': {name: Part}, 'attention': {...}, 'log': [...], 'n_images': N}.

    Each matrix (full data and each subsample) is cached under <out>/cache and loaded on a rerun. In a group of
    processes (helpers.report.distributed) each CKA part is sharded by whole minibatches and summed over the
    processes; the attention distances and maps, the highest-norm audit and the receptive fields are computed by
    process 0 only (None or empty elsewhere).
    """
    from tqdm.auto import tqdm

    from helpers import gram_cache
    from helpers.report.attention_maps import cached_attention_maps
    from helpers.report.controls import classifier_policy

    cache = Path(settings.out) / "cache"
    fp, log = settings.fingerprint(), []
    parts_idx = intervals.disjoint_subsamples(len(images), settings.repeats, settings.seed) if settings.repeats else []
    try:
        controls = control_models(settings, model_a, model_b)
    except (ValueError, TypeError, RuntimeError) as error:
        raise ReportError(f"The untrained twins or references could not be built: {error}") from None
    jobs = _jobs(settings, model_a, model_b, images, controls)
    # image set outermost, so that each model runs once per image set: the jobs after its first reuse its
    # Grams (helpers.gram_cache), which are kept for the same ImageSet object only
    image_sets = [images] + [subset(images, part) for part in parts_idx]
    here = world()
    if here.distributed:  # process 0 decodes the images once, so that every shard reads its disk cache (image_cache)
        main_first(here, lambda: fill_image_cache(images, [model_a, model_b], settings.batch_size),
                   "Decoding the images into the disk cache", others=False)
    shard_sets = shards(image_sets, settings.batch_size, here)  # this process's whole minibatches of each set
    steps = [(name, k, state, finish) for k in range(-1, len(parts_idx)) for name, state, finish in jobs]
    parts = {name: Part(name, None, [], settings.level) for name, _, _ in jobs}

    def part(k, state, finish):
        """One CKA part on image set k: this process's shard's sums, summed over the processes, made CKA."""
        mine = state(shard_sets[k + 1]) if shard_sets[k + 1] is not None else (None, None)
        accumulator, info = reduce_state(*mine, here)
        if here.distributed:  # the meta of the whole image set, not of one shard
            info = {**info, "images": image_sets[k + 1].name}
            if "n_images_skipped" in info:
                n = len(image_sets[k + 1])
                info["n_images_skipped"] = n - min(n, n_batches(n, settings.batch_size) * settings.batch_size)
        return finish(accumulator, info)

    readings = {w: {"head": classifier_policy(m), "tokens": getattr(settings, f"policy_{w}")}
                for w, m in (("a", model_a), ("b", model_b))}
    try:
        # the trained models' Grams on (this process's shard of) all images stay kept until the highest-norm audit
        # has read them, after every subsample: no model runs twice (helpers.gram_cache.pinned)
        with gram_cache.pinned([model_a, model_b], [shard_sets[0]]):
            for name, k, state, finish in tqdm(steps, desc="CKA parts", disable=not progress or not here.main):
                where = cache / (f"{name}.npz" if k < 0 else f"{name}_sub{k:02d}.npz")
                result = cached(where, fp, (lambda state=state, finish=finish, k=k: part(k, state, finish)), log, here)
                if k < 0:
                    parts[name].full = result
                else:
                    parts[name].subsamples.append(result)
            high_norm = cached_high_norm(settings, model_a, model_b, images, shard_sets[0], parts, readings, cache, log,
                                         here)
        on_main = (("a", model_a), ("b", model_b)) if here.main else ()  # not sharded: process 0 only
        attention = {w: cached_attention(settings, w, m, images, cache, log) if plan[w] else None for w, m in on_main}
        maps = {w: cached_attention_maps(settings, w, m, images, cache, log) if plan[w] else None for w, m in on_main}
        fields = {w: cached_receptive_fields(settings, w, m, images, cache, log) for w, m in on_main}
    except HookNeverFiredError as error:  # the layers asked for, not the computation
        raise ReportError(f"{error} Here: leave those modules out of --layers-a/--layers-b (a pattern such as "
                          "'blocks.*' takes every submodule; the preset 'blocks' or 'blocks.*.attn' do not).") from None
    except (ValueError, TypeError, KeyError) as error:
        raise ReportError(f"{error}") from None
    return {"parts": parts, "attention": attention, "attention_maps": maps, "high_norm": high_norm,
            "receptive_fields": fields, "log": log, "n_images": len(images),
            "images_name": images.name,
            "has_labels": images.labels is not None, "plan": plan, "controls": controls,
            "attention_exists": {"a": has_attention(model_a), "b": has_attention(model_b)},
            "readings": readings,
            "model_classes": {"a": type(model_a).__name__, "b": type(model_b).__name__}}


def fill_image_cache(images, models: list, batch_size: int) -> None:
    """Decode `images` once for each preprocessing of `models` into the disk cache (helpers.image_cache), unless
    there already or too big to keep; a set held as a tensor (shapes) has nothing to decode."""
    from helpers import loading

    if images.tensor is not None:
        return
    done = set()
    for model in models:
        prep = loading.preprocessing(model)
        key = repr(prep.fingerprint())
        if key not in done:
            done.add(key)
            loading.fill_cache(images, prep, batch_size)


def cached_high_norm(settings: Settings, model_a, model_b, images, shard, parts: dict, readings: dict, cache: Path,
                     log, w: World):
    """The highest-norm audit (helpers.report.audit) on process 0, from <cache>/high_norm.npz when finished earlier,
    else from the Grams the CKA parts computed (gathered from every process's shard); None on the other processes.
    Every process must call it: all take part in gathering the Grams."""
    from helpers.report.audit import audit_grams, high_norm_audit

    path = cache / "high_norm.npz"
    saved = share_from_main(arrays_saved(path, settings.fingerprint(), len(images)) if w.main else None, w)
    grams = None if saved else audit_grams(settings, {"a": model_a, "b": model_b}, shard, readings, w)
    if not w.main:
        return None
    return cached_arrays(path, settings.fingerprint(), len(images), lambda: high_norm_audit(
        settings, model_a, model_b, images, parts, readings, grams=grams), log)


def cached_attention(settings: Settings, which: str, model, images, cache: Path, log) -> dict:
    """{'distances': (blocks, heads) px, 'uniform': px of a uniform head, 'n_images': n}, cached as an .npz.

    Uses the first --attention-count images (helpers.attention.attention_distance_table streams them).
    """
    from helpers.attention import attention_distance_table, uniform_attention_distance

    n = min(len(images), settings.attention_count)

    def compute():
        size = model.patch_embed.patch_size
        patch = int(size[0] if isinstance(size, (tuple, list)) else size)
        return {"distances": attention_distance_table(model, subset(images, range(n)), batch_size=min(64, settings.batch_size)),
                "uniform": np.array(uniform_attention_distance(int(round(model.patch_embed.num_patches ** 0.5)), patch))}

    arrays = cached_arrays(cache / f"attention_{which}.npz", settings.fingerprint(), n, compute, log)
    return {"distances": arrays["distances"], "uniform": float(arrays["uniform"]), "n_images": n}


RF_IMAGES = 32  # images for the receptive fields, as in the paper (Fig. 6)


def cached_receptive_fields(settings: Settings, which: str, model, images, cache: Path, log) -> dict:
    """{'layers', 'radius_px' (L,), 'uniform_px', 'n_images'}: each recorded layer's effective receptive field
    (helpers.receptive_fields: |d centre output / d input|, channels summed) summarised by the radius around its
    centre of mass that holds half the gradient; the first 32 images; cached as an .npz. A model whose layers
    have no spatial centre (outputs neither (B, N, D) tokens nor (B, C, H, W) maps) gets {'error': why}.
    """
    from helpers.data import batches
    from helpers.receptive_fields import mass_radius, receptive_fields, uniform_mass_radius

    n = min(len(images), RF_IMAGES)

    def compute():
        x = next(batches(subset(images, range(n)), model, n))
        maps = receptive_fields(model, x, layers=layers_arg(getattr(settings, f"layers_{which}"))).maps
        return {"layers": np.array(list(maps)), "radius_px": np.array([mass_radius(m) for m in maps.values()]),
                "uniform_px": np.array(uniform_mass_radius(*x.shape[-2:]))}

    try:
        arrays = cached_arrays(cache / f"receptive_fields_{which}.npz", settings.fingerprint(), n, compute, log)
    except (ValueError, RuntimeError) as error:
        log.append(f"receptive fields of model {which.upper()}: not computed ({error})")
        return {"error": str(error)}
    return {"layers": [str(x) for x in arrays["layers"]], "radius_px": arrays["radius_px"],
            "uniform_px": float(arrays["uniform_px"]), "n_images": n}


def matched_depth(part: Part) -> dict:
    """For each layer of B (column j), the layer of A with the highest CKA: index, name, value with interval.

    agreement: the fraction of subsamples whose best match is the same layer (NaN without subsamples).
    """
    values = part.full.values
    best = values.argmax(axis=0)                        # (Lb,)
    cka, low, high = part.interval_of(lambda v: v.max(axis=0))
    subs = part.sub_values
    agreement = (subs.argmax(axis=1) == best[None]).mean(0) if len(subs) else np.full(len(best), np.nan)
    return {"b_layer": list(part.full.cols), "a_index": best, "a_layer": [part.full.rows[i] for i in best],
            "cka": cka, "ci_low": low, "ci_high": high, "agreement": agreement}


def mean_off_diagonal(values: np.ndarray) -> float:
    """The mean of a square matrix's off-diagonal entries: how alike a model's layers are overall."""
    mask = ~np.eye(len(values), dtype=bool)
    return float(values[mask].mean())


def curves(results: dict) -> dict:
    """{name: columns} of every curve: matched depth, CKA with the labels, attention distances and maps, receptive
    fields, and the highest-norm audit's table."""
    parts, out = results["parts"], {}
    if results.get("high_norm") is not None:  # the highest-norm audit's table (helpers.report.audit)
        from helpers.report.audit import high_norm_columns

        out["high_norm_audit"] = high_norm_columns(results["high_norm"], {"a": list(parts["cross"].full.rows),
                                                                          "b": list(parts["cross"].full.cols)})
    m = matched_depth(parts["cross"])
    out["matched_depth"] = {"b_layer": m["b_layer"], "b_index": list(range(len(m["b_layer"]))), "matched_a_layer": m["a_layer"],
                            "matched_a_index": list(m["a_index"]), "cka": m["cka"], "ci_low": m["ci_low"],
                            "ci_high": m["ci_high"], "subsample_agreement": m["agreement"]}
    for w in ("a", "b"):
        if f"labels_{w}" in parts:
            p = parts[f"labels_{w}"]
            v, lo, hi = p.interval()
            n = len(p.full.rows)
            out[f"label_cka_{w}"] = {"layer": list(p.full.rows), "index": list(range(n)),
                                     "relative_depth": [i / max(1, n - 1) for i in range(n)],
                                     "cka": v[:, 0], "ci_low": lo[:, 0], "ci_high": hi[:, 0]}
        rf = results.get("receptive_fields", {}).get(w)
        if rf and "error" not in rf:
            n = len(rf["layers"])
            out[f"receptive_field_{w}"] = {"layer": rf["layers"], "index": list(range(n)),
                                           "relative_depth": [i / max(1, n - 1) for i in range(n)],
                                           "radius_50_px": rf["radius_px"], "uniform_image_px": [rf["uniform_px"]] * n}
        att = results["attention"][w]
        if att is not None:
            d = att["distances"]
            out[f"attention_distance_{w}"] = {"block": [b for b in range(d.shape[0]) for _ in range(d.shape[1])],
                                              "head": [h for _ in range(d.shape[0]) for h in range(d.shape[1])],
                                              "distance_px": d.reshape(-1),
                                              "uniform_head_px": [att["uniform"]] * d.size}
        if (results.get("attention_maps") or {}).get(w) is not None:
            from helpers.report.attention_maps import table

            out[f"attention_maps_{w}"] = table(results["attention_maps"][w])
    return out
