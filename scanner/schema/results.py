"""The results table, one row per span: every column's type, description, default and roles.

This is the one list of results columns. The row builder (scanner/results/rows.py) starts every row from
`default_row()`, phase 2 ranks candidates by RANK_COLUMNS, export writes EXPORT_EVIDENCE and
EXPORT_OPTIONAL, and every comparison of two runs' tables leaves out WALL_CLOCK. Adding a column is
one `column(...)` here (and its value in rows.py, unless the default is what every row holds), then
`python -m scanner.schema schemas/`.
"""

from __future__ import annotations

import pyarrow as pa

from scanner.schema.fields import DOC_KEY, ROLE_RANK, ROLE_WALL_CLOCK, default_of, field, names_with

# Raised with every column added or value whose meaning changes: a run directory of another version is
# not resumed (scanner/storage/rundir.py), since its finished parts and the new ones would mix two tables.
SCHEMA_VERSION = "5"
STATUSES = ("memorized", "not_memorized", "screened_out", "skipped", "failed", "not_searched")


def column(
    name: str,
    type_: pa.DataType,
    doc: str,
    nullable: bool = False,
    *,
    default=None,
    roles: tuple[str, ...] = (),
) -> pa.Field:
    """A results column: what a fresh row holds (`default`, None unless given) and its `roles`."""
    return field(name, type_, doc, nullable, default=default, roles=roles)


def _threshold_type() -> pa.DataType:
    entry = pa.struct(
        [
            field(
                "name", pa.string(), "Threshold name, e.g. 'tau' for the main one or a compressor ('gzip')."
            ),
            field("tau", pa.float64(), "The threshold value τ for this span."),
            field("memorized", pa.bool_(), "ACR > τ with a verified prompt (failures are never memorized)."),
        ]
    )
    return pa.list_(
        pa.field(
            "item", entry, nullable=False, metadata={DOC_KEY: b"One named threshold and the verdict at it."}
        )
    )


def _span_fields() -> list[pa.Field]:
    return [
        column(
            "doc_id",
            pa.string(),
            "Document id: the corpus id column as a string, or '<file>:<row>' when the corpus has none.",
            default="",
        ),
        column(
            "span_id",
            pa.string(),
            "Stable span id: the first 16 hex digits of sha256 over (doc_row, "
            "doc_id, token_start, token count, tokenizer id); unique per corpus row (also where ids "
            "repeat) and the same across runs of one corpus and tokenizer.",
            default="",
            roles=(ROLE_RANK,),
        ),
        column(
            "char_start",
            pa.int64(),
            "Start of the span in the document text, in characters (Python string index), inclusive.",
            default=0,
        ),
        column(
            "char_end",
            pa.int64(),
            "End of the span in the document text, in characters, exclusive.",
            default=0,
        ),
        column(
            "token_start",
            pa.int64(),
            "Start of the span in the document's token ids (the whole "
            "document tokenized once, without special tokens), inclusive.",
            default=0,
        ),
        column("token_end", pa.int64(), "End of the span in the document's token ids, exclusive.", default=0),
        column(
            "text",
            pa.string(),
            "The span exactly as it stands in the document: "
            "text[char_start:char_end]. Empty for a skipped null or empty document.",
            default="",
        ),
        column(
            "target_tokens",
            pa.int32(),
            "Number of target token ids, |y| (token_end - token_start); 0 for a skipped row.",
            default=0,
            roles=(ROLE_RANK,),
        ),
        column(
            "target_ids",
            pa.list_(field("item", pa.int32(), "A target token id.")),
            "The target token "
            "ids as cut from the document's tokenization (what the prompt must make the model "
            "generate); empty for a skipped row. Kept so evidence can be re-checked without the corpus.",
            default=[],
        ),
        column(
            "status",
            pa.string(),
            "One of memorized, not_memorized, screened_out (ruled out by the "
            "cheap screen, no search ran), skipped (not a valid target, see reason), failed (an "
            "error, see reason; retried on resume) or not_searched (a candidate the search budget did "
            "not reach, see reason: --search-budget or --max-candidates).",
            default="skipped",
            roles=(ROLE_RANK,),
        ),
        column(
            "reason",
            pa.string(),
            "Why the span was skipped or failed, e.g. 'too short: 5 tokens < "
            "32' or the error; null otherwise.",
            nullable=True,
        ),
    ]


