"""What a person at a terminal sees while the work runs, on stderr (stdout stays the results').

`scan`: the driver's bar (spans, candidates, memorized, spans per second, ETA: tqdm's) and, on a terminal,
a line per running search unit below it, read from the run directory every POLL_S seconds
(storage/progress.py, the same files `status` reads: so it shows units on Ray actors too).
`acr`: on a terminal, a line redrawn in place per target (the prompt length being tried, the GCG step of
this length's budget, the target tokens right under teacher forcing, elapsed time), and a line kept per
length tried with its outcome. Nothing of either is printed to a pipe or a file.
The bar advances with the screen, before any verdict; once the scan returns it shows the run's own totals,
memorized spans included."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path

from tqdm import tqdm

from scanner import api
from scanner.cli.watch import running_line
from scanner.config import ExecutorConfig, PassageConfig, ScanConfig
from scanner.search.progress import SearchObserver, SearchProgress
from scanner.storage.progress import running

POLL_S = 1.0  # the scan's running-units line: how often it reads the run directory
REDRAW_S = 0.2  # acr's line: at most this often (a tiny model runs hundreds of GCG steps a second)


def on_terminal(stream=None) -> bool:
    stream = stream or sys.stderr
    return hasattr(stream, "isatty") and stream.isatty()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """`run_scan`'s progress: `start(documents)` once the run directory is prepared, then one call
    per screened shard. With `run_dir` and a terminal, a line per running unit under the bar."""

    def __init__(self, run_dir: str | Path | None = None) -> None:
        self.bar: tqdm | None = None
        self.units: tqdm | None = None
        self.totals = {"spans": 0, "candidates": 0}
        self.run_dir = Path(run_dir) if run_dir is not None and on_terminal() else None
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def start(self, documents: int) -> None:
        self.bar = tqdm(total=documents, unit="doc", desc="scan", dynamic_ncols=True)
        if self.run_dir is not None:
            self.units = tqdm(bar_format="{desc}", position=1, leave=False, dynamic_ncols=True)
            self._poller = threading.Thread(target=self._poll, name="units-line", daemon=True)
            self._poller.start()

    def __call__(self, stats: dict) -> None:
        # Screen stats: what this relaunch screened, shard by shard (a screen finds no memorized span).
        self.totals["spans"] += stats["spans"]
        self.totals["candidates"] += stats["candidates"]
        if self.bar is None:
            return
        self.bar.update(stats["documents"])
        spans_per_s = stats["spans"] / stats["seconds"] if stats["seconds"] else 0.0
        self.bar.set_postfix(
            spans=self.totals["spans"], candidates=self.totals["candidates"], spans_s=f"{spans_per_s:.1f}"
        )

    def finish(self, stats: dict) -> None:
        """The run's totals once it returned (its merged stats: every shard, resumed ones too)."""
        if self.bar is not None:
            self.bar.set_postfix(
                spans=stats.get("spans", 0),
                candidates=stats.get("candidates", 0),
                memorized=stats.get("memorized", 0),
            )

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                units = running(self.run_dir)
            except OSError:  # the run directory moved or went away meanwhile: the next poll tries again
                continue
            self.units.set_description_str(_units_text(units), refresh=True)

    def close(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
        for bar in (self.units, self.bar):
            if bar is not None:
                bar.close()


def _units_text(units: list[dict]) -> str:
    """The running units as one line cut to the terminal (a wrapped line would break the bars' redraw);
    `status --watch` shows every unit in full."""
    text = running_line(units[0]) if units else ""
    if len(units) > 1:
        text = f"{len(units)} units running; {text}"
    return text[: max(shutil.get_terminal_size().columns - 1, 20)]


def run_with_progress(
    config: ScanConfig,
    out: str,
    executor: ExecutorConfig | None = None,
    passages: PassageConfig | None = None,
) -> api.ScanResult:
    """scanner.scan with the bar (and, on a terminal, the running units) on stderr."""
    bar = ProgressBar(out)
    try:
        result = api.scan(config, out, executor=executor, passages=passages, progress=bar)
        bar.finish(result.stats)
        return result
    finally:
        bar.close()


def _printable(text: str, limit: int = 32) -> str:
    """A target's start as one terminal-safe line (control characters shown as '?')."""
    short = text if len(text) <= limit else text[: limit - 1] + "…"
    return "".join(c if c.isprintable() else "?" for c in short)


class StatusLine:
    """One line of a terminal redrawn in place, and lines kept above it."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.drawn = False
        self.shown = float("-inf")

    def show(self, text: str, force: bool = False) -> None:
        if not force and time.monotonic() - self.shown < REDRAW_S:
            return
        self.shown = time.monotonic()
        width = shutil.get_terminal_size().columns
        self.stream.write("\r\033[K" + text[: max(width - 1, 20)])
        self.stream.flush()
        self.drawn = True

    def keep(self, text: str) -> None:
        self.clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.drawn = False


class TargetsLine(SearchObserver):
    """`acr`'s progress on a terminal: which target, the prompt length tried, the step, tokens right."""

    def __init__(self, texts: list[str], line: StatusLine | None = None) -> None:
        self.texts, self.line = texts, line or StatusLine()

    def _name(self, p: SearchProgress) -> str:
        return f"target {p.index + 1}/{len(self.texts)}"

    def _text(self, p: SearchProgress) -> str:
        return f"'{_printable(self.texts[p.index])}'"

    def _now(self, p: SearchProgress) -> str:
        """The live line, what changes first (a narrow terminal cuts its end)."""
        step = f"step {p.step}/{p.steps}" if p.steps else "no GCG steps"
        best = "" if p.prompt_tokens is None else f", shortest prompt {p.prompt_tokens}"
        return (
            f"{self._name(p)}: length {p.length}, {step}, right {p.right}/{p.target_tokens}, "
            f"{_duration(p.elapsed())}{best}  {self._text(p)}"
        )

    def started(self, p: SearchProgress) -> None:
        self.line.show(
            f"{self._name(p)}: {p.target_tokens} tokens, prompt lengths up to {p.cap}  {self._text(p)}",
            force=True,
        )

    def length_started(self, p: SearchProgress) -> None:
        self.line.show(self._now(p), force=True)

    def stepped(self, p: SearchProgress) -> None:
        self.line.show(self._now(p))

    def length_finished(self, p: SearchProgress) -> None:
        restart = f" (restart {p.trial})" if p.trial else ""
        self.line.keep(
            f"{self._name(p)}: length {p.length}{restart} {p.outcome} after {p.step}/{p.steps} steps, "
            f"best right {p.right}/{p.target_tokens}, {_duration(p.elapsed())} elapsed"
        )

    def finished(self, p: SearchProgress) -> None:
        self.line.clear()  # the result's row follows on stdout

    def failed(self, index: int, error: Exception) -> None:
        self.line.clear()
