"""The command-line reference (docs/cli.md) is what the generator writes from the commands now, and every
command's --help opens with a one-line purpose and an example that click parses."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from scanner.cli.main import cli
from scanner.cli.reference import help_markdown, markdown_text, reference

ROOT = Path(__file__).resolve().parents[1]


def test_committed_reference_matches_the_commands(tmp_path):
    out = tmp_path / "cli.md"
    subprocess.run([sys.executable, "-m", "scanner.cli.reference", str(out)], check=True, cwd=ROOT)
    committed = ROOT / "docs" / "cli.md"
    assert committed.is_file(), f"{committed} missing; run python -m scanner.cli.reference docs/cli.md"
    assert committed.read_text(encoding="utf-8") == out.read_text(encoding="utf-8"), (
        "docs/cli.md is stale; run python -m scanner.cli.reference docs/cli.md and commit the result"
    )


def test_the_reference_holds_every_option_of_every_command():
    text = reference(cli)
    for name, command in cli.commands.items():
        assert f"## acr-scan {name}\n" in text
        for param in command.params:
            if isinstance(param, click.Option):
                assert f"- `{param.opts[0]}" in text.split(f"## acr-scan {name}\n")[1], (
                    f"{name} {param.opts[0]}"
                )


def test_help_text_becomes_markdown_without_stray_markup():
    assert markdown_text("<name>.log and `a_b*` and x_y*") == r"\<name\>.log and `a_b*` and x\_y\*"
    assert help_markdown("Purpose.\n\n\b\nExample:\n  acr-scan demo\n\nMore\ntext.") == [
        "Purpose.",
        "",
        "Example:",
        "",
        "```console",
        "$ acr-scan demo",
        "```",
        "",
        "More text.",
        "",
    ]


def help_lines(args: list[str]) -> list[str]:
    out = CliRunner().invoke(cli, [*args, "--help"], terminal_width=100)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    return [line.strip() for line in lines[lines.index("") + 1 :]]  # after "Usage: ..." and its blank line


@pytest.mark.parametrize("name", [None, *sorted(cli.commands)])
def test_help_opens_with_a_purpose_and_an_example_that_parses(name):
    args = [name] if name else []
    lines = help_lines(args)
    purpose, blank, label = lines[:3]
    assert purpose.endswith(".") and blank == "", f"{args}: the help must open with a one-line purpose"
    assert label in ("Example:", "Examples:"), f"{args}: the purpose must be followed by an example"
    examples = lines[3 : lines.index("", 3)]
    assert examples, f"{args}: no example line under {label}"
    for example in examples:
        words = shlex.split(example)
        assert words[: 1 + len(args)] == ["acr-scan", *args], f"{example!r} is not an example of {args}"
        command = cli.commands[name] if name else cli
        command.make_context(" ".join(words[:2]), words[1 + len(args) :])  # raises on a wrong option
