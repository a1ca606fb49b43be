"""Escaping and number formatting for the HTML report's sections (report.py, report_documents.py): one
copy, so a value reads the same in every section. Every untrusted string goes through `esc`."""

from __future__ import annotations

import hashlib
import html
import math
import re
from urllib.parse import quote

# Control characters but tab, newline and carriage return: HTML forbids them in text (a NUL is a parse
# error) and a corpus may hold them. Each becomes one visible character (U+2400 + its code: the control
# pictures, U+2421 for DEL, U+FFFD for C1), so the text keeps its length and its marks their offsets.
CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _picture(char: str) -> str:
    code = ord(char)
    return chr(0x2400 + code) if code < 0x20 else "\u2421" if code == 0x7F else "\ufffd"


def esc(value) -> str:
    return html.escape(CONTROLS.sub(lambda m: _picture(m.group()), str(value)), quote=True)


def num(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def count(n: int, noun: str) -> str:
    return f"{num(n)} {noun}{'' if n == 1 else 's'}"


def status_facts(counts: dict[str, int]) -> str:
    """'3 memorized, 1 screened out' from {status: rows}, zero counts left out."""
    return ", ".join(f"{num(n)} {esc(s.replace('_', ' '))}" for s, n in counts.items() if n)


def page_name(finding_id: str) -> str:
    """The file name (without .html) of a finding's page: ids acr-scan writes are hex already; one from a
    table made by hand might hold '/' or '..', so it is named by its hash instead."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", finding_id or ""):
        return finding_id
    return "id-" + hashlib.sha256(str(finding_id).encode()).hexdigest()[:16]


def href(*parts: str) -> str:
    """A relative link to a file, each part percent-encoded: a report named 'a #1.html' must not turn its
    pages' folder into a fragment."""
    return esc("/".join(quote(part) for part in parts))


def page_link(pages: str | None, name: str) -> str:
    """The link from a report section to its finding's page (report_pages.py); none without pages."""
    if pages is None:
        return ""
    return (
        f'<p class="page-link"><a href="{href(pages, name + ".html")}">This finding explained on a page of '
        "its own, in the book's surrounding text →</a></p>"
    )


def prompt_pre(prompt: str) -> str:
    """A prompt as a <pre> block; one of whitespace only (a newline, say) also spelled out, since its
    block alone looks empty."""
    shown = f"<pre>{esc(prompt)}</pre>"
    if prompt.strip():
        return shown
    return f'{shown}<p class="meta">A prompt of whitespace only: {esc(repr(prompt))}.</p>'
