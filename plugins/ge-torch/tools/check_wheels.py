"""Check that `pip install ge-hub[torch]` works the way it will from a package index.

    python plugins/ge-torch/tools/check_wheels.py WORKDIR      (the `torch-wheels` tox env)

1. Build wheels of ge-hub (the repository root) and ge-torch into WORKDIR/wheelhouse
   with `pip wheel --no-deps`.
2. Make a fresh virtual environment, WORKDIR/venv, that sees nothing of this machine's
   site-packages, and install PyTorch into it first: `torch==2.13.0` (override with
   GE_TORCH_SMOKE_TORCH), which pip takes from a local file where the machine's pip is
   set up with one. Installing it first matters: a bare `torch` requirement resolved
   from an index would pick whatever build the index has, a CUDA one on Linux.
3. Install the other third-party requirements the two wheels declare, from the index.
4. Install `ge-hub[torch]` with `--no-index --find-links WORKDIR/wheelhouse`: the extra
   must bring in ge-torch, and nothing may come from anywhere but the wheelhouse.
5. In a new interpreter, outside the source tree: `torch.compile(model, backend="ge")`
   without importing ge_torch first (PyTorch finds the backend through the entry point),
   compared with eager, and `ge_hub.load(model, example_inputs=...)` through the torch
   frontend; both must come from the installed wheels.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = ROOT / "plugins" / "ge-torch"
OUR_DISTRIBUTIONS = {"ge-hub", "ge-torch", "ge-onnx", "ge-paddle", "ge-mindspore"}

SMOKE = r"""
import sys, torch
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 6 * 6, 5)).eval()
x = torch.randn(2, 3, 8, 8)
with torch.no_grad():
    expected = model(x)
    actual = torch.compile(model, backend="ge")(x)
torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
import ge_hub, ge_torch
venv = sys.prefix
for module in (ge_hub, ge_torch):
    assert module.__file__.startswith(venv), f"{module.__name__} from {module.__file__}"
graph = ge_hub.load(model, example_inputs=(x,))
(y,) = ge_hub.compile(graph).run([x.numpy()])
torch.testing.assert_close(torch.from_numpy(y), expected, rtol=1e-4, atol=1e-5)
print("smoke test passed: torch", torch.__version__, "ge-hub", ge_hub.__version__)
"""


def run(*command, cwd=None) -> None:
    shown = ["<smoke test>" if c is SMOKE else str(c) for c in command]
    print("+", " ".join(shown), flush=True)
    subprocess.run([str(c) for c in command], check=True, cwd=cwd)


def requirements(wheel: Path) -> list[str]:
    """The unconditional Requires-Dist entries of a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    found = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = line.split(":", 1)[1].strip()
            if ";" not in requirement:  # extras and environment markers are not ours
                found.append(requirement)
    return found


def distribution_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def main(workdir: str) -> int:
    work = Path(workdir).resolve()
    wheelhouse, venv = work / "wheelhouse", work / "venv"
    for path in (wheelhouse, venv):
        shutil.rmtree(path, ignore_errors=True)
    wheelhouse.mkdir(parents=True)

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheelhouse, ROOT,
        PLUGIN)
    wheels = sorted(wheelhouse.glob("*.whl"))
    print("wheelhouse:", ", ".join(w.name for w in wheels))

    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    torch_requirement = os.environ.get("GE_TORCH_SMOKE_TORCH", "torch==2.13.0")
    run(*pip, torch_requirement)
    third_party = sorted({r for w in wheels for r in requirements(w)
                          if distribution_name(r) not in OUR_DISTRIBUTIONS
                          and distribution_name(r) != "torch"})
    if third_party:
        run(*pip, *third_party)
    run(*pip, "--no-index", "--find-links", wheelhouse, "ge-hub[torch]")

    # A new interpreter, in a directory where neither the source tree nor its packages
    # can be imported by accident.
    run(python, "-c", SMOKE, cwd=work)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
