"""Help in sections: `scan` and `acr` take some 60 options, which read as one wall in a flat list. Each
option names its section where it is declared (`option(SEARCH, "--tau", ...)`); SectionedCommand lists
them under those headings, common ones first. Parsing is click's own: only the help layout differs."""

from __future__ import annotations

import click
from click.formatting import measure_table

CORPUS = "Corpus and output"
TARGETS = "Targets and output"
PLAN = "Plan"
COMPARE = "Comparison"
MODEL = "Model"
PROMPT = "Prompt"
SPANS = "Spans and screen"
EXTRACTION = "Extraction (p_z)"
SEARCH = "Search"
REJECT = "Early rejection"
BUDGET = "Budget"
ENGINE = "Engines"
CALIBRATION = "Calibration"
PASSAGES = "Passages"
EXECUTOR = "Executor"
OTHER = "Other"
# The order of the headings in --help; a command shows those it has options in.
SECTIONS = (CORPUS, TARGETS, PLAN, COMPARE, MODEL, PROMPT, SPANS, EXTRACTION, SEARCH, REJECT, BUDGET, ENGINE,
            CALIBRATION, PASSAGES, EXECUTOR, OTHER)


class SectionOption(click.Option):
    def __init__(self, *decls, section: str, **attrs) -> None:
        super().__init__(*decls, **attrs)
        if section not in SECTIONS:  # a typo would drop the option from --help
            raise ValueError(f"option {self.opts}: unknown help section {section!r}; use one of "
                             f"scanner/cli/sections.py's SECTIONS {SECTIONS}")
        self.section = section


def option(section: str, *decls: str, **attrs):
    """click.option that files the option under `section` in a SectionedCommand's --help."""
    return click.option(*decls, cls=SectionOption, section=section, **attrs)


def section_of(param: click.Parameter) -> str:
    # click's own options (--help) and any plain click.option land in "Other" rather than vanish.
    return getattr(param, "section", OTHER)


class SectionedCommand(click.Command):
    """A click command whose --help lists options under SECTIONS' headings instead of one "Options"."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):
                rows.setdefault(section_of(param), []).append(record)
        # One first-column width for every section, as one flat list had: write_dl sizes each call alone.
        widths = measure_table([row for section in rows.values() for row in section])
        width = min(widths[0], 30) if widths else 0
        for section in SECTIONS:
            if section in rows:
                with formatter.section(section):
                    formatter.write_dl([(first.ljust(width), second) if second else (first, second)
                                        for first, second in rows[section]])
