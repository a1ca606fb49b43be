"""The documentation site builds with `mkdocs build --strict` (offline), and a broken link fails it: a
guide that links a page or an anchor that does not exist, or a page left out of the nav, is an error."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly_with_readme_as_home(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "acr-scanner" in home and 'href="docs/scanning/"' in home  # README's relative links, resolved
    assert (tmp_path / "site" / "docs" / "cli" / "index.html").is_file()
    assert (
        tmp_path / "site" / "bench" / "index.html"
    ).is_file()  # bench/README.md, published from outside docs/
    assert (tmp_path / "site" / "bench" / "gpu" / "RESULTS" / "index.html").is_file()


def copy_of_the_docs(to: Path) -> Path:
    """The files the site is built from, in a scratch tree (mkdocs.yml, the hook and what it publishes)."""
    to.mkdir()
    for name in ("mkdocs.yml", "README.md", "DEVELOPERS.md"):
        shutil.copy(ROOT / name, to / name)
    for folder in ("docs", "schemas", "cluster", "docker"):
        shutil.copytree(ROOT / folder, to / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for page in [ROOT / "bench" / "README.md", *sorted(ROOT.glob("bench/*/RESULTS.md"))]:
        (to / page.parent.relative_to(ROOT)).mkdir(parents=True, exist_ok=True)
        shutil.copy(page, to / page.relative_to(ROOT))
    return to


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    root = copy_of_the_docs(tmp_path / "repo")
    guide = root / "docs" / "measuring.md"
    text = guide.read_text(encoding="utf-8")
    guide.write_text(
        text + "\n[gone](nowhere.md) and [lost](scanning.md#no-such-section)\n", encoding="utf-8"
    )
    done = build(root, tmp_path / "site")
    assert done.returncode != 0
    assert "nowhere.md" in done.stderr and "no-such-section" in done.stderr, done.stderr
