"""A page per flagged passage, for a reader who is not an engineer: the passage in the book's surrounding
text, the prompt, what the model wrote beside the book's text, the ACR, whose words the prompt holds, how
firm the generation is, and what the run drew it from; the engineering figures beside the plain words.

One page per row of passages.parquet (the top flagged spans for runs without one), named after its id in
a folder beside the report (`pages_folder`), linked from the report. Like the report, each page is one
self-contained file (inline CSS, no script, no network) and every corpus string goes through `esc`: a
book holding `<script>` shows it as text. The surrounding text is read by the caller (cli, through
stages/surroundings.py: a window around each passage, never a whole book) and passed in; without it a
page shows the passage alone and says why.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from scanner.errors import require
from scanner.measures.overlap import longest_shared_run_at
from scanner.results import report_align
from scanner.results.html_format import count, esc, href, num, page_name
from scanner.results.report_words import (
    acr_sentence,
    denominators_html,
    denominators_sentence,
    margin_facts,
    margin_sentence,
    source_sentence,
)

TOP_SPANS = 50  # runs without passages: pages for the spans the report lists
MIN_MARKED_RUN = 8  # characters: a shorter run of the prompt in the book is a chance match, not shown
COLUMNS = (
    "doc_id",
    "doc_row",
    "span_id",
    "char_start",
    "char_end",
    "token_start",
    "token_end",
    "text",
    "acr",
    "acr_kind",
    "tau",
    "prompt",
    "prompt_tokens",
    "target_tokens",
    "certificate_prompt",
    "verify_engine",
    "verify_dtype",
    "verified_generation",
    "teacher_forced",
    "min_margin",
    "generation_margin",
    "generation_margin_at",
    "fragile_below",
    "fragile",
    "prompt_source",
    "prompt_span_run_tokens",
    "prompt_span_run_chars",
    "prompt_doc_run_tokens",
    "prompt_doc_run_chars",
    "attempts",
    "steps",
    "shard",
    "predictable",
    "predictable_reason",
    "calibrated_memorized",
    "searched_as",
)


@dataclass(frozen=True)
class Finding:
    """One page: a passage (or, for runs without passages, a span) and the span whose prompt it shows."""

    page: str  # the file's stem
    span: dict  # the best span's results row: the prompt and its figures
    passage: dict | None
    spans: tuple[dict, ...]  # the memorized spans it merges (the span alone for a span page)

    @property
    def where(self) -> dict:
        return self.passage or self.span

    @property
    def key(self) -> str:
        return self.where.get("doc_row") or self.where["doc_id"]

    @property
    def reach(self) -> int:
        """The end of the passage with its verified extension, in the document's characters."""
        extended = (self.passage or {}).get("extended_char_end")
        return max(extended or 0, self.where["char_end"])


def _acr(row: dict) -> float:
    return row["acr"] if row.get("acr") is not None else -1.0


def findings(table: pa.Table, passages: pa.Table | None = None) -> list[Finding]:
    """The pages of a run, highest ACR first: one per passage, or the TOP_SPANS flagged spans."""
    memorized = table.filter(pc.equal(table["status"], "memorized"))
    rows = memorized.select([c for c in COLUMNS if c in table.column_names]).to_pylist()
    if passages is None:
        ranked = sorted(rows, key=lambda r: -_acr(r))[:TOP_SPANS]
        return [Finding(page_name(f"span-{r['span_id']}"), r, None, (r,)) for r in ranked]
    by_id = {r["span_id"]: r for r in rows}
    out = []
    for p in sorted(
        passages.to_pylist(),
        key=lambda p: (-(p["best_acr"] if p["best_acr"] is not None else -1), -p["tokens"]),
    ):
        best = by_id.get(p["best_span_id"]) or _span_of(p)
        merged = tuple(by_id[s] for s in p["span_ids"] if s in by_id) or (best,)
        out.append(Finding(page_name(p["passage_id"]), best, p, merged))
    return out


def _span_of(p: dict) -> dict:
    """A passage's best span where the results table does not hold it (a table cut by hand)."""
    return {
        "span_id": p["best_span_id"],
        "doc_id": p["doc_id"],
        "doc_row": p.get("doc_row"),
        "char_start": p["char_start"],
        "char_end": p["char_end"],
        "text": p["text"],
        "acr": p["best_acr"],
        "acr_kind": p.get("best_acr_kind"),
        "prompt": p["best_prompt"],
        "prompt_tokens": p["best_prompt_tokens"],
        "target_tokens": p["tokens"],
        "prompt_source": p.get("best_prompt_source"),
    }


