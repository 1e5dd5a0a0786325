"""Stage 5 of the report: the words, each computed from the numbers: SUMMARY.md's sentences, METHODS.md's
paragraph (what was loaded, how CKA and its intervals were estimated), the references, settings.json."""

from __future__ import annotations

import platform
from dataclasses import asdict
from pathlib import Path

import numpy as np

from helpers import models, zoo
from helpers.course import shown_path
from helpers.report.compute import mean_off_diagonal
from helpers.report.settings import Settings, file_sha256
from helpers.report.loading import MIN_PER_SUBSAMPLE, MIN_REPEATS

REFERENCES = [
    "Raghu, M., Unterthiner, T., Kornblith, S., Zhang, C., & Dosovitskiy, A. (2021). Do Vision Transformers See "
    "Like Convolutional Neural Networks? NeurIPS 34. arXiv:2108.08810.",
    "Kornblith, S., Norouzi, M., Lee, H., & Hinton, G. (2019). Similarity of Neural Network Representations "
    "Revisited. ICML. arXiv:1905.00414.",
    "Nguyen, T., Raghu, M., & Kornblith, S. (2021). Do Wide and Deep Networks Learn the Same Things? Uncovering "
    "How Neural Network Representations Vary with Width and Depth. ICLR. arXiv:2010.15327.",
    "Nguyen, T., Raghu, M., & Kornblith, S. (2022). On the Origins of the Block Structure Phenomenon in Neural Network "
    "Representations. TMLR. arXiv:2202.07184.",
]


# The estimator's unbiased HSIC, and each model family the report may compare: cited when a compared model is one.
HSIC_REFERENCE = ("Song, L., Smola, A., Gretton, A., Bedo, J., & Borgwardt, K. (2012). Feature Selection via Dependence "
                  "Maximization. JMLR 13, 1393-1434 (the unbiased HSIC estimator).")
FAMILY_REFERENCES = {
    "VisionTransformer": "Dosovitskiy, A., et al. (2021). An Image is Worth 16x16 Words: Transformers for Image Recognition "
                         "at Scale. ICLR. arXiv:2010.11929.",
    "deit": "Touvron, H., et al. (2021). Training data-efficient image transformers & distillation through attention. ICML. "
            "arXiv:2012.12877.",
    "ResNet": "He, K., Zhang, X., Ren, S., & Sun, J. (2016). Deep Residual Learning for Image Recognition. CVPR. "
              "arXiv:1512.03385.",
    "EfficientNet": "Tan, M., & Le, Q. V. (2019). EfficientNet: Rethinking Model Scaling for Convolutional Neural Networks. "
                    "ICML. arXiv:1905.11946.",
    "ConvNeXt": "Liu, Z., Mao, H., Wu, C.-Y., Feichtenhofer, C., Darrell, T., & Xie, S. (2022). A ConvNet for the 2020s. "
                "CVPR. arXiv:2201.03545.",
    "SwinTransformer": "Liu, Z., et al. (2021). Swin Transformer: Hierarchical Vision Transformer using Shifted Windows. "
                       "ICCV. arXiv:2103.14030.",
    "MlpMixer": "Tolstikhin, I., et al. (2021). MLP-Mixer: An all-MLP Architecture for Vision. NeurIPS. arXiv:2105.01601.",
}


def references(results: dict, settings) -> list:
    """REFERENCES, the unbiased-HSIC paper, and the paper of each compared model's family."""
    out = REFERENCES + [HSIC_REFERENCE]
    for w in ("a", "b"):
        family = results["model_classes"][w]
        key = "deit" if getattr(settings, f"model_{w}").startswith("deit") else family
        if key in FAMILY_REFERENCES and FAMILY_REFERENCES[key] not in out:
            out.append(FAMILY_REFERENCES[key])
    return out


def _v(value, low, high) -> str:
    """'0.62 [0.58, 0.66]', or '0.62' without an interval."""
    if np.isnan(low):
        return f"{float(value):.2f}"
    return f"{float(value):.2f} [{float(low):.2f}, {float(high):.2f}]"


READING_LABEL = {"head": "classifier reading", "tokens": "all-token reading"}


