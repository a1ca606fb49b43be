"""Whose words are in the prompt: the longest run a prompt shares with the work, in tokens and in
characters, and the verdict `prompt_source` (pure, no torch).

Regulators ask whether a model reproduced a work *without that expression being provided in the prompt*
(METHOD.md, "What makes a finding hold up as evidence"). A natural-prefix certificate is the work's own
text; a GCG prompt may hold words of its target. So every prompt is measured against its span and its
whole document, and called:
- `work_text`: a certificate (the document's own preceding text), or a prompt that shares a run of at
  least `k` consecutive tokens (ScanConfig.work_text_tokens, default 4) with the document;
- `free`: any other prompt, the empty one (the template alone) included.
k guards against the chance matches of common tokens (' the', ' of') that any prompt shares with a book;
the run lengths themselves are kept beside the verdict, so a stricter reader can apply another k. A
row's `certificate_prompt` that is not its `prompt` is not measured: it is the document's own preceding
text by construction, work_text whatever its length.
"""

from __future__ import annotations

from collections.abc import Sequence

WORK_TEXT, FREE = "work_text", "free"
SOURCES = (WORK_TEXT, FREE)
_SURROGATES = 0xD800, 0xE000  # code points a str may not hold: token ids skip over them


def longest_shared_run(needle: str, haystack: str) -> int:
    """Length of the longest substring of `needle` that occurs in `haystack` (0 when none).

    A run at least one longer than the best so far is looked for at each start of `needle`, with
    str's own search over `haystack`: len(needle) + best searches, each in C, none a Python loop over
    the haystack (a prompt is tens of tokens, a document a book)."""
    best = 0
    for start in range(len(needle)):
        while start + best < len(needle) and needle[start : start + best + 1] in haystack:
            best += 1
    return best


def longest_shared_run_at(needle: str, haystack: str) -> tuple[int, int]:
    """Where the longest run of `needle` stands in `haystack`: (start in haystack, length); (0, 0) when
    none. The same search as longest_shared_run, keeping the place (the report marks it in the text)."""
    best, at = 0, 0
    for start in range(len(needle)):
        while start + best < len(needle):
            found = haystack.find(needle[start : start + best + 1])
            if found < 0:
                break
            best, at = best + 1, found
    return at, best


def token_string(ids: Sequence[int]) -> str:
    """Token ids as one character each, so runs of ids are found by string search."""
    low, high = _SURROGATES
    return "".join(chr(i if i < low else i + high - low) for i in ids)


def longest_shared_tokens(prompt_ids: Sequence[int], ids: Sequence[int] | str) -> int:
    """The longest run of consecutive ids of the prompt that stands in `ids` (or its token_string)."""
    return longest_shared_run(token_string(prompt_ids), ids if isinstance(ids, str) else token_string(ids))


def prompt_source(*, has_prompt: bool, is_certificate: bool, run_tokens: int | None, k: int) -> str | None:
    """The verdict (see the module docstring); None when there is no prompt."""
    if not has_prompt:
        return None
    if is_certificate or (run_tokens or 0) >= k:
        return WORK_TEXT
    return FREE


def prompt_overlap(
    prompt: str | None,
    prompt_ids: Sequence[int] | None,
    span_text: str,
    target_ids: Sequence[int],
    *,
    is_certificate: bool,
    k: int,
    document: str | None = None,
    document_ids: Sequence[int] | str | None = None,
) -> dict:
    """The overlap columns of one prompt (scanner/schema/results.py `_prompt_overlap_fields`): its runs
    shared with the span and with the document (None where the document is not given: the verdict then
    rests on the span alone), and `prompt_source`."""
    if prompt is None:
        return {
            "prompt_span_run_tokens": None,
            "prompt_span_run_chars": None,
            "prompt_doc_run_tokens": None,
            "prompt_doc_run_chars": None,
            "prompt_source": None,
        }
    ids = list(prompt_ids or [])
    span_tokens = longest_shared_tokens(ids, target_ids)
    doc_tokens = None if document_ids is None else longest_shared_tokens(ids, document_ids)
    return {
        "prompt_span_run_tokens": span_tokens,
        "prompt_span_run_chars": longest_shared_run(prompt, span_text),
        "prompt_doc_run_tokens": doc_tokens,
        "prompt_doc_run_chars": None if document is None else longest_shared_run(prompt, document),
        "prompt_source": prompt_source(
            has_prompt=True, is_certificate=is_certificate, run_tokens=max(span_tokens, doc_tokens or 0), k=k
        ),
    }