def pages_folder(report: str | Path) -> str:
    """The pages' folder beside the report, named after it: two reports in one folder keep their pages
    apart (passage ids are the same in every run of one corpus)."""
    return f"{Path(report).stem}-passages"


def _marks(f: Finding, text: str, offset: int) -> list[tuple[int, int, str]]:
    p, s = f.where, f.span
    marks = [
        (p["char_start"], p["char_end"], "passage"),
        (s["char_start"], s["char_end"], "best"),
        (p["char_end"], f.reach, "ext"),
    ]
    prompt = s.get("prompt")
    if prompt and s.get("prompt_source") == "work_text":
        at, length = longest_shared_run_at(prompt, text)
        # the last place before the span: where a certificate (the text just before it) stands
        before = text.rfind(text[at : at + length], 0, max(s["char_start"] - offset, 0))
        at = before if before >= 0 else at
        if length >= min(MIN_MARKED_RUN, len(prompt)):
            marks.append((offset + at, offset + at + length, "given"))
    return marks


def marked(text: str, offset: int, marks: list[tuple[int, int, str]]) -> str:
    """`text` (the document from character `offset`) escaped, each piece in the classes of the marks
    (start, end, class; document offsets) that cover it."""
    cuts = {0, len(text)} | {min(max(x - offset, 0), len(text)) for a, b, _ in marks if b > a for x in (a, b)}
    ordered, out = sorted(cuts), []
    for a, b in zip(ordered, ordered[1:], strict=False):
        classes = " ".join(c for s, e, c in marks if s - offset <= a and b <= e - offset and e > s)
        out.append(f'<span class="{classes}">{esc(text[a:b])}</span>' if classes else esc(text[a:b]))
    return "".join(out)


LEGEND = (
    '<p class="legend"><span class="passage">memorized passage</span> <span class="passage best">the span '
    'this prompt reproduces</span> <span class="ext">reproduced past the passage by continued generation'
    '</span> <span class="given">the prompt\'s own words, where they stand in the book</span></p>'
)


def _book_html(f: Finding, context: dict | None) -> str:
    if context is None:
        text = f.where["text"] + ((f.passage or {}).get("extension_text") or "")
        note = (
            '<p class="meta">The surrounding text is not shown: the corpus was not at hand when this report '
            "was built, or no longer holds the passage at its place (<code>acr-scan report RUN --corpus "
            "PATH</code> names it).</p>"
        )
        return (
            note
            + f'<div class="book">{marked(text, f.where["char_start"], _marks(f, text, f.where["char_start"]))}</div>'
        )
    text, offset, total = context["text"], context["offset"], context["doc_chars"]
    head = f'<span class="cut">[… {num(offset)} characters before]</span> ' if offset else ""
    rest = total - offset - len(text)
    tail = f' <span class="cut">[{num(rest)} characters more …]</span>' if rest > 0 else ""
    where = (
        f'<p class="meta">Characters {num(f.where["char_start"])}–{num(f.reach)} of {num(total)} in the '
        "document, with the text around them.</p>"
    )
    return (
        where + f'<div class="book">{head}{marked(text, offset, _marks(f, text, offset))}{tail}</div>{LEGEND}'
    )


def _prompt_html(row: dict) -> str:
    prompt = row.get("prompt")
    if prompt is None:
        return '<p class="meta">No prompt recorded.</p>'
    if prompt == "":
        return (
            "<p class=\"meta\">The empty prompt: the model's fixed template alone (no words of anyone's).</p>"
        )
    return f'<div class="prompt">{esc(prompt)}</div>'


