"""helpers: the small, tested package behind the course notebooks.

One module per idea:
    cka            Gram matrices, centering, HSIC, CKA (the full-batch reference)
    minibatch_cka  streaming minibatch CKA for whole layer-by-layer matrices (CKAMatrix results)
    exercises      check functions for the notebook exercises
    slips          the usual wrong answers per exercise, named by the checks and the grader's feedback
    grade/         python -m helpers.grade: grade a class's submitted notebooks (grader: read, recognise,
                   judge, write feedback; cases: inputs and judges per exercise; sandbox, child: the sandbox
                   the students' code runs in)
    capture        forward hooks by preset, name or pattern; token policies
    compare        cka_matrix: CKA between every layer of one or two models over many images
    gram_cache     per-batch Grams kept, so that one model runs once over the same images for every comparison
    attention      attention maps of timm ViTs; mean attention distance
    receptive_fields  effective receptive fields from input gradients (F4)
    residuals      norm ratios of skip connection and branch (F5)
    localization   CKA of final-block tokens with every input patch (F7)
    probes         closed-form ridge probes (F8, F9)
    intervals      intervals for CKA values (or any statistic of the images) from disjoint subsamples
    claims         the paper's findings split into numbered claims (F1.1, F1.2, ...)
    verdicts       the one rule that judges a claim against its controls; saving verdicts
    scorecard      RESULTS.md: every claim's verdict on each track
    report         python -m helpers.report: two models, one report bundle
    guards         checks of what is passed in; models returned in the mode they came in
    shapes, data   the generated lite dataset; image sets with each model's preprocessing
    loading        image files to batches: decoded in threads, uint8 crops normalised per batch
    image_cache    decoded, cropped images kept on disk, once per image set and preprocessing
    autocast       forward passes in float16 on CUDA; Grams and sums stay float32 / float64
    download       downloads that resume after an interruption, verified, extracted atomically (Imagenette)
    zoo, train     the lite models (timm ViTs, ResNets, a Mixer, an EfficientNet) and their training
    models         load any model by name on either track; the track chooser
    course, plots  notebook set-up (paths, seeds, device) and the figure style
"""
