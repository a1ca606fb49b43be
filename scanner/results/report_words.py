"""The report's sentences about one finding: how firm its generation is (generation_margin, fragile), whose
words its prompt holds (prompt_source and the shared runs), what its ACR says. One copy, so the main page's
tables and the page per passage (report_pages.py) say the same thing. Every value goes through `esc`.
"""

from __future__ import annotations

from scanner.results.html_format import count, esc, num

SOURCE_LABELS = {"free": "free of the work's text", "work_text": "holds the work's text"}
ACR_KINDS = {
    "certificate_bound": "a bound: the document's own preceding text elicited it, a shorter prompt may exist",
    "searched_min": "the shortest prompt the search found",
    "decision_bound": "the first prompt the search verified; a shorter one may exist (not tightened)",
}


def margin_cell(row: dict) -> str:
    """'0.83 at token 5 · fragile' for a table cell or a heading; '–' when no generation was verified."""
    margin = row.get("generation_margin")
    if margin is None:
        return "–"
    at = row.get("generation_margin_at")
    where = f" at token {num(at)}" if at is not None else ""
    flag = " · <b>fragile</b>" if row.get("fragile") else ""
    return f"{esc(num(margin))}{where}{flag}"


def margin_facts(row: dict) -> str:
    """The margin for a section's line of figures: value, position, threshold and the fragile verdict."""
    if row.get("generation_margin") is None:
        return "generation margin not measured"
    below = row.get("fragile_below")
    verdict = (
        f"fragile (below {num(below)}: re-check with <code>acr-scan verify RUN --dtype float32</code>)"
        if row.get("fragile")
        else f"not fragile (threshold {num(below)})"
    )
    return f"generation margin {margin_cell({**row, 'fragile': False})}, {verdict}"


def margin_sentence(row: dict) -> str:
    """The margin in plain words, for a reader who is not an engineer."""
    margin = row.get("generation_margin")
    if margin is None:
        return "How firmly the model preferred each of the book's words was not measured for this prompt."
    at, total, below = row.get("generation_margin_at"), row.get("target_tokens"), row.get("fragile_below")
    step = f"word piece {num(at + 1)} of {num(total)}" if at is not None else "one step"
    firm = (
        f"That is below {num(below)}, the scan's line for <b>fragile</b>: another numeric path (a different "
        "precision or inference engine) might pick another word there, so this finding should be re-checked "
        "(<code>acr-scan verify RUN --dtype float32</code>)."
        if row.get("fragile")
        else f"That is above {num(below)}, the scan's line for fragile: small numeric differences between "
        "machines are not expected to change the output."
    )
    return (
        f"At its least certain step ({step}) the model still preferred the book's word piece over the next "
        f"best by {esc(num(margin))} logits (a logit margin: 0 would be a tie). {firm}"
    )


def source_sentence(row: dict, k: int | None = None) -> str:
    """Whose words the prompt holds, in plain words (scanner/measures/overlap.py is the rule)."""
    source, runs = row.get("prompt_source"), row.get("prompt_doc_run_tokens")
    if runs is None:
        runs = row.get("prompt_span_run_tokens")
    shared = f"{num(runs)} tokens" if runs is not None else "not measured"
    if source is None:
        return "Whether the prompt holds the book's own words was not measured."
    if source == "free":
        line = f" (the scan counts {num(k)} or more as the work's own text)" if k else ""
        return (
            f"The prompt is <b>free of the book's text</b>: the longest run of word pieces it shares with the "
            f"document is {shared}{line}. The model wrote the passage without being handed its words."
        )
    if row.get("acr_kind") == "certificate_bound" or row.get("prompt") == row.get("certificate_prompt"):
        return (
            "The prompt <b>is the book's own text</b> just before the passage (a natural-prefix certificate): "
            "this shows the model continues the book from its own words, not that it writes the passage "
            "unprompted."
        )
    return (
        f"The prompt <b>holds the book's own words</b>: it shares a run of {shared} with the document, so the "
        "model was handed part of the text it then wrote."
    )


def acr_sentence(row: dict, acr: float | None, tokens: int | None) -> str:
    """What the ACR says, in plain words."""
    if acr is None:
        return "No compression ratio was measured."
    prompt = row.get("prompt_tokens")
    kind = ACR_KINDS.get(row.get("acr_kind") or "", "")
    why = f" ({esc(kind)})" if kind else ""
    ratio = (
        f"the {num(tokens)} tokens it wrote are {esc(num(acr))} times as many as the {count(prompt, 'token')} "
        "of the prompt"
        if prompt
        else f"its ratio is {esc(num(acr))}"
    )
    return (
        f"The adversarial compression ratio (ACR) is {esc(num(acr))}: {ratio}{why}. Above "
        f"{num(row.get('tau', 1.0))} the method (Schwarzschild et al. 2024) calls the text memorized: the "
        "model holds it in a form shorter than the text itself."
    )


DENOMINATOR_LABELS = (
    ("documents", "documents"),
    ("spans", "spans"),
    ("screened", "spans screened"),
    ("candidates", "candidates (passed the screen)"),
    ("settled_by_certificate", "settled by certificate"),
    ("searched", "searched"),
    ("attempts", "attempts (prompt lengths tried, failures included)"),
    ("gcg_steps", "GCG steps"),
    ("not_searched", "not searched (budget)"),
    ("failed", "failed"),
    ("memorized", "memorized"),
    ("copies", "copies of a span searched once (counted above too)"),
)


def denominators_html(counts: dict) -> str:
    """The counts every hit was drawn from (results/denominators.py), with the hits by prompt source."""
    prompts = counts["memorized_by_prompt"]
    items = [(label, counts[key]) for key, label in DENOMINATOR_LABELS]
    items += [
        ("memorized, prompt free of the work's text", prompts["free"]),
        (
            "memorized, prompt holding the work's text (certificates, runs of the work's tokens)",
            prompts["work_text"],
        ),
    ]
    if prompts["unmeasured"]:
        items.append(("memorized, prompt not measured", prompts["unmeasured"]))
    return '<dl class="summary">' + "".join(f"<dt>{esc(k)}</dt><dd>{num(v)}</dd>" for k, v in items) + "</dl>"


def denominators_sentence(counts: dict) -> str:
    """The same counts as one sentence for a lay reader."""
    return (
        f"The scan read {num(counts['documents'])} documents cut into {num(counts['spans'])} overlapping "
        f"windows (spans). A quick first test screened {num(counts['screened'])} of them; "
        f"{num(counts['candidates'])} looked likely enough to be memorized to test properly: "
        f"{num(counts['settled_by_certificate'])} were settled by the book's own preceding text, "
        f"{num(counts['searched'])} by a search for a short prompt, and {num(counts['not_searched'])} were "
        f"not reached within the search budget. {num(counts['memorized'])} spans were found memorized in all, "
        "failures and successes both counted below."
    )
