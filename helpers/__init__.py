"""helpers: the small, tested package behind the course notebooks.

One module per idea:
    cka            Gram matrices, centering, HSIC, CKA (the full-batch reference)
    minibatch_cka  streaming minibatch CKA for whole layer-by-layer matrices (CKAMatrix results)
    exercises      check functions for the notebook exercises
    capture        forward hooks by preset, name or pattern; token policies
    compare        cka_matrix: CKA between every layer of one or two models over many images
    attention      attention maps of timm ViTs; mean attention distance
    shapes, data   the generated lite dataset; image sets with each model's preprocessing
    zoo, train     the lite models (timm classes) and their training
    models         load any model by name on either track; the track chooser
    course, plots  notebook set-up (paths, seeds, device) and the figure style
"""
