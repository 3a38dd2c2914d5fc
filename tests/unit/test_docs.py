"""The user documentation (README.md and docs/*.md) stays consistent with the repository.

Every relative link must resolve to a file (and, with ``#anchor``, to a heading of it), every
repository path quoted in backticks must exist, and the pages speak of this project only:
no references to documents outside the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
REPO_PATH = re.compile(
    r"^(?:gpustack_operator|controllers|tests|deploy|examples|hack|docs)/[\w./-]*$"
)
OUTSIDE_REFERENCES = re.compile(r"\b(?:SPEC|DESIGN)\b|§")


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a heading: lower case, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading fragment of *page*, with GitHub's ``-1``, ``-2`` suffixes for repeats."""
    seen: dict[str, int] = {}
    result = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = github_anchor(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def prose(page: Path) -> str:
    """The page without fenced code blocks (console transcripts may name anything)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def test_there_are_pages() -> None:
    assert REPO / "README.md" in PAGES
    assert len(PAGES) > 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: {resolved} does not exist")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading with the anchor #{fragment}")
    assert not broken, f"{page.name} has broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_quoted_repository_paths_exist(page: Path) -> None:
    missing = []
    for span in CODE_SPAN.findall(prose(page)):
        path = span.split("::", 1)[0]
        if REPO_PATH.match(path) and not (REPO / path).exists():
            missing.append(path)
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_pages_cite_no_documents_outside_the_repository(page: Path) -> None:
    hits = [
        f"line {number}: {line.strip()}"
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE_REFERENCES.search(line)
    ]
    assert not hits, f"{page.name} cites documents users cannot see:\n" + "\n".join(hits)


def test_anchor_rule_matches_github() -> None:
    assert (
        github_anchor("Running the operator on a simulated cluster (`sim --cluster`)")
        == "running-the-operator-on-a-simulated-cluster-sim---cluster"
    )
    assert github_anchor("Worker: empty to converged") == "worker-empty-to-converged"


def test_code_and_tests_cite_the_projects_own_docs() -> None:
    """Rules are cited from docs/ (readable in the repository), never from section numbers of
    documents outside it."""
    outside = re.compile("(?:SPEC|DESIGN) " + chr(0xA7))  # built so this file does not match
    hits = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("gpustack_operator", "controllers", "tests", "hack")
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, "cite docs/ instead of documents outside the repository:\n" + "\n".join(hits)


DOCS_CITATION = re.compile(r'docs/([\w-]+\.md),\s*(?:#\s*)?"([^"\n]+)"')


def headings(page: Path) -> set[str]:
    """The text of every heading of *page* (outside fenced code), as written and without a
    trailing parenthesis: "Coalescing" names ``## Coalescing (`coalesce.py`)``."""
    result = set()
    for line in prose(page).splitlines():
        if match := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            result |= {match.group(1), re.sub(r"\s*\([^()]*\)$", "", match.group(1))}
    return result


def test_cited_docs_sections_exist() -> None:
    """Every ``docs/<page>.md, "<Section>"`` cited in code and tests names a heading of it
    (a citation may wrap onto the next line, also inside a comment)."""
    cited = 0
    broken = []
    for folder in ("gpustack_operator", "controllers", "tests", "hack"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for match in DOCS_CITATION.finditer(path.read_text(encoding="utf-8")):
                cited += 1
                page, section = REPO / "docs" / match.group(1), match.group(2)
                if not page.is_file() or section not in headings(page):
                    broken.append(f"{path.relative_to(REPO)}: docs/{match.group(1)}, {section!r}")
    assert cited > 50, "the citation pattern no longer matches how code cites docs/"
    assert not broken, "cited sections that do not exist:\n" + "\n".join(broken)
