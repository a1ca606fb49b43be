"""The passages table: one row per memorized passage (scanner/measures/passages.py)."""

from __future__ import annotations

import pyarrow as pa

from scanner.schema.fields import ROLE_WALL_CLOCK, field

# Part of the passages table's fingerprint (storage/passages.py): a table of another version is built again.
PASSAGES_VERSION = "2"


def _passage_fields() -> list[pa.Field]:
    return [
        field(
            "passage_id",
            pa.string(),
            "Stable passage id: the first 16 hex digits of sha256 over (doc_row, "
            "token_start, token_end, tokenizer id); the same passage of one corpus and tokenizer gets the "
            "same id in every run.",
        ),
        field("doc_id", pa.string(), "Document id, as in the results."),
        field(
            "doc_row",
            pa.string(),
            "The corpus row '<file>:<row>', as in the results; null only for "
            "results written without it (then passages are grouped by doc_id).",
            nullable=True,
        ),
        field(
            "char_start", pa.int64(), "Start of the passage in the document text, in characters, inclusive."
        ),
        field(
            "char_end",
            pa.int64(),
            "End of the passage in the document text, in characters, exclusive (before any extension).",
        ),
        field(
            "token_start",
            pa.int64(),
            "Start of the passage in the document's token ids, inclusive: the "
            "first memorized span's token_start.",
        ),
        field(
            "token_end",
            pa.int64(),
            "End of the passage in the document's token ids, exclusive: the "
            "largest token_end of its memorized spans.",
        ),
        field("tokens", pa.int32(), "token_end - token_start."),
        field("text", pa.string(), "The passage as it stands in the document: text[char_start:char_end]."),
    ]


def _passage_evidence_fields() -> list[pa.Field]:
    return [
        field("best_acr", pa.float64(), "The highest ACR of the passage's memorized spans.", nullable=True),
        field(
            "best_acr_kind",
            pa.string(),
            "What kind of ACR best_acr is, copied from the results' "
            "acr_kind (a searched minimum or a certificate bound); null only where the results were "
            "written without acr_kind (tables made by hand).",
            nullable=True,
        ),
        field(
            "best_prompt",
            pa.string(),
            "The prompt of that span: typed in, greedy generation writes the span's tokens.",
            nullable=True,
        ),
        field("best_prompt_tokens", pa.int32(), "Its length in tokens, |x*|.", nullable=True),
        field("best_span_id", pa.string(), "The span (span_id in the results) the best prompt elicits."),
        field(
            "span_ids",
            pa.list_(field("item", pa.string(), "A memorized span's span_id.")),
            "The memorized spans merged into the passage, in token order.",
        ),
        field("spans", pa.int32(), "How many memorized spans the passage merges."),
        field(
            "other_spans_inside",
            pa.int32(),
            "Spans wholly inside the passage's token range that are "
            "not memorized (searched without success, screened out, failed); their tokens are covered "
            "by the memorized spans around them.",
        ),
        field(
            "calibrated_spans",
            pa.int32(),
            "Of the merged spans, those calibrated memorized (not shown "
            "predictable); null only where the results were written without calibrated_memorized (tables "
            "made by hand or by another tool).",
            nullable=True,
        ),
    ]


def _extension_fields() -> list[pa.Field]:
    def ext(name: str, type_: pa.DataType, doc: str) -> pa.Field:
        return field(
            name, type_, doc + " Null when the extension did not run (--extend-tokens 0).", nullable=True
        )

    return [
        field(
            "extend_budget",
            pa.int32(),
            "--extend-tokens: how many tokens past the passage's end "
            "generation was asked for (0: extension off).",
        ),
        ext(
            "extended_token_end",
            pa.int64(),
            "End (exclusive) of the longest run of the document's tokens "
            "that greedy generation from one of the passage's prompts reproduced, counted from the start of "
            "that prompt's span; token_end when generation reproduced nothing past the passage.",
        ),
        ext(
            "extended_char_end",
            pa.int64(),
            "The same end in characters: text[char_start:extended_char_end] "
            "is the passage with its extension.",
        ),
        ext(
            "extended_tokens",
            pa.int32(),
            "Tokens verified past the passage's end (extended_token_end - token_end); 0 when none.",
        ),
        ext(
            "extended_chars",
            pa.int32(),
            "Characters verified past the passage's end (extended_char_end - char_end).",
        ),
        ext(
            "extension_text",
            pa.string(),
            "The verified text past the passage: text[char_end:extended_char_end]; empty when none.",
        ),
        ext(
            "extension_prompt",
            pa.string(),
            "The prompt whose greedy generation gave that run: a span's "
            "prompt or its natural-prefix certificate.",
        ),
        ext(
            "extension_span_id",
            pa.string(),
            "The span that prompt belongs to; its token_start is where the "
            "comparison with the document began.",
        ),
        ext("extension_engine", pa.string(), "The engine that generated, 'hf' or 'vllm'."),
        field(
            "extend_s",
            pa.float64(),
            "Wall-clock seconds of the extension of this passage (its share of "
            "a batched generation); 0 when it did not run.",
            roles=(ROLE_WALL_CLOCK,),
        ),
    ]


def _prompt_source_fields() -> list[pa.Field]:
    """Whose words are in the passage's prompts (the results' prompt_source, scanner/measures/overlap.py)."""
    return [
        field(
            "best_prompt_source",
            pa.string(),
            "prompt_source of the best span's prompt (best_prompt): "
            "'work_text' (a certificate, or a run of the work's tokens in it) or 'free'; null where the "
            "results have no prompt_source column.",
            nullable=True,
        ),
        field(
            "extension_prompt_source",
            pa.string(),
            "The same of extension_prompt: 'work_text' when it is "
            "a natural-prefix certificate, else its span's prompt_source. Null when the extension did not "
            "run or found no prompt.",
            nullable=True,
        ),
    ]


def _shared_fields() -> list[pa.Field]:
    """Text many documents hold (scanner/run/passages.py, results/report_shared.py)."""
    return [
        field(
            "copies_in_corpus",
            pa.int32(),
            "How many documents of the corpus hold most of the passage's "
            "text: over its characters, the median of the largest copies_in_corpus (results) of the "
            "memorized spans covering each; null only where the results were written without it "
            "(tables made by hand).",
            nullable=True,
        ),
        field(
            "shared_text",
            pa.bool_(),
            "Text repeated across the corpus (a header, a licence, a table of "
            "contents), not the document's own: copies_in_corpus is at least --shared-text-min-docs (default: "
            "half the corpus's documents, at least 3). The "
            "report shows it once, as text repeated in N documents; export --without-shared-text leaves "
            "it out.",
            nullable=True,
        ),
    ]


def passages_schema() -> pa.Schema:
    """One row per memorized passage (scanner/measures/passages.py). Add columns, never rename or retype."""
    fields = (
        _passage_fields()
        + _passage_evidence_fields()
        + _extension_fields()
        + _prompt_source_fields()
        + _shared_fields()
    )
    return pa.schema(
        fields, metadata={b"name": b"acr-scanner passages", b"version": PASSAGES_VERSION.encode()}
    )
