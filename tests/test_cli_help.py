"""The command line's help and defaults, in process (no model): `scan` and `acr --help` list every shown
option under exactly one section heading, in the intended order, the main ones first; the hidden ones are
the knobs of features off by default and still parse; every default that is a config field's is the
dataclass's own; the demo does not import the command group (no import cycle)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from scanner.cli.main import cli
from scanner.cli.options import (
    calibration_config,
    default_of,
    engine_config,
    executor_config,
    model_config,
    passage_config,
    prompt_config,
    scan_config,
    search_config,
)
from scanner.cli.sections import SectionOption
from scanner.config import (
    CalibrationConfig,
    CorpusConfig,
    EngineConfig,
    ExecutorConfig,
    ModelConfig,
    PassageConfig,
    PromptConfig,
    ScanConfig,
    SearchConfig,
    SpanConfig,
)

ROOT = Path(__file__).resolve().parents[1]
HEADINGS = {
    "scan": [
        "Main options",
        "Corpus and output",
        "Model",
        "Prompt",
        "Spans and screen",
        "Extraction (p_z)",
        "Search",
        "Early rejection",
        "Budget",
        "Engines",
        "Calibration",
        "Passages",
        "Executor",
        "Other",
    ],
    "plan": [
        "Main options",
        "Corpus and output",
        "Plan",
        "Model",
        "Prompt",
        "Spans and screen",
        "Extraction (p_z)",
        "Search",
        "Early rejection",
        "Budget",
        "Engines",
        "Calibration",
        "Passages",
        "Executor",
        "Other",
    ],
    "acr": [
        "Main options",
        "Targets and output",
        "Model",
        "Prompt",
        "Search",
        "Early rejection",
        "Engines",
        "Calibration",
        "Other",
    ],
}


def context(name: str) -> click.Context:
    # Under the group's context, as on the command line: it sets -h beside --help.
    group = click.Context(cli, info_name="acr-scan", **cli.context_settings)
    return click.Context(cli.commands[name], info_name=name, parent=group)


def help_sections(name: str) -> dict[str, list[str]]:
    """Heading -> the lines under it, in the order --help prints them."""
    out = CliRunner().invoke(cli, [name, "--help"], terminal_width=100)
    assert out.exit_code == 0, out.output
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.output.splitlines():
        if line and not line.startswith(" ") and line.endswith(":") and not line.startswith("Usage"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.strip():
            current.append(line)
    return sections


@pytest.mark.parametrize("name", sorted(HEADINGS))
def test_help_lists_every_option_under_exactly_one_heading_in_order(name):
    sections = help_sections(name)
    assert list(sections) == HEADINGS[name]
    command = cli.commands[name]
    ctx = context(name)
    options = [p for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.hidden]
    for param in options:
        term = param.get_help_record(ctx)[0]
        under = [
            h
            for h, lines in sections.items()
            for line in lines
            if line == f"  {term}" or line.startswith(f"  {term}  ")
        ]
        assert len(under) == 1, f"{name}: {term} is under {under}"
    rows = [line for lines in sections.values() for line in lines if line.startswith("  -")]
    assert len(rows) == len(options), f"{name}: {len(rows)} rows in --help for {len(options)} options"
    main = [line.split()[0] for line in sections["Main options"] if line.startswith("  -")]
    lead = {p.name: p.opts[-1] for p in options}
    assert main == [lead[n] for n in command.lead], (
        f"{name}: the main options in the order the command names them"
    )


HIDDEN = {"draft_model", "probe_size", "probe_reduction", "probe_min_kept", "bound_unmemorized"}


@pytest.mark.parametrize("name", ["acr", "scan", "plan"])
def test_hidden_options_are_the_off_by_default_knobs_and_still_parse(name):
    command = cli.commands[name]
    assert {p.name for p in command.params if getattr(p, "hidden", False)} == HIDDEN
    args = ["c"] if name != "acr" else ["t"]
    args += ["--model", "m", "--out", "o"] if name != "acr" else ["--model", "m"]
    args += ["--sample", "1"] if name == "plan" else []
    ctx = command.make_context(
        name, [*args, "--draft-model", "d", "--probe-size", "8", "--bound-unmemorized"]
    )
    assert (ctx.params["draft_model"], ctx.params["probe_size"], ctx.params["bound_unmemorized"]) == (
        "d",
        8,
        True,
    )


def test_a_lead_that_names_no_option_is_refused():
    from scanner.cli.sections import SectionedCommand

    with pytest.raises(ValueError, match=r"lead names \['mdoel'\]"):
        SectionedCommand("x", params=[click.Option(["--model"])], lead=("mdoel",))


def defaults(name: str, **required) -> dict:
    command = cli.commands[name]
    ctx = context(name)
    return {p.name: p.get_default(ctx) for p in command.params if p.name not in required} | required


def fields(config) -> dict:
    return dataclasses.asdict(config)  # so that a failure names the field that differs


def test_scan_defaults_are_the_configs_defaults():
    # Options left at their defaults must give the configs' own defaults: a click default that restates
    # a dataclass default and drifts from it fails here.
    o = defaults("scan", corpus="c", model="m", out="r")
    assert fields(scan_config(o, "c")) == fields(
        ScanConfig(corpus=CorpusConfig(path="c"), model=ModelConfig(model="m"))
    )
    assert fields(executor_config(o)) == fields(ExecutorConfig())
    assert fields(passage_config(o)) == fields(PassageConfig())


def test_acr_defaults_are_the_configs_defaults():
    o = defaults("acr", model="m", texts=())
    assert fields(model_config(o)) == fields(ModelConfig(model="m"))
    assert fields(prompt_config(o)) == fields(PromptConfig())
    assert fields(search_config(o)) == fields(SearchConfig())
    assert fields(engine_config(o)) == fields(
        dataclasses.replace(EngineConfig(), screen="hf")
    )  # acr has no screen
    assert fields(calibration_config(o)) == fields(CalibrationConfig())


def test_default_of_reads_the_dataclass_and_names_a_wrong_field():
    assert default_of(SpanConfig, "span_tokens") == SpanConfig().span_tokens
    assert default_of(ScanConfig, "calibration") == CalibrationConfig()  # a default_factory
    with pytest.raises(ValueError, match=r"SpanConfig has no field 'span_token'; its fields are"):
        default_of(SpanConfig, "span_token")
    with pytest.raises(ValueError, match=r"ScanConfig.corpus has no default"):
        default_of(ScanConfig, "corpus")


def test_an_unknown_section_is_refused_where_the_option_is_declared():
    with pytest.raises(ValueError, match=r"unknown help section 'Serch'"):
        SectionOption(["--x"], section="Serch")


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_only_the_entry_point_imports_the_command_group():
    importers = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "scanner").rglob("*.py") if "scanner.cli.main" in imports(p)
    )
    # and the reference generator, which reads the group to write docs/cli.md; nothing imports it back
    assert importers == ["scanner/__main__.py", "scanner/cli/reference.py"]
