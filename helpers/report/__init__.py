"""Compare any two models on your own images and write a report bundle for an appendix.

    python -m helpers.report                                   # lite-vit vs lite-efficientnet on 'shapes', offline
    python -m helpers.report vit_base_patch16_224.augreg_in1k resnet50.tv_in1k --images path/to/folder --out outputs/mine
    python -m helpers.report resnet18 lite-vit --weights-a my_finetune.safetensors   # your own checkpoint

What it computes (all with helpers.compare, streamed in minibatches): the CKA matrix within each
model, the cross-model matrix A x B, matched depth (for each layer of B, the layer of A with the
highest CKA), CKA with the class labels (when the images have labels), mean attention distances
(for a model with attention), each CKA value with an interval from disjoint subsamples
(helpers.intervals), and a summary whose every sentence is computed from the numbers written.
Cross-model and label CKA are computed under two readings (each model's classifier reading and all
tokens) and on 5 untrained draws of both architectures (the floor; the first draw is the "untrained
twins" of the tables), with a shuffled-image null for the best matches (R2, R3); the comparisons are
judged by helpers.verdicts in helpers.report.controls, which writes a comparative sentence only when
both readings agree. SUMMARY.md opens with a short paragraph to paste: the conclusions that hold under
both readings and every measure, and one methods sentence.
--weights-a/-b load your own checkpoints (head kept), --reference-a/-b add a second checkpoint.

What it writes into --out: figures/ (PNG, PDF, SVG), tables/ (CSV and NPZ of every matrix and
curve), settings.json, verdicts.json (every verdict with its untrained draws, their seeds and the null),
METHODS.md, SUMMARY.md, CAPTIONS.md, overview.html; cache/ holds each finished part, so a rerun with
the same --out and settings loads them instead of recomputing.

The stages, one module each (notebook 16_compare_your_models calls the same functions, imported here):

    settings.py   Settings, the command line (settings_from_args), ReportError
    loading.py    load_inputs: the models (your own weights kept), the images, the untrained twins
    compute.py    compute: every CKA part with its subsamples, cached; matched depth and the curves
    floor.py      the floor over 5 seeded untrained draws and the shuffled-image null of R2/R3
    controls.py   the two readings, the floor and the references, judged by helpers.verdicts
    audit.py      the image-statistics audit (brightness, colour means, top principal component, CKA without the
                  highest-norm images)
    attention_maps.py  where a ViT's heads look: the CLS (or centre-patch) attention of a few example images
    figures.py    one function per figure
    text.py       SUMMARY.md's short section and sentences, METHODS.md's paragraph, the references
    pages.py      CAPTIONS.md and overview.html
    bundle.py     write_bundle, run and main (python -m helpers.report); run fits --repeats to a small set
    measures.py   the conclusions recomputed and judged under other measures (--measures, default cka,procrustes)
    distributed.py  several processes (torchrun): images sharded by whole minibatches, sums all-reduced

On several GPUs: torchrun --nproc_per_node N -m helpers.report ... (the same bundle as one process; distributed.py).
"""

from helpers.report.settings import ReportError, Settings, build_parser, file_sha256, layers_arg, settings_from_args
from helpers.report.loading import attention_plan, control_models, has_attention, load_images, load_inputs, load_model
from helpers.report.compute import (RF_IMAGES, Part, cached, compute, curves, matched_depth, mean_off_diagonal,
                                    thread_count, torch_threads)
from helpers.report import audit, controls, floor, pages
from helpers.report.figures import (attention_figure, figures, heatmap_figure, label_cka_figure, matched_depth_figure,
                                    receptive_field_figure)
from helpers.report.text import (REFERENCES, command_line, methods_text, references, settings_record, short_section,
                                 summary_sections, summary_sentences, versions)
from helpers.report.bundle import OUTPUT_NAMES, main, remove_old_outputs, run, write_bundle