def _verdict_fields() -> list[pa.Field]:
    return [
        column(
            "acr",
            pa.float64(),
            "Adversarial Compression Ratio |y| / |x*|; |y| / cap when the search "
            "found no verified prompt; |y| / |certificate| for a span settled by its certificate (a bound, "
            "see acr_kind); null when no search ran (screened out, not searched, skipped, failed).",
            nullable=True,
        ),
        column(
            "memorized", pa.bool_(), "ACR > tau with a prompt verified by greedy generation.", default=False
        ),
        column(
            "prompt",
            pa.string(),
            "The shortest prompt string found (free tokens only, without the "
            "fixed template); typed in, it elicits the span. Null when none was found.",
            nullable=True,
        ),
        column(
            "prompt_ids",
            pa.list_(field("item", pa.int32(), "A prompt token id.")),
            "Token ids of the prompt (the string re-tokenized); null when no prompt was found.",
            nullable=True,
        ),
        column(
            "prompt_tokens",
            pa.int32(),
            "|x*|: the number of prompt tokens counted by ACR; 0 means "
            "the fixed template alone elicits the span. Null when no prompt was found.",
            nullable=True,
        ),
        column(
            "tau",
            pa.float64(),
            "The main threshold τ that decides `memorized` (the paper uses 1).",
            default=1.0,
        ),
        column(
            "thresholds",
            _threshold_type(),
            "The verdict at every configured threshold, the main "
            "one and data-dependent ones (compression ratios); empty when none applies.",
            default=[],
        ),
    ]


def _screen_fields() -> list[pa.Field]:
    return [
        column(
            "greedy_match_rate",
            pa.float64(),
            "Teacher-forced screen: the share of target positions "
            "where the model's argmax is the target token, given the preceding document context (its "
            "window: exactly --context-tokens tokens with --screen-window exact; at least that many, up "
            "to --chunk-tokens, streamed; provenance screen_window says which). Null when the screen "
            "did not run.",
            nullable=True,
            roles=(ROLE_RANK,),
        ),
        column(
            "mean_nll",
            pa.float64(),
            "Teacher-forced screen: mean negative log-likelihood (nats per "
            "token) of the target given the preceding context (its window, as for greedy_match_rate). "
            "Null when the screen did not run.",
            nullable=True,
            roles=(ROLE_RANK,),
        ),
        column(
            "discoverable",
            pa.bool_(),
            "Discoverable memorization (Carlini et al. 2023): the span's "
            "first half alone (after the template) greedily yields the rest, teacher-forced. Null when "
            "the span row did not run: the screen did not run, or the span's window fell below "
            "--certificate-min-match.",
            nullable=True,
        ),
        column(
            "certificate_tokens",
            pa.int32(),
            "Length of the shortest preceding document context "
            "(at most --context-tokens) that greedily elicits the span, teacher-forced (an upper bound "
            "on |x*|); null when none does or, below --certificate-min-match, none was tried.",
            nullable=True,
            roles=(ROLE_RANK,),
        ),
        column(
            "certificate_prompt",
            pa.string(),
            "That preceding context as a string; null when none.",
            nullable=True,
        ),
    ]


def _verify_fields() -> list[pa.Field]:
    return [
        column(
            "verified_generation",
            pa.bool_(),
            "Greedy generation from the prompt string, in the "
            "verify engine, reproduced the span; false when nothing was verified.",
            default=False,
        ),
        column(
            "teacher_forced",
            pa.bool_(),
            "The teacher-forced argmax matched the target at every "
            "position given the prompt; null when no prompt was checked.",
            nullable=True,
        ),
        column(
            "verify_engine",
            pa.string(),
            "The engine that ran the greedy generation check, e.g. "
            "'hf' or 'vllm'; null when nothing was verified.",
            nullable=True,
        ),
        column(
            "min_margin",
            pa.float64(),
            "Smallest logit margin (target logit minus the best other "
            "logit) over the target positions given the prompt, teacher forced (one forward of the HF "
            "model over prompt and span; the generation's own margin is generation_margin); negative "
            "means a position was wrong. Null when no prompt was checked.",
            nullable=True,
        ),
    ]


