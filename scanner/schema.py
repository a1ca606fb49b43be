"""The only definition of the Arrow schemas: what a corpus must hold, the corpus `ingest` writes and the
results table (one row per span).

Every field carries its description in the field metadata under b"doc", so the Parquet files document
themselves and `schemas/` (serialized schema + Markdown) is generated from here, never edited by hand.
Regenerate with `python -m scanner.schema schemas/`; a test fails when the committed copy drifts.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pyarrow as pa

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
INGESTED_VERSION = "1"
DOC_KEY = b"doc"
STATUSES = ("memorized", "not_memorized", "screened_out", "skipped", "failed", "not_searched")

# What `stages/read.py` accepts. Documented here rather than enforced as a schema because the column
# names are options (--text-column, --id-column) and any other columns may be present.
CORPUS_REQUIRED = {
    "text": "The document text: a string column (string, large_string or string_view; null rows become "
            "skipped spans). Named by --text-column, default 'text'. Binary columns must be cast first.",
    "id": "Optional document id, string or integer, unique unless --allow-duplicate-ids. Named by "
          "--id-column; by default 'id', else 'doc_id', else '<file>:<row>' is used.",
}
TEXT_TYPES = (pa.string(), pa.large_string(), pa.string_view())


def _field(name: str, type_: pa.DataType, doc: str, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={DOC_KEY: doc.encode()})


def _threshold_type() -> pa.DataType:
    entry = pa.struct([
        _field("name", pa.string(), "Threshold name, e.g. 'tau' for the main one or a compressor ('gzip')."),
        _field("tau", pa.float64(), "The threshold value τ for this span."),
        _field("memorized", pa.bool_(), "ACR > τ with a verified prompt (failures are never memorized)."),
    ])
    return pa.list_(pa.field("item", entry, nullable=False,
                             metadata={DOC_KEY: b"One named threshold and the verdict at it."}))


def _span_fields() -> list[pa.Field]:
    return [
        _field("doc_id", pa.string(), "Document id: the corpus id column as a string, or '<file>:<row>' "
               "when the corpus has none."),
        _field("span_id", pa.string(), "Stable span id: the first 16 hex digits of sha256 over (doc_row, "
               "doc_id, token_start, token count, tokenizer id); unique per corpus row (also where ids "
               "repeat) and the same across runs of one corpus and tokenizer."),
        _field("char_start", pa.int64(), "Start of the span in the document text, in characters "
               "(Python string index), inclusive."),
        _field("char_end", pa.int64(), "End of the span in the document text, in characters, exclusive."),
        _field("token_start", pa.int64(), "Start of the span in the document's token ids (the whole "
               "document tokenized once, without special tokens), inclusive."),
        _field("token_end", pa.int64(), "End of the span in the document's token ids, exclusive."),
        _field("text", pa.string(), "The span exactly as it stands in the document: "
               "text[char_start:char_end]. Empty for a skipped null or empty document."),
        _field("target_tokens", pa.int32(), "Number of target token ids, |y| (token_end - token_start); "
               "0 for a skipped row."),
        _field("target_ids", pa.list_(_field("item", pa.int32(), "A target token id.")), "The target token "
               "ids as cut from the document's tokenization (what the prompt must make the model "
               "generate); empty for a skipped row. Kept so evidence can be re-checked without the corpus."),
        _field("status", pa.string(), "One of memorized, not_memorized, screened_out (ruled out by the "
               "cheap screen, no search ran), skipped (not a valid target, see reason), failed (an "
               "error, see reason; retried on resume) or not_searched (a candidate the search budget did "
               "not reach, see reason: --search-budget or --max-candidates)."),
        _field("reason", pa.string(), "Why the span was skipped or failed, e.g. 'too short: 5 tokens < "
               "32' or the error; null otherwise.", nullable=True),
    ]


def _verdict_fields() -> list[pa.Field]:
    return [
        _field("acr", pa.float64(), "Adversarial Compression Ratio |y| / |x*|; |y| / cap when the search "
               "found no verified prompt; |y| / |certificate| for a span settled by its certificate (a bound, "
               "see acr_kind); null when no search ran (screened out, not searched, skipped, failed).",
               nullable=True),
        _field("memorized", pa.bool_(), "ACR > tau with a prompt verified by greedy generation."),
        _field("prompt", pa.string(), "The shortest prompt string found (free tokens only, without the "
               "fixed template); typed in, it elicits the span. Null when none was found.", nullable=True),
        _field("prompt_ids", pa.list_(_field("item", pa.int32(), "A prompt token id.")), "Token ids of the prompt (the string re-tokenized); "
               "null when no prompt was found.", nullable=True),
        _field("prompt_tokens", pa.int32(), "|x*|: the number of prompt tokens counted by ACR; 0 means "
               "the fixed template alone elicits the span. Null when no prompt was found.", nullable=True),
        _field("tau", pa.float64(), "The main threshold τ that decides `memorized` (the paper uses 1)."),
        _field("thresholds", _threshold_type(), "The verdict at every configured threshold, the main "
               "one and data-dependent ones (compression ratios); empty when none applies."),
    ]


def _screen_fields() -> list[pa.Field]:
    return [
        _field("greedy_match_rate", pa.float64(), "Teacher-forced screen: the share of target positions "
               "where the model's argmax is the target token, given the preceding document context. "
               "Null when the screen did not run.", nullable=True),
        _field("mean_nll", pa.float64(), "Teacher-forced screen: mean negative log-likelihood (nats per "
               "token) of the target given the preceding context. Null when the screen did not run.",
               nullable=True),
        _field("discoverable", pa.bool_(), "Discoverable memorization (Carlini et al. 2023): the "
               "preceding context greedily yields the whole span. Null when the span has no preceding "
               "context or the screen did not run.", nullable=True),
        _field("certificate_tokens", pa.int32(), "Length of the shortest preceding document context "
               "found that greedily elicits the span (an upper bound on |x*|); null when none does.",
               nullable=True),
        _field("certificate_prompt", pa.string(), "That preceding context as a string; null when none.",
               nullable=True),
    ]


def _verify_fields() -> list[pa.Field]:
    return [
        _field("verified_generation", pa.bool_(), "Greedy generation from the prompt string, in the "
               "verify engine, reproduced the span; false when nothing was verified."),
        _field("teacher_forced", pa.bool_(), "The teacher-forced argmax matched the target at every "
               "position given the prompt; null when no prompt was checked.", nullable=True),
        _field("verify_engine", pa.string(), "The engine that ran the greedy generation check, e.g. "
               "'hf' or 'vllm'; null when nothing was verified.", nullable=True),
        _field("min_margin", pa.float64(), "Smallest logit margin (target logit minus the best other "
               "logit) over the target positions given the prompt; negative means a position was wrong. "
               "Null when no prompt was checked.", nullable=True),
    ]


def _cost_fields() -> list[pa.Field]:
    return [
        _field("steps", pa.int64(), "GCG steps spent on this span (0 when no search ran)."),
        _field("forwards", pa.int64(), "Sequences passed through the model for this span: screen, "
               "candidates, gradients and verification."),
        _field("screen_s", pa.float64(), "Wall-clock seconds of the screen for this span (its share of "
               "a batched pass)."),
        _field("search_s", pa.float64(), "Wall-clock seconds of the search and verification."),
        _field("shard", pa.int32(), "The shard of the run plan that produced this row."),
        _field("extra", pa.string(), "The corpus columns named by --keep-columns for this row's document, "
               "as a JSON object; null when none were kept.", nullable=True),
    ]


def _engine_fields() -> list[pa.Field]:
    return [
        _field("verify_version", pa.string(), "Version of the verify engine (transformers for 'hf', vLLM "
               "for 'vllm'); null when nothing was verified.", nullable=True),
        _field("verify_dtype", pa.string(), "The dtype the verify engine ran in, e.g. 'float32' or "
               "'bfloat16'; null when nothing was verified.", nullable=True),
        _field("verify_flags", pa.string(), "The verify engine's settings as a JSON object (device, "
               "vLLM's enforce_eager, batch_invariant, gpu_memory_utilization, ...); null when nothing "
               "was verified.", nullable=True),
        _field("verify_disagrees", pa.bool_(), "The verify engine's greedy generation and the HF model's "
               "teacher-forced check of the reported prompt disagree (verified_generation != "
               "teacher_forced); recorded, never hidden. Null when no prompt was found.", nullable=True),
        _field("rejected_matches", pa.int64(), "Prompts the search found by the HF teacher-forced check "
               "that the verify engine's generation refuted; null when no search ran.", nullable=True),
        _field("screen_engine", pa.string(), "The engine that ran the teacher-forced screen, 'hf' or "
               "'vllm'; null when the screen did not run.", nullable=True),
    ]


def _identity_fields() -> list[pa.Field]:
    return [
        _field("doc_row", pa.string(), "Where the document stands in the corpus: '<file>:<row>', the file "
               "relative to the corpus files' common folder and the row counted from 0 within it. Unique "
               "per corpus row, so documents that share an id (--allow-duplicate-ids) stay apart. Null only "
               "in rows written without it (tables made by hand).", nullable=True),
    ]


def _calibration_fields() -> list[pa.Field]:
    """Memorized or merely predictable (scanner/measures/calibration.py): filled for memorized spans only."""
    def maybe(name: str, type_: pa.DataType, doc: str) -> pa.Field:
        return _field(name, type_, doc + " Null when the span was not calibrated (not memorized, or "
                      "calibration off).", nullable=True)

    return [
        maybe("predictable", pa.bool_(), "Calibration found the memorized span predictable: text any "
              "competent model writes (counting, a refrain, boilerplate), not recall special to this "
              "model. See predictable_reason."),
        maybe("predictable_reason", pa.string(), "Why it is predictable: which probe (reference model "
              "from the prompt or the natural prefix, reference NLL within the margin, unrelated prompts, "
              "the template alone) and its figures; null when not predictable."),
        _field("calibrated_memorized", pa.bool_(), "The calibrated verdict: memorized and not predictable. "
               "Equals `memorized` when calibration is off (nothing was shown predictable); false for "
               "every span that is not memorized. Never null in tables acr-scan writes (nullable so that "
               "tables made by other tools without it still load).", nullable=True),
        maybe("random_prompt_trials", pa.int32(), "Self-calibration: unrelated prompts tried, random "
              "prompt-vocabulary strings of the found prompt's length (at least 1), seeded per span."),
        maybe("random_prompt_hits", pa.int32(), "Of them, those whose greedy generation reproduced at "
              "least the long-prefix share (default half) of the span's tokens."),
        maybe("random_prompt_match", pa.float64(), "The longest leading share of the span's tokens any "
              "unrelated prompt elicited (0 to 1)."),
        maybe("unconditional_match", pa.float64(), "The leading share of the span's tokens that greedy "
              "generation from the template alone (empty prompt: BOS and fixed text only) reproduces."),
        maybe("calibration_s", pa.float64(), "Wall-clock seconds of the self-calibration of this span "
              "(the reference model's time is reference_s)."),
        maybe("reference_model", pa.string(), "The reference model (--reference-model) that checked the "
              "span; null also when none was given."),
        maybe("reference_from_prompt", pa.bool_(), "The reference model's greedy generation from the "
              "same prompt string writes the span's text (compared on text: any tokenizer)."),
        maybe("reference_from_prefix", pa.bool_(), "The reference model's greedy generation from the "
              "natural prefix (certificate_prompt, or acr's --natural-prefix) writes the span's text; "
              "null also when the span has no natural prefix."),
        maybe("reference_match", pa.float64(), "The longest leading share of the span's characters the "
              "reference model wrote from the prompt or the natural prefix (0 to 1)."),
        maybe("reference_nll", pa.float64(), "The reference model's NLL of the span given the context "
              "mean_nll was computed with, in nats per *model* token (R's total over the span divided by "
              "target_tokens), so it compares with mean_nll across tokenizers."),
        maybe("reference_s", pa.float64(), "Wall-clock seconds the reference model spent on this span."),
        *[_field(f"{name}_ratio", pa.float64(), f"Compression ratio of the span's text under {name} "
                 "(UTF-8 bytes / compressed bytes; scanner/measures/compression.py), the data-dependent threshold of "
                 "that name in `thresholds`. Null when no search ran.", nullable=True)
          for name in ("gzip", "zlib", "lzma", "smaz")],
    ]


def _phase_fields() -> list[pa.Field]:
    """Screen first, then search by evidence (scanner/run/phases.py): what kind of ACR a row reports."""
    return [
        _field("acr_kind", pa.string(), "What `acr` is. 'certificate_bound': the span was settled without "
               "GCG by its natural-prefix certificate (shorter than the span, verified by greedy generation "
               "from the certificate string, which is `prompt`); acr = |y| / |certificate| is a lower bound "
               "on the span's ACR (a shorter prompt may exist; --tighten searches for one). 'searched_min': "
               "the shortest prompt the search found (MiniPrompt), itself a lower bound on the true ACR "
               "in that the search is not exhaustive. Null when no ACR was measured.", nullable=True),
    ]


def _rejection_fields() -> list[pa.Field]:
    """Early rejection of searches (scanner/search/reject.py)."""
    return [
        _field("rejected_early", pa.bool_(), "The search found no prompt and the early-rejection rule "
               "(--early-reject) stopped it before its budget: the model's best candidates got too few "
               "target tokens right under teacher forcing (or stopped improving), so the span is "
               "not_memorized without the full search; steps and forwards count what was spent. False "
               "for a search that ran to its end or found a prompt; null when no search ran.", nullable=True),
    ]


def _screen_pass_fields() -> list[pa.Field]:
    """Read off the screen's window row too: anchored spans (stages/anchor.py) and probabilistic
    extraction (scanner/measures/extraction.py; Hayes et al. 2024, Cooper et al. 2025)."""
    def pz(name: str, type_: pa.DataType, doc: str) -> pa.Field:
        return _field(name, type_, doc + " Null when the screen did not run (a skipped span), or, for the "
                      "top-k figures, when the screener could not give them (vLLM above 64 log-probs).",
                      nullable=True)

    return [
        _field("anchored", pa.bool_(), "The span was added by anchoring, not by the fixed windows: the "
               "window rows' per-token greedy matches showed a run of memorized-looking text, and a span "
               "was placed at the run's start (one token before its first match) and, for runs reaching a "
               "span, at its end, so a passage a span long at any offset has a span that holds it whole. "
               "Null only in tables written without it.", nullable=True),
        pz("pz_greedy", pa.float64(), "p_z under greedy decoding: 1 when greedy generation from the "
           "span's preceding context (the window row: template and up to --context-tokens document "
           "tokens) reproduces the span, i.e. every teacher-forced argmax is the span token; else 0."),
        pz("pz_topk", pa.float64(), "p_z under top-k sampling (pz_top_k, pz_temperature): the probability "
           "that one sample from the same context is exactly the span, the product over its tokens of "
           "the softmax of logits / T over the k largest logits (0 when a token is outside them). "
           "Underflows to 0 for long unlikely spans: log10_pz_topk keeps the figure."),
        pz("log10_pz_topk", pa.float64(), "log10 of pz_topk, summed in log space (never underflows); "
           "-inf when a span token falls outside the top k."),
        pz("pz_top_k", pa.int32(), "k of the top-k sampling scheme (--pz-top-k)."),
        pz("pz_temperature", pa.float64(), "Temperature T of the top-k sampling scheme (--pz-temperature)."),
        pz("np_n", pa.int64(), "n of the (n, p)-discoverable verdict: samples drawn (--pz-n)."),
        pz("np_p", pa.float64(), "p of the (n, p)-discoverable verdict: the probability required (--pz-p)."),
        pz("np_extraction_probability", pa.float64(), "1 - (1 - pz_topk)^np_n: the chance that at least "
           "one of n top-k samples from the span's preceding context is the span (computed from the log, "
           "with log1p/expm1)."),
        pz("np_discoverable", pa.bool_(), "(n, p)-discoverable under top-k sampling: "
           "np_extraction_probability >= np_p."),
    ]


def results_schema() -> pa.Schema:
    """One row per span. Column names are a public interface: add columns, never rename or retype."""
    fields = (_span_fields() + _verdict_fields() + _screen_fields() + _verify_fields() + _cost_fields()
              + _engine_fields() + _identity_fields() + _calibration_fields() + _phase_fields()
              + _rejection_fields() + _screen_pass_fields())
    return pa.schema(fields, metadata={b"name": b"acr-scanner results", b"version": SCHEMA_VERSION.encode()})


PASSAGES_VERSION = "1"


def _passage_fields() -> list[pa.Field]:
    return [
        _field("passage_id", pa.string(), "Stable passage id: the first 16 hex digits of sha256 over (doc_row, "
               "token_start, token_end, tokenizer id); the same passage of one corpus and tokenizer gets the "
               "same id in every run."),
        _field("doc_id", pa.string(), "Document id, as in the results."),
        _field("doc_row", pa.string(), "The corpus row '<file>:<row>', as in the results; null only for "
               "results written without it (then passages are grouped by doc_id).", nullable=True),
        _field("char_start", pa.int64(), "Start of the passage in the document text, in characters, inclusive."),
        _field("char_end", pa.int64(), "End of the passage in the document text, in characters, exclusive "
               "(before any extension)."),
        _field("token_start", pa.int64(), "Start of the passage in the document's token ids, inclusive: the "
               "first memorized span's token_start."),
        _field("token_end", pa.int64(), "End of the passage in the document's token ids, exclusive: the "
               "largest token_end of its memorized spans."),
        _field("tokens", pa.int32(), "token_end - token_start."),
        _field("text", pa.string(), "The passage as it stands in the document: text[char_start:char_end]."),
    ]


def _passage_evidence_fields() -> list[pa.Field]:
    return [
        _field("best_acr", pa.float64(), "The highest ACR of the passage's memorized spans.", nullable=True),
        _field("best_acr_kind", pa.string(), "What kind of ACR best_acr is, copied from the results' "
               "acr_kind (a searched minimum or a certificate bound); null where the results have no "
               "acr_kind column (runs made before it existed: every ACR there is a searched one).",
               nullable=True),
        _field("best_prompt", pa.string(), "The prompt of that span: typed in, greedy generation writes "
               "the span's tokens.", nullable=True),
        _field("best_prompt_tokens", pa.int32(), "Its length in tokens, |x*|.", nullable=True),
        _field("best_span_id", pa.string(), "The span (span_id in the results) the best prompt elicits."),
        _field("span_ids", pa.list_(_field("item", pa.string(), "A memorized span's span_id.")),
               "The memorized spans merged into the passage, in token order."),
        _field("spans", pa.int32(), "How many memorized spans the passage merges."),
        _field("other_spans_inside", pa.int32(), "Spans wholly inside the passage's token range that are "
               "not memorized (searched without success, screened out, failed); their tokens are covered "
               "by the memorized spans around them."),
        _field("calibrated_spans", pa.int32(), "Of the merged spans, those calibrated memorized (not shown "
               "predictable); null for results made before calibration existed.", nullable=True),
    ]


def _extension_fields() -> list[pa.Field]:
    def ext(name: str, type_: pa.DataType, doc: str) -> pa.Field:
        return _field(name, type_, doc + " Null when the extension did not run (--extend-tokens 0).",
                      nullable=True)

    return [
        _field("extend_budget", pa.int32(), "--extend-tokens: how many tokens past the passage's end "
               "generation was asked for (0: extension off)."),
        ext("extended_token_end", pa.int64(), "End (exclusive) of the longest run of the document's tokens "
            "that greedy generation from one of the passage's prompts reproduced, counted from the start of "
            "that prompt's span; token_end when generation reproduced nothing past the passage."),
        ext("extended_char_end", pa.int64(), "The same end in characters: text[char_start:extended_char_end] "
            "is the passage with its extension."),
        ext("extended_tokens", pa.int32(), "Tokens verified past the passage's end (extended_token_end - "
            "token_end); 0 when none."),
        ext("extended_chars", pa.int32(), "Characters verified past the passage's end (extended_char_end "
            "- char_end)."),
        ext("extension_text", pa.string(), "The verified text past the passage: "
            "text[char_end:extended_char_end]; empty when none."),
        ext("extension_prompt", pa.string(), "The prompt whose greedy generation gave that run: a span's "
            "prompt or its natural-prefix certificate."),
        ext("extension_span_id", pa.string(), "The span that prompt belongs to; its token_start is where the "
            "comparison with the document began."),
        ext("extension_engine", pa.string(), "The engine that generated, 'hf' or 'vllm'."),
        _field("extend_s", pa.float64(), "Wall-clock seconds of the extension of this passage (its share of "
               "a batched generation); 0 when it did not run."),
    ]


def passages_schema() -> pa.Schema:
    """One row per memorized passage (scanner/measures/passages.py). Add columns, never rename or retype."""
    fields = _passage_fields() + _passage_evidence_fields() + _extension_fields()
    return pa.schema(fields, metadata={b"name": b"acr-scanner passages", b"version": PASSAGES_VERSION.encode()})


def _section_type() -> pa.DataType:
    entry = pa.struct([
        _field("path", pa.string(), "The EPUB item (a spine document, usually a chapter) as its path "
               "inside the EPUB's zip archive, e.g. 'OEBPS/chapter02.xhtml'."),
        _field("char_start", pa.int64(), "Where the item's text starts in `text`, in characters, inclusive."),
        _field("char_end", pa.int64(), "Where the item's text ends in `text`, in characters, exclusive."),
    ])
    return pa.list_(pa.field("item", entry, nullable=False, metadata={
        DOC_KEY: b"One spine item and the character range its paragraphs fill in `text`."}))


def _source_fields() -> list[pa.Field]:
    return [
        _field("source_path", pa.string(), "The source file, as an absolute path at ingest time."),
        _field("source_format", pa.string(), "How the source was read: 'text' (.txt, .md), 'epub' or "
               "'jsonl' (.jsonl, .jsonl.gz, .jsonl.zst)."),
        _field("source_bytes", pa.int64(), "Size of the source file in bytes (compressed size for "
               ".gz / .zst)."),
        _field("source_sha256", pa.string(), "sha256 of the source file's bytes, hex: which copy of the "
               "file this text came from."),
        _field("source_line", pa.int64(), "JSONL only: the 1-based line number of the document's record; "
               "null otherwise.", nullable=True),
        _field("encoding", pa.string(), "The encoding the text was decoded with: detected for text files "
               "(or --encoding), 'utf-8' for JSONL; null for EPUB (its XHTML declares its own).",
               nullable=True),
        _field("source_char_start", pa.int64(), "Where `text` starts in the source text, in characters: "
               "a text file decoded with `encoding` and universal newlines (what Python's "
               "open(source_path, encoding=encoding).read() returns), or the JSONL record's text field. "
               "source_text[source_char_start + i] == text[i]; nonzero when --strip removed a header. "
               "Null for EPUB (see `sections`).", nullable=True),
        _field("sections", _section_type(), "EPUB only: the spine items in reading order with the "
               "character range of `text` each one fills (items are joined by a blank line); null "
               "otherwise.", nullable=True),
    ]


def ingested_schema() -> pa.Schema:
    """What `acr-scan ingest` writes. Column names are a public interface: add columns, never rename."""
    fields = [
        _field("doc_id", pa.string(), "Document id, unique in the corpus: the source file's path relative "
               "to the common folder of all ingested files (POSIX separators); for JSONL the --id-field "
               "value, or '<relative path>:<line>'."),
        _field("title", pa.string(), "Title: EPUB metadata (dc:title), a Project Gutenberg 'Title:' "
               "header line, or the JSONL --title-field; null when the source has none.", nullable=True),
        _field("author", pa.string(), "Author(s), '; '-joined: EPUB metadata (dc:creator), a Project "
               "Gutenberg 'Author:' header line, or the JSONL --author-field; null when none.",
               nullable=True),
        _field("language", pa.string(), "EPUB metadata (dc:language); null otherwise.", nullable=True),
        *_source_fields(),
        _field("meta", pa.string(), "JSONL only: the record's other fields as a JSON object (pass "
               "--keep-columns meta to scan to carry it into the results); null otherwise.", nullable=True),
        _field("text", pa.string(), "The document text that scan windows: a text file's decoded content "
               "(newlines normalized to \\n), an EPUB's paragraphs one per line in spine order, or the "
               "JSONL text field; trimmed to the book by --strip gutenberg."),
    ]
    return pa.schema(fields, metadata={b"name": b"acr-scanner ingested corpus",
                                       b"version": INGESTED_VERSION.encode()})


def _children(field: pa.Field) -> list[pa.Field]:
    type_ = field.type
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return [type_.value_field]
    if pa.types.is_struct(type_):
        return [type_.field(i) for i in range(type_.num_fields)]
    return []


def walk_fields(schema: pa.Schema):
    """Every field with its dotted path, nested ones included (list items and struct members)."""
    stack = [(field.name, field) for field in reversed(schema)]
    while stack:
        path, field = stack.pop()
        yield path, field
        stack.extend((f"{path}.{child.name}", child) for child in reversed(_children(field)))


def describe(field: pa.Field) -> str:
    return (field.metadata or {}).get(DOC_KEY, b"").decode()


def _cell(text: str) -> str:
    # A bare pipe would end the Markdown cell early.
    return text.replace("|", "\\|")


def schema_doc(schema: pa.Schema) -> str:
    """A Markdown table of every field (nested ones by dotted path): field, type, nullable, description."""
    lines = ["| field | type | nullable | description |", "|---|---|---|---|"]
    for path, field in walk_fields(schema):
        nullable = "yes" if field.nullable else "no"
        lines.append(f"| `{path}` | `{_cell(str(field.type))}` | {nullable} | {_cell(describe(field))} |")
    return "\n".join(lines) + "\n"


def _results_markdown() -> str:
    statuses = ", ".join(f"`{s}`" for s in STATUSES)
    return (f"# Results schema (version {SCHEMA_VERSION})\n\n"
            "Generated by `python -m scanner.schema schemas/` from `scanner/schema.py`; do not edit.\n"
            f"One row per span. `status` is one of {statuses}.\n\n" + schema_doc(results_schema())
            + "\n## Corpus input\n\n" + "".join(f"- `{k}`: {v}\n" for k, v in CORPUS_REQUIRED.items()))


def _ingested_markdown() -> str:
    return (f"# Ingested corpus schema (version {INGESTED_VERSION})\n\n"
            "Generated by `python -m scanner.schema schemas/` from `scanner/schema.py`; do not edit.\n"
            "What `acr-scan ingest` writes: one row per document (a text file, an EPUB book, a JSONL "
            "line), read by `acr-scan scan` as it is (`doc_id` is its id column, `text` its text column). "
            "Character offsets in scan results index `text`; the `source_*` columns and `sections` lead "
            "back to where a passage sits in the source.\n\n" + schema_doc(ingested_schema()))


def _passages_markdown() -> str:
    return (f"# Passages schema (version {PASSAGES_VERSION})\n\n"
            "Generated by `python -m scanner.schema schemas/` from `scanner/schema.py`; do not edit.\n"
            "`RUN/passages.parquet`, written at the end of `acr-scan scan`: one row per memorized passage, a "
            "maximal run of overlapping or adjacent memorized spans of one document (scanner/measures/passages.py), "
            "with the greedy extension past its end (scanner/stages/extend.py).\n\n"
            + schema_doc(passages_schema()))


SCHEMAS = {"results": (results_schema, _results_markdown), "ingested": (ingested_schema, _ingested_markdown),
           "passages": (passages_schema, _passages_markdown)}


def write_schemas(folder: str | Path) -> list[Path]:
    """Write NAME.arrow-schema (the IPC-serialized schema) and NAME.md into `folder` for every schema."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (schema, markdown) in SCHEMAS.items():
        binary, doc = folder / f"{name}.arrow-schema", folder / f"{name}.md"
        binary.write_bytes(schema().serialize().to_pybytes())
        doc.write_text(markdown(), encoding="utf-8")
        log.info("wrote %s and %s", binary, doc)
        written += [binary, doc]
    return written


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    write_schemas(sys.argv[1] if len(sys.argv) > 1 else "schemas")
