"""docs/architecture.md's figure for how many modules one model call runs through is what
`bench/call_path.py` measures today, so the page cannot drift from the code."""

from __future__ import annotations

import re

from tests.conftest import PROJECT_ROOT, load_module

ARCHITECTURE = PROJECT_ROOT / "docs" / "architecture.md"
FIGURE = re.compile(r"`bench/call_path\.py`: (\d+) of the package's\s+modules")


def test_the_architecture_page_gives_the_measured_modules_per_model_call() -> None:
    call_path = load_module(PROJECT_ROOT / "bench" / "call_path.py")
    written = FIGURE.findall(ARCHITECTURE.read_text())
    assert len(written) == 1, "docs/architecture.md names bench/call_path.py's figure once"
    measured = call_path.median_modules(call_path.measure())
    assert int(written[0]) == measured, (
        f"docs/architecture.md says {written[0]} modules per model call; "
        f"bench/call_path.py measures {measured}: update the page"
    )
