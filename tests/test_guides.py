"""The guides' quick commands take the time the guides state: run exactly as written, in a shell, with
`acr-scan` this checkout and `~` a home whose cache holds the session's tiny model.

What this guards against: a guide that says "about a minute" for a command that runs many times longer
(such as a recall audit of 16 searches after a scan that searched nothing). The limit is the stated time
times SLACK: room for a loaded machine, and still far below what an audit out of proportion costs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLACK = 5  # the stated time, times this: CI machines share their cores
WORDS = {"a": 1, "one": 1, "two": 2, "three": 3, "five": 5}
ISHMAEL = "Call me Ishmael. Some years ago, never mind how long precisely, I went to sea."


def section(path: Path, title: str) -> str:
    text = path.read_text()
    start = text.index(title)
    end = text.find("\n#", start + len(title))
    return text[start : end if end > 0 else None]


def console_commands(text: str) -> list[str]:
    """The `$ ` commands of the section's first console block, continuation lines joined."""
    block = re.search(r"```console\n(.+?)\n```", text, re.S).group(1)
    lines = block.replace("\\\n", " ").splitlines()
    return [line[2:] for line in lines if line.startswith("$ ")]


def stated_seconds(text: str, lead: str = "takes ") -> float:
    """'takes about a minute' -> 60; 'about two minutes' -> 120."""
    found = re.search(lead + r"about (\w+) (minute|second)s?", text)
    assert found, "the guide states how long its command takes"
    return WORDS[found.group(1)] * (60 if found.group(2) == "minute" else 1)


def shell(tmp_path: Path, tiny_dir: Path | None) -> dict:
    """An environment where `acr-scan` is this checkout and ~/.cache/acr-scanner/tiny the tiny model
    (None: an empty cache, as on a fresh machine)."""
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    (home / ".cache" / "acr-scanner").mkdir(parents=True)
    if tiny_dir is not None:
        (home / ".cache" / "acr-scanner" / "tiny").symlink_to(tiny_dir)
    bin_dir.mkdir()
    script = bin_dir / "acr-scan"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m scanner "$@"\n')
    script.chmod(0o755)
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("ACR_AUDIT_SAMPLE", None)  # the guide's command at its defaults, the recall audit's included
    env.pop("XDG_CACHE_HOME", None)
    return env


def my_texts(folder: Path) -> None:
    """A folder of .txt files of unseen prose, one holding a sentence the tiny model memorized."""
    import random

    from scanner.studies.tiny import salad

    rng = random.Random(1)
    folder.mkdir()
    for i in range(3):
        text = salad(rng, 80) + (f" {ISHMAEL} {salad(rng, 40)}" if i == 1 else "")
        (folder / f"text-{i}.txt").write_text(text)


def test_the_tiny_model_guide_takes_the_time_it_states(tiny_dir, tmp_path):
    guide = section(ROOT / "docs" / "scanning.md", "### Try it on the demo's tiny model")
    commands, limit = console_commands(guide), SLACK * stated_seconds(guide)
    assert commands[0].startswith("acr-scan ingest my-texts/") and "acr-scan scan" in commands[1]
    env = shell(tmp_path, tiny_dir)
    my_texts(tmp_path / "my-texts")
    start = time.monotonic()
    for command in commands:
        left = limit - (time.monotonic() - start)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=max(left, 1),
        )
        assert done.returncode == 0, (command, done.stderr[-3000:])
    took = time.monotonic() - start
    assert took < limit, f"the guide says about {limit / SLACK:.0f} s; it took {took:.0f} s"
    flagged = [json.loads(line) for line in (tmp_path / "flagged.jsonl").read_text().splitlines()]
    assert flagged and all(r["text"].strip() in ISHMAEL for r in flagged), (
        "the memorized sentence, and nothing else"
    )
    plan = json.loads((tmp_path / "run" / "audit_plan.json").read_text())
    assert plan["sample"] == "25%" and plan["size"] == 0, "no search spent, no audit bought"


def test_the_readme_demo_from_nothing_takes_the_time_it_states(tmp_path):
    """README's first command, its `acr-scan demo` part, in a home with no cache: the tiny model is
    trained, measured and scanned in about the time README states for 2 idle cores."""
    readme = section(ROOT / "README.md", "## On a fresh machine")
    limit = SLACK * stated_seconds(readme, lead="; ")
    command = re.search(r"```bash\n(.+?)\n```", readme, re.S).group(1).split("&&")[-1].strip()
    assert command == ".venv/bin/acr-scan demo", command
    env = shell(tmp_path, None)  # nothing cached: the demo trains the tiny model
    start = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", command.removeprefix(".venv/bin/")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=limit,
    )
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-3000:]
    assert took < limit, f"README says about {limit / SLACK:.0f} s; it took {took:.0f} s"
    assert "canary: 4/4 memorized" in done.stdout
    report = tmp_path / "home" / ".cache" / "acr-scanner" / "tiny" / "demo-scan" / "report.html"
    assert report.is_file() and str(report) in done.stdout, (
        "the report lies where README says, its path printed"
    )
