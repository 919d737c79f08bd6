"""Check that `pip install ge-hub[paddle]` works the way it will from a package index.

    python plugins/ge-paddle/tools/check_wheels.py WORKDIR      (the `paddle-wheels` tox env)

1. Build wheels of ge-hub (the repository root) and ge-paddle into WORKDIR/wheelhouse
   with `pip wheel --no-deps`.
2. Make a fresh virtual environment, WORKDIR/venv, that sees nothing of this machine's
   site-packages, and install the third-party requirements the two wheels declare from
   the index (paddlepaddle among them; PIP_CONSTRAINT, set by tox, pins it to 3.3.1).
3. Install `ge-hub[paddle]` with `--no-index --find-links WORKDIR/wheelhouse`: the extra
   must bring in ge-paddle, and nothing may come from anywhere but the wheelhouse.
4. In new interpreters, outside the source tree: save a small Layer with
   `paddle.jit.save`; load the saved `.json` through `ge_hub.load` in an interpreter that
   never imports paddle (and check that it did not), and the Layer itself through
   `ge_hub.load(layer, input_spec=...)`; both compared with Paddle, both from the
   installed wheels.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = ROOT / "plugins" / "ge-paddle"
OUR_DISTRIBUTIONS = {"ge-hub", "ge-torch", "ge-onnx", "ge-paddle", "ge-mindspore"}

SAVE = r"""
import sys, numpy as np, paddle
paddle.seed(0)
layer = paddle.nn.Sequential(paddle.nn.Conv2D(3, 4, 3), paddle.nn.ReLU(), paddle.nn.Flatten(),
                             paddle.nn.Linear(4 * 6 * 6, 5))
layer.eval()
x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype("float32")
np.save("x.npy", x)
np.save("expected.npy", layer(paddle.to_tensor(x)).numpy())
spec = [paddle.static.InputSpec([None, 3, 8, 8], "float32", "x")]
import ge_hub, ge_paddle
for module in (ge_hub, ge_paddle):
    assert module.__file__.startswith(sys.prefix), f"{module.__name__} from {module.__file__}"
graph = ge_hub.load(layer, input_spec=spec)
(y,) = ge_hub.compile(graph).run([x])
np.testing.assert_allclose(y, np.load("expected.npy"), rtol=1e-4, atol=1e-5)
paddle.jit.save(layer, "saved/model", input_spec=spec)
print("Layer loaded and saved: paddle", paddle.__version__)
"""

LOAD = r"""
import sys, numpy as np, ge_hub
(y,) = ge_hub.compile(ge_hub.load("saved/model.json")).run([np.load("x.npy")])
np.testing.assert_allclose(y, np.load("expected.npy"), rtol=1e-4, atol=1e-5)
assert "paddle" not in sys.modules, "loading a saved model imported paddle"
print("smoke test passed: saved model read without paddle, ge-hub", ge_hub.__version__)
"""


def run(*command, cwd=None) -> None:
    shown = ["<script>" if c in (SAVE, LOAD) else str(c) for c in command]
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
    for path in (wheelhouse, venv, work / "saved"):
        shutil.rmtree(path, ignore_errors=True)
    wheelhouse.mkdir(parents=True)

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheelhouse, ROOT,
        PLUGIN)
    wheels = sorted(wheelhouse.glob("*.whl"))
    print("wheelhouse:", ", ".join(w.name for w in wheels))

    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    third_party = sorted({r for w in wheels for r in requirements(w)
                          if distribution_name(r) not in OUR_DISTRIBUTIONS})
    if third_party:
        run(*pip, *third_party)
    run(*pip, "--no-index", "--find-links", wheelhouse, "ge-hub[paddle]")

    # New interpreters, in a directory where neither the source tree nor its packages
    # can be imported by accident.
    run(python, "-c", SAVE, cwd=work)
    run(python, "-c", LOAD, cwd=work)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
