"""Screening stage: one teacher-forced pass over each span's window ranks spans before any search.

Per span, from rows of a single batched forward (left-padded, so every row's target sits at the end):
- the window row [template][preceding context][span]: greedy-match rate and mean NLL of the span, its
  per-token greedy matches (where anchored spans go: stages/anchor.py) and p_z, the probability that
  greedy or top-k sampling generates the span from that context (scanner/measures/extraction.py);
- the span row [template][span]: discoverable memorization (Carlini et al. 2023), i.e. its first
  k tokens greedily yield the rest;
- certificate rows [template][last j context tokens][span] for j = 1..context: the shortest j whose
  teacher-forced greedy output is the whole span is the natural-prefix certificate, a free bound
  |x*| <= j that the search later verifies by generation from the document's own text.

With vLLM attached as the screener (--screen-engine vllm) the same rows go to it in one call, unpadded,
and its prompt log-probs give the matches and NLL; HF's path pads and batches `max_rows` at a time.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from scanner.config import ExtractionConfig, ScreenConfig
from scanner.engine.hf import HFEngine
from scanner.engine.losses import topk_logprobs
from scanner.errors import require
from scanner.measures.extraction import greedy_pz, log_pz
from scanner.stages.spans import Span

log = logging.getLogger(__name__)


@dataclass
class ScreenWork:
    """What the screen's forwards processed, counted where its rows are built: the figures a cost model
    of the screen needs (forwarded / corpus tokens is the re-encoding factor), measured, not assumed."""

    rows: int = 0  # sequences forwarded
    tokens: int = 0  # their real tokens: template, context and span of every row
    padded_tokens: int = 0  # with the left padding of HF's batches (equal to `tokens` under vLLM)
    head_positions: int = 0  # positions whose logits the screen read: every row's span tokens

    def add(self, lengths: list[int], padded: int, span_tokens: int) -> None:
        self.rows += len(lengths)
        self.tokens += sum(lengths)
        self.padded_tokens += padded
        self.head_positions += len(lengths) * span_tokens

    def to_dict(self) -> dict:
        return {"screen_rows": self.rows, "forwarded_tokens": self.tokens, "padded_tokens": self.padded_tokens,
                "head_positions": self.head_positions}


@dataclass(frozen=True)
class Screened:
    greedy_match_rate: float
    mean_nll: float
    discoverable: bool
    certificate_tokens: int | None  # context tokens of the shortest certificate
    certificate_start: int | None  # its first token index in the document
    pz_greedy: float | None = None  # p_z of the span given the window row's context, greedy decoding
    log_pz_topk: float | None = None  # natural log of p_z under top-k sampling; None: not computed
    window_matches: tuple[bool, ...] = ()  # the window row's per-token greedy matches


@dataclass(frozen=True)
class _Row:
    span: int  # index into the screened spans
    kind: str  # window, span, certificate
    context: tuple[int, ...]


def _rows(spans: list[Span], doc_ids: list[int], context: int, which: set[int] | None = None,
          windows: bool = True, certificates: bool = True) -> list[_Row]:
    """Rows of the spans in `which` (None: all): window and span rows, then certificate rows shortest
    first."""
    rows = []
    for i, span in enumerate(spans):
        if which is not None and i not in which:
            continue
        before = tuple(doc_ids[max(0, span.token_start - context):span.token_start])
        if windows:
            rows += [_Row(i, "window", before), _Row(i, "span", ())]
        if certificates:
            rows += [_Row(i, "certificate", before[len(before) - j:]) for j in range(1, len(before) + 1)]
    return rows


def _sequences(engine: HFEngine, rows: list[_Row], targets: list[list[int]]) -> list[list[int]]:
    t = engine.template
    return [list(t.prefix_ids) + list(r.context) + list(t.suffix_ids) + targets[r.span] for r in rows]


@dataclass(frozen=True)
class _Scores:
    matches: torch.Tensor  # [R, T] bool: the span token is the argmax
    nll: torch.Tensor  # [R, T]
    topk: torch.Tensor  # [R, T] log-prob under top-k sampling; NaN where not computed (non-window rows)

    @staticmethod
    def cat(parts: list[_Scores]) -> _Scores:
        return _Scores(*(torch.cat([getattr(p, f) for p in parts]) for f in ("matches", "nll", "topk")))


@torch.no_grad()
def _forward(engine: HFEngine, rows: list[_Row], targets: list[list[int]], extraction: ExtractionConfig) -> _Scores:
    """One padded forward over `rows` (all spans here have the same length T)."""
    seqs = _sequences(engine, rows, targets)
    width = max(len(s) for s in seqs)
    pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=engine.device)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=engine.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    keep = len(targets[rows[0].span]) + 1
    logits = engine.logits(ids, keep=keep, attention_mask=mask, position_ids=positions)[:, :-1].float()
    gold = torch.tensor([targets[r.span] for r in rows], device=engine.device)
    nll = F.cross_entropy(logits.transpose(1, 2), gold, reduction="none")
    # p_z needs the window rows only: top-k over the vocabulary is skipped for the other ~95 %.
    windows = torch.tensor([i for i, r in enumerate(rows) if r.kind == "window"], dtype=torch.long,
                           device=engine.device)
    topk = torch.full(gold.shape, math.nan, device=engine.device)
    if len(windows):
        topk[windows] = topk_logprobs(logits[windows], gold[windows], extraction.top_k, extraction.temperature)
    return _Scores((logits.argmax(-1) == gold).cpu(), nll.cpu(), topk.cpu())


def _summarize(rows: list[_Row], scores: _Scores, spans: list[Span], config: ScreenConfig) -> list[Screened]:
    out: list[dict] = [{} for _ in spans]
    for row, match, loss, topk in zip(rows, scores.matches, scores.nll, scores.topk, strict=True):
        acc = out[row.span]
        if row.kind == "window":
            log_topk = log_pz(topk.double().tolist())
            acc.update(greedy_match_rate=float(match.float().mean()), mean_nll=float(loss.mean()),
                       pz_greedy=greedy_pz(match.tolist()), window_matches=tuple(match.tolist()),
                       log_pz_topk=None if math.isnan(log_topk) else log_topk)
        elif row.kind == "span":
            k = config.discoverable_prefix or max(1, match.numel() // 2)
            acc["discoverable"] = bool(match[k:].all()) if k < match.numel() else False
        elif bool(match.all()) and "certificate_tokens" not in acc:  # rows come shortest first
            acc["certificate_tokens"] = len(row.context)
            acc["certificate_start"] = spans[row.span].token_start - len(row.context)
    return [Screened(a["greedy_match_rate"], a["mean_nll"], a["discoverable"], a.get("certificate_tokens"),
                     a.get("certificate_start"), pz_greedy=a["pz_greedy"], log_pz_topk=a["log_pz_topk"],
                     window_matches=a["window_matches"]) for a in out]


def _count(engine: HFEngine, rows: list[_Row], targets: list[list[int]], config: ScreenConfig,
           work: ScreenWork) -> None:
    """`rows`' tokens into `work`, padded as the HF path batches them (max_rows at a time)."""
    fixed = len(engine.template.prefix_ids) + len(engine.template.suffix_ids)
    span = len(targets[rows[0].span])
    lengths = [fixed + len(r.context) + span for r in rows]
    padded = sum(lengths)  # vLLM takes the rows unpadded
    if engine.screener is None:
        step = config.max_rows
        padded = sum(len(part) * max(part) for part in (lengths[i:i + step] for i in range(0, len(lengths), step)))
    work.add(lengths, padded, span)


