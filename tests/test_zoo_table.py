"""scripts/zoo_table.py: the data series it lays out is the main ViT recipe, by seed and data fraction."""

from script_module import load_script

from helpers import zoo
from helpers.models import lite_card

zoo_table = load_script("zoo_table")


def test_the_data_series_holds_only_the_main_recipe_by_seed_and_fraction():
    series = zoo_table.data_series()
    assert series[0] == {0.01: "lite-vit-data01", 0.03: "lite-vit-data03", 0.10: "lite-vit-data10",
                         0.30: "lite-vit-data30", 1.0: "lite-vit"}
    members = {name for row in series.values() for name in row.values()}
    # variants that differ in more than data and seed are not part of it
    assert not members & {"lite-vit-gap", "lite-vit-nocutmix", "lite-vit-noskip-1", "lite-mixer", "lite-resnet"}
    for seed, row in series.items():
        for fraction, name in row.items():
            assert (zoo.ZOO[name].seed, zoo.ZOO[name].data_fraction) == (seed, fraction)


def test_a_series_row_shows_each_cards_accuracy_and_local_heads():
    row = next(line for line in zoo_table.series_table() if line.startswith("| 0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    for cell, name in zip(cells, zoo_table.data_series()[0].values()):
        card = lite_card(name)
        uniform = card["uniform_attention_distance_px"]
        local = sum(d < 0.6 * uniform for d in card["attention_distance_px"][0] + card["attention_distance_px"][1])
        assert cell == f"{card['test_accuracy']:.2%} ({local})", name


def test_local_heads_counts_blocks_0_and_1_only():
    card = {"uniform_attention_distance_px": 10.0,
            "attention_distance_px": [[5.0, 6.5, 9.0], [3.0, 5.99, 8.0], [1.0, 1.0, 1.0]]}
    assert zoo_table.local_heads(card) == 3  # 5.0, 3.0 and 5.99 are below 6.0; block 2 does not count
