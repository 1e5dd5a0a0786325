"""Each claim's effect, defined once: one signed number per model (or pair), > 0 in the paper's direction.

The notebooks, notebook 17's survival table (helpers.survival) and the report call these functions; no
notebook carries its own effect code, so the number a notebook judges is the number RESULTS.md shows and
anyone can recompute it from the models. One module per finding group, in the course's order:

    structure     F1   within a model (06) and across models (07): similarity-matrix statistics
    attention     F2, F3   attention distances (08) and head groups against convolutions (09)
    receptive     F4   effective receptive fields (10)
    skips         F5, F6   skip-to-branch ratios and models without one block's skips (11)
    localization  F7   spatial localization (12)
    probes        F8, F9   linear probes (13) and data scale (14)
    mixer         F10  the MLP-Mixer (15)

Each function's docstring states its effect in words, with the shapes it reads.
"""