def _score(engine: HFEngine, rows: list[_Row], targets: list[list[int]], config: ScreenConfig,
           work: ScreenWork | None = None) -> _Scores:
    if not rows:
        return _Scores(torch.zeros(0, 0, dtype=torch.bool), torch.zeros(0, 0), torch.zeros(0, 0))
    if work is not None:
        _count(engine, rows, targets, config, work)
    if engine.screener is not None:
        engine.forwards += len(rows)
        scores = engine.screener.prompt_scores(_sequences(engine, rows, targets), len(targets[rows[0].span]),
                                               topk_rows=[r.kind == "window" for r in rows],
                                               top_k=config.extraction.top_k,
                                               temperature=config.extraction.temperature)
        topk = scores.topk if scores.topk is not None else torch.full(scores.nll.shape, math.nan)
        return _Scores(scores.matches, scores.nll, topk)
    e = config.extraction
    return _Scores.cat([_forward(engine, rows[i:i + config.max_rows], targets, e)
                        for i in range(0, len(rows), config.max_rows)])


def screen_spans(engine: HFEngine, doc_ids: list[int], spans: list[Span], config: ScreenConfig,
                 work: ScreenWork | None = None) -> list[Screened]:
    """Screen the non-skipped spans of one document (all of one target length) in batched forwards;
    what they forwarded is added to `work` when given."""
    if not spans:
        return []
    lengths = {len(s.target_ids) for s in spans}
    require(len(lengths) == 1, f"screen_spans takes spans of one length, got {sorted(lengths)}")
    targets = [s.target_ids for s in spans]
    context = config.context_tokens
    if config.certificate_min_match == 0:  # one pass over every row
        rows = _rows(spans, doc_ids, context)
        return _summarize(rows, _score(engine, rows, targets, config, work), spans, config)
    rows = _rows(spans, doc_ids, context, certificates=False)
    scores = _score(engine, rows, targets, config, work)
    likely = {row.span for row, match in zip(rows, scores.matches, strict=True)
              if row.kind == "window" and float(match.float().mean()) >= config.certificate_min_match}
    more = _rows(spans, doc_ids, context, likely, windows=False)
    if more:
        rows, scores = rows + more, _Scores.cat([scores, _score(engine, more, targets, config, work)])
    return _summarize(rows, scores, spans, config)