def _reading_names(results: dict, reading: str) -> str:
    """'classifier reading (A: cls, B: mean)'."""
    pol = results["readings"]
    return f"{READING_LABEL[reading]} (A: {pol['a'][reading]}, B: {pol['b'][reading]})"


SECTIONS = ("The comparisons under each reading", "Audits and flags", "Descriptions of each model")


def summary_sentences(results: dict, settings: Settings) -> list:
    """The summary, one computed sentence per item (SUMMARY.md's sections, in order, as one list)."""
    return [line for lines in summary_sections(results, settings).values() for line in lines]


def repeats_words(results: dict, settings: Settings) -> str:
    """How the intervals were made, and, when the set was too small for the subsamples asked, what the report chose."""
    n, R = results["n_images"], settings.repeats
    asked = results.get("repeats_asked", R)
    iv = (f"{settings.level:.0%} intervals from {R} disjoint subsamples of {n // R} images each" if R else "no intervals")
    if asked and R != asked:
        iv += (f" ({asked} subsamples were asked for; with {n} images the report chose {R}, keeping at least "
               f"{MIN_PER_SUBSAMPLE} images in each)" if R else
               f" ({n} images are too few for {MIN_REPEATS} subsamples of {MIN_PER_SUBSAMPLE}, the smallest the report "
               "makes intervals from, so it ran without them)")
    elif not R:
        iv += " (--repeats 0)"
    return iv


