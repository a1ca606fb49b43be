"""`--config FILE`: a command's options in a TOML file a batch job keeps beside its submit script.

The keys are the command's option names without the dashes (`search-budget = "2h"`, `search_budget`
alike), and its arguments' names (`corpus`, `run_dir`); the command line overrides the file, and an
environment variable an option reads (ACR_AUDIT_SAMPLE) overrides the file too, as click orders them.
The file is read by an eager option, so an unknown key or a wrong type is refused (exit 2) before any
other option is parsed and before anything runs; its values become the command's defaults (click's
default_map), so every value still passes through the option's own type and the configs' checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from pathlib import Path

import click

from scanner.cli.options import scan_config
from scanner.cli.output import UNSAFE, terminal_safe
from scanner.cli.sections import OTHER, option, sections
from scanner.errors import InputError

FIX = (
    'the keys are the option names of `acr-scan {name} --help` without the dashes, e.g. search-budget = "2h"'
)


def config_option(f):
    """--config FILE on a command: its options (and arguments) read from a TOML file."""
    return option(
        OTHER,
        "--config",
        "config",
        is_eager=True,
        expose_value=False,
        callback=load_config,
        metavar="FILE",
        help='A TOML file of options, e.g. search-budget = "2h" (docs/config.md); the command '
        "line overrides it.",
    )(f)


def load_config(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    if path is None:
        return
    values = read_toml(path)
    defaults = file_defaults(ctx, values, path)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def read_toml(path: str) -> dict:
    file = Path(path)
    if not file.is_file():
        raise InputError(
            f"--config {path}: no such file; pass a TOML file of options (acr-scan config RUN "
            "writes one from a run)"
        )
    try:
        with file.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise InputError(
            f"--config {path} is not valid TOML ({err}); write one key = value per line, "
            'strings in quotes, e.g. model = "HuggingFaceTB/SmolLM2-135M"'
        ) from err
    except UnicodeDecodeError as err:
        raise InputError(f"--config {path} is not UTF-8 text; save it as UTF-8") from err


def keys(command: click.Command) -> dict[str, click.Parameter]:
    """Each key a file may use for `command`, in its underscore spelling, and the parameter it sets."""
    out = {}
    for param in command.params:
        if param.name in ("config", "help") or not param.expose_value:
            continue
        if isinstance(param, click.Argument):
            out[param.name] = param
        else:
            for opt in param.opts:
                if opt.startswith("--"):
                    out[opt[2:].replace("-", "_")] = param
    return out


def key_name(param: click.Parameter) -> str:
    """How a file (and `acr-scan config`) spells the key of `param`: its long option without dashes."""
    if isinstance(param, click.Argument):
        return param.name
    return next(opt[2:] for opt in param.opts if opt.startswith("--"))


def file_defaults(ctx: click.Context, values: dict, path: str) -> dict:
    """{parameter name: value} from the file's keys, each checked against the option it names."""
    known = keys(ctx.command)
    out = {}
    for key, value in values.items():
        param = known.get(key.replace("-", "_"))
        if isinstance(value, dict) and param is None:
            raise InputError(
                f"--config {path}: [{key}] is a table; the file holds its keys at the top level, "
                f"without tables: {FIX.format(name=ctx.command.name)}"
            )
        if param is None:
            raise InputError(unknown_key(ctx.command, key, path, known))
        if param.name in out:  # search-budget and search_budget both: which one was meant is unknowable
            raise InputError(
                f"--config {path}: {key_name(param)} is set twice (as '{key}' and another spelling); "
                "keep one of them"
            )
        out[param.name] = checked(ctx, param, key, value, path)
    return out