def _cost_fields() -> list[pa.Field]:
    return [
        column("steps", pa.int64(), "GCG steps spent on this span (0 when no search ran).", default=0),
        column(
            "forwards",
            pa.int64(),
            "Sequences passed through the model for this span: screen, "
            "candidates, gradients and verification.",
            default=0,
        ),
        column(
            "screen_s",
            pa.float64(),
            "Wall-clock seconds of the screen for this span (its share of a batched pass).",
            default=0.0,
            roles=(ROLE_WALL_CLOCK,),
        ),
        column(
            "search_s",
            pa.float64(),
            "Wall-clock seconds of the search and verification.",
            default=0.0,
            roles=(ROLE_WALL_CLOCK,),
        ),
        column(
            "shard",
            pa.int32(),
            "The shard of the run plan that produced this row.",
            default=0,
            roles=(ROLE_RANK,),
        ),
        column(
            "extra",
            pa.string(),
            "The corpus columns named by --keep-columns for this row's document, "
            "as a JSON object; null when none were kept.",
            nullable=True,
        ),
    ]


def _engine_fields() -> list[pa.Field]:
    return [
        column(
            "verify_version",
            pa.string(),
            "Version of the verify engine (transformers for 'hf', vLLM "
            "for 'vllm'); null when nothing was verified.",
            nullable=True,
        ),
        column(
            "verify_dtype",
            pa.string(),
            "The dtype the verify engine ran in, e.g. 'float32' or "
            "'bfloat16'; null when nothing was verified.",
            nullable=True,
        ),
        column(
            "verify_flags",
            pa.string(),
            "The verify engine's settings as a JSON object (device, "
            "vLLM's enforce_eager, batch_invariant, gpu_memory_utilization, ...); null when nothing "
            "was verified.",
            nullable=True,
        ),
        column(
            "verify_disagrees",
            pa.bool_(),
            "The verify engine's greedy generation and the HF model's "
            "teacher-forced check of the reported prompt disagree (verified_generation != "
            "teacher_forced); recorded, never hidden. Null when no prompt was found.",
            nullable=True,
        ),
        column(
            "rejected_matches",
            pa.int64(),
            "Prompts the search found by the HF teacher-forced check "
            "that the verify engine's generation refuted; null when no search ran.",
            nullable=True,
        ),
        column(
            "screen_engine",
            pa.string(),
            "The engine that ran the teacher-forced screen, 'hf' or "
            "'vllm'; null when the screen did not run.",
            nullable=True,
        ),
    ]


def _identity_fields() -> list[pa.Field]:
    return [
        column(
            "doc_row",
            pa.string(),
            "Where the document stands in the corpus: '<file>:<row>', the file "
            "relative to the corpus files' common folder and the row counted from 0 within it. Unique "
            "per corpus row, so documents that share an id (--allow-duplicate-ids) stay apart. Null only "
            "in rows written without it (tables made by hand).",
            nullable=True,
        ),
    ]


