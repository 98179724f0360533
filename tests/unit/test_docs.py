"""The documentation: every relative link in the README, docs/ and benchmarks/ resolves (the
file, and the heading an anchor names), and the README's option tables list exactly the
options the source accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backlog_source.core import settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("*.md")])
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading '{anchor}'")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def _readme_option_names() -> set[str]:
    """The first-column names of the README's two option tables (Spark's, this source's)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Options", 1)[1].split("\n### ", 1)[0]
    names = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def test_the_readme_documents_every_option_and_no_other() -> None:
    accepted = set(settings._OPTION_NAMES.values()) | {"kafka.bootstrap.servers", "kafka.*"}
    documented = _readme_option_names()
    assert documented - accepted == set(), "documented, but the source does not accept them"
    assert accepted - documented == set(), "accepted, but not in the README's option tables"