def summary_sections(results: dict, settings: Settings) -> dict:
    """{heading: [sentences]}: the comparisons (R1-R3 under both readings), the audits and flags, the descriptions."""
    parts, A, B = results["parts"], settings.model_a, settings.model_b
    s = []
    s.append(f"All numbers come from {results['n_images']} images of '{results['images_name']}', minibatches of "
             f"{settings.batch_size}; brackets are {repeats_words(results, settings)} (image sampling only, not other "
             "training runs).")
    from helpers.report import controls as rc

    floor = results.get("floor")
    seeds = floor["seeds"] if floor else [settings.seed]
    s.append(f"The untrained twins are the same architectures with random weights, both built after seeding with "
             f"{settings.seed}; the floor of every comparison below is the comparison on {len(seeds)} such untrained "
             f"draws ({rc.seeds_text(seeds)}), and R2 and R3 also get a null from "
             f"{floor['shuffles'] if floor else 0} shuffles of which image B's features belong to; "
             + ("the reference checkpoints give the run-to-run spread." if "ref_cross" in parts
                else "no reference checkpoints were given (--reference-a/-b), so the only noise "
                     "is the image sampling, not a second training run."))
    for r in rc.READINGS:
        x = rc.suffix(r)
        cross = parts[f"cross{x}"]
        values, low, high = cross.interval()
        rows, cols = cross.full.rows, cross.full.cols
        i, j = np.unravel_index(values.argmax(), values.shape)
        twin = parts[f"twin_cross{x}"].full.values
        s.append(f"Cross-model CKA under the {_reading_names(results, r)}: first layers ({rows[0]}, {cols[0]}) "
                 f"{_v(values[0, 0], low[0, 0], high[0, 0])} (untrained twins {twin[0, 0]:.2f}); last layers ({rows[-1]}, "
                 f"{cols[-1]}) {_v(values[-1, -1], low[-1, -1], high[-1, -1])} (twins {twin[-1, -1]:.2f}); the most similar "
                 f"pair is {rows[i]} with {cols[j]}, {_v(values[i, j], low[i, j], high[i, j])} (twins {twin[i, j]:.2f}).")
    judgements = rc.judged(parts, results["has_labels"], settings.level, floor)
    last = {"a": parts["cross"].full.rows[-1], "b": parts["cross"].full.cols[-1]}
    s += rc.sentences(judgements, A, B, last)
    from helpers.report.audit import flags, last_layer_flag

    audits = []
    flag = last_layer_flag(parts, results["has_labels"], {"a": A, "b": B}, results["readings"])
    audits += ([flag] if flag else []) + flags(parts, results["has_labels"], {"a": A, "b": B}, results["readings"])
    if results.get("high_norm") is not None:
        from helpers.report.audit import high_norm_flags

        audits += high_norm_flags(results["high_norm"], {"a": A, "b": B},
                                  {"a": list(parts["cross"].full.rows), "b": list(parts["cross"].full.cols)})
    d = []
    uni = {w: parts[f"within_{w}"].interval_of(mean_off_diagonal) for w in ("a", "b")}
    d.append(f"Mean CKA between different layers of the same model ({_reading_names(results, 'tokens')}): {A} "
             f"{_v(*uni['a'])}, {B} {_v(*uni['b'])} (a description of each model, not a comparison: no order is claimed).")
    if results["has_labels"]:
        for w, name in (("a", A), ("b", B)):
            for r in rc.READINGS:
                p = parts[f"labels_{w}{rc.suffix(r)}"]
                k = int(p.full.values[:, 0].argmax())
                twin = parts[f"twin_labels_{w}{rc.suffix(r)}"].full.values[k, 0]
                d.append(f"In {name} under the {READING_LABEL[r]} ({results['readings'][w][r]}), the class labels are most "
                         f"visible at {p.full.rows[k]} (layer {k + 1} of {len(p.full.rows)}, CKA "
                         f"{_v(*(x[k, 0] for x in p.interval()))}; untrained twin {twin:.2f}).")
    else:
        d.append("The images have no class labels, so CKA with the labels is not computed.")
    for w, name in (("a", A), ("b", B)):
        rf = results.get("receptive_fields", {}).get(w)
        if not rf or "error" in rf:
            d.append(f"Receptive fields of {name}: not computed ({(rf or {}).get('error', 'not asked for')}).")
            continue
        r = rf["radius_px"]
        d.append(f"Half of the receptive field of {name} lies within {r[0]:.1f} px of its centre at the first recorded "
                 f"layer ({rf['layers'][0]}) and within {r[-1]:.1f} px at the last ({rf['layers'][-1]}); a field spread "
                 f"over the whole image would need {rf['uniform_px']:.1f} px (first {rf['n_images']} images, channel "
                 "gradients summed; one estimate without an interval).")
    for w, name in (("a", A), ("b", B)):
        att = results["attention"][w]
        if att is None:
            why = "it has no attention layers" if not results["attention_exists"][w] else f"not asked for: --attention {settings.attention}"
            d.append(f"Attention distances of {name}: not applicable ({why}).")
            continue
        dist, u = att["distances"], att["uniform"]
        local = int((dist < u / 2).sum())
        maps = (results.get("attention_maps") or {}).get(w)
        if maps is not None:
            share = maps["prefix_share_last"].mean()
            d.append(f"Attention maps of {name} (figures/attention_maps_{w}; {maps['query']}, {len(maps['indices'])} "
                     f"example images, blocks 0 and {maps['blocks'] - 1}) illustrate, they do not measure; in the last "
                     f"block the {maps['query']} puts {1 - share:.0%} of its attention on the patches on these images "
                     f"(averaged over the heads), the rest on the prefix tokens.")
        d.append(f"In {name} the mean attention distance over heads is {dist[0].mean():.1f} px in the first block and "
                 f"{dist[-1].mean():.1f} px in the last (a uniform head: {u:.1f} px); {local} of {dist.size} heads attend "
                 f"within half the uniform distance (first {att['n_images']} images).")
    return dict(zip(SECTIONS, (s, audits, d)))


def _weights(name: str, path=None) -> str:
    """Where a model's weights come from, in words, for METHODS.md: a local file (with its SHA-256), a lite-zoo
    member, or a published timm tag."""
    if path is not None:
        heads = models.file_head_classes(name, path)
        head = f"its own {heads}-class classifier head kept" if heads else "no classifier head in the file"
        return (f"timm architecture '{name.split('.')[0]}' with the weights of the local file {Path(path).name} "
                f"(SHA-256 {file_sha256(path)}; {head}), not published pretrained weights")
    if name in zoo.ZOO:
        try:
            card = models.lite_card(name)
        except FileNotFoundError:
            return f"the course's lite model '{name}' (helpers/zoo.py recipe; no model card found)"
        acc = card.get("test_accuracy")
        acc_text = f", test accuracy {acc:.3f} on {card.get('test_images', '?')} held-out shapes images" if acc else ""
        return (f"the course's lite model '{name}' ({card.get('architecture', 'timm model')}, "
                f"{card.get('parameters', 0):,} parameters, trained by `{card.get('command', 'helpers.train')}`"
                f"{acc_text}; weights data/models/{name}.safetensors)")
    if "." in name:
        return f"timm model '{name}' with its published pretrained weights (tag '{name.split('.', 1)[1]}')"
    return f"timm model '{name}' with timm's default published pretrained weights for that architecture"


