"""The check each prepacked layout's tests share (ge_hub/offline/portability.py): a `.ghm`
holding the layout runs as stored here, with the same outputs; and a ge-hub from before the
layout (simulated: the layout gone from `layout_geometry`) refuses the non-portable file by
the layout's name and plans the portable one again from its graph, instead of reading the
layout as another one."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub.errors import OfflineModelError
from ge_hub.offline import portability


def check_older_ge_hub_plans_again(model, feeds: dict, layout: str, tmp_path, monkeypatch):
    expected = model.run(feeds)
    portable, fixed = tmp_path / "p.ghm", tmp_path / "f.ghm"
    model.save(portable)
    model.save(fixed, portable=False)
    for got, want in zip(ge_hub.load_compiled(fixed).run(feeds), expected):
        np.testing.assert_array_equal(got, want)
    older = {k: v for k, v in portability.layout_geometry().items() if k != layout}
    monkeypatch.setattr(portability, "layout_geometry", lambda: older)
    with pytest.raises(OfflineModelError, match=layout):
        ge_hub.load_compiled(fixed)
    with pytest.warns(RuntimeWarning, match="planned again from its graph"):
        again = ge_hub.load_compiled(portable)
    for got, want in zip(again.run(feeds), expected):
        np.testing.assert_array_equal(got, want)
