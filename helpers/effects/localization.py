"""Effects of finding F7 (notebook 12): how well a layer's tokens localize, from their token-by-patch CKA maps.

The maps come from helpers.localization (localization_maps: (T, T) CKA of each token with the raw input patch at
each grid position); a map becomes per-kind numbers with `summary` (helpers.localization.summarise): for
'all', 'interior', 'edge' and 'corner' tokens, the mean contrast (own patch minus the mean of the others),
margin (own patch minus the best other) and border preference. Each effect below reads such summaries and is
one signed number, > 0 in the paper's direction, in CKA units.

    S = {label: summary(maps[label], grids[label]) for label in maps}
    interior_margin(S["ViT seed 0"])                          # F7.1
    border_preference(S["ViT seed 0"])                        # F7.2
    contrast_gap(S["ViT seed 0"], S["ResNet seed 0 final"])   # F7.3 (and F7.4, F7.5 with other pairs)
"""

from __future__ import annotations

import math

from helpers import localization
from helpers.intervals import subsample_interval


def summary(maps, grid) -> dict:
    """(T, T) token-by-patch CKA map on a (rows, cols) grid -> {kind: {contrast, margin, border_preference, ...}}."""
    return localization.summarise(localization.localization_scores(maps, grid))


def _read(S: dict, kind: str, key: str) -> float:
    """S[kind][key] of a summary, checked: a grid without interior tokens (2 x 4) had no 'interior' (a bare KeyError) and
    an edge border preference of NaN; a 1 x 1 grid a NaN contrast."""
    if not isinstance(S, dict) or "all" not in S:
        raise TypeError(f"S must be one layer's summary {{'all': ..., 'edge': ...}} from summary(maps, grid), got "
                        f"{type(S).__name__}" + (f" with keys {list(S)[:4]}." if isinstance(S, dict) else "."))
    value = float(S[kind][key]) if kind in S else math.nan
    if not math.isfinite(value):
        need = "2 positions or more" if kind == "all" else "at least 3 x 3 positions, so that some are interior"
        raise ValueError(f"this summary has no {kind} tokens with a defined {key} (kinds: {sorted(S)}): the grid needs {need}.")
    return value


def interior_margin(S: dict) -> float:
    """F7.1, "interior tokens are most similar to their own input patch": the interior tokens' mean margin,
    own-patch CKA minus the best other patch. > 0 when the own patch is the peak, on average."""
    return _read(S, "interior", "margin")


def border_preference(S: dict) -> float:
    """F7.2, "edge tokens are similar to other edge positions": the edge tokens' mean CKA with the other border
    patches minus their mean CKA with interior patches. > 0 when edge tokens prefer the border."""
    return _read(S, "edge", "border_preference")


def contrast(S: dict) -> float:
    """How much a layer's tokens localize: mean over all tokens of own-patch CKA minus the others' mean."""
    return _read(S, "all", "contrast")


def contrast_gap(better: dict, worse: dict) -> float:
    """contrast(better) - contrast(worse): > 0 when the first layer localizes more. The effect of
    F7.3 (ViT final block minus ResNet final layer), F7.4 (ResNet earlier layer minus its final layer) and
    F7.5 (CLS ViT minus GAP ViT, final blocks)."""
    return contrast(better) - contrast(worse)


def with_interval(effect, full: dict, parts: list | None) -> tuple:
    """(effect on all images, half-width of its 90% interval over image subsamples), or (effect, None).

    effect: a function of {label: summary} -> number; full: {label: summary} on all images;
    parts: R dicts {label: summary} on R disjoint image subsamples (helpers.intervals), or None (too few images)."""
    value = float(effect(full))
    if parts is None:
        return value, None
    low, high = subsample_interval(value, [effect(S) for S in parts])
    return value, float(high - low) / 2


def effects_of(S: dict, vit: str, gap: str, resnet_final: str, resnet_earlier: str) -> dict:
    """Every F7 effect from one set of summaries {label: summary}: the untrained draws' floor uses it.

    vit, gap: labels of a CLS ViT's and a GAP ViT's final blocks; resnet_final, resnet_earlier: a ResNet's final and
    earlier layer. Returns {claim: effect} for F7.1-F7.5."""
    missing = [label for label in (vit, gap, resnet_final, resnet_earlier) if label not in S]
    if missing:  # a bare KeyError before
        raise KeyError(f"no summary for {missing}; the summaries are of {sorted(S)}.")
    return {"F7.1": interior_margin(S[vit]), "F7.2": border_preference(S[vit]),
            "F7.3": contrast_gap(S[vit], S[resnet_final]), "F7.4": contrast_gap(S[resnet_earlier], S[resnet_final]),
            "F7.5": contrast_gap(S[vit], S[gap])}

