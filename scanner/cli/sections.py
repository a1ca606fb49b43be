"""Help in sections: `scan` and `plan` take some 75 options, which read as one wall in a flat list. A
command names the few that most runs set (`lead`), listed first under "Main options"; every other option
names its section where it is declared (`option(SEARCH, "--tau", ...)`) and is listed under that heading.
Knobs of features that are off by default are declared hidden: they work on the command line and in a
--config file, and docs/cli.md lists them. Parsing is click's own: only the help layout differs."""

from __future__ import annotations

import click
from click.formatting import measure_table

MAIN = "Main options"
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
SECTIONS = (
    MAIN,
    CORPUS,
    TARGETS,
    PLAN,
    COMPARE,
    MODEL,
    PROMPT,
    SPANS,
    EXTRACTION,
    SEARCH,
    REJECT,
    BUDGET,
    ENGINE,
    CALIBRATION,
    PASSAGES,
    EXECUTOR,
    OTHER,
)


class SectionOption(click.Option):
    def __init__(self, *decls, section: str, **attrs) -> None:
        super().__init__(*decls, **attrs)
        if section not in SECTIONS:  # a typo would drop the option from --help
            raise ValueError(
                f"option {self.opts}: unknown help section {section!r}; use one of "
                f"scanner/cli/sections.py's SECTIONS {SECTIONS}"
            )
        self.section = section


def option(section: str, *decls: str, **attrs):
    """click.option that files the option under `section` in a SectionedCommand's --help."""
    return click.option(*decls, cls=SectionOption, section=section, **attrs)


def section_of(param: click.Parameter) -> str:
    # click's own options (--help) and any plain click.option land in "Other" rather than vanish.
    return getattr(param, "section", OTHER)


def sections(
    command: click.Command, ctx: click.Context, shown=None
) -> list[tuple[str, list[click.Parameter]]]:
    """(heading, options) in --help's order: the command's `lead` under MAIN in the order it names them,
    then the rest by their declared section. `shown(param)`: which options to list (default: those
    --help shows, hidden ones left out)."""
    shown = shown or (lambda param: param.get_help_record(ctx) is not None)
    options = [p for p in command.get_params(ctx) if not isinstance(p, click.Argument) and shown(p)]
    lead = getattr(command, "lead", ())
    by_name = {p.name: p for p in options}
    grouped: dict[str, list[click.Parameter]] = {MAIN: [by_name[name] for name in lead if name in by_name]}
    for param in options:
        if param.name not in lead:
            grouped.setdefault(section_of(param), []).append(param)
    return [(section, grouped[section]) for section in SECTIONS if grouped.get(section)]


class SectionedCommand(click.Command):
    """A click command whose --help lists options under SECTIONS' headings instead of one "Options",
    the ones named in `lead` first."""

    def __init__(self, *args, lead: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        names = {p.name for p in self.params}
        unknown = [name for name in lead if name not in names]
        if unknown:  # a typo would drop the option from the lead silently
            raise ValueError(f"command {self.name}: lead names {unknown}, which are not its options")
        self.lead = tuple(lead)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (section, [p.get_help_record(ctx) for p in params]) for section, params in sections(self, ctx)
        ]
        # One first-column width for every section, as one flat list had: write_dl sizes each call alone.
        widths = measure_table([row for _, section in rows for row in section])
        width = min(widths[0], 30) if widths else 0
        for section, records in rows:
            with formatter.section(section):
                formatter.write_dl(
                    [(first.ljust(width), second) if second else (first, second) for first, second in records]
                )
