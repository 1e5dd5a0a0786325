"""The numbered claims of Raghu et al. 2021 (findings F1-F10), each judged in one notebook.

Each finding of the paper (PAPER_SPEC.md) is split into the separate claims it makes, numbered
F1.1, F1.2, ... Every claim is judged in exactly one notebook by the rule in helpers.verdicts,
and RESULTS.md lists them all (scripts/make_results.py writes it from the saved verdicts).

    CLAIMS["F1.1"].statement    # the claim in our words
    CLAIMS["F1.1"].figure       # where the paper shows it
    CLAIMS["F1.1"].notebook     # "06": the notebook that judges it
"""

from __future__ import annotations

from typing import NamedTuple


class Claim(NamedTuple):
    notebook: str   # the notebook that judges it, "06"
    figure: str     # where the paper shows it
    statement: str  # the claim, in the course's words


CLAIMS = {
    # F1: representation structure (notebook 06 within a model, 07 across models)
    "F1.1": Claim("06", "Fig. 1", "A ViT's layer-by-layer similarity structure is much more uniform than a ResNet's."),
    "F1.2": Claim("06", "Fig. 1", "A ViT's lower and higher layers are highly similar; a ResNet's are not."),
    "F1.3": Claim("06", "Fig. 1", "A ViT's similarity matrix has a clear grid-like structure."),
    "F1.4": Claim("06", "Fig. 1", "A ResNet's representations form stages."),
    "F1.5": Claim("07", "Fig. 2", "The lower half of the ResNet's layers is most similar to about the lowest quarter of the ViT's."),
    "F1.6": Claim("07", "Fig. 2", "The upper half of the ResNet's layers is most similar to about the next third of the ViT's "
                              "(the best-matching ViT depth climbs with ResNet depth)."),
    "F1.7": Claim("07", "Fig. 2", "The final third of the ViT's layers is dissimilar to every ResNet layer."),
    "F1.8": Claim("07", "Fig. B.1", "The same picture for other pairs (ViT-B/32 against R50, ViT-H/14 against R152)."),
    # F2: local and global attention heads (08)
    "F2.1": Claim("08", "Fig. 3", "The lowest blocks have a mix of local and global heads."),
    "F2.2": Claim("08", "Fig. 3", "In the higher blocks every head is global."),
    "F2.3": Claim("08", "Fig. 4", "Trained on much less data, the lower blocks do not learn local heads."),
    "F2.4": Claim("08", "Fig. 4", "Those less-data models perform much worse."),
    "F2.5": Claim("08", "Fig. C.5", "The effect depends on the model: ViT-B/32 learns local heads even on ImageNet alone."),
    # F3: local heads and convolutions (09)
    "F3.1": Claim("09", "Fig. 5", "The CKA of first-block head groups with the ResNet's lower layers falls as the group's "
                              "mean attention distance grows."),
    "F3.2": Claim("09", "Fig. 5", "It falls by a large amount: from about 0.6 for the most local heads to about 0.25 for the most global."),
    # F4: effective receptive fields (10)
    "F4.1": Claim("10", "Fig. 6", "The ViT's lower-layer receptive fields are larger than the ResNet's."),
    "F4.2": Claim("10", "Fig. 6", "The ResNet's receptive fields grow gradually with depth."),
    "F4.3": Claim("10", "Fig. 6", "The ViT's receptive fields become much more global midway through the network."),
    "F4.4": Claim("10", "Fig. 6", "The ViT's post-residual receptive fields depend strongly on the centre patch."),
    "F4.5": Claim("10", "Fig. C.4", "Pre-residual attention receptive fields depend far less on the centre patch."),
    "F4.6": Claim("10", "Fig. C.4", "Pre-residual MLP receptive fields resemble the post-residual ones."),
    "F4.7": Claim("10", "Fig. C.4", "The ResNet's pre-residual fields look like its post-residual ones, but shrink at each stage's first block."),
    # F5: skip connections (11, sections 1-3)
    "F5.1": Claim("11", "Fig. 7", "The ViT's skip-to-branch norm ratio is much higher than the ResNet's, throughout the network."),
    "F5.2": Claim("11", "Fig. 7", "In the first half the CLS token travels mostly by the skip connection and the spatial tokens "
                              "get large branch updates; in the second half this is reversed."),
    "F5.3": Claim("11", "Fig. E.1", "The CLS token changes little early and quickly late, mostly through the MLP branches."),
    "F5.4": Claim("11", "Fig. E.2", "The cosine similarity of skip and branch tells the same story."),
    # F6: ViTs without the skip connections of one block (11, section 4)
    "F6.1": Claim("11", "Fig. 8", "Removing the skip connections of block i splits the similarity structure into before and after block i."),
    "F6.2": Claim("11", "§6", "Removing the skip connections of a middle block costs about 4% accuracy."),
    # F7: spatial localization (12)
    "F7.1": Claim("12", "Fig. 9", "Interior final-block ViT tokens are most similar to their own input patch."),
    "F7.2": Claim("12", "Fig. 9", "Edge tokens are similar to other edge positions."),
    "F7.3": Claim("12", "Fig. 9", "The ResNet's final-layer positions are much less spatially discriminative."),
    "F7.4": Claim("12", "Fig. D.3", "Earlier ResNet layers localize better than its final layer."),
    "F7.5": Claim("12", "Fig. 10", "A ViT trained with global average pooling (GAP) localizes significantly less."),
    # F8: linear probes, CLS against GAP (13)
    "F8.1": Claim("13", "Fig. 11", "The CLS model's spatial tokens probe poorly in the top layers, where the GAP model's and "
                               "the ResNet's positions probe well."),
    "F8.2": Claim("13", "Fig. 11", "The CLS model read at its CLS token and the GAP model read at its pooled tokens perform alike."),
    "F8.3": Claim("13", "Fig. 11", "Pooling the CLS model's tokens plateaus in the last layers."),
    "F8.4": Claim("13", "Fig. 11", "The GAP model's first token nearly matches its pooled tokens at the last layer."),
    # F9: data and model scale (14)
    "F9.1": Claim("14", "Fig. 12", "Even with 3% of the data, lower-layer representations are very similar to the 100% model's."),
    "F9.2": Claim("14", "Fig. 12", "Higher layers need much more data to become similar to the 100% model's."),
    "F9.3": Claim("14", "Fig. 12", "They need more data still in the larger model."),
    "F9.4": Claim("14", "Fig. 13", "More pre-training data gives much stronger intermediate representations (10-shot probes)."),
    "F9.5": Claim("14", "Fig. 13", "Larger ViTs have much stronger intermediate representations than ResNets."),
    # F10: MLP-Mixer (15)
    "F10.1": Claim("15", "App. H", "MLP-Mixers show distinct blocks of similar layers."),
    "F10.2": Claim("15", "App. H", "A smaller first block, then a larger one."),
    "F10.3": Claim("15", "App. H", "The block structure does not depend on the Mixer's size."),
    "F10.4": Claim("15", "App. H", "A Mixer's representations are more like a ViT's than a ResNet's."),
}


