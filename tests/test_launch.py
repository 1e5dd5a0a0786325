"""Launch links and set-up: badges from one configured slug, the Colab set-up cell run offline, Binder's files.

The Colab test runs a notebook's real set-up cell in a fresh virtual environment, with `google.colab`
simulated by a stub module and github.com redirected (by git's own `url.insteadOf`) to a local
repository: no network, and it must not reinstall torch.
"""

import json
import os
import re
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent


launch = load_script("launch")
colab_setup = load_script("colab_setup")
SLUG, BRANCH = launch.launch_config()


def _notebooks():
    return launch.source_notebooks() + sorted((ROOT / "notebooks" / "student").glob("*.ipynb"))


# --------------------------------------------------------------------------- badges and the launch block


def test_every_notebook_agrees_with_the_configured_slug():
    assert launch.disagreements() == [], "run: python scripts/launch.py"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: launch.relative(p))
def test_badges_open_the_notebook_they_sit_in(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    title = "".join(nb["cells"][0]["source"])
    links = re.findall(r"\]\((https://(?:colab\.research\.google\.com/github|mybinder\.org/v2/gh)/[^)]+)\)", title)
    own = launch.relative(path)
    assert len(links) == 2, f"{own}: expected one Colab and one Binder badge, found {links}"
    assert links[0] == f"https://colab.research.google.com/github/{SLUG}/blob/{BRANCH}/{own}"
    assert links[1] == f"https://mybinder.org/v2/gh/{SLUG}/{BRANCH}?labpath={own.replace('/', '%2F')}"
    code = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert f'"https://github.com/{SLUG}"' in code and f'"--branch", "{BRANCH}"' in code


def test_a_new_slug_rewrites_every_link_and_leaves_the_rest():
    path = ROOT / "notebooks" / "05_hooking_vit_and_resnet.ipynb"
    before = json.loads(path.read_text(encoding="utf-8"))
    after = launch.apply_launch(json.loads(path.read_text(encoding="utf-8")), "notebooks/05_x.ipynb",
                                "someone/fork", "dev")
    text = json.dumps(after)
    assert SLUG not in text.replace("someone/fork", "")
    assert "https://github.com/someone/fork" in text and "blob/dev/notebooks/05_x.ipynb" in text
    assert [c["source"] for c in after["cells"][1:]][1:] == [c["source"] for c in before["cells"][1:]][1:]
    code_before = "".join(before["cells"][1]["source"]).split(launch.BLOCK_LAST)[1]
    assert "".join(after["cells"][1]["source"]).split(launch.BLOCK_LAST)[1] == code_before


def test_a_missing_launch_block_is_a_clear_error():
    with pytest.raises(SystemExit, match="launch block"):
        launch.with_block("import numpy\n", launch.colab_block(SLUG, BRANCH), "notebooks/99_x.ipynb")


def test_a_malformed_slug_is_a_clear_error(tmp_path):
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[tool.course.launch]\nrepository = "no-owner"\nbranch = "main"\n')
    with pytest.raises(SystemExit, match="owner/name"):
        launch.launch_config(bad)


# --------------------------------------------------------------------------- Colab: what gets installed


def test_colab_plan_installs_what_is_missing_or_old_and_never_torch():
    needs = ["torch>=2.3", "torchvision>=0.18", "numpy>=1.24", "timm>=1.0.9", "ipywidgets>=8.0", "seaborn>=0.13"]
    have = {"torch": "2.1.0+cu121", "torchvision": "0.16.0", "numpy": "2.0.2", "timm": "0.9.16", "ipywidgets": "8.1.5"}
    to_install, notes = colab_setup.plan(needs, have)
    assert to_install == ["timm>=1.0.9", "seaborn>=0.13"]
    assert any("torch 2.1.0+cu121 is older" in n and "kept" in n for n in notes)
    to_install, notes = colab_setup.plan(needs, {})
    assert not any(r.startswith("torch") for r in to_install)
    assert any("torch is missing" in n for n in notes)


# ipywidgets 7.7.1's public names (ipywidgets/widgets/__init__.py of its wheel, read on 2026-12-03): every
# Colab runtime ships 7.7.1, and widgets of ipywidgets 8 do not render in hosted Colab
IPYWIDGETS_7_7 = {
    "Widget", "DOMWidget", "ValueWidget", "CoreWidget", "Checkbox", "ToggleButton", "Valid", "Button", "Box", "HBox",
    "VBox", "GridBox", "FloatText", "BoundedFloatText", "FloatSlider", "FloatProgress", "FloatRangeSlider",
    "FloatLogSlider", "IntText", "BoundedIntText", "IntSlider", "IntProgress", "IntRangeSlider", "Play", "ColorPicker",
    "DatePicker", "Output", "RadioButtons", "ToggleButtons", "Dropdown", "Select", "SelectionSlider", "SelectMultiple",
    "SelectionRangeSlider", "Tab", "Accordion", "HTML", "HTMLMath", "Label", "Text", "Textarea", "Password",
    "Combobox", "Controller", "interact", "interactive", "fixed", "interact_manual", "interactive_output", "jslink",
    "jsdlink", "Layout", "Image", "Video", "Audio", "Style", "TwoByTwoLayout", "AppLayout", "GridspecLayout",
    "FileUpload"}


def test_colab_keeps_its_ipywidgets_and_the_notebooks_use_only_what_7_7_has():
    colab = {"torch": "2.5.1+cu121", "torchvision": "0.20.1+cu121", "numpy": "1.26.4", "timm": "1.0.12",
             "ipywidgets": "7.7.1", "seaborn": "0.13.2", "matplotlib": "3.8.0", "safetensors": "0.4.5", "tqdm": "4.66.6"}
    to_install, _ = colab_setup.plan(colab_setup.course_requirements(), colab)
    assert not any(r.startswith("ipywidgets") for r in to_install), "Colab's ipywidgets 7.7.1 would be upgraded"
    used = set()
    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            used |= set(re.findall(r"\bwidgets\.([A-Za-z_]+)", "".join(cell["source"])))
    assert used and used <= IPYWIDGETS_7_7, f"not in ipywidgets 7.7: {sorted(used - IPYWIDGETS_7_7)}"


def test_colab_requirements_cover_what_the_notebooks_import():
    names = {colab_setup.parse(r)[0] for r in colab_setup.course_requirements()}
    assert {"torch", "torchvision", "timm", "numpy", "matplotlib", "ipywidgets", "safetensors"} <= names
    with pytest.raises(ValueError, match="name>=X.Y"):
        colab_setup.parse("numpy==1.24")


def _stub_colab_venv(tmp_path: Path) -> Path:
    """A fresh venv that sees this environment's packages (as Colab has its own) plus a stub google.colab."""
    env_dir = tmp_path / "colab-venv"
    venv.create(env_dir, with_pip=False)
    site = next(env_dir.glob("lib/python*/site-packages"))
    (site / "course_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    stub = tmp_path / "stub" / "google" / "colab"  # no google/__init__.py: other google.* packages still import
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('"""Stand-in for Colab\'s module: its presence is what the set-up cell checks."""\n')
    return env_dir


def _local_remote(tmp_path: Path) -> Path:
    """A git repository on disk holding what the set-up cell fetches (the working tree's version)."""
    remote = tmp_path / "remote"
    for part in ("helpers", "scripts"):
        shutil.copytree(ROOT / part, remote / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "requirements.txt"):
        (remote / name).write_bytes((ROOT / name).read_bytes())
    git = ["git", "-C", str(remote), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    subprocess.run(git[:3] + ["init", "-q", "-b", BRANCH], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "course"], check=True)
    return remote


def test_colab_set_up_cell_runs_offline_and_keeps_torch(tmp_path):
    env_dir = _stub_colab_venv(tmp_path)
    remote = _local_remote(tmp_path)
    nb = json.loads((ROOT / "notebooks" / "05_hooking_vit_and_resnet.ipynb").read_text(encoding="utf-8"))
    cell = "".join(nb["cells"][1]["source"])
    block = cell[: cell.index(launch.BLOCK_LAST)]
    program = ("import google.colab\n" + block +
               "from helpers import models\nprint('helpers from', models.__file__)\nmodels.choose_track()\n")
    content = tmp_path / "content"  # Colab's working directory
    content.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=str(tmp_path / "stub"), HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               PIP_NO_INDEX="1", GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0=f"url.{remote}.insteadOf",
               GIT_CONFIG_VALUE_0=f"https://github.com/{SLUG}")
    run = subprocess.run([str(env_dir / "bin" / "python"), "-c", program], cwd=content, env=env,
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    folder = SLUG.split("/")[1]
    assert f"helpers from {content / folder / 'helpers'}" in out
    assert "Colab set-up: everything the course needs is installed" in out
    assert "Track: lite (no pretrained weights cached and the hub is unreachable)" in out
    fresh_site = next(env_dir.glob("lib/python*/site-packages"))
    assert not list(fresh_site.glob("torch*")), "the set-up cell installed torch into the fresh environment"


# --------------------------------------------------------------------------- Binder


def _requirement_lines(path: Path) -> list[str]:
    lines = [line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line]


def test_binder_installs_the_same_packages_with_cpu_torch():
    binder = _requirement_lines(ROOT / "binder" / "requirements.txt")
    course = [line for line in _requirement_lines(ROOT / "requirements.txt") if line != "-e ."]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in binder, "Binder must take CPU torch wheels"
    assert sorted(line for line in binder if not line.startswith("--")) == sorted(course)


def test_binder_post_build_only_installs_the_helpers():
    post_build = ROOT / "binder" / "postBuild"
    assert os.access(post_build, os.X_OK), "repo2docker runs postBuild only when it is executable"
    commands = _requirement_lines(post_build)  # comments (and the #! line) dropped
    assert commands == ["pip install --no-deps -e ."], commands