def versions() -> dict:
    import matplotlib
    import timm
    import torch

    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"python": platform.python_version(), "torch": torch.__version__, "timm": timm.__version__,
            "numpy": np.__version__, "matplotlib": matplotlib.__version__, "course_commit": commit}


POLICY_WORDS = {"all": "every token (or spatial position) flattened into one vector per image",
                "cls": "the class (CLS) token only", "spatial": "the patch tokens only, flattened",
                "mean": "the average over tokens (or spatial positions)"}


def command_line(settings: Settings) -> str:
    """The command that reproduces this report."""
    s, d = settings, Settings()
    parts = ["python -m helpers.report", s.model_a, s.model_b, "--images", s.images, "--count", str(s.count or 0)]
    for key in ("layers_a", "layers_b", "policy_a", "policy_b", "batch_size", "repeats", "level", "attention",
                "attention_count", "seed", "threads", "weights_a", "weights_b", "reference_a", "reference_b", "measures",
                "measure_count", "vector_figures"):
        if getattr(s, key) != getattr(d, key):
            parts += [f"--{key.replace('_', '-')}", str(getattr(s, key))]
    return " ".join(parts + ["--out", shown_path(s.out)])


def _layer_list(resolved: dict) -> str:
    """'block0 = blocks.0, ...' (label = module) from a CKAMatrix's resolved layers; the module alone when they agree."""
    return ", ".join(label if label == module else f"{label} = {module}" for label, module in resolved.items())


def _draws_words(results: dict, s: Settings) -> str:
    """'5 untrained draws of both architectures (random weights; draw s built right after torch.manual_seed(s), seeds 0-4)'."""
    from helpers.report.controls import seeds_text

    seeds = (results.get("floor") or {}).get("seeds") or [s.seed]
    return (f"{len(seeds)} untrained draws of both architectures (the same architectures with random weights; each "
            f"draw builds both right after seeding the random generator with its seed, {seeds_text(seeds)}; the first "
            "is shown beside the trained models as their untrained twins)")


def _null_words(results: dict) -> str:
    floor = results.get("floor") or {}
    if not floor.get("null"):
        return ""
    return (f"; the two best-match statistics (the best-match CKA of B's last layer and the matched-depth correlation) "
            f"are also compared with a permutation null: the statistic recomputed {floor['shuffles']} times with B's "
            "images shuffled within each minibatch (its 95th percentile is printed beside the floor)")


def _fitted_words(results: dict, s: Settings) -> str:
    """The sentence saying that the report chose fewer subsamples (or none) for a small image set, else ''."""
    asked, n = results.get("repeats_asked", s.repeats), results["n_images"]
    if not asked or asked == s.repeats:
        return ""
    if s.repeats:
        return (f" The set has {n} images, too few for the {asked} subsamples asked for, so the report chose {s.repeats}, "
                f"keeping at least {MIN_PER_SUBSAMPLE} images in each.")
    return (f" (the set has {n} images, fewer than the {MIN_REPEATS} subsamples of {MIN_PER_SUBSAMPLE} images the "
            "report needs for an interval, so it ran without intervals)")


