"""The README's Quick start is what CI runs: keep the two in sync."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_has_exactly_two_one_line_commands():
    cmds = quick_start_commands()
    assert len(cmds) == 2, cmds
    assert "pytest" not in cmds[0] and "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert quick_start_commands()[1] in ci_lines
