"""The page's side-by-side view (report_pages.py): the book's text beside what the model wrote, stretch by
stretch of the document, marking where greedy generation matches the book and where it leaves it.

What a run stores decides what can be shown. The model's output is not kept as text: a memorized span is
one whose greedy generation from the prompt string reproduced its target tokens exactly
(verified_generation), so over the span the output *is* the book's text, and the passage's extension
(passages.parquet) is the run of further tokens generation reproduced before its first differing token.
The tokens generated after that point are not stored, so the page names the point and says so rather
than inventing them.
"""

from __future__ import annotations

from scanner.results.html_format import count, esc, num

AFTER_CHARS = 240  # of the book after the last reproduced token, to show where generation left it


def _text(f, start: int, end: int) -> str:
    """The document's characters [start, end) within the passage and its extension."""
    where = f.where
    whole = where["text"] + ((f.passage or {}).get("extension_text") or "")
    return whole[start - where["char_start"] : end - where["char_start"]]


def _shown(text: str) -> str:
    """Escaped text; a stretch of whitespace alone is named (an empty-looking cell would read as nothing)."""
    if text and not text.strip():
        names = {" ": "space", "\n": "line break", "\t": "tab"}
        return f'<span class="cut">({", ".join(names.get(c, repr(c)) for c in text[:8])})</span>'
    return esc(text)


def _row(book: str, model: str | None, note: str) -> str:
    if model is None:
        cell = '<td class="none">–</td>'
    else:
        cell = f'<td class="text same">{_shown(model)}</td>'
    return f'<tr><td class="text">{_shown(book)}</td>{cell}<td>{note}</td></tr>'


def _continues(f) -> bool:
    """The extension's generation started from the best span's own prompt (so it is this prompt's output)."""
    p = f.passage or {}
    return bool(p.get("extended_tokens")) and p.get("extension_span_id") == f.span["span_id"]


def _extension_source(f) -> str:
    p = f.passage
    if _continues(f):
        return "the same prompt, generation continued"
    origin = next((r for r in f.spans if r["span_id"] == p.get("extension_span_id")), None)
    span = f"span <code>{esc(p.get('extension_span_id'))}</code>"
    if origin is not None and p.get("extension_prompt") == origin.get("certificate_prompt"):
        return f"the book's own text before {span} (its natural-prefix certificate)"
    return f"the prompt of {span}"


def _passage_rows(f) -> list[str]:
    p, s = f.passage, f.span
    others = "memorized too: other windows of the passage, each reproduced from its own prompt (not this one's output)"
    engine = esc(s.get("verify_engine") or "the verify engine")
    rows = []
    if s["char_start"] > p["char_start"]:
        rows.append(_row(_text(f, p["char_start"], s["char_start"]), None, others))
    rows.append(
        _row(
            s["text"],
            s["text"],
            f"<b>identical</b>: all {num(s.get('target_tokens'))} tokens, checked by "
            f"greedy generation from the prompt string ({engine})",
        )
    )
    if s["char_end"] < p["char_end"]:
        rest = _text(f, s["char_end"], p["char_end"])
        rows.append(
            _row(rest, rest, "<b>identical</b>: the generation continued through the passage")
            if _continues(f)
            else _row(rest, None, others)
        )
    if f.reach > p["char_end"]:
        ext = _text(f, p["char_end"], f.reach)
        rows.append(
            _row(
                ext,
                ext,
                f"<b>identical</b>: {count(p['extended_tokens'], 'more token')} past the passage, "
                f"generated from {_extension_source(f)}",
            )
        )
    return rows


def _after_note(f) -> str:
    p = f.passage
    if p is None:
        return (
            "not checked: the verification generates exactly the span's tokens; the run made no passage "
            "that would continue it"
        )
    if p.get("extended_tokens") is None:
        return "not checked: extension was off in this run (--extend-tokens 0)"
    if not p["extended_tokens"]:
        return (
            f"<b>differs</b>: generation from the passage's prompts (asked for {num(p['extend_budget'])} more "
            "tokens) reproduced none of the book past this point. What the model wrote instead is not stored "
            "in the run."
        )
    return (
        "<b>differs</b>: the run of the book's tokens that generation reproduced ends here; the next token it "
        "generated is not the book's. What the model wrote instead is not stored in the run."
    )


def _after_row(f, context: dict | None) -> str:
    note = _after_note(f)
    differs = f.passage is not None and f.passage.get("extended_tokens") is not None
    if context is None:
        book = "(the text after it: the corpus was not at hand)"
    else:
        start = f.reach - context["offset"]
        book = context["text"][start : start + AFTER_CHARS]
        if not book:
            book = "(the end of the document)"
    model = '<td class="differs">(not stored)</td>' if differs else '<td class="none">–</td>'
    return f'<tr><td class="text">{_shown(book)}</td>{model}<td>{note}</td></tr>'


def alignment_html(f, context: dict | None) -> str:
    """The table: the book's stretches, what the model wrote over each, and whether they agree."""
    s = f.span
    rows = (
        _passage_rows(f)
        if f.passage is not None
        else [
            _row(
                s["text"],
                s["text"],
                f"<b>identical</b>: all {num(s.get('target_tokens'))} tokens, checked by greedy "
                f"generation from the prompt string ({esc(s.get('verify_engine') or '–')})",
            )
        ]
    )
    rows.append(_after_row(f, context))
    stored = (
        ""
        if s.get("verified_generation", True)
        else '<p class="meta"><b>Note</b>: this row records no verified generation.</p>'
    )
    return (
        f'{stored}<table class="align"><colgroup><col style="width:38%"><col style="width:38%">'
        '<col style="width:24%"></colgroup><thead><tr><th>the book</th><th>the model wrote (greedy)</th>'
        f"<th>agreement</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "<p class=\"meta\">Shaded green: the model's output, token for token the book's text. The run keeps "
        "the output as this verdict (the generated token ids equal the book's), not as a separate copy.</p>"
    )
