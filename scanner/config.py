"""Frozen, keyword-only configs. They hold no live objects so they can be written to a run directory
and shipped to workers; validation happens at construction with messages that name the fix."""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

from scanner.errors import InputError, require

DTYPES = ("auto", "float32", "bfloat16", "float16")
BOS_POLICIES = ("auto", "always", "separator", "never")
LOSSES = ("ce", "margin", "wrong_ce")
SCHEDULES = ("fast", "paper")
ENGINES = ("auto", "hf", "vllm")
# What a corpus path may be (stages/read.py resolves it).
EXPECTED = "a Parquet file, a directory of Parquet files or a glob such as 'data/*.parquet'"


BUDGET_FORMS = (
    "GCG steps ('20000steps'), seconds ('3600s', '90m', '2h'), or 'auto' (stop when fewer than "
    "M of the last W decided candidates were memorized: 'auto', 'auto:2/128'), with a ceiling as "
    "'auto:20000steps' or 'auto:1/64:2h'"
)
_UNITS = {
    "steps": ("steps", 1),
    "step": ("steps", 1),
    "s": ("seconds", 1),
    "m": ("seconds", 60),
    "h": ("seconds", 3600),
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(steps|step|s|m|h)\s*$")
_AUTO = re.compile(r"^\s*auto\s*(:.*)?$", re.IGNORECASE)
_RULE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# --search-budget auto's rule: search on while at least 1 of the last 64 decided candidates along the rank
# was memorized (the window and threshold bench/budget/auto_budget.py chose by replaying recorded verdicts).
AUTO_RULE = (1, 64)
# A budget larger than this is no ceiling (1e12 s is 31,000 years): refused, as an infinite one must be.
MAX_BUDGET = 1e12


@dataclass(frozen=True)
class Budget:
    """A search budget: `amount` GCG steps or seconds of search (summed over workers: GPU-seconds)."""

    kind: str  # "steps" or "seconds"
    amount: float

    def __str__(self) -> str:
        return f"{self.amount:g} {self.kind}"


def _auto(text: str) -> tuple[tuple[int, int], str | None] | None:
    """('auto:M/W:CEILING' ->) ((M, W), CEILING or None); None when `text` is no auto budget."""
    match = _AUTO.match(text)
    if not match:
        return None
    parts = [p.strip() for p in (match.group(1) or "")[1:].split(":")] if match.group(1) else []
    rule = AUTO_RULE
    if parts and _RULE.match(parts[0]):
        m, w = (int(x) for x in _RULE.match(parts.pop(0)).groups())
        if not 1 <= m <= w:
            raise InputError(
                f"--search-budget {text!r}: the rule M/W needs 1 <= M <= W (at least M memorized of "
                f"the last W decided); give for instance 'auto:1/64'"
            )
        rule = (m, w)
    if len(parts) > 1 or (parts and not parts[0]):
        raise InputError(f"--search-budget {text!r} is not a budget; give {BUDGET_FORMS}")
    return rule, parts[0] if parts else None


def parse_auto(text: str | None) -> tuple[int, int] | None:
    """(M, W) of a budget that stops itself ('auto', 'auto:2/128:2h'): search on while at least M of the
    last W decided candidates were memorized (measures/budget.py auto_stop); None for any other budget."""
    auto = None if text is None else _auto(str(text))
    return None if auto is None else auto[0]


def parse_budget(text: str | None) -> Budget | None:
    """'20000steps' -> Budget('steps', 20000); '90m' -> Budget('seconds', 5400); None or 'auto' -> None
    (no ceiling); 'auto:2h' -> Budget('seconds', 7200), the ceiling of a budget that stops itself."""
    if text is None:
        return None
    given, auto = text, _auto(str(text))
    if auto is not None:
        if auto[1] is None:
            return None
        text = auto[1]
    match = _PATTERN.match(str(text).lower())
    if not match:
        raise InputError(f"--search-budget {given!r} is not a budget; give {BUDGET_FORMS}")
    kind, scale = _UNITS[match.group(2)]
    amount = float(match.group(1)) * scale
    if (
        not amount <= MAX_BUDGET
    ):  # an infinite one (1e400 digits) too: int() of it crashed, JSON cannot hold it
        raise InputError(
            f"--search-budget {given!r} is more than any scan spends (at most {MAX_BUDGET:.0e} steps "
            "or seconds); give a smaller budget, or leave --search-budget out for no ceiling"
        )
    if amount <= 0:
        raise InputError(f"--search-budget {given!r} must be above 0; give {BUDGET_FORMS}")
    if kind == "steps" and amount != int(amount):
        raise InputError(f"--search-budget {given!r}: steps are whole numbers; give {BUDGET_FORMS}")
    return Budget(kind, amount)


AUDIT_FORMS = (
    "a share of what the budgeted search spent ('25%'), a time ('10m', '600s', '1h') or a number of "
    "searches ('16'); 0 turns the audit off"
)
AUDIT_DEFAULT = "25%"
_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_COUNT = re.compile(r"^\s*-?\d+\s*$")


@dataclass(frozen=True)
class AuditRule:
    """What --audit-sample asks of the recall audit: `count` searches, a `share` of the seconds the budgeted
    search spent, or `seconds` of searching; the share and the time become searches at the scan's own
    measured seconds per search (measures/recall.py audit_size)."""

    kind: str  # "count", "share" or "seconds"
    amount: float

    def __str__(self) -> str:
        return {
            "count": f"{self.amount:g} searches",
            "share": f"{self.amount:.0%} of the search's seconds",
            "seconds": f"{self.amount:g} s",
        }[self.kind]


def parse_audit(value: int | str) -> AuditRule:
    """16 or '16' -> AuditRule('count', 16); '25%' -> ('share', 0.25); '10m' -> ('seconds', 600)."""
    text = str(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InputError(f"--audit-sample {value!r} is not an audit size; give {AUDIT_FORMS}")
    if isinstance(value, int) or _COUNT.match(text):
        require(int(text) >= 0, f"--audit-sample {text} must be >= 0; give {AUDIT_FORMS}")
        return AuditRule("count", int(text))
    share, duration = _SHARE.match(text), _PATTERN.match(text.lower())
    if share:
        amount = float(share.group(1)) / 100
        require(
            0 < amount <= 10,
            f"--audit-sample {text!r}: a share is above 0 % and at most 1000 %; give {AUDIT_FORMS}",
        )
        return AuditRule("share", amount)
    if duration and _UNITS[duration.group(2)][0] == "seconds":
        amount = float(duration.group(1)) * _UNITS[duration.group(2)][1]
        require(
            amount > 0, f"--audit-sample {text!r} must be above 0 s; give 0 for no audit, or {AUDIT_FORMS}"
        )
        return AuditRule("seconds", amount)
    raise InputError(f"--audit-sample {text!r} is not an audit size; give {AUDIT_FORMS}")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    model: str
    revision: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        require(bool(self.model), "--model is empty; pass a hub id, a local model directory or a .gguf file")
        require(self.dtype in DTYPES, f"unknown dtype '{self.dtype}'; choose one of {', '.join(DTYPES)}")
        require(self.threads is None or self.threads >= 1, f"--threads {self.threads} must be >= 1")


@dataclass(frozen=True, kw_only=True)
class PromptConfig:
    """How the free tokens are embedded: BOS policy, chat template, fixed text (all uncounted)."""

    chat: bool = False
    system_prompt: str | None = None
    instruction: str | None = None
    bos: str = "auto"
    allow_non_ascii: bool = False

    def __post_init__(self) -> None:
        require(
            self.bos in BOS_POLICIES,
            f"unknown BOS policy '{self.bos}'; choose one of {', '.join(BOS_POLICIES)}",
        )
        require(self.chat or self.system_prompt is None, "--system-prompt needs --chat (a chat template)")


@dataclass(frozen=True, kw_only=True)
class DraftConfig:
    """Probe sampling (Zhao et al., NeurIPS 2024): a draft model of the target's tokenizer scores every GCG
    candidate, the target scores a random probe of them, and the draft's best (1 - alpha) * B / reduction
    more, alpha = (1 + Spearman rho of the two losses on the probe) / 2; the step moves to the best the
    target scored. The target still gives the gradient and every verdict (generation), so a draft can
    make a search slower or weaker, never a false "memorized". Off (model None) by default: on verbatim
    spans it saved time on unmemorized ones only (bench/search/probe_sampling.py; bench/search/RESULTS.md, "Probe sampling")."""

    model: str | None = None  # anything the engine loads (HF dir, hub id, .gguf) with the target's tokenizer
    # nanoGCG's rule is probe 16 (B / 16), R 8, at least 1 kept; on verbatim spans it lost 2 of 6 memorized
    # canaries the target alone found (bench/search/RESULTS.md), where a probe of 32, R 4 and at least 32 kept did not.
    probe_size: int = 32  # candidates the target scores at random each step, to measure agreement
    reduction: float = 4.0  # R: the filtered set is (1 - alpha) * B / R of the draft's best
    min_kept: int = 32  # the filtered set is never smaller: exact greedy reproduction is a needle

    def __post_init__(self) -> None:
        require(
            self.model is None or bool(self.model.strip()),
            "--draft-model is empty; pass a model directory, a .gguf file or a hub id, or leave it out",
        )
        require(
            self.probe_size >= 2,
            f"--probe-size {self.probe_size} must be >= 2 (a rank correlation needs two)",
        )
        require(
            self.reduction > 0 and math.isfinite(self.reduction),
            f"--probe-reduction {self.reduction} must be a number > 0, e.g. 8",
        )
        require(self.min_kept >= 1, f"--probe-min-kept {self.min_kept} must be >= 1")

    @property
    def enabled(self) -> bool:
        return self.model is not None


@dataclass(frozen=True, kw_only=True)
class GCGConfig:
    """One GCG run at a fixed prompt length. `reference()` reproduces the authors' settings."""

    top_k: int = 128
    num_candidates: int = 256
    n_replace: int = 1
    loss: str = "margin"
    patience: int | None = 60
    chunk_size: int | None = None  # candidates per forward; None sizes it from free memory
    draft: DraftConfig = field(default_factory=DraftConfig)  # probe sampling; off unless draft.model is set

    def __post_init__(self) -> None:
        require(self.top_k >= 1, f"top_k {self.top_k} must be >= 1")
        require(self.num_candidates >= 1, f"num_candidates {self.num_candidates} must be >= 1")
        require(self.n_replace >= 1, f"n_replace {self.n_replace} must be >= 1")
        require(self.loss in LOSSES, f"unknown loss '{self.loss}'; choose one of {', '.join(LOSSES)}")
        require(self.patience is None or self.patience >= 1, f"patience {self.patience} must be >= 1")
        require(self.chunk_size is None or self.chunk_size >= 1, f"chunk_size {self.chunk_size} must be >= 1")

    @classmethod
    def reference(cls) -> GCGConfig:
        """The authors' GCG: top-k 250, 100 candidates, one swap, mean cross-entropy, no early stop."""
        return cls(top_k=250, num_candidates=100, n_replace=1, loss="ce", patience=None)


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """The MiniPrompt length search. Paper fields reproduce the authors' schedule exactly."""

    schedule: str = "fast"
    tau: float = 1.0
    seed: int = 0
    cap_factor: int = 5  # no prompt longer than cap_factor * |y| is tried (the paper's cap)
    gcg: GCGConfig = field(default_factory=GCGConfig)
    # paper schedule
    paper_start: int = 5
    paper_increment: int = 5
    paper_steps: int = 200
    paper_step_growth: float = 1.2
    # fast schedule
    try_empty: bool = True
    decide_steps: int = 400  # per attempt at the decision length
    shrink_steps: int = 200  # per attempt while minimizing a memorized target
    # A short first try below the decision length (0: none): memorized text is found there far more
    # easily than with |y| - 1 random tokens (search/schedule.py, FastSchedule).
    probe_length: int = 5
    restarts: int = 1  # extra attempts (fresh random prompt) before a length is declared failed
    verify_retries: int = 4  # teacher-forced matches that fail generation before a step moves on
    # After "not memorized", keep searching longer prompts (up to the cap, inserting tokens into the
    # best prompt so far) so the text gets a real ACR instead of the failure convention |y| / cap.
    bound_unmemorized: bool = False
    # Early rejection (search/reject.py), while nothing is found: a search whose best candidate still
    # gets under reject_min_right of the target right (teacher forced) after reject_after steps at a
    # length ends "not memorized"; an attempt stuck reject_stall steps ends without its restarts.
    # Calibrated on search trajectories (bench/search/early_reject.py, bench/search/RESULTS.md).
    early_reject: bool = True
    reject_after: int = 5  # steps at a length before the rule may stop it
    reject_min_right: float = 0.6  # share of target tokens the best candidate must get right by then
    reject_stall: int = 0  # steps without a rise in that count that stop the attempt (0: never)
    # Stop at the first verified success: the verdict and the bound it proves, not the minimum. The scan
    # decides every candidate this way before it shrinks any (scanner/run/phases.py); set per unit there.
    verdict_only: bool = False
    # A verified prompt whose generation margin (the smallest, over the span, of the generated token's
    # logit minus the best other logit) is below this many logits is marked fragile: bf16 keeps 8 bits
    # of mantissa, so logits of magnitude 16-32 are rounded to steps of 0.125, and another numeric path
    # (dtype, batch shape, kernel, engine) moves them by a few such steps; 1 is eight of them. Fragile
    # successes are the ones to re-check with `verify --dtype float32` or another --verify-engine.
    fragile_margin: float = 1.0

    def __post_init__(self) -> None:
        require(
            self.schedule in SCHEDULES,
            f"unknown schedule '{self.schedule}'; choose one of {', '.join(SCHEDULES)}",
        )
        require(self.tau > 0 and math.isfinite(self.tau), f"tau {self.tau} must be a positive number")
        require(self.cap_factor >= 1, f"cap_factor {self.cap_factor} must be >= 1")
        for name in ("paper_start", "paper_increment", "paper_steps", "decide_steps", "shrink_steps"):
            require(getattr(self, name) >= 1, f"{name} {getattr(self, name)} must be >= 1")
        require(self.restarts >= 0, f"restarts {self.restarts} must be >= 0")
        require(self.probe_length >= 0, f"probe_length {self.probe_length} must be >= 0 (0: no probe)")
        require(self.paper_step_growth >= 1, f"paper_step_growth {self.paper_step_growth} must be >= 1")
        require(self.reject_after >= 1, f"reject_after {self.reject_after} must be >= 1 (steps)")
        require(
            0 <= self.reject_min_right <= 1,
            f"reject_min_right {self.reject_min_right} must be a share in [0, 1], e.g. 0.5",
        )
        require(self.reject_stall >= 0, f"reject_stall {self.reject_stall} must be >= 0 (0: never)")
        require(
            math.isfinite(self.fragile_margin) and self.fragile_margin >= 0,
            f"--fragile-margin {self.fragile_margin} must be a number >= 0 (logits; 0: nothing is fragile)",
        )

    def reject_rule(self) -> RejectRule | None:
        """The early-rejection rule, or None when it is off."""
        if not self.early_reject:
            return None
        return RejectRule(after=self.reject_after, min_right=self.reject_min_right, stall=self.reject_stall)

    @classmethod
    def paper(cls, **overrides: Any) -> SearchConfig:
        """The authors' MiniPrompt: their length schedule with their GCG settings (no early rejection)."""
        return cls(**{"schedule": "paper", "gcg": GCGConfig.reference(), "early_reject": False, **overrides})


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Which engine gives the final word on a prompt (verify) and ranks spans (screen); the HF model
    always computes the GCG gradients. "auto" is decided where the engines are built, on the machine
    that runs the shard (engine/build.py resolve_engines), and stays "auto" in the saved config."""

    verify: str = "auto"
    screen: str = "auto"
    # vLLM is built first and takes this share of the GPU (weights + KV cache); the HF model and the
    # GCG activations get what is left (the candidate chunk is sized from free memory).
    gpu_memory_utilization: float = 0.4
    deterministic: bool = False  # vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1; GPU only)
    # Targets whose GCG forwards are shared (search/driver.py); 0: auto (engine/batched.py, width).
    targets_per_forward: int = 0

    def __post_init__(self) -> None:
        for name in ("verify", "screen"):
            value = getattr(self, name)
            require(value in ENGINES, f"--{name}-engine {value}: choose one of {', '.join(ENGINES)}")
        require(
            self.targets_per_forward >= 0,
            f"--targets-per-forward {self.targets_per_forward} must be >= 0 (0: auto)",
        )
        require(
            0 < self.gpu_memory_utilization < 1,
            f"--vllm-gpu-memory {self.gpu_memory_utilization} must be in (0, 1), e.g. 0.4",
        )

    @property
    def uses_vllm(self) -> bool:
        return "vllm" in (self.verify, self.screen)


@dataclass(frozen=True, kw_only=True)
class ExtractionConfig:
    # k = 40, T = 1: the top-k scheme Hayes et al. and Cooper et al. report beside greedy decoding.
    top_k: int = 40
    temperature: float = 1.0
    # n = 1000 samples, p = 0.5: (n, p)-discoverable iff p_z >= 1 - 0.5^(1/1000) = 6.9e-4, about the
    # p_z >= 0.1 % at which Cooper et al. count a book passage extracted.
    n: int = 1000
    p: float = 0.5

    def __post_init__(self) -> None:
        require(self.top_k >= 1, f"--pz-top-k {self.top_k} must be >= 1 (greedy p_z is always reported)")
        require(
            self.temperature > 0 and math.isfinite(self.temperature),
            f"--pz-temperature {self.temperature} must be > 0 (T = 0 is greedy, reported as pz_greedy)",
        )
        require(self.n >= 1, f"--pz-n {self.n} must be >= 1 (samples drawn by the extractor)")
        require(0 < self.p <= 1, f"--pz-p {self.p} must be in (0, 1]")

    @property
    def threshold(self) -> float:
        """The smallest p_z that is (n, p)-discoverable: 1 - (1 - p)^(1/n)."""
        return 1.0 if self.p == 1 else -math.expm1(math.log1p(-self.p) / self.n)


@dataclass(frozen=True, kw_only=True)
class CorpusConfig:
    path: str
    text_column: str = "text"
    id_column: str | None = None  # None: "id", else "doc_id", else "<file>:<row>"
    keep_columns: tuple[str, ...] = ()
    allow_duplicate_ids: bool = False

    def __post_init__(self) -> None:
        require(bool(self.path), f"the corpus path is empty; pass {EXPECTED}")
        require(bool(self.text_column), "--text-column is empty; pass the name of the text column")
        require(
            self.id_column is None or bool(self.id_column),
            "--id-column is empty; pass a column name or leave it out to detect 'id' / 'doc_id'",
        )
        require(
            isinstance(self.keep_columns, tuple),
            f"keep_columns {self.keep_columns!r} must be a tuple of column names",
        )


@dataclass(frozen=True, kw_only=True)
class SpanConfig:
    span_tokens: int = 32
    stride: int | None = None  # None: span_tokens (adjacent, non-overlapping windows)
    min_tokens: int | None = None  # None: span_tokens (shorter tail windows are dropped)
    allow_gaps: bool = False  # a stride beyond the span skips text: only when asked for (sampling)
    # Anchored spans (stages/anchor.py): fixed windows miss a memorized passage one span long at a random
    # offset (it straddles two windows, each half unmemorized text); a run of at least `anchor_min_run`
    # consecutive teacher-forced greedy matches (gaps of `anchor_max_gap` misses bridged) gets spans
    # aligned to its start and end. None: the span length minus 4 (bench/screen/RESULTS.md, anchored windows).
    anchors: bool = True
    anchor_min_run: int | None = None
    anchor_max_gap: int = 0

    def __post_init__(self) -> None:
        require(self.span_tokens >= 1, f"--span-tokens {self.span_tokens} must be >= 1")
        require(
            self.stride is None or self.stride >= 1,
            f"--stride {self.stride} must be >= 1 (or left out to use --span-tokens)",
        )
        require(
            self.allow_gaps or self.step <= self.span_tokens,
            f"--stride {self.stride} is larger than --span-tokens {self.span_tokens}: "
            f"{self.step - self.span_tokens} tokens of every {self.step} would never be scanned; pass "
            f"--stride {self.span_tokens} or less, or --allow-gaps to sample the text on purpose",
        )
        require(
            self.min_tokens is None or 1 <= self.min_tokens <= self.span_tokens,
            f"--min-tokens {self.min_tokens} must be between 1 and --span-tokens {self.span_tokens}",
        )
        require(
            self.anchor_min_run is None or self.anchor_min_run >= 1,
            f"--anchor-min-run {self.anchor_min_run} must be >= 1 (or left out: span length minus 4)",
        )
        require(self.anchor_max_gap >= 0, f"--anchor-max-gap {self.anchor_max_gap} must be >= 0")

    @property
    def step(self) -> int:
        return self.span_tokens if self.stride is None else self.stride

    @property
    def minimum(self) -> int:
        return self.span_tokens if self.min_tokens is None else self.min_tokens

    @property
    def min_run(self) -> int:
        return max(1, self.span_tokens - 4) if self.anchor_min_run is None else self.anchor_min_run


SCREEN_WINDOWS = ("auto", "exact", "stream")


@dataclass(frozen=True, kw_only=True)
class ScreenConfig:
    context_tokens: int = 32  # preceding document tokens in the window and the longest certificate
    discoverable_prefix: int | None = None  # k; None = half the span
    max_rows: int = 256  # rows per forward
    batch_tokens: int = 16384  # tokens per forward, padding included (a long row still goes alone)
    # Rows beyond the window, the span row (discoverable memorization) and the certificate rows (up to
    # context_tokens per span, ~95 % of an exhaustive screen's tokens), are built only for spans whose
    # window reaches this greedy-match rate: a span the model does not continue from its full context
    # rarely follows from less of it. 0 keeps the exhaustive screen. 0.75 kept every certificate of the
    # exhaustive screen on a planted corpus, where 0.5 let through 4 in 10 spans of unmemorized text
    # (bench/screen/RESULTS.md, "Screen modes").
    certificate_min_match: float = 0.75
    # The longest certificate tried; None: one token shorter than the span. Only a certificate shorter
    # than its span settles a candidate (ACR > 1, measures/budget.py settles); a longer one bounds nothing
    # ACR asks (the k-prefix test is the `discoverable` column), and a span with no certificate forwarded
    # a row for every j up to context_tokens: at 16-token spans and 32 of context, j = 16..32 are 3/4 of
    # its rows' context tokens. Capped by context_tokens.
    certificate_max_tokens: int | None = None
    # The windows: "exact" (one [context_tokens][span] row per span), "stream" (one causal pass over
    # chunks of chunk_tokens: each span sees at least context_tokens before it; stages/stream.py) or
    # "auto" (stream unless a chat template's suffix sits between context and span).
    window: str = "auto"
    chunk_tokens: int = 1024  # document tokens per streamed chunk (within the model's positions)
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)  # p_z from the window row

    def __post_init__(self) -> None:
        require(self.context_tokens >= 0, f"--context-tokens {self.context_tokens} must be >= 0")
        require(
            self.discoverable_prefix is None or self.discoverable_prefix >= 1,
            f"discoverable_prefix {self.discoverable_prefix} must be >= 1",
        )
        require(self.max_rows >= 1, f"max_rows {self.max_rows} must be >= 1")
        require(self.batch_tokens >= 1, f"batch_tokens {self.batch_tokens} must be >= 1")
        require(
            0 <= self.certificate_min_match <= 1,
            f"--certificate-min-match {self.certificate_min_match} must be in [0, 1]",
        )
        require(
            self.certificate_max_tokens is None or self.certificate_max_tokens >= 0,
            f"--certificate-max-tokens {self.certificate_max_tokens} must be >= 0 (0: no certificates)",
        )
        require(
            self.window in SCREEN_WINDOWS,
            f"--screen-window {self.window!r} is not one of {', '.join(SCREEN_WINDOWS)}",
        )
        require(self.chunk_tokens >= 2, f"--chunk-tokens {self.chunk_tokens} must be >= 2")

    def certificate_limit(self, span_tokens: int) -> int:
        """The longest certificate tried for spans of `span_tokens`."""
        cap = span_tokens - 1 if self.certificate_max_tokens is None else self.certificate_max_tokens
        return max(0, min(self.context_tokens, cap))


@dataclass(frozen=True, kw_only=True)
class CalibrationConfig:
    """What calibrates a memorized span. Defaults: self-calibration on, no reference model."""

    reference_model: str | None = None  # anything the engine loads (HF dir, hub id, .gguf); its own tokenizer
    nll_margin: float = 0.5  # nats per model token: R's NLL within this of the model's = nearly as likely
    random_prompts: int = 8  # unrelated prompts per memorized span (0: no self-calibration)
    long_prefix: float = 0.5  # share of the span's tokens an unrelated prompt must elicit to count as a hit
    random_share: float = 0.25  # share of unrelated prompts that must hit for "predictable"
    seed: int = 0

    def __post_init__(self) -> None:
        require(
            self.reference_model is None or bool(self.reference_model.strip()),
            "--reference-model is empty; pass a model directory, a .gguf file or a hub id, or leave it out",
        )
        require(self.nll_margin >= 0, f"--reference-margin {self.nll_margin} must be >= 0 (nats per token)")
        require(
            self.random_prompts >= 0, f"--calibration-prompts {self.random_prompts} must be >= 0 (0: off)"
        )
        require(0 < self.long_prefix <= 1, f"long_prefix {self.long_prefix} must be in (0, 1]")
        require(0 < self.random_share <= 1, f"random_share {self.random_share} must be in (0, 1]")

    @property
    def enabled(self) -> bool:
        return self.reference_model is not None or self.random_prompts > 0


@dataclass(frozen=True, kw_only=True)
class PassageConfig:
    """The passages table built at the end of a scan. Not part of the run's identity: changing it
    rebuilds passages.parquet only, never a shard."""

    extend_tokens: int = 128  # generated past each passage's end; 0 switches extension off
    # A passage held by at least this many documents is shared text (a header, a licence), not a book's
    # own; None: half the corpus's documents, at least 3 (shared_min_docs).
    shared_text_min_docs: int | None = None

    def __post_init__(self) -> None:
        require(
            self.extend_tokens >= 0, f"--extend-tokens {self.extend_tokens} must be >= 0 (0: no extension)"
        )
        require(
            self.shared_text_min_docs is None or self.shared_text_min_docs >= 2,
            f"--shared-text-min-docs {self.shared_text_min_docs} must be >= 2 (a text in one document is its own)",
        )

    def shared_min_docs(self, documents: int) -> int:
        """Documents that make a passage's text shared text in a corpus of `documents`."""
        if self.shared_text_min_docs is not None:
            return self.shared_text_min_docs
        return max(SHARED_TEXT_FLOOR, -(-documents // 2))


# The default's floor: text in 2 documents is a second edition or a quotation more often than boilerplate.
SHARED_TEXT_FLOOR = 3


@dataclass(frozen=True, kw_only=True)
class RejectRule:
    after: int  # steps at a length before the rule may stop it
    min_right: float  # share of target tokens the best candidate so far must get right by then
    stall: int  # steps without a rise in the best count that stop the attempt (0: never)


EXECUTORS = ("local", "ray")


@dataclass(frozen=True, kw_only=True)
class ExecutorConfig:
    """Where the scan runs. Not part of the run's identity: a run may resume under another executor
    (both give equal tables), so this is kept out of run_config.json's hash."""

    kind: str = "local"
    address: str | None = None  # ray: None starts a local Ray; "auto" joins the cluster this job runs in
    num_actors: int | None = None  # ray: None means one per GPU slot, else one per CPU slot
    gpus_per_actor: float | None = None  # ray: None means 1 where the cluster has GPUs, else 0
    cpus_per_actor: float = 1.0
    max_retries: int = 3  # ray: infrastructure failures (actor died, node lost) per shard
    # ray: seconds a running task's heartbeat (written every 2 s by a timer, whatever the task is doing)
    # may stay still before its actor is presumed hung, killed and the task re-queued; 0: never. Minutes,
    # so a stalled shared file system or a long GC pause is not taken for a hang.
    hung_after: float = 300.0

    def __post_init__(self) -> None:
        require(self.kind in EXECUTORS, f"--executor {self.kind!r} is not one of {', '.join(EXECUTORS)}")
        require(
            self.num_actors is None or self.num_actors >= 1, f"--num-actors {self.num_actors} must be >= 1"
        )
        require(
            self.gpus_per_actor is None or self.gpus_per_actor >= 0,
            f"--gpus-per-actor {self.gpus_per_actor} must be >= 0 (0: CPU actors)",
        )
        require(self.cpus_per_actor > 0, f"--cpus-per-actor {self.cpus_per_actor} must be > 0")
        require(self.max_retries >= 0, f"--max-retries {self.max_retries} must be >= 0")
        require(
            self.hung_after >= 0,
            f"--hung-after {self.hung_after} must be >= 0 seconds (0: never give a task up)",
        )
        if self.kind == "local":
            given = [
                name
                for name, value in (
                    ("--ray-address", self.address),
                    ("--num-actors", self.num_actors),
                    ("--gpus-per-actor", self.gpus_per_actor),
                )
                if value is not None
            ]
            require(
                not given, f"{', '.join(given)} only apply to --executor ray; add --executor ray or drop them"
            )


@dataclass(frozen=True, kw_only=True)
class ScanConfig:
    corpus: CorpusConfig
    model: ModelConfig
    prompt: PromptConfig = field(default_factory=PromptConfig)
    spans: SpanConfig = field(default_factory=SpanConfig)
    screen: ScreenConfig = field(default_factory=ScreenConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    engines: EngineConfig = field(default_factory=EngineConfig)  # "auto" is decided where the shard runs
    min_match_rate: float = (
        0.5  # screen: a span is a candidate at this greedy-match rate or with a certificate
    )
    max_candidates_per_doc: int | None = None
    # Phase 2 (scanner/run/phases.py) searches candidates corpus-wide, best screen evidence first, until a
    # budget is spent: --max-candidates counts searched candidates, --search-budget GCG steps or
    # seconds ("20000steps", "2h"); candidates left over are not_searched. Settled certificates cost neither.
    max_candidates: int | None = None
    search_budget: str | None = None
    # After the budgeted search, a seeded random sample of what it left unsearched and of what the screen
    # dropped is searched too, so the run can state its recall (measures/recall.py). Its size follows the
    # work: by default searches worth a quarter of the seconds the budgeted search spent (parse_audit's
    # forms); kept as the user gave it (16, "16", "25%", "10m").
    audit_sample: int | str = AUDIT_DEFAULT
    tighten: bool = False  # also search spans their certificate settled, after the others
    unit_size: int = 8  # candidates per search unit (the resumable unit of phase 2)
    docs_per_shard: int = 8
    # A prompt sharing a run of at least this many tokens with its document is `work_text`, not `free`
    # (prompt_source, scanner/measures/overlap.py); certificates are work_text whatever their length.
    work_text_tokens: int = 4
    # Memorized spans are calibrated after the search: predictable text is told from recall (measures/calibration.py).
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)

    def __post_init__(self) -> None:
        require(0 <= self.min_match_rate <= 1, f"--min-match-rate {self.min_match_rate} must be in [0, 1]")
        require(
            self.max_candidates_per_doc is None or self.max_candidates_per_doc >= 0,
            f"--max-candidates-per-doc {self.max_candidates_per_doc} must be >= 0",
        )
        require(
            self.max_candidates is None or self.max_candidates >= 0,
            f"--max-candidates {self.max_candidates} must be >= 0",
        )
        parse_audit(self.audit_sample)  # InputError naming the value and the accepted forms
        require(self.docs_per_shard >= 1, f"--docs-per-shard {self.docs_per_shard} must be >= 1")
        require(self.unit_size >= 1, f"--unit-size {self.unit_size} must be >= 1")
        require(
            self.work_text_tokens >= 1,
            f"--work-text-tokens {self.work_text_tokens} must be >= 1 (the "
            "shortest run of the work's tokens that makes a prompt work_text; default 4)",
        )
        require(
            not (self.prompt.chat and self.screen.window == "stream"),
            "--screen-window stream reads a span right after the document text before it, but --chat puts "
            "the template's suffix between them; pass --screen-window exact or auto",
        )
        parse_budget(self.search_budget)  # InputError naming the value and the accepted forms

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """What `acr-scan compare` is (no live objects): run A's folder and saved scan config, model B, the spans."""

    run: str  # run A's folder, resolved
    scan: ScanConfig  # run A's configuration with B's model (and no draft: a draft is of A's tokenizer)
    spans: tuple[str, ...] | None = None  # --spans; None: A's flagged and control spans
    targets: tuple[str, ...] | None = None  # --file's texts: the spans of run A that lie inside them
    tighten: bool = False  # shrink below each verdict (else both searches stop at their verdict)
    unit_size: int = 8


def from_saved(cls, data: dict, source: str):
    """A frozen config dataclass from its saved JSON (config.to_dict()'s inverse: nested configs rebuilt,
    lists made tuples where the field is a tuple). The one reader of run_config.json, for a relaunch's
    compare, a re-check and a bundle's verify. An unknown or missing key, or a value the config refuses,
    is an InputError naming `source` (the file it came from)."""
    require(
        isinstance(data, dict),
        f"{source}: {cls.__name__} is {type(data).__name__}, not an object; the file "
        "is damaged: use the run's own copy",
    )
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    require(
        not unknown,
        f"{source}: {cls.__name__} has no field(s) {unknown}; the run was made by another "
        "acr-scanner release: read it with that release",
    )
    values = {}
    for key, value in data.items():
        hint = hints[key]
        if isinstance(value, dict) and dataclasses.is_dataclass(hint):
            value = from_saved(hint, value, source)
        elif isinstance(value, list) and (typing.get_origin(hint) is tuple or "tuple" in str(hint)):
            value = tuple(value)
        values[key] = value
    try:
        return cls(**values)
    except TypeError as err:  # a required field missing
        raise InputError(
            f"{source}: {cls.__name__}: {err}; the file is damaged: use the run's own copy"
        ) from err
