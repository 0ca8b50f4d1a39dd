"""The files protocol (`llm.tool_protocol = "files"`) through whole runs in the process: no tool
described, the workspace's small files shown whole in each session's opening (task's first,
never through a link, never in part), a file changed by its path and a fenced block without a
read first, and a reply that changes nothing told how, in the protocol's own words."""

from __future__ import annotations

import os

from ouroboros.ground import prompts
from ouroboros.model.scripted import Reply
from ouroboros.progress import tasks
from ouroboros.progress.records import Task
from ouroboros.tools.shown import MAX_FILE_BYTES, text_of
from ouroboros.tools.workspace import Workspace
from tests.conftest import Project
from tests.inprocess import run_here
from tests.test_tool_protocol_run import messages

FINISH = Reply(text='{"name": "finish", "arguments": {"summary": "done"}}')
FILES = {"tool_protocol": "files"}


def test_a_file_shown_is_changed_by_its_path_and_a_block_without_a_read(project: Project) -> None:
    (project.root / "SYSTEM_PROMPT.md").write_text("# Purpose\nFix `add` in `calc.py`.\n")
    (project.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (project.workspace / "notes").mkdir()
    (project.workspace / "notes" / "a.txt").write_text("a note\n")
    nothing = Reply(text="The bug is the minus sign.")
    block = Reply(text="calc.py\n```python\ndef add(a, b):\n    return a + b\n```")
    ran = run_here(project, [nothing, block, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    first = ran.chat_requests()[0]
    assert "tools" not in first
    system, opening = (m["content"] for m in first["messages"])
    assert system.startswith(prompts.FILES_PREAMBLE)
    assert "tool" not in system.replace("Purpose", "")
    assert opening.endswith(
        "Your workspace's files:\n\ncalc.py\n```\ndef add(a, b):\n    return a - b\n```"
        "\n\nnotes/a.txt\n```\na note\n```"
    )
    told = ran.chat_requests()[1]["messages"][-1]
    assert told == {"role": "user", "content": prompts.NO_CHANGE[0]}


def test_no_file_is_shown_through_a_link_in_part_or_as_bytes(
    project: Project, tmp_path: os.PathLike[str]
) -> None:
    """A link the agent planted is not followed (its target is outside); a file too big is
    named, never cut (a model writing it whole from a part would lose the rest); bytes that
    are no text are left out."""
    secret = project.root.parent / "secret.txt"
    secret.write_text("the secret outside\n")
    (project.workspace / "inside.txt").symlink_to(secret)
    (project.workspace / "folder").symlink_to(project.root.parent)
    (project.workspace / "big.log").write_text("x" * (MAX_FILE_BYTES + 1))
    (project.workspace / "blob.bin").write_bytes(b"\x00\x01\x02")
    (project.workspace / "small.txt").write_text("small\n")
    ran = run_here(project, [FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    opening = ran.chat_requests()[0]["messages"][1]["content"]
    assert "the secret outside" not in opening
    assert "small.txt\n```\nsmall\n```" in opening
    assert opening.endswith("Files too long to show here: big.log.")
    assert "blob.bin" not in opening
    assert "inside.txt" not in opening
    workspace = Workspace(project.workspace, project.root / "SYSTEM_PROMPT.md")
    assert text_of(workspace, "inside.txt") is None  # were it listed (a race): not read through


def test_the_files_shown_fit_their_share_and_the_tasks_come_first(project: Project) -> None:
    """What does not fit the share of the window is named; the file the task names is shown
    before the others, whatever its name's order."""
    (project.root / "SYSTEM_PROMPT.md").write_text("# Purpose\nFix `zeta.py`.\n")
    (project.workspace / "zeta.py").write_text("z = 1\n")
    for n in range(40):
        (project.workspace / f"a{n:02}.txt").write_text(f"line {n}\n" * 30)
    ran = run_here(project, [FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    opening = ran.chat_requests()[0]["messages"][1]["content"]
    assert opening.index("zeta.py\n```") < opening.index("a00.txt\n```")
    assert "Files too long to show here: " in opening
    assert "and " in opening.rsplit("Files too long", 1)[1]  # more than are named
    assert len(opening) < 4096 * 2


def test_a_file_with_fences_is_shown_in_a_longer_fence(project: Project) -> None:
    (project.workspace / "README.md").write_text("Run:\n```sh\nmake\n```\n")
    ran = run_here(project, [FINISH], llm=FILES)
    opening = ran.chat_requests()[0]["messages"][1]["content"]
    assert opening.endswith("README.md\n````\nRun:\n```sh\nmake\n```\n````")


def test_a_bare_block_that_keeps_most_of_a_shown_file_is_its_new_text(project: Project) -> None:
    """The real small model often writes the changed file with no path: taken for the one file
    shown whose lines it keeps most of; a snippet (a new function alone) would lose the rest of
    the file written whole, and is not taken."""
    (project.workspace / "todo.txt").write_text("call mom\npay rent\n")
    whole = Reply(text="Here it is:\n\n```\ncall mom\npay rent\nbuy milk\n```")
    ran = run_here(project, [whole, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "todo.txt").read_text() == "call mom\npay rent\nbuy milk\n"
    sent = ran.chat_requests()[1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": whole.text}  # as written, no call added


def test_a_bare_snippet_of_a_shown_file_changes_nothing(project: Project) -> None:
    (project.workspace / "mathlib.py").write_text("def double(x):\n    return x * 2\n")
    snippet = Reply(text="```\ndef square(x):\n    return x * x\n```")
    ran = run_here(project, [snippet, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "mathlib.py").read_text() == "def double(x):\n    return x * 2\n"
    assert ran.chat_requests()[1]["messages"][-1]["content"] == prompts.NO_CHANGE[0]


def test_a_bare_block_two_files_share_alike_changes_neither(project: Project) -> None:
    (project.workspace / "a.txt").write_text("same\n")
    (project.workspace / "b.txt").write_text("same\n")
    ran = run_here(project, [Reply(text="```\nsame\nmore\n```"), FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "a.txt").read_text() == "same\n"
    assert (project.workspace / "b.txt").read_text() == "same\n"


def test_an_operators_task_is_checked_after_a_write_and_not_listed(project: Project) -> None:
    """The opening is the task and the files: a small model answered a listed task's name with
    names like it. A write's result says the check's outcome instead, failing or passing; once
    every task passes the run ends (no tool is offered to finish with)."""
    (project.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    check = 'python3 -c "import calc; assert calc.add(2, 3) == 5"'
    tasks.post(project.state, [Task(text="fix-add", check=check)])
    # The same size, in the same second: a cached bytecode of the wrong one would be run.
    wrong = Reply(text="calc.py\n```\ndef add(a, b):\n    return a * b\n```")
    right = Reply(text="calc.py\n```\ndef add(a, b):\n    return a + b\n```")
    ran = run_here(project, [wrong, right, Reply(text="more")], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    requests = ran.chat_requests()
    assert len(requests) == 2  # every task passes: the run ends, as a finish would end it
    assert "fix-add" not in requests[0]["messages"][1]["content"]
    after_wrong = requests[1]["messages"][-1]["content"]
    assert "[the task's check exited 1:\n" in after_wrong
    assert "AssertionError" in after_wrong
    assert "the check of T1 passes now" in messages(project)[-1].message.content


def test_every_file_a_reply_writes_whole_is_written(project: Project) -> None:
    """A change to two files comes in one reply: each block is that file's last word."""
    cart = '"""A cart."""\n\n\ndef calc_total(items):\n    total = sum(items)\n    return total\n'
    (project.workspace / "cart.py").write_text(cart)
    (project.workspace / "shop.py").write_text("from cart import calc_total\n")
    renamed = cart.replace("calc_total", "cart_total")
    both = Reply(
        text=f"cart.py\n```\n{renamed}```\n\nshop.py\n```\nfrom cart import cart_total\n```"
    )
    ran = run_here(project, [both, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "cart.py").read_text() == renamed
    assert (project.workspace / "shop.py").read_text() == "from cart import cart_total\n"
    assert "only the first ran" not in str(ran.chat_requests()[1]["messages"])


def test_a_file_written_back_unchanged_is_said_to_be_unchanged(project: Project) -> None:
    (project.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    same = Reply(text="calc.py\n```\ndef add(a, b):\n    return a - b\n```")
    ran = run_here(project, [same, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    said = ran.chat_requests()[1]["messages"][-1]["content"]
    assert said.endswith("calc.py already holds exactly this text: nothing changed")


def test_a_loop_restarts_the_session_at_once_without_a_nudge(project: Project) -> None:
    """A small model copies a nudge as it copies its own loop: in the files protocol a loop
    starts a fresh session right away, with the files as they are now."""
    (project.workspace / "todo.txt").write_text("call mom\n")
    same = Reply(text="I will add it.")
    ran = run_here(project, [same, same, same, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    requests = ran.chat_requests()
    assert len(requests) == 4
    fresh = requests[3]["messages"]
    assert len(fresh) == 2
    assert fresh[1]["content"].startswith("Session 2.")
    said = [m["content"] for r in requests for m in r["messages"] if m["role"] == "user"]
    assert not any("going in circles:" in s for s in said)


def test_a_bare_block_labelled_with_its_files_path_writes_the_rest(project: Project) -> None:
    """The real model wrote `shapes.py` as the first line inside the block: a label, not a line
    of the file (kept, the file would no longer run)."""
    (project.workspace / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    labelled = Reply(
        text="```\nshapes.py\ndef area(w, h):\n    return w * h\n\n\n"
        "def perimeter(w, h):\n    return 2 * (w + h)\n```"
    )
    ran = run_here(project, [labelled, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    written = (project.workspace / "shapes.py").read_text()
    assert written.startswith("def area(w, h):\n")
    assert written.endswith("return 2 * (w + h)\n")


def test_a_snippet_under_a_shown_files_path_is_not_written(project: Project) -> None:
    """The real model wrote `square` alone under `mathlib.py`: written whole, the file lost
    `double`, and no later session could know it had been there. A block that keeps less than
    half of a shown file's lines is no whole new text: nothing is written, and the model is
    told to write the whole file. A file of one line may be rewritten."""
    (project.workspace / "mathlib.py").write_text("def double(x):\n    return x * 2\n")
    (project.workspace / "hello.txt").write_text("hi\n")
    snippet = Reply(text="mathlib.py\n```\ndef square(x):\n    return x * 2\n```")
    rewrite = Reply(text="hello.txt\n```\nhello\n```")
    ran = run_here(project, [snippet, rewrite, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "mathlib.py").read_text() == "def double(x):\n    return x * 2\n"
    assert ran.chat_requests()[1]["messages"][-1]["content"] == prompts.NO_CHANGE[0]
    assert (project.workspace / "hello.txt").read_text() == "hello\n"


def test_a_bare_block_keeping_half_of_a_two_line_file_is_not_taken_for_it(
    project: Project,
) -> None:
    """The real model wrote `def square(x): return x * 2` bare, for a `mathlib.py` of `double`
    returning `x * 2`: half its lines, and not its new text."""
    (project.workspace / "mathlib.py").write_text("def double(x):\n    return x * 2\n")
    ran = run_here(
        project, [Reply(text="```\ndef square(x):\n    return x * 2\n```"), FINISH], llm=FILES
    )
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "mathlib.py").read_text() == "def double(x):\n    return x * 2\n"


def test_a_bare_block_keeping_half_of_a_two_line_file_from_its_start_is_its_new_text(
    project: Project,
) -> None:
    """`add` fixed keeps `def add(a, b):`, where the file starts: its new text."""
    (project.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fixed = Reply(text="Here:\n\n```\ndef add(a, b):\n    return a + b\n```")
    ran = run_here(project, [fixed, FINISH], llm=FILES)
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
