"""What `acr-scan report` reads beyond the run directory: the book's text around each finding, for its page
(results/report_pages.py). The corpus is the one the scan read (run_config.json) or --corpus; it is used
only when its fingerprint is the scan's, so a page never sets a passage in another text. Without it the
report is still written and its pages say the surrounding text is not shown."""

from __future__ import annotations

from scanner.cli.output import echo


def _corpus(run, path: str | None):
    """The scan's corpus opened, or None with a note saying why (missing, moved, changed)."""
    from scanner.config import CorpusConfig
    from scanner.errors import InputError
    from scanner.stages.read import open_corpus

    saved = run.saved_config()
    corpus = dict(saved["config"]["corpus"])
    where = path or corpus["path"]
    config = CorpusConfig(
        path=where,
        text_column=corpus.get("text_column", "text"),
        id_column=corpus.get("id_column"),
        allow_duplicate_ids=corpus.get("allow_duplicate_ids", False),
    )
    try:
        opened = open_corpus(config)
    except InputError as err:
        echo(
            f"note: the pages show no surrounding text: the corpus {where} cannot be read ({err}); pass "
            "--corpus PATH where it now lies",
            err=True,
        )
        return None
    if saved.get("corpus_fingerprint") and opened.fingerprint() != saved["corpus_fingerprint"]:
        echo(
            f"note: the pages show no surrounding text: the corpus {where} is not the one the scan read "
            "(its fingerprint differs); pass --corpus PATH of the scanned files",
            err=True,
        )
        return None
    return opened


def surroundings_of(run, table, passages, corpus_path: str | None, chars: int) -> dict[str, dict]:
    """{page: the text around its passage} for every finding the report gives a page."""
    from scanner.results.report_pages import findings
    from scanner.stages.surroundings import Wanted, surroundings

    finds = findings(table, passages)
    if not finds:
        return {}
    corpus = _corpus(run, corpus_path)
    if corpus is None:
        return {}
    wanted = [
        Wanted(
            page=f.page,
            key=f.key,
            shard=f.span.get("shard") or 0,
            char_start=f.where["char_start"],
            char_end=f.where["char_end"],
            text=f.where["text"],
            reach=f.reach,
        )
        for f in finds
    ]
    return surroundings(corpus, run.load_plan(), wanted, chars)