def _calibration_fields() -> list[pa.Field]:
    """Memorized or merely predictable (scanner/measures/calibration.py): filled for memorized spans only."""

    def maybe(name: str, type_: pa.DataType, doc: str, roles: tuple[str, ...] = ()) -> pa.Field:
        return column(
            name,
            type_,
            doc + " Null when the span was not calibrated (not memorized, or calibration off).",
            nullable=True,
            roles=roles,
        )

    return [
        maybe(
            "predictable",
            pa.bool_(),
            "Calibration found the memorized span predictable: text any "
            "competent model writes (counting, a refrain, boilerplate), not recall special to this "
            "model. See predictable_reason.",
        ),
        maybe(
            "predictable_reason",
            pa.string(),
            "Why it is predictable: which probe (reference model "
            "from the prompt or the natural prefix, reference NLL within the margin, unrelated prompts, "
            "the template alone) and its figures; null when not predictable.",
        ),
        column(
            "calibrated_memorized",
            pa.bool_(),
            "The calibrated verdict: memorized and not predictable. "
            "Equals `memorized` when calibration is off (nothing was shown predictable); false for "
            "every span that is not memorized. Never null in tables acr-scan writes (nullable so that "
            "tables made by other tools without it still load).",
            nullable=True,
            default=False,
        ),
        maybe(
            "random_prompt_trials",
            pa.int32(),
            "Self-calibration: unrelated prompts tried, random "
            "prompt-vocabulary strings of the found prompt's length (at least 1), seeded per span.",
        ),
        maybe(
            "random_prompt_hits",
            pa.int32(),
            "Of them, those whose greedy generation reproduced at "
            "least the long-prefix share (default half) of the span's tokens.",
        ),
        maybe(
            "random_prompt_match",
            pa.float64(),
            "The longest leading share of the span's tokens any unrelated prompt elicited (0 to 1).",
        ),
        maybe(
            "unconditional_match",
            pa.float64(),
            "The leading share of the span's tokens that greedy "
            "generation from the template alone (empty prompt: BOS and fixed text only) reproduces.",
        ),
        maybe(
            "calibration_s",
            pa.float64(),
            "Wall-clock seconds of the self-calibration of this span "
            "(the reference model's time is reference_s).",
            roles=(ROLE_WALL_CLOCK,),
        ),
        maybe(
            "reference_model",
            pa.string(),
            "The reference model (--reference-model) that checked the span; null also when none was given.",
        ),
        maybe(
            "reference_from_prompt",
            pa.bool_(),
            "The reference model's greedy generation from the "
            "same prompt string writes the span's text (compared on text: any tokenizer).",
        ),
        maybe(
            "reference_from_prefix",
            pa.bool_(),
            "The reference model's greedy generation from the "
            "natural prefix (certificate_prompt, or acr's --natural-prefix) writes the span's text; "
            "null also when the span has no natural prefix.",
        ),
        maybe(
            "reference_match",
            pa.float64(),
            "The longest leading share of the span's characters the "
            "reference model wrote from the prompt or the natural prefix (0 to 1).",
        ),
        maybe(
            "reference_nll",
            pa.float64(),
            "The reference model's NLL of the span given the context "
            "mean_nll was computed with, in nats per *model* token (R's total over the span divided by "
            "target_tokens), so it compares with mean_nll across tokenizers.",
        ),
        maybe(
            "reference_s",
            pa.float64(),
            "Wall-clock seconds the reference model spent on this span.",
            roles=(ROLE_WALL_CLOCK,),
        ),
        *[
            column(
                f"{name}_ratio",
                pa.float64(),
                f"Compression ratio of the span's text under {name} "
                "(UTF-8 bytes / compressed bytes; scanner/measures/compression.py), the data-dependent threshold of "
                "that name in `thresholds`. Null when no search ran.",
                nullable=True,
            )
            for name in ("gzip", "zlib", "lzma", "smaz")
        ],
    ]


def _phase_fields() -> list[pa.Field]:
    """Screen first, then search by evidence (scanner/run/phases.py): what kind of ACR a row reports."""
    return [
        column(
            "acr_kind",
            pa.string(),
            "What `acr` is. 'certificate_bound': the span was settled without "
            "GCG by its natural-prefix certificate (shorter than the span, verified by greedy generation "
            "from the certificate string, which is `prompt`); acr = |y| / |certificate| is a lower bound "
            "on the span's ACR (a shorter prompt may exist; --tighten searches for one). 'searched_min': "
            "the shortest prompt the search found (MiniPrompt), itself a lower bound on the true ACR "
            "in that the search is not exhaustive. 'decision_bound': the search stopped at its verdict, "
            "the first prompt it verified, and the budget ran out before the span's turn to be shrunk "
            "(every candidate is decided before any is shrunk): acr = |y| / |prompt| is the bound that "
            "prompt proves. Null when no ACR was measured.",
            nullable=True,
        ),
    ]


def _rejection_fields() -> list[pa.Field]:
    """Early rejection of searches (scanner/search/reject.py)."""
    return [
        column(
            "rejected_early",
            pa.bool_(),
            "The search found no prompt and the early-rejection rule "
            "(--early-reject) stopped it before its budget: the model's best candidates got too few "
            "target tokens right under teacher forcing (or stopped improving), so the span is "
            "not_memorized without the full search; steps and forwards count what was spent. False "
            "for a search that ran to its end or found a prompt; null when no search ran.",
            nullable=True,
        ),
    ]


