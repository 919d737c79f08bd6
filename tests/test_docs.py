"""The README and the architecture page link only to files of this repository, and those
files exist: the documentation ships with the code and must not send readers elsewhere."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/architecture.md"]
# [text](target) and bare URLs.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://|\bwww\.", re.IGNORECASE)


def links(text: str) -> list[str]:
    return LINK.findall(text)


@pytest.mark.parametrize("page", PAGES)
def test_page_links_only_files_of_the_repository(page):
    path = ROOT / page
    text = path.read_text()
    outside = [line for line in text.splitlines() if URL.search(line)]
    assert not outside, f"{page} points outside the repository:\n" + "\n".join(outside)
    missing = []
    for target in links(text):
        file = target.split("#", 1)[0]
        if file and not (path.parent / file).exists():
            missing.append(target)
    assert not missing, f"{page} links files that do not exist: {missing}"


def test_the_readme_links_the_architecture_page():
    assert "docs/architecture.md" in links((ROOT / "README.md").read_text())


def test_the_checks_see_links_and_urls():
    assert links("see [the page](docs/a.md) and [x](b.md#part)") == ["docs/a.md", "b.md#part"]
    assert URL.search("at https://example.org") and URL.search("www.example.org")
    assert not URL.search("ge_hub.ops.reference and a::b")
