"""No import circles among the modules that read images and the report's compute stage: each module's imports
(top-level and inside functions) are read from its source, and the graph between these modules must have no cycle."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GROUPS = {
    "images": ["helpers.data", "helpers.guards", "helpers.loading", "helpers.image_cache", "helpers.image_types"],
    "report": ["helpers.report.compute", "helpers.report.attention_maps", "helpers.report.cached"],
}


def imports_of(module: str) -> set:
    """Every helpers module that `module` imports anywhere in its source (from x import y counts x and x.y)."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("helpers")}


def graph(nodes: list) -> dict:
    """{module: [the modules of `nodes` it imports]}."""
    return {n: [m for m in imports_of(n) if m in nodes and m != n] for n in nodes}


def cycle(edges: dict) -> list | None:
    """A cycle in the import graph `edges` (as a list of module names), or None."""
    nodes, state = list(edges), {}

    def visit(n, path):
        state[n] = "open"
        for m in edges[n]:
            if state.get(m) == "open":
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m, path + [m])):
                return found
        state[n] = "done"
        return None

    for n in nodes:
        if n not in state and (found := visit(n, [n])):
            return found
    return None


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_no_import_circle(group):
    found = cycle(graph(GROUPS[group]))
    assert found is None, f"import circle: {' -> '.join(found)}"


def test_the_check_finds_a_circle():
    edges = graph(GROUPS["images"])
    assert "helpers.guards" in edges["helpers.data"]  # the real graph has edges to find a circle in
    edges["helpers.guards"] = edges["helpers.guards"] + ["helpers.data"]  # the import guards.py used to make
    assert cycle(edges) is not None