def _screen_pass_fields() -> list[pa.Field]:
    """Read off the screen's window row too: anchored spans (stages/anchor.py) and probabilistic
    extraction (scanner/measures/extraction.py; Hayes et al. 2024, Cooper et al. 2025)."""

    def pz(name: str, type_: pa.DataType, doc: str) -> pa.Field:
        return column(
            name,
            type_,
            doc + " Null when the screen did not run (a skipped span), or, for the "
            "top-k figures, when the screener could not give them (vLLM above 64 log-probs).",
            nullable=True,
        )

    return [
        column(
            "anchored",
            pa.bool_(),
            "The span was added by anchoring, not by the fixed windows: the "
            "window rows' per-token greedy matches showed a run of memorized-looking text, and a span "
            "was placed at the run's start (one token before its first match) and, for runs reaching a "
            "span, at its end, so a passage a span long at any offset has a span that holds it whole. "
            "Null only in tables written without it.",
            nullable=True,
        ),
        pz(
            "pz_greedy",
            pa.float64(),
            "p_z under greedy decoding: 1 when greedy generation from the "
            "span's preceding context (its window: template and --context-tokens document tokens, or at "
            "least that many when streamed) reproduces the span, i.e. every teacher-forced argmax is the "
            "span token; else 0.",
        ),
        pz(
            "pz_topk",
            pa.float64(),
            "p_z under top-k sampling (pz_top_k, pz_temperature): the probability "
            "that one sample from the same context is exactly the span, the product over its tokens of "
            "the softmax of logits / T over the k largest logits (0 when a token is outside them). "
            "Underflows to 0 for long unlikely spans: log10_pz_topk keeps the figure.",
        ),
        pz(
            "log10_pz_topk",
            pa.float64(),
            "log10 of pz_topk, summed in log space (never underflows); "
            "-inf when a span token falls outside the top k.",
        ),
        pz("pz_top_k", pa.int32(), "k of the top-k sampling scheme (--pz-top-k)."),
        pz("pz_temperature", pa.float64(), "Temperature T of the top-k sampling scheme (--pz-temperature)."),
        pz("np_n", pa.int64(), "n of the (n, p)-discoverable verdict: samples drawn (--pz-n)."),
        pz("np_p", pa.float64(), "p of the (n, p)-discoverable verdict: the probability required (--pz-p)."),
        pz(
            "np_extraction_probability",
            pa.float64(),
            "1 - (1 - pz_topk)^np_n: the chance that at least "
            "one of n top-k samples from the span's preceding context is the span (computed from the log, "
            "with log1p/expm1).",
        ),
        pz(
            "np_discoverable",
            pa.bool_(),
            "(n, p)-discoverable under top-k sampling: np_extraction_probability >= np_p.",
        ),
    ]


def _copy_fields() -> list[pa.Field]:
    """Identical spans searched once (scanner/run/units.py)."""
    return [
        column(
            "searched_as",
            pa.string(),
            "The span_id of the copy whose search (or certificate) gave "
            "this row its verdict, prompt and ACR: a span with the same target tokens, searched once for "
            "every copy in the corpus (a header every book carries, a quotation, a second edition). The "
            "copy keeps its own place and screen columns and no cost of its own (steps and seconds 0: "
            "copies count once against the budget). Null for a span searched, certified or screened "
            "itself.",
            nullable=True,
        ),
        column(
            "copies_in_corpus",
            pa.int32(),
            "Of a memorized span: how many documents of the corpus hold "
            "its target tokens (its own included), counting the copies the plans grouped and the places "
            "found by its text at any offset afterwards (scanner/run/occurrences.py). Text held by many "
            "documents (a publisher's header, a licence) is shared text, not a book's own: the passages "
            "table's shared_text. Null when not memorized.",
            nullable=True,
        ),
        column(
            "audit_stratum",
            pa.string(),
            "Of a span the recall audit drew and searched (a seeded random "
            "sample of what the budget left unsearched and of what the screen dropped, run/phases.py): "
            "its stratum, e.g. 'not_searched/top' or 'screened_out/rest'. Its status and prompt are the "
            "audit search's; recall.json estimates from these rows what the unsearched still hold. Null "
            "for every span the scan decided by itself.",
            nullable=True,
        ),
    ]


ATTEMPT_STAGES = (
    "certify",
    "search",
    "audit",
    "tighten",
)  # the unit kind an attempt ran in (scanner/run/tasks.py)
ATTEMPT_OUTCOMES = ("success", "failed", "rejected_early")


