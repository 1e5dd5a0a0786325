"""The report's highest-norm audit reads the Grams its CKA parts computed: no model runs again, even when the Gram
cache's size limit (helpers.gram_cache.MAX_BYTES) would have dropped them by then (Imagenette at full size does)."""

from contextlib import nullcontext

import pytest

from helpers import gram_cache, report
import importlib

compute = importlib.import_module("helpers.report.compute")  # the module (helpers.report.compute is also a function)

SMALL = dict(count=48, repeats=2, batch_size=24, attention="none", threads=1, measures="cka", vector_figures="none")


def _forwards_during_the_audit(monkeypatch, tmp_path) -> int:
    """Forward passes of the two compared models while the report runs its highest-norm audit."""
    counted, auditing = [], []
    real, real_guarded = compute.cached_high_norm, gram_cache.guarded

    def counting(*args, **kwargs):  # (a hook on the models would change their fingerprint, so count the passes)
        auditing.append(True)
        try:
            return real(*args, **kwargs)
        finally:
            auditing.clear()

    def forward(run, dtype, what="the forward pass"):  # every forward pass of a model's Grams goes through here
        if auditing:
            counted.append(what)
        return real_guarded(run, dtype, what)

    monkeypatch.setattr(gram_cache, "guarded", forward)
    monkeypatch.setattr(compute, "cached_high_norm", counting)
    monkeypatch.setattr(gram_cache, "MAX_BYTES", 1)  # every set is too big to keep, as at Imagenette's scale
    gram_cache.clear()
    results = report.run(report.Settings(**SMALL, out=str(tmp_path)), progress=False)
    assert results["high_norm"] is not None and "k" in results["high_norm"]
    return len(counted)


def test_the_audit_runs_no_model_again(monkeypatch, tmp_path):
    assert _forwards_during_the_audit(monkeypatch, tmp_path) == 0
    assert "Forward passes ran on the CPU in float32." in (tmp_path / "METHODS.md").read_text()  # the precision, said
    assert gram_cache.kept_bytes() <= gram_cache.MAX_BYTES  # the pinned Grams are let go after the audit


def test_without_pinning_the_audit_would_run_the_models_again(monkeypatch, tmp_path):
    monkeypatch.setattr(gram_cache, "pinned", lambda *a: nullcontext())
    assert _forwards_during_the_audit(monkeypatch, tmp_path) > 0  # what the test above rules out
