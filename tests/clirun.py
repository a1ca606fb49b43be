"""`acr-scan ARGS` run in this test process: the same entry point as the console script
(scanner.cli.main.main: its exit codes, its messages on stderr, its log lines) without a new interpreter
that imports torch and transformers again (about 5 s of CPU a call, most of a tiny scan's cost).

Tests about the process itself (a kill, Ctrl-C, a terminal, a pipe, a changed environment, Ray) start a
real one with subprocess instead."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path


def cli(*args, cwd: str | Path | None = None, timeout: float | None = None,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Like subprocess.run([python, -m, scanner, *args], capture_output=True, text=True). `timeout` is
    accepted for the callers' sake and left to pytest-timeout: a call in this process cannot be cut."""
    import torch

    from scanner.cli.main import main

    argv = ["acr-scan", *map(str, args)]
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, sys.argv, sys.stdin, torch.get_num_threads(), os.getcwd())
    root.handlers[:] = []  # so that the CLI's logging.basicConfig takes effect, as in a fresh process
    sys.argv, sys.stdin = argv, io.StringIO(input or "")
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if cwd is not None:
                os.chdir(cwd)
            try:
                main()
            except SystemExit as end:
                code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    finally:
        root.handlers[:], sys.argv, sys.stdin = saved[0], saved[2], saved[3]
        root.setLevel(saved[1])
        torch.set_num_threads(saved[4])  # --threads sets the process's
        os.chdir(saved[5])
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def cli_process(*args, cwd: str | Path | None = None, timeout: float = 600, env: dict | None = None
                ) -> subprocess.CompletedProcess:
    """`acr-scan ARGS` in a new interpreter: for a run whose executor starts Ray (it would join this
    process's cluster), or a test about the process."""
    return subprocess.run([sys.executable, "-m", "scanner", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)