def _attempt_type() -> pa.DataType:
    def member(name: str, type_: pa.DataType, doc: str, nullable: bool = False) -> pa.Field:
        return field(name, type_, doc, nullable)

    entry = pa.struct(
        [
            member(
                "stage",
                pa.string(),
                "The unit it ran in: 'certify' (generation from the natural-prefix "
                "certificate, no GCG), 'search' (the search to the span's verdict) or 'tighten' (the later "
                "search that shrank the decided prompt).",
            ),
            member("length", pa.int32(), "Prompt tokens tried (free tokens; 0: the template alone)."),
            member("trial", pa.int32(), "Which run at this length: 0 the first, 1.. the restarts."),
            member("tries", pa.int32(), "Runs the schedule allowed at this length (1 + restarts)."),
            member(
                "warm",
                pa.string(),
                "How it started: 'random' (fresh random prompt), 'shrink' (from the "
                "success one length up), 'grow' (from the best failed prompt below), 'deletion' (a one-token "
                "deletion of the success above already elicited the span: no GCG), 'none' (the empty "
                "prompt, checked by generation), 'certificate' (the natural-prefix certificate checked by "
                "generation), 'decided' (the verdict's prompt checked again before shrinking from it), 'resumed' (a "
                "try the search budget cut, gone on with by a relaunch from its lowest-loss prompt: max_steps and "
                "steps are what was left and spent after the relaunch; the lengths finished before the cut are "
                "not searched again and not listed).",
            ),
            member(
                "seed",
                pa.int64(),
                "The search's seed (per span, from --seed and span_id): every attempt "
                "of one search draws from one generator seeded with it, in this order; null for a "
                "certificate check.",
                nullable=True,
            ),
            member("max_steps", pa.int64(), "GCG steps the schedule allowed it (0: no optimization)."),
            member("steps", pa.int64(), "GCG steps it spent; the attempts of a span sum to its `steps`."),
            member(
                "best_loss",
                pa.float64(),
                "Lowest loss it reached (mean cross-entropy over the target); "
                "null where no loss was computed.",
                nullable=True,
            ),
            member(
                "best_right",
                pa.int32(),
                "Most target tokens right under teacher forcing among its "
                "candidates (all of them on success); null where nothing was scored.",
                nullable=True,
            ),
            member(
                "outcome",
                pa.string(),
                "'success' (a prompt verified by greedy generation), 'failed' (its "
                "steps ran out) or 'rejected_early' (the early-rejection rule stopped it, see stop_reason).",
            ),
            member(
                "stop_reason",
                pa.string(),
                "Why the early-rejection rule stopped it ('hopeless', 'stalled'); null otherwise.",
                nullable=True,
            ),
        ]
    )
    return pa.list_(
        pa.field(
            "item", entry, nullable=False, metadata={DOC_KEY: b"One attempt: a prompt length tried once."}
        )
    )


def _evidence_fields() -> list[pa.Field]:
    """Every attempt disclosed and whose words are in the prompt (scanner/measures/overlap.py)."""

    def run(name: str, doc: str) -> pa.Field:
        return column(name, pa.int32(), doc + " Null when the row has no prompt.", nullable=True)

    return [
        column(
            "attempts",
            _attempt_type(),
            "Every attempt behind the verdict, in the order they ran: the "
            "certificate check, the search to the verdict, then the tightening (stage), failures "
            "included. A copy (searched_as) carries the attempts of the span searched for it, which ran "
            "once (its own steps are 0). Empty when no search or certificate check ran.",
            default=[],
        ),
        run(
            "prompt_span_run_tokens",
            "Longest run of consecutive prompt token ids that stands in the span's target_ids.",
        ),
        run(
            "prompt_span_run_chars",
            "Longest run of the prompt string's characters that stands in the span's text.",
        ),
        run(
            "prompt_doc_run_tokens",
            "Longest run of consecutive prompt token ids that stands in the whole "
            "document's token ids (the document tokenized once, as spans are cut); measured where the "
            "search ran, against the document of the span searched (for a copy: its twin's).",
        ),
        run(
            "prompt_doc_run_chars",
            "Longest run of the prompt string's characters that stands in the whole document's text.",
        ),
        column(
            "prompt_source",
            pa.string(),
            "Whose words are in `prompt`: 'work_text' when it is a "
            "natural-prefix certificate (the document's own preceding text) or shares a run of at least "
            "k tokens with the document (prompt_doc_run_tokens, or the span's where the document was not "
            "read; k: --work-text-tokens, default 4); 'free' otherwise (the empty prompt too). Export, "
            "report and verify count the two apart; export --free-prompts-only keeps 'free'. Null when "
            "the row has no prompt.",
            nullable=True,
        ),
    ]


