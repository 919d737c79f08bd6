"""Check that `pip install ge-hub[mindspore]` works the way it will from a package index.

    python plugins/ge-mindspore/tools/check_wheels.py WORKDIR   (the `mindspore-wheels` env)

1. Build wheels of ge-hub (the repository root) and ge-mindspore into WORKDIR/wheelhouse
   with `pip wheel --no-deps`.
2. Make a fresh virtual environment, WORKDIR/venv, that sees nothing of this machine's
   site-packages, and install the third-party requirements the two wheels declare from
   the index (mindspore, NumPy 1.x, ...; PIP_CONSTRAINT, which tox sets to the plugin's
   constraints.txt, pins them).
3. Install `ge-hub[mindspore]` with `--no-index --find-links WORKDIR/wheelhouse`: the
   extra must bring in ge-mindspore, and nothing may come from anywhere but the
   wheelhouse.
4. In new interpreters, outside the source tree (script files: MindSpore refuses to
   compile code given with `python -c`): export a small Cell to MINDIR; read that file
   with `ge_hub.load` without mindspore being imported; load the Cell itself; compare
   both with MindSpore. Everything must come from the installed wheels.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = ROOT / "plugins" / "ge-mindspore"
OUR_DISTRIBUTIONS = {"ge-hub", "ge-torch", "ge-onnx", "ge-paddle", "ge-mindspore"}

EXPORT = r"""
import sys
import numpy as np
import mindspore as ms
from mindspore import nn

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.fc = nn.Dense(4 * 8 * 8, 5)

    def construct(self, x):
        y = self.relu(self.bn(self.conv(x)))
        return self.fc(y.reshape(y.shape[0], -1))

ms.set_seed(0)
net = Net()
net.set_train(False)
x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
np.save("x.npy", x)
np.save("expected.npy", net(ms.Tensor(x)).asnumpy())
ms.export(net, ms.Tensor(x), file_name="net", file_format="MINDIR")

import ge_hub, ge_mindspore
venv = sys.prefix
for module in (ge_hub, ge_mindspore):
    assert module.__file__.startswith(venv), f"{module.__name__} from {module.__file__}"
(y,) = ge_hub.compile(ge_hub.load(net, example_inputs=(x,))).run([x])
np.testing.assert_allclose(y, np.load("expected.npy"), rtol=1e-4, atol=1e-5)
print("Cell through ge-hub matches MindSpore")
"""

READ = r"""
import sys
import numpy as np
import ge_hub
x = np.load("x.npy")
(y,) = ge_hub.compile(ge_hub.load("net.mindir")).run([x])
assert "mindspore" not in sys.modules, "reading MINDIR imported mindspore"
np.testing.assert_allclose(y, np.load("expected.npy"), rtol=1e-4, atol=1e-5)
print("smoke test passed: ge-hub", ge_hub.__version__, "read net.mindir without mindspore")
"""


def run(*command, cwd=None) -> None:
    print("+", " ".join(str(c) for c in command), flush=True)
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
    wheelhouse, venv, scratch = work / "wheelhouse", work / "venv", work / "smoke"
    for path in (wheelhouse, venv, scratch):
        shutil.rmtree(path, ignore_errors=True)
    wheelhouse.mkdir(parents=True)
    scratch.mkdir()

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheelhouse, ROOT,
        PLUGIN)
    wheels = sorted(wheelhouse.glob("*.whl"))
    print("wheelhouse:", ", ".join(w.name for w in wheels))

    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    third_party = sorted({r for w in wheels for r in requirements(w)
                          if distribution_name(r) not in OUR_DISTRIBUTIONS})
    run(*pip, *third_party)
    run(*pip, "--no-index", "--find-links", wheelhouse, "ge-hub[mindspore]")

    # New interpreters, in a directory where neither the source tree nor its packages
    # can be imported by accident.
    (scratch / "export.py").write_text(EXPORT)
    (scratch / "read.py").write_text(READ)
    run(python, scratch / "export.py", cwd=scratch)
    run(python, scratch / "read.py", cwd=scratch)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
