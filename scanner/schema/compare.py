"""The comparison table of `acr-scan compare` (RUN_B/compare.parquet): one row per span of run A measured
again on model B, both sides side by side, and its verdict class (scanner/measures/compare.py).

Columns of a side are prefixed: `a_` as run A's results table holds them, `b_` what B's measures settled
(the certificate, the completion test, the best of the warm and the cold search), `warm_` the search on B
warm-started from A's prompt, `cold_` the same search from scratch on the same budget (the control).
"""

from __future__ import annotations

import pyarrow as pa

from scanner.schema.fields import field

COMPARE_VERSION = "1"

_SPAN = [
    ("span_id", pa.string(), "The span's id in run A (and on B: the same tokenizer cuts the same span)."),
    ("doc_id", pa.string(), "Document id."),
    ("shard", pa.int32(), "Run A's shard of the span."),
    ("char_start", pa.int64(), "Start of the span in the document text (characters)."),
    ("char_end", pa.int64(), "End of the span in the document text (characters, exclusive)."),
    ("text", pa.string(), "The span's text."),
    ("target_tokens", pa.int32(), "|y|: the span's tokens."),
    (
        "selected_as",
        pa.string(),
        "Why the span was measured: memorized (A's search found it), certified (A's "
        "natural-prefix certificate settled it), control (A searched it and found it not memorized), listed (--spans, or "
        "inside a --file target).",
    ),
    (
        "verdict_class",
        pa.string(),
        "still_memorized, forgotten_by_completion_still_compressible, forgotten, "
        "completion_only, newly_memorized, not_memorized, or failed (measures/compare.py).",
    ),
    ("reason", pa.string(), "Why the row failed (retried by a relaunch), else null."),
]


def _side(prefix: str, who: str) -> list[tuple]:
    return [
        (f"{prefix}memorized", pa.bool_(), f"{who}: ACR > tau with a prompt verified by generation."),
        (f"{prefix}acr", pa.float64(), f"{who}: the ACR (a lower bound where acr_kind says so)."),
        (
            f"{prefix}acr_kind",
            pa.string(),
            f"{who}: how the ACR was found (searched_min, decision_bound, certificate_bound).",
        ),
        (
            f"{prefix}prompt",
            pa.string(),
            f"{who}: the prompt string that elicits the span (null: none found).",
        ),
        (f"{prefix}prompt_tokens", pa.int32(), f"{who}: the prompt's tokens."),
        (f"{prefix}prompt_source", pa.string(), f"{who}: whose words the prompt holds (free, work_text)."),
        (
            f"{prefix}min_margin",
            pa.float64(),
            f"{who}: the smallest teacher-forced logit margin of the prompt.",
        ),
        (
            f"{prefix}generation_margin",
            pa.float64(),
            f"{who}: the smallest margin of the verifying generation.",
        ),
        (f"{prefix}steps", pa.int64(), f"{who}: GCG steps spent."),
        (f"{prefix}forwards", pa.int64(), f"{who}: model forwards spent by the search."),
        (
            f"{prefix}attempts",
            pa.string(),
            f"{who}: the search's attempts (JSON list: stage, length, warm, steps, outcome).",
        ),
    ]


_A_EXTRA = [
    ("a_status", pa.string(), "A: the span's status in run A."),
    ("a_greedy_match_rate", pa.float64(), "A: greedy-match rate of the span after its document context."),
    ("a_discoverable", pa.bool_(), "A: the k-prefix test (null: A's screen did not run it)."),
    ("a_pz_greedy", pa.float64(), "A: p_z under greedy decoding from the document context."),
    ("a_completion", pa.bool_(), "A: the completion test passed (discoverable, or p_z greedy = 1)."),
]
_B_EXTRA = [
    ("b_status", pa.string(), "B: memorized, not_memorized or failed."),
    ("b_prompt_origin", pa.string(), "B: which measure gave b_prompt: certificate, warm or cold."),
    ("b_greedy_match_rate", pa.float64(), "B: greedy-match rate of the span after its document context."),
    (
        "b_discoverable",
        pa.bool_(),
        "B: the k-prefix test (the span's first k tokens greedily yield the rest).",
    ),
    ("b_pz_greedy", pa.float64(), "B: p_z under greedy decoding from the document context."),
    ("b_pz_topk", pa.float64(), "B: p_z under top-k sampling from the document context."),
    ("b_completion", pa.bool_(), "B: the completion test passed (discoverable, or p_z greedy = 1)."),
    (
        "b_certificate_tokens",
        pa.int32(),
        "B: the shortest natural prefix whose teacher-forced output is the span.",
    ),
    (
        "b_certificate_verified",
        pa.bool_(),
        "B: that certificate reproduces the span by greedy generation and "
        "proves ACR > tau (null: no certificate).",
    ),
    ("b_screen_s", pa.float64(), "B: seconds of the screen and the certificate check."),
]
_RUNS = [
    (
        "warm_from_a",
        pa.bool_(),
        "A's prompt, checked on B by generation, elicits the span (null: A had none).",
    ),
    ("warm_s", pa.float64(), "Seconds of the warm search."),
    ("cold_s", pa.float64(), "Seconds of the cold search."),
]


def compare_schema() -> pa.Schema:
    columns = [
        *_SPAN,
        *_side("a_", "A"),
        *_A_EXTRA,
        *_side("b_", "B"),
        *_B_EXTRA,
        *_side("warm_", "warm search on B"),
        *_side("cold_", "cold search on B"),
        *_RUNS,
    ]
    fields = [field(name, type_, doc, nullable=True) for name, type_, doc in columns]
    return pa.schema(fields, metadata={b"compare_version": COMPARE_VERSION.encode()})