def unknown_key(command: click.Command, key: str, path: str, known: dict) -> str:
    spelled = sorted({key_name(p) for p in known.values()})
    close = difflib.get_close_matches(key.replace("_", "-"), spelled, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"--config {path}: '{key}' is not an option of acr-scan {command.name}; {hint}{FIX.format(name=command.name)}"


def checked(ctx: click.Context, param: click.Parameter, key: str, value, path: str):
    """The file's value in the form the option takes; InputError naming the key, the file and the fix."""
    if not fits(param, value):
        given = f"{key} = {toml_value(value)}" if is_scalar(value) else key
        raise InputError(
            f"--config {path}: {given} is {kind(value)}; {key_name(param)} takes {expected_type(param)}, "
            f"e.g. {example(param)}"
        )
    text = str(value) if isinstance(param.type, click.types.StringParamType) else value
    try:
        return param.type_cast_value(ctx, text)
    except click.BadParameter as err:
        raise InputError(f"--config {path}: {key} = {toml_value(value)}: {err.format_message()}") from err


def fits(param: click.Parameter, value) -> bool:
    if isinstance(value, dict | list) or value is None:
        return False
    if getattr(param, "is_flag", False) or isinstance(param.type, click.types.BoolParamType):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(param.type, click.types.IntParamType):
        return isinstance(value, int)
    if isinstance(param.type, click.types.FloatParamType):
        return isinstance(value, int | float)
    if isinstance(param.type, click.Choice):
        return isinstance(value, str)
    return isinstance(value, str | int | float)  # a text option; "16" and 16 alike (e.g. audit-sample)


def expected_type(param: click.Parameter) -> str:
    if getattr(param, "is_flag", False):
        return "true or false"
    if isinstance(param.type, click.types.IntParamType):
        return "a whole number"
    if isinstance(param.type, click.types.FloatParamType):
        return "a number"
    if isinstance(param.type, click.Choice):
        return "one of " + ", ".join(f'"{c}"' for c in param.type.choices)
    return "a string"


def example(param: click.Parameter) -> str:
    name = key_name(param)
    if getattr(param, "is_flag", False):
        return f"{name} = true"
    if isinstance(param.type, click.types.IntParamType):
        return f"{name} = 8"
    if isinstance(param.type, click.types.FloatParamType):
        return f"{name} = 0.5"
    if isinstance(param.type, click.Choice):
        return f'{name} = "{param.type.choices[0]}"'
    return f'{name} = "..."'


def kind(value) -> str:
    names = {
        bool: "true or false",
        int: "a whole number",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return next((text for t, text in names.items() if isinstance(value, t)), type(value).__name__)


def is_scalar(value) -> bool:
    return isinstance(value, bool | int | float | str)


def toml_value(value) -> str:
    """A scalar written as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return toml_string(value)


def toml_string(text: str) -> str:
    """A TOML basic string that is one terminal-safe line: quotes and backslashes escaped, and every
    character a terminal acts on (output.UNSAFE: controls, DEL, C1, bidirectional overrides) as \\uXXXX."""
    return '"' + "".join(_escaped(c) for c in text) + '"'


def _escaped(c: str) -> str:
    if c in '"\\':
        return "\\" + c
    return f"\\u{ord(c):04x}" if UNSAFE.match(c) else c


# Where each option of `scan` lands in a run's configuration (options.py scan_config builds it), read back
# by `acr-scan config`. Three options need more than a field: corpus (the argument), keep-columns (a
# comma-separated list) and steps (decide_steps or paper_steps, by the schedule): option_values has them.
FIELDS = {
    "model": "model.model",
    "revision": "model.revision",
    "device": "model.device",
    "dtype": "model.dtype",
    "threads": "model.threads",
    "trust_remote_code": "model.trust_remote_code",
    "chat": "prompt.chat",
    "system_prompt": "prompt.system_prompt",
    "instruction": "prompt.instruction",
    "bos": "prompt.bos",
    "allow_non_ascii": "prompt.allow_non_ascii",
    "schedule": "search.schedule",
    "tau": "search.tau",
    "seed": "search.seed",
    "cap_factor": "search.cap_factor",
    "top_k": "search.gcg.top_k",
    "candidates": "search.gcg.num_candidates",
    "loss": "search.gcg.loss",
    "restarts": "search.restarts",
    "fragile_margin": "search.fragile_margin",
    "draft_model": "search.gcg.draft.model",
    "probe_size": "search.gcg.draft.probe_size",
    "probe_reduction": "search.gcg.draft.reduction",
    "probe_min_kept": "search.gcg.draft.min_kept",
    "bound_unmemorized": "search.bound_unmemorized",
    "early_reject": "search.early_reject",
    "reject_after": "search.reject_after",
    "reject_min_right": "search.reject_min_right",
    "reject_stall": "search.reject_stall",
    "verify_engine": "engines.verify",
    "screen_engine": "engines.screen",
    "vllm_gpu_memory": "engines.gpu_memory_utilization",
    "deterministic": "engines.deterministic",
    "targets_per_forward": "engines.targets_per_forward",
    "reference_model": "calibration.reference_model",
    "reference_margin": "calibration.nll_margin",
    "calibration_prompts": "calibration.random_prompts",
    "text_column": "corpus.text_column",
    "id_column": "corpus.id_column",
    "allow_duplicate_ids": "corpus.allow_duplicate_ids",
    "span_tokens": "spans.span_tokens",
    "stride": "spans.stride",
    "allow_gaps": "spans.allow_gaps",
    "anchors": "spans.anchors",
    "anchor_min_run": "spans.anchor_min_run",
    "anchor_max_gap": "spans.anchor_max_gap",
    "pz_top_k": "screen.extraction.top_k",
    "pz_temperature": "screen.extraction.temperature",
    "pz_n": "screen.extraction.n",
    "pz_p": "screen.extraction.p",
    "context_tokens": "screen.context_tokens",
    "certificate_min_match": "screen.certificate_min_match",
    "certificate_max_tokens": "screen.certificate_max_tokens",
    "screen_window": "screen.window",
    "chunk_tokens": "screen.chunk_tokens",
    "min_match_rate": "min_match_rate",
    "max_candidates_per_doc": "max_candidates_per_doc",
    "max_candidates": "max_candidates",
    "search_budget": "search_budget",
    "audit_sample": "audit_sample",
    "tighten": "tighten",
    "unit_size": "unit_size",
    "docs_per_shard": "docs_per_shard",
    "work_text_tokens": "work_text_tokens",
}
# Options of `scan` that are not part of a run's configuration: where it runs and where it writes, and the
# passages' settings (a relaunch may change them; passages.parquet alone is rebuilt).
NOT_RECORDED = (
    "out",
    "executor",
    "ray_address",
    "num_actors",
    "gpus_per_actor",
    "cpus_per_actor",
    "max_retries",
    "hung_after",
    "extend_tokens",
    "shared_text_min_docs",
)


def option_values(config) -> dict:
    """{parameter name of `scan`: value} that make `config` (a ScanConfig) again."""
    data = dataclasses.asdict(config)
    values = {name: _field(data, path) for name, path in FIELDS.items()}
    values["steps"] = data["search"]["paper_steps" if config.search.schedule == "paper" else "decide_steps"]
    values["keep_columns"] = ",".join(config.corpus.keep_columns)
    values["corpus"] = config.corpus.path
    return values


def _field(data: dict, path: str):
    for part in path.split("."):
        data = data[part]
    return data


def unreproduced(command: click.Command, values: dict, config) -> list[str]:
    """The configuration's fields that `values`, given to `command`, would set otherwise: fields no option
    sets (a run made through the Python API with, say, its own shrink_steps)."""
    ctx = click.Context(command, info_name=command.name)
    options = {p.name: p.get_default(ctx) for p in command.params if p.expose_value} | values
    rebuilt = scan_config(options, values["corpus"])
    return changed_fields(dataclasses.asdict(config), dataclasses.asdict(rebuilt))


def changed_fields(saved: dict, rebuilt: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in saved.items():
        if isinstance(value, dict):
            out += changed_fields(value, rebuilt[key], f"{prefix}{key}.")
        elif value != rebuilt.get(key):
            out.append(f"{prefix}{key} = {value!r}")
    return out


def run_toml(run_dir: str, command: click.Command) -> tuple[str, list[str]]:
    """RUN_DIR's configuration as a --config file of `command` (scan), and the fields it cannot set."""
    from scanner.api import saved_config

    config = saved_config(run_dir)
    values = option_values(config)
    missing = unreproduced(command, values, config)
    return render(command, values, run_dir, missing), missing


def render(command: click.Command, values: dict, run_dir: str, missing: list[str]) -> str:
    """The TOML text: a header saying what the file is, the corpus, then each option by --help's sections."""
    name = command.name
    lines = [
        f"# The configuration of the run in {terminal_safe(run_dir)} (its run_config.json), as a file for",
        f"# `acr-scan {name} --config FILE --out NEW_RUN`: the same run again, options on the command line",
        "# overriding these. Not part of a run's configuration, so not here: --out, the executor's and the",
        "# passages' options.",
    ]
    if missing:
        lines += [
            "#",
            "# Settings of this run that no option sets (so a scan with this file sets them otherwise;",
            "# scanner.scan(scanner.saved_config(RUN_DIR), NEW_RUN) keeps them):",
            *(f"#   {terminal_safe(field)}" for field in missing),
        ]
    lines += ["", f"corpus = {toml_value(values['corpus'])}"]
    ctx = click.Context(command, info_name=name)
    for section, params in sections(command, ctx, shown=lambda p: p.name in values and p.name != "corpus"):
        written = [
            f"{key_name(p)} = {toml_value(values[p.name])}" for p in params if values[p.name] is not None
        ]
        if written:
            lines += ["", f"# {section}", *written]
    return "\n".join(lines) + "\n"
