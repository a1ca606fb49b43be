"""Screening stage: teacher-forced passes over each span's window rank spans before any search.

Per span of a document (scanner/engine/teacher.py computes the scores, in bounded memory):
- its window: greedy-match rate and mean NLL of the span given the document text before it, its
  per-token greedy matches (where anchored spans go: stages/anchor.py) and p_z, the probability that
  greedy or top-k sampling generates the span from that context (scanner/measures/extraction.py). The
  window is one row [template][context_tokens context][span] per span ("exact") or read off one causal
  pass over long chunks of the document ("stream", stages/stream.py: each span then sees at least
  context_tokens before it, ~1.1 forwarded tokens per corpus token instead of 2 or more);
- then, for the spans whose window reaches certificate_min_match (all of them at 0, the exhaustive
  screen), the span row [template][span]: discoverable memorization (Carlini et al. 2023), i.e. its
  first k tokens greedily yield the rest (None where not run), and
- the certificate rows [template][last j context tokens][span]: the shortest j whose teacher-forced
  greedy output is the whole span is the natural-prefix certificate, a free bound |x*| <= j that the
  search later verifies by generation from the document's own text. The rows go in rounds of doubling j
  (1-2, 3-4, 5-8, ...) and a span leaves at its first round with a success: every j below the one found
  was tried, so the result is the exhaustive screen's shortest j, monotone in j or not. Each row is
  forwarded through the window's first miss first, and whole only where it matched that far (cuts()).

With vLLM attached as the screener (--screen-engine vllm) the same rows go to it unpadded, and its
prompt log-probs give the matches and NLL.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from scanner.config import ScreenConfig
from scanner.engine.hf import HFEngine
from scanner.engine.teacher import teacher_scores
from scanner.engine.token_scores import TokenScores
from scanner.errors import require
from scanner.measures.extraction import greedy_pz, log_pz
from scanner.stages.spans import Span
from scanner.stages.stream import DocumentStream, chunk_tokens, resolve_window, stream_windows

log = logging.getLogger(__name__)


@dataclass
class ScreenWork:
    """What the screen's forwards processed, counted where its rows are built: the figures a cost model
    of the screen needs (forwarded / corpus tokens is the re-encoding factor), measured, not assumed."""

    rows: int = 0  # sequences forwarded (window rows or streamed chunks, span and certificate rows)
    tokens: int = 0  # their real tokens: template, context and span of every row
    padded_tokens: int = 0  # with the padding of HF's batches (equal to `tokens` under vLLM)
    head_positions: int = 0  # positions whose logits the screen read

    def add(self, lengths: list[int], padded: int, head_positions: int) -> None:
        self.rows += len(lengths)
        self.tokens += sum(lengths)
        self.padded_tokens += padded
        self.head_positions += head_positions

    def to_dict(self) -> dict:
        return {
            "screen_rows": self.rows,
            "forwarded_tokens": self.tokens,
            "padded_tokens": self.padded_tokens,
            "head_positions": self.head_positions,
        }


@dataclass(frozen=True)
class Screened:
    greedy_match_rate: float
    mean_nll: float
    discoverable: bool | None  # None: the span row was not run (window below certificate_min_match)
    certificate_tokens: int | None  # context tokens of the shortest certificate
    certificate_start: int | None  # its first token index in the document
    pz_greedy: float | None = None  # p_z of the span given the window's context, greedy decoding
    log_pz_topk: float | None = None  # natural log of p_z under top-k sampling; None: not computed
    window_matches: tuple[bool, ...] = ()  # the window's per-token greedy matches


def _score(
    engine: HFEngine,
    seqs: list[list[int]],
    tails: list[int],
    topk: bool,
    config: ScreenConfig,
    work: ScreenWork | None,
) -> list[TokenScores]:
    scored = teacher_scores(engine, seqs, tails, [topk] * len(seqs), config)
    if work is not None:
        work.add([len(s) for s in seqs], scored.padded_tokens, sum(tails))
    return scored.rows


def _row(engine: HFEngine, context: list[int], target: list[int]) -> list[int]:
    t = engine.template
    return [*t.prefix_ids, *context, *t.suffix_ids, *target]


def _context(doc_ids: list[int], span: Span, tokens: int) -> list[int]:
    return doc_ids[max(0, span.token_start - tokens) : span.token_start]


def _windows(
    engine: HFEngine,
    doc_ids: list[int],
    spans: list[Span],
    config: ScreenConfig,
    work: ScreenWork | None,
    stream: DocumentStream | None,
) -> list[TokenScores]:
    if resolve_window(engine, config) == "exact":
        seqs = [_row(engine, _context(doc_ids, s, config.context_tokens), s.target_ids) for s in spans]
        return _score(engine, seqs, [len(s.target_ids) for s in spans], True, config, work)
    length = len(spans[0].target_ids)
    if stream is None or stream.ids is not doc_ids or stream.overlap < config.context_tokens + length:
        overlap = config.context_tokens + length
        stream = DocumentStream(doc_ids, overlap, chunk_tokens(engine, config, overlap))
    got, forwarded = stream_windows(engine, stream, [(s.token_start, s.token_end) for s in spans], config)
    if work is not None:
        work.add(*forwarded)
    return got


def _discoverable(
    engine: HFEngine, spans: list[Span], which: list[int], config: ScreenConfig, work: ScreenWork | None
) -> dict[int, bool]:
    """Span rows of the spans in `which`: the first k tokens alone greedily yield the rest."""
    scores = _score(
        engine,
        [_row(engine, [], spans[i].target_ids) for i in which],
        [len(spans[i].target_ids) for i in which],
        False,
        config,
        work,
    )
    out = {}
    for i, got in zip(which, scores, strict=True):
        k = config.discoverable_prefix or max(1, got.matches.numel() // 2)
        out[i] = bool(got.matches[k:].all()) if k < got.matches.numel() else False
    return out


def rounds(context: int) -> list[tuple[int, int]]:
    """Certificate lengths [lo, hi] tried together, doubling: (1, 2), (3, 4), (5, 8), ... up to context."""
    out, lo = [], 1
    while lo <= context:
        hi = min(context, max(2, 2 * (lo - 1)))
        out.append((lo, hi))
        lo = hi + 1
    return out


# A certificate row is forwarded first through its span's first token that the window missed, and on only
# where that one matched: a shorter context seldom gets right what the window's longer one got wrong, so
# most rows of a span without a certificate cost j + that position instead of j + the span (such a span
# forwards a row for every j; on bench/screen/screen_modes.py's planted corpus 19 of the 61 spans the default
# screen follows have none). Causal attention makes a cut row's matches the whole row's at the same
# positions (but for float rounding under another batch shape, as between batches).
def cuts(window: TokenScores) -> list[int]:
    """Span lengths a certificate row goes through in turn: to the window's first miss (none where it
    got every token or missed only the last), then the whole span."""
    matches = window.matches.tolist()
    first = next((t for t, ok in enumerate(matches) if not ok), len(matches))
    return [first + 1, len(matches)] if first + 1 < len(matches) else [len(matches)]


def _elicits(
    engine: HFEngine,
    doc_ids: list[int],
    spans: list[Span],
    rows: list[tuple[int, int]],
    windows: list[TokenScores],
    config: ScreenConfig,
    work: ScreenWork | None,
) -> set[int]:
    """Indexes into `rows` ((span, j) pairs) whose last-j-context row's teacher-forced greedy output is the
    whole span; a row leaves at the first cut of its span (cuts()) that it misses."""
    per_span = {i: cuts(windows[i]) for i in {i for i, _ in rows}}  # once a span: its window may sit on a GPU
    plan = [per_span[i] for i, _ in rows]
    alive = list(range(len(rows)))
    for stage in range(2):
        todo = [k for k in alive if stage < len(plan[k])]
        seqs = [
            _row(
                engine,
                _context(doc_ids, spans[rows[k][0]], rows[k][1]),
                spans[rows[k][0]].target_ids[: plan[k][stage]],
            )
            for k in todo
        ]
        scores = _score(engine, seqs, [plan[k][stage] for k in todo], False, config, work)
        missed = {k for k, got in zip(todo, scores, strict=True) if not bool(got.matches.all())}
        alive = [k for k in alive if k not in missed]
    return set(alive)


def _certificates(
    engine: HFEngine,
    doc_ids: list[int],
    spans: list[Span],
    which: list[int],
    windows: list[TokenScores],
    config: ScreenConfig,
    work: ScreenWork | None,
) -> dict[int, int]:
    """The shortest j <= certificate_limit whose last-j-context row elicits the span, of the spans in
    `which` that have one; shorter lengths first, a span leaving at its first round with a success."""
    found: dict[int, int] = {}
    pending = [i for i in which if spans[i].token_start > 0]
    for lo, hi in rounds(config.certificate_limit(len(spans[0].target_ids)) if spans else 0):
        rows = [(i, j) for i in pending for j in range(lo, min(hi, spans[i].token_start) + 1)]
        if not rows:
            break
        for k in sorted(_elicits(engine, doc_ids, spans, rows, windows, config, work)):
            i, j = rows[k]
            if i not in found:  # rows of a span come shortest first
                found[i] = j
        pending = [i for i in pending if i not in found and spans[i].token_start > hi]
    return found


def _screened(
    span: Span, window: TokenScores, discoverable: bool | None, certificate: int | None
) -> Screened:
    matches = window.matches.tolist()
    log_topk = math.nan if window.topk is None else log_pz(window.topk.tolist())
    return Screened(
        float(window.matches.float().mean()),
        float(window.nll.mean()),
        discoverable,
        certificate,
        None if certificate is None else span.token_start - certificate,
        pz_greedy=greedy_pz(matches),
        log_pz_topk=None if math.isnan(log_topk) else log_topk,
        window_matches=tuple(matches),
    )


def screen_spans(
    engine: HFEngine,
    doc_ids: list[int],
    spans: list[Span],
    config: ScreenConfig,
    work: ScreenWork | None = None,
    stream: DocumentStream | None = None,
) -> list[Screened]:
    """Screen the non-skipped spans of one document (all of one target length) in batched forwards;
    what they forwarded is added to `work` when given. `stream`: the document's streamed scores so far
    (stream mode), shared by the calls that screen one document's spans."""
    if not spans:
        return []
    lengths = {len(s.target_ids) for s in spans}
    require(len(lengths) == 1, f"screen_spans takes spans of one length, got {sorted(lengths)}")
    windows = _windows(engine, doc_ids, spans, config, work, stream)
    follow = [
        i for i, w in enumerate(windows) if float(w.matches.float().mean()) >= config.certificate_min_match
    ]
    discoverable = _discoverable(engine, spans, follow, config, work)
    certificates = _certificates(engine, doc_ids, spans, follow, windows, config, work)
    return [
        _screened(s, w, discoverable.get(i), certificates.get(i))
        for i, (s, w) in enumerate(zip(spans, windows, strict=True))
    ]
