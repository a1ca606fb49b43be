"""MkDocs hook: the site is the repository's Markdown laid out as the code host shows it.

The guides link to files outside docs/ (../bench/README.md, ../schemas/results.md) and README.md links
into docs/, so that every page reads the same on the code host without the site. MkDocs resolves links
inside its docs_dir only; this hook hands it the files at their paths in the repository instead, so the
same relative links resolve on the site, README.md becomes its home page, and `mkdocs build --strict`
fails on a link to anything that is not published here.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

# What the site publishes, as repository paths (glob patterns); a link to any other file is broken.
PUBLISHED = ("README.md", "DEVELOPERS.md", "docs/*.md", "docs/img/*", "schemas/*.md", "bench/README.md",
             "bench/*/RESULTS.md", "cluster/*", "docker/*")


def on_files(files: Files, config) -> Files:
    root = Path(config.config_file_path).parent
    paths = sorted({p for pattern in PUBLISHED for p in root.glob(pattern) if p.is_file()})
    published = [File(p.relative_to(root).as_posix(), str(root), config.site_dir, config.use_directory_urls)
                 for p in paths]
    # The theme's and plugins' own assets (not from docs_dir) stay.
    return Files([f for f in files if not f.abs_src_path or not f.abs_src_path.startswith(config.docs_dir)]
                 + published)
