"""No tensor is turned into numpy in a way that crashes on a GPU, in helpers or in any notebook.

On the CPU, `tensor.numpy()` and `np.asarray(tensor)` work; on CUDA they raise ("can't convert
cuda:0 device type tensor to numpy"). The tests run on the CPU, so they cannot see that crash by
running the code. This test reads the code instead (its syntax tree), with two rules:

1. `.numpy()` is called only on `.cpu()` (possibly through .detach(), .float(), ... in between):
   `x.detach().cpu().numpy()`. On the CPU `.cpu()` costs nothing, so the rule holds everywhere,
   also where a tensor happens to be on the CPU today (a rule with exceptions would be missed).
2. In notebooks, `np.asarray(f(...))` / `np.array(f(...))` of a function the notebook defines or
   receives (a learner's exercise function, say) is refused: such a function may return a tensor on
   the GPU. Convert its result explicitly (`.cpu().numpy()`, `float(...)`), or use helpers' functions.

It found notebook 11's `by_hand.numpy()` and `np.asarray(fn(...))` (cells 3 and 5), which crashed
on any GPU, the lite track included.
"""

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PASS_THROUGH = {"detach", "float", "double", "contiguous", "clone", "squeeze", "flatten", "ravel", "long", "int", "bool"}
SAFE_CALLS = {"list", "range", "sorted", "zip", "map", "tuple", "len", "reversed", "enumerate", "float", "int", "sum",
              "min", "max", "abs", "round"}


def _on_cpu(node: ast.AST) -> bool:
    """True when `node` (what .numpy() is called on) is x.cpu() or x.to('cpu'), through pass-through methods."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PASS_THROUGH:
        node = node.func.value
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    return node.func.attr == "cpu" or (node.func.attr == "to" and any(
        isinstance(a, ast.Constant) and a.value == "cpu" for a in node.args))


def unsafe_conversions(source: str, notebook: bool) -> list:
    """(line, code) of every conversion that breaks the rules of the module docstring."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "numpy" and not node.args and not _on_cpu(node.func.value):
            found.append((node.lineno, ast.unparse(node)[:100]))
        elif (notebook and node.func.attr in ("asarray", "array") and isinstance(node.func.value, ast.Name)
              and node.func.value.id in ("np", "numpy") and node.args and isinstance(node.args[0], ast.Call)
              and isinstance(node.args[0].func, ast.Name) and node.args[0].func.id not in SAFE_CALLS):
            found.append((node.lineno, ast.unparse(node)[:100]))
    return sorted(found)


def _code_cells(path: Path):
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "code":  # IPython magics and shell lines are not Python
            yield index, "\n".join(line for line in "".join(cell["source"]).splitlines()
                                   if not line.lstrip().startswith(("%", "!")))


def test_the_rules_catch_what_crashed_and_pass_what_is_safe():
    crashed = "by_hand = f(z)\nprint(by_hand.numpy())\nvalues = np.asarray(fn(block, z))\n"
    assert [line for line, _ in unsafe_conversions(crashed, notebook=True)] == [2, 3]
    safe = ("a = x.detach().cpu().numpy()\nb = x.cpu().float().numpy()\nc = x.to('cpu').numpy()\n"
            "d = np.asarray(list(y))\ne = float(fn(z))\nf = np.asarray(fn(z).cpu())\n")
    assert unsafe_conversions(safe, notebook=True) == []


@pytest.mark.parametrize("path", sorted((ROOT / "helpers").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT / "helpers")))
def test_helpers_convert_device_safely(path):
    found = unsafe_conversions(path.read_text(encoding="utf-8"), notebook=False)
    assert not found, f"{path.name}: tensor-to-numpy conversions that crash on a GPU (use .detach().cpu().numpy()): {found}"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").rglob("*.ipynb")), ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_notebooks_convert_device_safely(path):
    found = [(f"cell {index}",) + hit for index, source in _code_cells(path) for hit in unsafe_conversions(source, notebook=True)]
    assert not found, f"{path.name}: conversions that crash on a GPU (use .detach().cpu().numpy()): {found}"