def methods_text(results: dict, settings: Settings) -> str:
    """METHODS.md: a paragraph to paste into an appendix, the settings in brief, and the references."""
    s, parts, v = settings, results["parts"], versions()
    res = {w: parts["cross"].full.meta.get(f"resolved_layers_{w}", {}) for w in ("a", "b")}
    n, R = results["n_images"], s.repeats
    labels = "with class labels" if results["has_labels"] else "without class labels"
    paragraph = (
        f"We compared the internal representations of {s.model_a} (model A: {_weights(s.model_a, s.weights_a)}) and {s.model_b} "
        f"(model B: {_weights(s.model_b, s.weights_b)}) with linear centred kernel alignment (CKA; Kornblith et al., 2019), following "
        f"Raghu et al. (2021). Both models saw the same {n} images from '{results['images_name']}' ({labels}), each "
        f"preprocessed with the model's own configuration (timm's resolve_data_config: resize, crop, mean and standard "
        f"deviation). We recorded {len(res['a'])} layers of A ('{s.layers_a}': {_layer_list(res['a'])}) and {len(res['b'])} "
        f"layers of B ('{s.layers_b}': {_layer_list(res['b'])}). Token policy: for A, {POLICY_WORDS[s.policy_a]}; for B, "
        f"{POLICY_WORDS[s.policy_b]}. Every cross-model and label comparison was also made under each model's classifier "
        f"reading (what its classification head reads; A: {POLICY_WORDS[results['readings']['a']['head']]}; B: "
        f"{POLICY_WORDS[results['readings']['b']['head']]}), and on {_draws_words(results, s)} as a floor"
        + (f"; reference checkpoints ({', '.join(_weights(getattr(s, 'model_' + w), getattr(s, 'reference_' + w)) for w in 'ab' if getattr(s, 'reference_' + w))}) "
           "give the run-to-run spread" if s.reference_a or s.reference_b else "") +
        f". A comparison is stated only when both readings get the same verdict under the course's rule (the effect "
        f"must exceed its noise, max(interval, run-to-run spread), and be learned: exceed the largest value of the untrained "
        f"draws by more than its noise){_null_words(results)}. CKA was estimated with the minibatch estimator of Nguyen et al. (2021): unbiased "
        f"HSIC per minibatch of {s.batch_size} images, summed over minibatches (each weighted by m(m-3)) before the "
        f"normalisation, so that no activations are stored. We report CKA between the layers of each model, between "
        f"every layer of A and every layer of B, the matched depth (for each layer of B, the layer of A with the highest "
        f"CKA)")
    if results["has_labels"]:
        paragraph += ", and the CKA of each layer with the one-hot class labels"
    paragraph += "."
    if any(a is not None for a in results["attention"].values()):
        n_att = next(a["n_images"] for a in results["attention"].values() if a is not None)
        paragraph += (f" For models with attention, the mean attention distance of each head (in pixels, patch tokens "
                      f"only, attention renormalised over patch keys) is averaged over the first {n_att} images.")
    maps = [m for m in (results.get("attention_maps") or {}).values() if m is not None]
    if maps:
        paragraph += (f" Attention maps illustrate where the heads look: for {len(maps[0]['indices'])} example images "
                      "(the first image of each of the first classes, or the first images of an unlabelled set), the "
                      "attention probabilities of one query token over the patch keys (the CLS token for a model whose "
                      "head reads it, otherwise the centre patch), per head and averaged over the heads, in the first "
                      "and the last block.")
    fields = [f for f in results.get("receptive_fields", {}).values() if f and "error" not in f]
    if fields:
        paragraph += (f" Effective receptive fields (a variant of Raghu et al., 2021, Fig. 6, which reads each channel "
                      f"separately; here the channels' gradients are summed first, so they can cancel): the absolute "
                      f"gradient of each layer's output at its centre location (summed over channels) with respect to the input, "
                      f"averaged over the first {fields[0]['n_images']} images, summarised by the radius around its "
                      f"centre of mass that holds half of the gradient.")
    if R:
        paragraph += (
            f" Intervals ({s.level:.0%}) come from {R} disjoint random subsamples of {n // R} images (seed {s.seed}): "
            f"the value on all {n} images plus or minus t({R - 1}) times the standard deviation of the {R} subsample values "
            f"divided by sqrt({R}). The spread is that of the subsample estimator (CKA on {n // R} images), rescaled to "
            f"{n} images on the assumption that its variance falls as one over the number of images; the intervals "
            f"describe the sampling of images only, not differences between training runs, and their coverage was "
            f"checked on synthetic data (tests/test_intervals.py). (Raghu et al. (2021) averaged CKA over 20 repeats; "
            f"here the subsamples give an interval, not an average.)" + _fitted_words(results, s))
    else:
        paragraph += " No intervals were computed" + (_fitted_words(results, s) or " (--repeats 0)") + "."
    paragraph += (" An image-statistics audit gives, for each recorded layer under both readings, its CKA with each "
                  "image's mean brightness and with its per-channel colour means (pixel values with the model's "
                  "normalisation undone), and the share of its variance along the top principal component (per "
                  "minibatch, averaged); layers whose CKA with these statistics is at least their CKA with the labels "
                  "are flagged in the summary. A highest-norm audit (after Nguyen, Raghu & Kornblith, 2022, who found "
                  "that a few images of very large activation norm can dominate CKA) recomputes, for each recorded "
                  "layer under both readings, its CKA with the class labels and its matched CKA (with its best match "
                  "in the other model) without the layer's k highest-norm images (k = 1% of the images, at least 5; "
                  "for a pair, both layers' k), the norm measured from the minibatch mean; the summary flags a value "
                  "that moves by more than the half-width of its interval. The matched-depth correlation is not "
                  "recomputed this way.")
    from helpers.report.settings import precision

    run_on = precision()
    paragraph += (f" Forward passes ran on the {'GPU' if run_on['device'] == 'cuda' else 'CPU'}"
                  + (f" under {run_on['autocast']} autocast (Grams float32, sums float64)." if run_on["autocast"] else
                     " in float32."))
    paragraph += (f" Software: Python {v['python']}, PyTorch {v['torch']}, timm {v['timm']}, NumPy {v['numpy']}, "
                  f"Matplotlib {v['matplotlib']}, course helpers at commit {v['course_commit']}.")
    refs = "\n".join(f"- {r}" for r in references(results, settings))
    return (f"# Methods\n\n{paragraph}\n\nReproduce with:\n\n```\n{command_line(settings)}\n```\n\n"
            f"Every setting is in settings.json.\n\n## References\n\n{refs}\n")