def _lay_html(f: Finding, counts: dict, k: int | None) -> str:
    s, tokens = f.span, f.span.get("target_tokens")
    given = (
        "was given no prompt at all, only its fixed template,"
        if s.get("prompt") == ""
        else f"was given the prompt below ({count(s.get('prompt_tokens') or 0, 'token')}; a token is a word or "
        "a piece of one)"
    )
    wrote = (
        f"The model {given} and, always choosing its most likely next word piece (greedy decoding), wrote "
        f"{count(tokens or 0, 'token')} which match the book's text word for word over {num(tokens)} tokens."
    )
    longer = ""
    if f.passage is not None:
        ext = f.passage.get("extended_tokens")
        grew = (
            f" Continued generation reproduced {count(ext, 'more token')} of the book past it." if ext else ""
        )
        longer = (
            f" The memorized passage around it is {num(f.passage['tokens'])} tokens long: "
            f"{num(f.passage['spans'])} overlapping windows, each reproduced from its own prompt.{grew}"
        )
    acr = f.passage["best_acr"] if f.passage is not None else s.get("acr")
    return "".join(
        f"<p>{x}</p>"
        for x in (
            wrote + longer,
            acr_sentence(s, acr, tokens),
            source_sentence(s, k),
            margin_sentence(s),
            denominators_sentence(counts),
        )
    )


def _weakest(f: Finding) -> str:
    measured = [r for r in f.spans if r.get("generation_margin") is not None]
    if len(f.spans) < 2 or not measured:
        return ""
    weakest = min(measured, key=lambda r: r["generation_margin"])
    fragile = sum(bool(r.get("fragile")) for r in f.spans)
    return (
        f"; over its {num(len(f.spans))} spans the weakest margin is {num(weakest['generation_margin'])} "
        f"(span <code>{esc(weakest['span_id'])}</code>), {num(fragile)} fragile"
    )


FIGURES = (
    ("acr", "ACR"),
    ("acr_kind", "kind of ACR"),
    ("prompt_tokens", "prompt tokens |x*|"),
    ("target_tokens", "target tokens |y|"),
    ("verify_engine", "verified by"),
    ("verify_dtype", "dtype"),
    ("verified_generation", "greedy generation reproduced it"),
    ("teacher_forced", "teacher-forced check"),
    ("min_margin", "min margin (teacher forced)"),
    ("generation_margin", "generation margin"),
    ("generation_margin_at", "generation margin at token"),
    ("fragile_below", "fragile below"),
    ("fragile", "fragile"),
    ("prompt_source", "prompt source"),
    ("prompt_span_run_tokens", "longest run shared with the span (tokens)"),
    ("prompt_span_run_chars", "longest run shared with the span (characters)"),
    ("prompt_doc_run_tokens", "longest run shared with the document (tokens)"),
    ("prompt_doc_run_chars", "longest run shared with the document (characters)"),
    ("steps", "GCG steps"),
    ("predictable", "predictable (calibration)"),
    ("calibrated_memorized", "calibrated memorized"),
    ("span_id", "span"),
    ("doc_row", "corpus row"),
)


def _figures_html(f: Finding) -> str:
    s = f.span
    items = [(label, s.get(key)) for key, label in FIGURES if key in s]
    attempts = s.get("attempts")
    if attempts:
        items.append(
            (
                "attempts",
                f"{len(attempts)} ({sum(a['outcome'] != 'success' for a in attempts)} without success)",
            )
        )
    if f.passage is not None:
        p = f.passage
        items += [
            ("passage", p["passage_id"]),
            ("passage tokens", p["tokens"]),
            ("spans merged", p["spans"]),
            ("extended tokens", p.get("extended_tokens")),
            ("extension engine", p.get("extension_engine")),
        ]
    listing = "".join(f"<dt>{esc(k)}</dt><dd>{esc(num(v))}</dd>" for k, v in items)
    return f'<p class="meta">{margin_facts(s)}{_weakest(f)}</p><dl class="summary">{listing}</dl>'


