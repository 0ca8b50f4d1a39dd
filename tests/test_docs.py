"""The README is a front page, and every relative link in it and in docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from tests.conftest import PROJECT_ROOT

PAGES = [
    PROJECT_ROOT / "README.md",
    *sorted((PROJECT_ROOT / "docs").glob("*.md")),
    *sorted((PROJECT_ROOT / "ouroboros").glob("*/README.md")),
    PROJECT_ROOT / "ouroboros" / "README.md",
]

FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def prose(text: str) -> str:
    """The text less its code blocks and code spans, where a `[x](y)` is no link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped (but
    `-` and `_`), each space a `-`; a repeated one gets `-1`, `-2`, ..."""
    made: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in made:
            n += 1
            anchor = f"{slug}-{n}"
        made.add(anchor)
    return made


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = unquote(target).partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            broken.append(f"{target}: no such file")
        elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
            broken.append(f"{target}: no heading with that anchor in {goal.name}")
    return broken


def test_the_readme_is_a_front_page() -> None:
    lines = (PROJECT_ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the detail into docs/"


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    broken = {str(page.relative_to(PROJECT_ROOT)): broken_links(page) for page in PAGES}
    assert not {page: links for page, links in broken.items() if links}


def test_anchors_follow_githubs_rules(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Tool calls: native, text, auto\n## The agent's `plan`\n## Loops\n## Loops\n")
    assert anchors(page) == {"tool-calls-native-text-auto", "the-agents-plan", "loops", "loops-1"}