def _robustness_fields() -> list[pa.Field]:
    """How close the verdict's own generation came to another token (scanner/engine/hf.py Verification):
    greedy decoding is not bit-stable across dtypes, batch shapes and engines, so the evidence says how
    robust each success is (min_margin is the teacher-forced figure, not the generation's)."""
    return [
        column(
            "generation_margin",
            pa.float64(),
            "Smallest logit margin of the verify engine's greedy "
            "generation from the prompt string, over the span's positions: at each decoding step the "
            "logit of the token generation chose (for a verified prompt, the span's token) minus the best "
            "other logit, read off the generation itself (KV-cached decoding; vLLM: the difference of its "
            "top-2 log-probs), not a teacher-forced pass. Null when no prompt was verified.",
            nullable=True,
        ),
        column(
            "generation_margin_at",
            pa.int32(),
            "The span position (0-based target token) where "
            "generation_margin occurs: the token a change of numeric path would flip first. Null when no "
            "prompt was verified.",
            nullable=True,
        ),
        column(
            "fragile_below",
            pa.float64(),
            "The threshold of `fragile` (--fragile-margin, logits; "
            "scanner/config.py SearchConfig.fragile_margin). Null when no prompt was verified.",
            nullable=True,
        ),
        column(
            "fragile",
            pa.bool_(),
            "A verified prompt whose generation_margin is below fragile_below: "
            "greedy decoding under another numeric path (dtype, batch shape, engine) may leave the span "
            "there; re-check it with `acr-scan verify RUN --dtype float32` or --verify-engine. Null when "
            "no prompt was verified.",
            nullable=True,
        ),
    ]


def results_schema() -> pa.Schema:
    """One row per span. Column names are a public interface: add columns, never rename or retype."""
    fields = (
        _span_fields()
        + _verdict_fields()
        + _screen_fields()
        + _verify_fields()
        + _cost_fields()
        + _engine_fields()
        + _identity_fields()
        + _calibration_fields()
        + _phase_fields()
        + _rejection_fields()
        + _screen_pass_fields()
        + _copy_fields()
        + _evidence_fields()
        + _robustness_fields()
    )
    return pa.schema(fields, metadata={b"name": b"acr-scanner results", b"version": SCHEMA_VERSION.encode()})


_SCHEMA = results_schema()
RANK_COLUMNS = names_with(_SCHEMA, ROLE_RANK)
RESULTS_WALL_CLOCK = names_with(_SCHEMA, ROLE_WALL_CLOCK)
# What export writes for a flagged span, in a reader's order rather than the table's (so it is a list,
# not a role): the evidence every results table holds, then columns written where the table has them (a
# table made by hand or trimmed may lack them): ids to re-check a span without the corpus or a tokenizer
# round trip, the calibrated verdict and its evidence, how the search ended.
EXPORT_EVIDENCE = (
    "doc_id",
    "span_id",
    "char_start",
    "char_end",
    "token_start",
    "text",
    "prompt",
    "prompt_tokens",
    "target_tokens",
    "acr",
    "verified_generation",
    "verify_engine",
    "min_margin",
    "certificate_tokens",
)
EXPORT_OPTIONAL = (
    "token_end",
    "target_ids",
    "prompt_ids",
    "teacher_forced",
    "mean_nll",
    *(f.name for f in _calibration_fields()),
    "rejected_early",
    "searched_as",
    *(f.name for f in _evidence_fields()),
    "verify_version",
    "verify_dtype",
    *(f.name for f in _robustness_fields()),
)


def default_row() -> dict:
    """What a fresh results row holds in every column (new lists each call: rows never share one)."""
    return {f.name: default_of(f) for f in _SCHEMA}
