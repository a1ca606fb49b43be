"""`acr-scan ARGS` run in this test process: the same entry point as the console script
(scanner.cli.main.main: its exit codes, its messages on stderr, its log lines) without a new interpreter
that imports torch and transformers again (about 5 s of CPU a call, most of a tiny scan's cost).

Tests about the process itself (a kill, Ctrl-C, a terminal, a pipe, a changed environment) and CLI runs
that start their own Ray start a real one with subprocess instead."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path


def cli(*args, cwd: str | Path | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Like subprocess.run([python, -m, scanner, *args], capture_output=True, text=True). `timeout` is
    accepted for the callers' sake and left to pytest-timeout: a call in this process cannot be cut."""
    from scanner.cli.main import main

    argv = ["acr-scan", *map(str, args)]
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level, old_argv = root.handlers[:], root.level, sys.argv
    root.handlers[:] = []  # so that the CLI's logging.basicConfig takes effect, as in a fresh process
    sys.argv, code = argv, 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            with contextlib.chdir(cwd or os.getcwd()):
                main()
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    finally:
        root.handlers[:], sys.argv = handlers, old_argv
        root.setLevel(level)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