def settings_record(results: dict, settings: Settings) -> dict:
    """settings.json: every setting, what the presets resolved to, the software versions."""
    parts = results["parts"]
    return {"settings": asdict(settings), "fingerprint": settings.fingerprint(), "command": command_line(settings),
            "n_images": results["n_images"], "images": results["images_name"], "has_labels": results["has_labels"],
            "subsample_size": results["n_images"] // settings.repeats if settings.repeats else None,
            "resolved_layers_a": parts["cross"].full.meta.get("resolved_layers_a"),
            "resolved_layers_b": parts["cross"].full.meta.get("resolved_layers_b"),
            "estimator": parts["cross"].full.estimator, "interval": "full value +- t * sd(subsamples) / sqrt(R) (helpers.intervals)",
            "attention_distances": {w: results["plan"][w] for w in ("a", "b")},
            "model_classes": results["model_classes"],
            "weights": {"a": _weights(settings.model_a, settings.weights_a), "b": _weights(settings.model_b, settings.weights_b)},
            "readings": results["readings"],
            "repeats_asked": results.get("repeats_asked", settings.repeats),
            "floor_seeds": (results.get("floor") or {}).get("seeds"),
            "null_shuffles": (results.get("floor") or {}).get("shuffles"),
            "versions": versions()}


# --------------------------------------------------------------------------- the short section a student can paste

SHORT_WORDS = 200  # the short section's length, at most about this many words

_PLAIN = {"R1": "which model's last layer carries more class information",
          "R2": "whether the last layer of {B} has a close counterpart in {A}",
          "R3": "whether deeper layers of {B} match deeper layers of {A}"}


def _interval(v, words: str = "") -> str:
    """'+0.066 (90% interval +0.058 to +0.074)' from a verdict's effect and its image interval (words: '90% interval ')."""
    e = v.effects[0]
    if v.intervals:
        h = v.intervals[0]
        return f"{e:+.2f} ({words}{e - h:+.2f} to {e + h:+.2f})"
    return f"{e:+.2f} (no image interval; noise {v.noise[0]:.2f} from the reference checkpoints)"


