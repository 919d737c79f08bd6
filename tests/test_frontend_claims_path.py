"""`Frontend.claims_path`: a frontend claims paths that name a model without being its
file (a saved model's prefix or directory), ahead of the catch-alls; a claim that raises
is no claim, and objects are never offered to it."""

from __future__ import annotations

import pytest

import ge_hub
from ge_hub import plugins
from ge_hub.errors import FrontendNotFoundError
from ge_hub.registry import Frontend


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setenv(plugins.ALLOW_ENV, "")
    plugins.reset()
    registry = plugins.get_registry()
    registry.current_plugin = "test"
    yield registry
    plugins.reset()


def _frontend(name, accepts=lambda m: True, **claims):
    return Frontend(name, accepts=accepts, load=lambda m, **o: (name, o), **claims)


def test_a_prefix_is_claimed_ahead_of_catch_alls(registry, tmp_path):
    (tmp_path / "model.acme").write_text("program")
    prefix = str(tmp_path / "model")
    registry.add_frontend(_frontend("greedy"))  # claims nothing, accepts everything
    registry.add_frontend(_frontend(
        "acme", claims_path=lambda path: (tmp_path / "model.acme").exists()
        and str(path) == prefix))
    assert ge_hub.load(prefix) == ("acme", {})
    assert ge_hub.load(tmp_path / "elsewhere") == ("greedy", {})


def test_a_frontend_with_only_claims_path_is_not_a_catch_all():
    assert not _frontend("acme", claims_path=lambda path: False).is_catch_all


def test_a_raising_claim_is_no_claim(registry, tmp_path):
    def broken(path):
        raise RuntimeError("boom")

    registry.add_frontend(_frontend("acme", claims_path=broken))
    with pytest.raises(FrontendNotFoundError):
        ge_hub.load(str(tmp_path / "model"))


def test_objects_are_not_offered_to_claims_path(registry):
    seen = []
    registry.add_frontend(_frontend("acme", claims_path=lambda path: seen.append(path) or True))
    with pytest.raises(FrontendNotFoundError):
        ge_hub.load(object())
    assert seen == []
