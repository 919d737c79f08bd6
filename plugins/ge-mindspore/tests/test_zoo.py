"""The zoo against MindSpore: each network from its Cell and from its MINDIR file, within
1e-4 relative error and with no Python step in the compiled plan."""

from __future__ import annotations

import pytest

from ge_mindspore import testing

from . import zoo

CASES = [pytest.param(name, source, id=f"{name}-{source}",
                      marks=[pytest.mark.slow] if name in zoo.SLOW else [])
         for name in zoo.MODELS for source in ("cell", "mindir")]


@pytest.mark.parametrize(("name", "source"), CASES)
def test_zoo_matches_mindspore(name, source, export):
    cell, x = zoo.build(name)
    model = cell if source == "cell" else export(cell, x, name=name)
    report = testing.compare(model, [x.asnumpy()])
    print(f"zoo {name} {source}: max rel error {report.max_rel_error:.2e}, "
          f"python steps {report.python_steps}")
    assert report.max_rel_error < 1e-4, report
    assert report.python_steps == 0, report