def _stands(claim: str, cka: dict, measured: dict) -> tuple:
    """(True, '') when the claim holds, beyond the untrained draws (and the null), under both readings and every
    measure computed; else (False, the reason in plain words)."""
    from helpers.report import measures

    words = {"CKA": measures.conclusion(cka[claim])}
    words.update({measures.KEYS[k]: measures.conclusion(measured[k]["judgements"][claim]) for k in measures.keys_of(measured)})
    values = set(words.values())
    if len(values) == 1 and next(iter(values)).startswith("holds"):
        return True, ""
    if "not judged" in values:
        return False, "there is no noise estimate (too few images for intervals, and no second checkpoint)"
    if len(values) > 1:
        plain = {"not shown": "not beyond untrained copies or shuffled images", "readings disagree": "the readings disagree",
                 "not judged": "not judged"}
        return False, "the similarity measures disagree (" + "; ".join(
            f"with {m}: {'holds' if w.startswith('holds') else plain[w]}" for m, w in words.items()) + ")"
    if values == {"readings disagree"}:
        return False, "the two readings disagree"
    return False, "the trained models do not beat untrained copies (or shuffled images) by more than the noise"


def _stand_sentence(claim: str, by_reading: dict, A: str, B: str, level: float) -> str:
    """One plain sentence for a conclusion that stands: what, the number and interval under each reading, the floor."""
    head, tokens = by_reading["head"], by_reading["tokens"]
    top = max(max(v.floor_draws) for v in (head, tokens)) if head.floor_draws else None
    floor = f"; untrained copies at most {top:+.2f}" if top is not None else ""
    null = (f", shuffled images {max(verdicts_null(v) for v in (head, tokens)):+.2f}" if head.null else "")
    numbers = (f"{_interval(head, f'{level:.0%} interval ')} under the classifier reading and {_interval(tokens)} over all "
               f"tokens{floor}{null}")
    if claim == "R1":
        higher, lower = (A, B) if "A - B" in head.measure else (B, A)
        return f"The last layer of {higher} carries more class information than that of {lower}: CKA with the labels higher by {numbers}."
    if claim == "R2":
        return f"The last layer of {B} has a close counterpart in {A}: best-match CKA {numbers}."
    return f"Deeper layers of {B} match deeper layers of {A}: correlation of depth with matched depth {numbers}."


def verdicts_null(v) -> float:
    from helpers.verdicts import null_level

    return null_level(v.null)


def short_section(results: dict, settings: Settings, judgements: dict, measured: dict) -> str:
    """SUMMARY.md's opening paragraph (at most about SHORT_WORDS words), for a reader outside the course: each
    conclusion that stands under both readings and every measure, one sentence with its numbers and intervals; one
    sentence naming the comparisons that do not stand and why; one methods sentence."""
    from helpers.report import measures
    from helpers.report.controls import seeds_text

    A, B = settings.model_a, settings.model_b
    out, left = [], {}
    for claim in judgements:
        ok, why = _stands(claim, judgements, measured)
        if ok:
            out.append(_stand_sentence(claim, judgements[claim], A, B, settings.level))
        else:
            left.setdefault(why, []).append(_PLAIN[claim].format(A=A, B=B))
    if not out:
        out.append(f"No comparison between {A} and {B} holds under both readings and every similarity measure computed.")
    for why, claims in left.items():
        out.append(f"Not concluded, because {why}: {' or '.join(claims)}.")
    n, R = results["n_images"], settings.repeats
    floor = results.get("floor") or {}
    seeds = floor.get("seeds") or [settings.seed]
    used = ["CKA"] + [measures.KEYS[k] for k in measures.keys_of(measured)]
    spread = ("reference checkpoints give the run-to-run spread" if "ref_cross" in results["parts"] else
              "one trained checkpoint per model, so the intervals cover image sampling only")
    intervals = (f"{settings.level:.0%} intervals from {R} disjoint subsamples of {n // R} images" if R else "no intervals (too few images)")
    others = f" and {', '.join(used[1:])} (METHODS.md)" if len(used) > 1 else ""
    out.append(f"Methods: we compared {A} and {B} on {n} images of '{results['images_name']}' with linear CKA "
               f"(Kornblith et al., 2019){others}, reading each model as its classifier does (classifier reading) and "
               f"over all its tokens, with {intervals} ({spread}), against {len(seeds)} untrained copies of both "
               f"architectures (random weights, {seeds_text(seeds)}) and, for best matches, {floor.get('shuffles', 0)} "
               "shuffles of the images.")
    return " ".join(out)