CSS = """
body{font:16px/1.55 Georgia,"Times New Roman",serif;color:#1f2328;max-width:980px;margin:24px auto;padding:0 20px}
h1{font:600 1.5em/1.3 system-ui,sans-serif;margin:0 0 6px;overflow-wrap:anywhere}
h2{font:600 1.1em system-ui,sans-serif;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
.meta,.legend,dl,table{font:13px/1.45 system-ui,sans-serif;color:#57606a}a{color:#0969da}
.book,.prompt,td.text{white-space:pre-wrap;overflow-wrap:anywhere;word-break:normal}
.book{border:1px solid #d0d7de;border-radius:6px;padding:12px 14px;background:#fcfcfd}
.prompt{font:14px/1.45 ui-monospace,Menlo,Consolas,monospace;background:#f6f8fa;border:1px solid #d0d7de;
 border-radius:6px;padding:8px 10px}
.passage{background:#fde4d6}.passage.best{background:#f8c2a4}.ext{background:#fbefc2}
.given{outline:2px dashed #1f6feb;outline-offset:1px;background:#dbeafe}.cut{color:#8c959f;font-style:italic}
.legend span{display:inline-block;padding:1px 5px;margin:2px 8px 2px 0;border-radius:3px}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}dt{font-weight:600}
dd{margin:0;overflow-wrap:anywhere}
table.align{border-collapse:collapse;width:100%;table-layout:fixed;color:#1f2328}
table.align th,table.align td{border:1px solid #d0d7de;padding:6px 8px;vertical-align:top;text-align:left}
table.align th{background:#f6f8fa}td.text{font:14px/1.45 Georgia,serif}td.same{background:#e6f4ea}
td.differs{background:#fdecea}td.none{color:#8c959f}code{font:12px ui-monospace,Menlo,Consolas,monospace}
"""


def page_html(
    f: Finding,
    context: dict | None,
    counts: dict,
    report_name: str,
    model: str | None = None,
    k: int | None = None,
) -> str:
    """One finding's whole page; `context`: stages/surroundings.py's window, or None."""
    doc = esc(f.where["doc_id"])
    title = f"Memorized passage in {f.where['doc_id']}" + (f" · {model}" if model else "")
    body = (
        f'<p class="meta"><a href="{href("..", report_name)}">← the scan report</a> · page '
        f"<code>{esc(f.page)}</code></p><h1>A passage the model reproduces: {doc}</h1>"
        f'<h2 id="words">In plain words</h2>{_lay_html(f, counts, k)}'
        f'<h2 id="book">The book around it</h2>{_book_html(f, context)}'
        f'<h2 id="prompt">What the model was given</h2>{_prompt_html(f.span)}'
        f'<h2 id="output">What the model wrote, beside the book</h2>{report_align.alignment_html(f, context)}'
        f'<h2 id="figures">The figures</h2>{_figures_html(f)}'
        f'<h2 id="drawn">What the run drew it from</h2>{denominators_html(counts)}'
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


MARKER = ".acr-scan-pages"  # in every pages folder a report writes: what is ours to replace


def check_pages_folder(folder: Path) -> None:
    """InputError unless `folder` is absent or a pages folder a report wrote (its marker and pages only):
    a report replaces its own pages, and never a file or a folder of anyone else's."""
    if not folder.exists() and not folder.is_symlink():
        return
    fix = (
        f"move it away or pass another --out (the pages of OUT go to OUT-STEM-passages/, here {folder.name}/)"
    )
    require(
        folder.is_dir() and not folder.is_symlink(),
        f"{folder} exists and is not a folder a report wrote; {fix}",
    )
    names = {p.name for p in folder.iterdir()}
    foreign = sorted(n for n in names if n != MARKER and not n.endswith(".html"))
    require(
        MARKER in names and not foreign,
        f"{folder} exists and was not written by acr-scan report ("
        + (f"it holds {', '.join(map(repr, foreign[:3]))}" if foreign else f"no {MARKER} marker")
        + f"); {fix}",
    )


def write_pages(folder: Path, pages: Iterable[tuple[str, str]], commit: Callable[[], None]) -> int:
    """Write (name, html) pages into a temporary folder one at a time (a run's thousands of pages are
    never all in memory), call `commit` (the report's own atomic write), then put the folder in place of
    the old one, which must be a pages folder a report wrote (check_pages_folder); on any failure the
    temporary folder is removed and the old pages stay. Returns the count."""
    check_pages_folder(folder)
    temp, old = (folder.parent / f".{folder.name}.{what}-{os.getpid()}" for what in ("tmp", "old"))
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    written = 0
    try:
        (temp / MARKER).write_text(
            "pages of an acr-scan report: the report replaces this folder when it is written again\n",
            encoding="utf-8",
        )
        for name, page in pages:
            (temp / f"{name}.html").write_bytes(page.encode("utf-8"))
            written += 1
        commit()
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    if folder.exists():
        os.replace(folder, old)
    if written:
        os.replace(temp, folder)
    else:
        shutil.rmtree(temp)
    shutil.rmtree(old, ignore_errors=True)
    return written