class Size(NamedTuple):
    value: float    # the paper's size, in the unit of the claim's effect (helpers.effects)
    words: str      # where the number comes from


# Claims whose statement in the paper has a number. Their verdict judges the direction (the protocol in
# helpers.verdicts) and, separately, the size against this number. Other "much ..." claims give no number
# to compare with: their verdicts judge direction only, and RESULTS.md says so in the statement.
SIZES = {
    "F3.2": Size(0.35, "CKA about 0.6 for the most local heads, about 0.25 for the most global, Fig. 5"),
    "F6.2": Size(4.0, "about 4 points of accuracy, §6"),
    "F9.4": Size(0.30, "a 30% gap in absolute 10-shot accuracy, Fig. 13"),
}

# Claims of sameness ("A is like B"): judged on |difference| <= noise (helpers.verdicts), marked ≈ in RESULTS.md.
SAMENESS = frozenset({"F4.6", "F8.2", "F8.3", "F8.4", "F9.1"})


def claims_of(notebook: str) -> list:
    """The claim numbers judged in `notebook` ('06'), in order."""
    if not (isinstance(notebook, str) and len(notebook) == 2 and notebook.isdigit()):  # '07_vit_vs_resnet' gave []
        raise ValueError(f"notebook must be a notebook's two-digit number such as '07', got {notebook!r}.")
    return [c for c, claim in CLAIMS.items() if claim.notebook == notebook]


# The comparisons helpers.report writes about a student's own two models (notebook 16). They are not claims of
# the paper (the scorecard and RESULTS.md list only CLAIMS), but each is judged by the same rule (helpers.verdicts).
REPORT_CLAIMS = {
    "R1": Claim("16", "label_cka", "The last recorded layers of the two models hold different amounts of class "
                                   "information (CKA with the class labels); the effect is oriented so that it is positive "
                                   "for the order the classifier reading shows."),
    "R2": Claim("16", "matched_depth", "The last recorded layer of model B has a counterpart in model A (its best-matching "
                                       "layer of A, cross-model CKA)."),
    "R3": Claim("16", "matched_depth", "Matched depth follows depth: deeper layers of model B best match deeper layers of "
                                       "model A (correlation of the two depths)."),
}
