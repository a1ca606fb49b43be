"""The `acr-scan` command line. Thin: options -> configs -> one library call -> output."""

from __future__ import annotations

import errno
import json
import logging
import sys
from pathlib import Path

import click

from scanner import api
from scanner.cli.configfile import config_option
from scanner.cli.options import (
    all_scan_options,
    b_template_options,
    calibration_config,
    calibration_options,
    engine_config,
    engine_options,
    executor_config,
    executor_options,
    model_config,
    model_options,
    passage_config,
    prompt_config,
    scan_config,
    search_config,
    search_options,
)
from scanner.cli.output import (
    audit_line,
    calibration_line,
    echo,
    emit_records,
    run_summary,
    summary_line,
    terminal_safe,
    work_text_tokens,
)
from scanner.cli.sections import COMPARE, MODEL, PLAN, TARGETS, SectionedCommand, option
from scanner.config import DTYPES, ENGINES
from scanner.errors import InputError
from scanner.stop import EXIT_CODE as STOPPED
from scanner.stop import Stopped, on_signals

log = logging.getLogger(__name__)


def read_targets(texts: tuple[str, ...], file: str | None) -> list[dict]:
    targets = [{"text": t} for t in texts]
    if file:
        path = Path(file)
        if not path.is_file():
            raise InputError(f"--file {file}: no such file")
        lines = _text_lines(path)
        if path.suffix == ".jsonl":
            targets += [
                _json_target(file, number, line) for number, line in enumerate(lines, 1) if line.strip()
            ]
        else:
            targets += [{"text": line} for line in lines if line.strip()]
    if not targets and file:
        raise InputError(
            f"--file {file} holds no target text (it is empty, or blank lines only); put one text per "
            'line (.txt), or one {"text": ...} object per line (.jsonl)'
        )
    if not targets:
        raise InputError("no target text; pass TEXT arguments or --file")
    return targets


def _text_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    try:
        # "\n" only, as JSON Lines defines lines: splitlines() would also cut at U+2028 inside a string.
        return [line.removesuffix("\r") for line in data.decode("utf-8").split("\n")]
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(
            f"--file {path} line {line}: not valid UTF-8 (byte 0x{data[err.start]:02x} at column "
            f"{column}); save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from err


def _json_target(file: str, number: int, line: str) -> dict:
    expected = 'expected one JSON object per line with a \'text\' string, like {"text": "..."}'
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise InputError(
            f"--file {file} line {number}: not JSON ({err.msg} at column {err.colno}); {expected}"
        ) from err
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise InputError(f"--file {file} line {number}: {expected}")
    return row


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="-v for info logs, -vv for debug logs.")
@click.version_option(package_name="acr-scanner")
def cli(verbose: int) -> None:
    """Measure LLM memorization with the Adversarial Compression Ratio.

    \b
    Example:
      acr-scan demo

    `acr` measures texts; `ingest`, `scan`, `status`, `report` and `export` scan a corpus; `plan` projects
    a scan's cost; `verify` re-checks a run or an evidence bundle. `acr-scan COMMAND --help` for each.
    """
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    handler = logging.StreamHandler()  # log lines quote ids and names too: printed terminal-safe
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


class SafeFormatter(logging.Formatter):
    """A log line is one line, terminal-safe (a newline in an id would forge the next one); a traceback
    keeps its lines, each made safe."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        return terminal_safe(super().formatMessage(record))

    def formatException(self, ei) -> str:  # noqa: N802
        return "\n".join(map(terminal_safe, super().formatException(ei).splitlines()))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return "\n".join(map(terminal_safe, super().formatStack(stack_info).splitlines()))


# The options most runs set, listed first in each command's --help (sections.py MAIN).
ACR_LEAD = ("model", "file", "as_json", "device", "dtype", "schedule", "tau")
SCAN_LEAD = (
    "config",
    "model",
    "out",
    "device",
    "dtype",
    "span_tokens",
    "search_budget",
    "executor",
    "ray_address",
)
PLAN_LEAD = (
    "config",
    "model",
    "out",
    "sample",
    "screen_sample",
    "workers",
    "device",
    "search_budget",
    "executor",
    "as_json",
)
COMPARE_LEAD = ("config", "model", "out", "device", "spans", "file", "executor")


@cli.command("acr", cls=SectionedCommand, lead=ACR_LEAD)
@model_options
@search_options
@engine_options(screen=False)
@calibration_options
@option(
    TARGETS,
    "--natural-prefix",
    default=None,
    help="A prompt string known to precede the text (a certificate).",
)
@option(TARGETS, "--file", "file", default=None, help=".txt (a target per line) or .jsonl ({'text': ...}).")
@option(TARGETS, "--json", "as_json", is_flag=True, help="One JSON object per target.")
@click.argument("texts", nargs=-1)
def acr_command(texts, file, as_json, natural_prefix, **options) -> None:
    """Measure the ACR of texts against a model.

    \b
    Example:
      acr-scan acr --model ~/.cache/acr-scanner/tiny "Call me Ishmael."

    The ACR of each TEXT (or of each line of --file) against --model. On a terminal, without --json, stderr shows each target's search: the prompt length tried, the GCG
    step, the target tokens right, the time. In Python: scanner.measure (docs/api.md).
    """
    targets = read_targets(texts, file)
    if natural_prefix is not None:
        for t in targets:
            t.setdefault("natural_prefix", natural_prefix)
    observer = None
    if not as_json:
        from scanner.cli.progress import TargetsLine, on_terminal

        observer = TargetsLine([t["text"] for t in targets]) if on_terminal() else None
    records = api.measure_iter(
        targets,
        model_config(options),
        prompt=prompt_config(options),
        search=search_config(options),
        engines=engine_config(options),
        calibration=calibration_config(options),
        observer=observer,
    )
    emit_records(records, as_json)


@cli.command("scan", cls=SectionedCommand, lead=SCAN_LEAD)
@config_option
@click.argument("corpus")
@all_scan_options
def scan_command(corpus, out, **options) -> None:
    """Scan a Parquet corpus into a run directory.

    \b
    Example:
      acr-scan scan corpus.parquet --model M --out run/

    Scans CORPUS (a Parquet file, directory or glob) span by span into the run directory --out.
    Relaunching the same command resumes; `status`, `report`, `export` and `verify` read the run directory.
    Options can come from a --config file (docs/config.md); in Python: scanner.scan (docs/api.md).

    \b
    Exit codes (a batch system may relaunch on 75, 4 and 5):
      0   done: every span has its row, none failed
      2   bad input or usage, or the run directory is another scan's
      4   shards or units failed after their retries; they stay pending
      5   done, but some spans' searches or checks failed (failed rows)
      75  stopped by SIGTERM or SIGUSR1 (a time limit, a preemption)
      130 interrupted (Ctrl-C)
    4, 5, 75 and 130 keep the finished work: relaunch the same command to go on.
    """
    from scanner.cli.progress import run_with_progress

    executor = executor_config(options)
    with on_signals():
        stats = run_with_progress(scan_config(options, corpus), out, executor, passage_config(options)).stats
    click.echo(summary_line(stats, out))
    audit = audit_line(out)
    if audit:
        echo(audit)
    failed = stats["run"]["failed_shards"]
    if failed:
        for task, error in sorted(failed.items(), key=str):
            name = f"shard {task:05d}" if isinstance(task, int) else task
            echo(f"{name} failed after {executor.max_retries} retries: {error}", err=True)
        click.echo(
            f"{len(failed)} shard(s) or unit(s) failed and stay pending; relaunch the same command to "
            "retry them (finished work is kept)",
            err=True,
        )
        sys.exit(4)
    exit_on_failed_rows(stats["run"]["failed_rows"])


FAILED_ROWS = 5  # the scan ended, but spans whose search or check failed are in the table


def exit_on_failed_rows(failed: dict[str, int]) -> None:
    """Exit FAILED_ROWS naming the failed spans by phase, when there are any: a batch system must not read
    a table holding failed rows as a success (a relaunch retries them)."""
    if not failed:
        return
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(failed.items()))
    click.echo(
        f"{sum(failed.values())} span(s) failed ({counts}; their errors are in the results' reason "
        "column and logs/); relaunch the same command to retry them (finished work is kept)",
        err=True,
    )
    sys.exit(FAILED_ROWS)


@cli.command("plan", cls=SectionedCommand, lead=PLAN_LEAD)
@config_option
@click.argument("corpus")
@option(
    PLAN,
    "--sample",
    required=True,
    help="Candidates to search of those the scan would search: a share with a decimal point (0.1) or a "
    "count (50), drawn every k-th along the scan's rank from a --seed offset.",
)
@option(
    PLAN,
    "--screen-sample",
    default="1.0",
    show_default=True,
    help="Documents to screen (and to draw the candidates from): a share (0.25) or a count (50), drawn with "
    "--seed; the screen is a small share of a scan, and all of it makes the candidates exact.",
)
@option(
    PLAN,
    "--workers",
    type=int,
    default=1,
    show_default=True,
    help="Workers (GPUs, Ray actors) the whole scan would run on, for its wall time.",
)
@option(
    PLAN,
    "--efficiency",
    type=float,
    default=0.85,
    show_default=True,
    help="Parallel efficiency assumed for --workers (bench/cluster/scale.py measures it).",
)
@option(PLAN, "--json", "as_json", is_flag=True, help="The projection as one JSON object.")
@all_scan_options
def plan_command(corpus, out, sample, screen_sample, workers, efficiency, as_json, **options) -> None:
    """Project a scan's cost from a sample of it.

    \b
    Example:
      acr-scan plan corpus.parquet --model M --sample 0.05 --workers 8 --out plan/

    Screens CORPUS (or a --screen-sample of its documents) with the scan's options, searches a --sample
    of the candidates the scan would search (into --out: sample.parquet, run/), then projects the whole
    scan: tokens, screen, candidates, search, passages, wall time and worker-hours.
    """
    from scanner.cli.plan import plan_lines
    from scanner.cli.progress import ProgressBar
    from scanner.run.plan import plan_scan

    config = scan_config(options, corpus)
    api.check_reference(config.calibration)
    bar = ProgressBar(Path(out) / "run")  # the bar of `scan`, on the sample's run
    try:
        with on_signals():  # a stopped plan exits 75 as a scan does; its relaunch goes on
            plan = plan_scan(
                config,
                out,
                sample,
                workers=workers,
                efficiency=efficiency,
                executor=executor_config(options),
                passages=passage_config(options),
                progress=bar,
                screen_sample=screen_sample,
            )
    finally:
        bar.close()
    click.echo(json.dumps(plan, indent=1) if as_json else "\n".join(plan_lines(plan)))
    if plan["failed"]:
        click.echo(
            f"{len(plan['failed'])} shard(s) or unit(s) of the sample failed; the projection leaves them "
            "out: relaunch the same command to retry them",
            err=True,
        )
        sys.exit(4)


@cli.command("ingest")
@click.argument("sources", nargs=-1, required=True)
@click.option(
    "--out", "out", required=True, help="The Parquet corpus to write (atomically), e.g. corpus.parquet."
)
@click.option(
    "--log",
    "log_path",
    default=None,
    help="Where skipped, ignored and noted sources are listed (JSONL); default: beside --out, "
    "<name>.ingest-log.jsonl.",
)
@click.option("--text-field", default="text", show_default=True, help="JSONL: the field that holds the text.")
@click.option(
    "--id-field", default=None, help="JSONL: the field that holds the document id; default: file:line."
)
@click.option("--title-field", default=None, help="JSONL: a field with the title.")
@click.option("--author-field", default=None, help="JSONL: a field with the author.")
@click.option(
    "--strip",
    multiple=True,
    type=click.Choice(["gutenberg"]),
    help="Remove boilerplate: gutenberg = Project Gutenberg's header and licence footer.",
)
@click.option(
    "--encoding",
    default=None,
    help="Text files that are not UTF-8: decode with this codec instead of detecting it.",
)
def ingest_command(
    sources, out, log_path, text_field, id_field, title_field, author_field, strip, encoding
) -> None:
    """Turn text, EPUB and JSONL files into one Parquet corpus.

    \b
    Example:
      acr-scan ingest books/ --out corpus.parquet --strip gutenberg

    SOURCES are folders, files or globs of .txt/.md, .epub and .jsonl(.gz/.zst); `scan` reads the corpus.
    """
    from scanner.ingest import IngestConfig, ingest

    config = IngestConfig(
        sources=tuple(sources),
        out=out,
        log=log_path,
        text_field=text_field,
        id_field=id_field,
        title_field=title_field,
        author_field=author_field,
        strip=tuple(dict.fromkeys(strip)),
        encoding=encoding,
    )
    click.echo(ingest(config).line())


@cli.command("status")
@click.argument("run_dir")
@click.option(
    "--workers",
    type=int,
    default=1,
    show_default=True,
    help="Shards running at once (the Ray actors), for the ETA.",
)
@click.option(
    "--watch",
    is_flag=True,
    help="A live view (the phase, each phase's counts, throughput, ETA) until the run is complete; Ctrl-C leaves.",
)
@click.option(
    "--interval", type=float, default=10.0, show_default=True, help="--watch: seconds between refreshes."
)
@click.option("--iterations", type=int, default=None, help="--watch: stop after this many refreshes.")
def status_command(run_dir, workers, watch, interval, iterations) -> None:
    """Show where a run stands (JSON, or a live view with --watch).

    \b
    Example:
      acr-scan status run/ --watch

    The phase (starting, screen, certify, search, write, passages, complete), each phase's progress,
    shards done and total, rows by status, throughput, the current phase's ETA, and inside each running
    unit its candidates done, the live candidate's prompt length, step and tokens right, and the age of
    its heartbeat (`running`).
    """
    from scanner.storage.rundir import RunDir

    if not watch:
        run = RunDir(run_dir)
        run.require_run()
        from scanner.storage.cost import run_cost
        from scanner.storage.progress import running
        from scanner.storage.status import phase_counts, progress

        now = progress(run, workers)  # eta_s and elapsed_s of the phase the run is in, not only phase 3's
        counts = run.status(workers)
        for shard, why in counts["damaged_shards"].items():
            click.echo(f"warning: shard {shard} is not counted: {why}", err=True)
        click.echo(
            json.dumps(
                {
                    **counts,
                    "phases": phase_counts(run),
                    "phase": now.pop("phase"),
                    "eta_s": now.pop("eta_s"),
                    "elapsed_s": now.pop("elapsed_s"),
                    "scan_process": now.pop("scan_process"),
                    "progress": now,
                    "running": running(run.path),
                    "recall": run.recall(),
                    "cost": run_cost(run),
                },
                indent=1,
            )
        )
        return
    from scanner.cli.watch import watch as watch_run

    def show(frame: str) -> None:
        if sys.stdout.isatty():
            click.clear()  # redraw in place on a terminal; piped into a file, frames follow each other
        click.echo(frame + "\n")

    try:
        watch_run(run_dir, interval=interval, iterations=iterations, workers=workers, show=show)
    except KeyboardInterrupt:
        click.echo("stopped watching; the scan is not affected")


@cli.command("config")
@click.argument("run_dir")
def config_command(run_dir) -> None:
    """Print a run's configuration as a --config file.

    \b
    Example:
      acr-scan config run/

    The options RUN_DIR's scan was made with (its run_config.json) as TOML on stdout: saved as run.toml,
    `acr-scan scan --config run.toml --out run2/` scans the same corpus the same way, and options given
    beside --config change what they name (docs/config.md). The executor's and the passages' options are
    not part of a run's configuration and are left out.
    """
    from scanner.cli.configfile import run_toml

    text, missing = run_toml(run_dir, scan_command)
    if missing:
        echo(
            f"warning: {len(missing)} setting(s) of this run have no option, so a scan with this file sets "
            f"them otherwise: {', '.join(missing)} (listed at the file's top)",
            err=True,
        )
    click.echo(text, nl=False)


@cli.command("export")
@click.argument("run_dir")
@click.option("--out", "out", default=None, help=".csv, .jsonl or .parquet (by extension).")
@click.option("--tau", default="1", show_default=True, help="1, gzip, zlib, lzma, smaz or a number.")
@click.option("--all", "all_rows", is_flag=True, help="Every row, not only the memorized spans.")
@click.option(
    "--calibrated", is_flag=True, help="Only calibrated memorization: memorized and not predictable."
)
@click.option(
    "--passages",
    is_flag=True,
    help="The memorized passages (merged spans with their extension) instead of spans.",
)
@click.option(
    "--free-prompts-only",
    "free_only",
    is_flag=True,
    help="Only elicitations whose prompt holds none of the work's text (prompt_source free).",
)
@click.option(
    "--bundle",
    default=None,
    help="A new folder: the flagged spans as a bundle anyone re-verifies "
    "(evidence, configuration, model hashes, manifest, a standalone recheck.py).",
)
@click.option(
    "--model",
    "model",
    default=None,
    help="--bundle: where the model is now (default: the run's); "
    "refused unless its files are the bytes the run recorded.",
)
@click.option(
    "--sign",
    "sign",
    default=None,
    help="--bundle: sign manifest.json with this ssh-ed25519 private key "
    "(manifest.json.sig, as `ssh-keygen -Y sign` writes it); a passphrase is read from "
    "ACR_SIGN_PASSPHRASE, else asked on the terminal.",
)
@click.option(
    "--without-shared-text",
    "no_shared",
    is_flag=True,
    help="Leave out shared text: passages many documents hold (a header, a licence; the passages' "
    "shared_text, --shared-text-min-docs of the scan) and their spans.",
)
def export_command(
    run_dir, out, tau, all_rows, calibrated, passages, free_only, bundle, model, sign, no_shared
) -> None:
    """Export the flagged spans with their prompts.

    \b
    Examples:
      acr-scan export run/ --out flagged.jsonl
      acr-scan export run/ --bundle evidence/ --sign ~/.ssh/id_ed25519

    The memorized spans (or --passages) with the prompts that reproduce them; the run's denominators go beside the file (OUT.denominators.json). --bundle writes a folder anyone
    re-verifies with `acr-scan verify --bundle` or its standalone recheck.py.
    """
    from scanner.results.denominators import denominators, denominators_line
    from scanner.results.export import denominators_path, export, export_passages, without_shared
    from scanner.results.report_compare import export_compare, is_comparison

    if is_comparison(run_dir):  # a comparison exports its table, both models' identities beside it
        if bundle is not None or out is None:
            raise InputError(
                f"{run_dir} is a comparison (acr-scan compare): pass --out FILE (.csv, .jsonl, .parquet); "
                "for a bundle of B's evidence, scan the corpus with B and export that run's --bundle"
            )
        count = export_compare(run_dir, out)
        click.echo(f"{count} compared spans written to {out}; both models' identities in {out}.models.json")
        return
    if sign is not None and bundle is None:
        raise InputError(f"--sign {sign} signs a bundle; pass --bundle DIR")
    if (out is None) == (bundle is None) or (bundle is not None and (all_rows or passages)):
        raise InputError(
            "pass --out FILE or --bundle DIR (one of them; --bundle takes neither --all nor --passages)"
        )
    run = readable_run(run_dir)
    table = run.read_results()
    about = {"work_text_tokens": work_text_tokens(run), "without_shared_text": no_shared}
    if bundle is not None:
        from scanner.cli.evidence import export_bundle

        export_bundle(run, bundle, tau, calibrated, model, sign, leave_out_shared=no_shared)
        click.echo(denominators_line(denominators(table)))
        return
    from scanner.results.report_shared import shared_spans, treatment
    from scanner.storage.passages import passages_if_built, read_passages

    built = (
        read_passages(run) if no_shared or passages else passages_if_built(run)
    )  # the former names the fix
    shared = treatment(table, built, no_shared)
    if passages:
        if tau != "1" or all_rows:
            raise InputError(
                "--tau and --all select spans; --passages exports every passage of the run's "
                "verdict (drop --tau/--all, or drop --passages)"
            )
        count = export_passages(
            without_shared(built) if no_shared else built,
            out,
            calibrated=calibrated,
            free_only=free_only,
            results=table,
            about=about,
            shared=shared,
        )
        click.echo(f"{count} passages written to {out}")
    else:
        count = export(
            table,
            out,
            tau=tau,
            all_rows=all_rows,
            calibrated=calibrated,
            free_only=free_only,
            about=about,
            leave_out=shared_spans(built) if no_shared else None,
            shared=shared,
        )
        click.echo(f"{count} rows written to {out}")
    click.echo(f"{denominators_line(denominators(table))}; counts in {denominators_path(out)}")
    click.echo(calibration_line(table))


def readable_run(run_dir: str):
    """The run directory for export/report/verify: refused when it is none, a warning when unfinished."""
    from scanner.storage.rundir import RunDir

    run = RunDir(run_dir)
    run.require_run()
    done, total = len(run.done_shards()), len(run.load_plan())
    if done < total:
        click.echo(
            f"warning: the run in {run_dir} is unfinished: {done} of {total} shards done; what "
            "follows covers the finished shards only (relaunch the scan to finish it)",
            err=True,
        )
    return run


@cli.command("report")
@click.argument("run_dir")
@click.option(
    "--out",
    "out",
    required=True,
    help="The HTML file to write; a page per finding goes to OUT-STEM-passages/.",
)
@click.option(
    "--corpus", "corpus", default=None, help="Where the scanned corpus lies now (default: the scan's path)."
)
@click.option(
    "--context-chars",
    default=1200,
    show_default=True,
    help="Characters of the book each side of a passage (0: the passage alone).",
)
def report_command(run_dir, out, corpus, context_chars) -> None:
    """Write a run's HTML report.

    \b
    Example:
      acr-scan report run/ --out report.html

    One self-contained page: summary, ACR histogram, a row per document with findings and a summary of the rest,
    memorized passages; beside it a page per passage in the book's surrounding text.
    """
    from scanner.cli.output import work_text_tokens
    from scanner.cli.pages import surroundings_of
    from scanner.results.report import write_report
    from scanner.results.report_compare import is_comparison, write_compare_report
    from scanner.storage.passages import passages_path, read_passages

    if is_comparison(run_dir):
        click.echo(f"comparison report written to {write_compare_report(run_dir, out)}")
        return
    if (
        context_chars < 0
    ):  # a negative reach cut the passage itself, and every page said the corpus was absent
        raise InputError(
            f"--context-chars {context_chars}: must be 0 or more (0: the passage alone); "
            "pass e.g. --context-chars 1200"
        )
    run = readable_run(run_dir)
    passages = read_passages(run) if passages_path(run).is_file() else None
    if passages is None:
        click.echo(
            f"note: {run_dir} has no passages table yet; the report lists single spans (relaunch the "
            "scan command to build it)",
            err=True,
        )
    table = run.read_results()
    around = surroundings_of(run, table, passages, corpus, context_chars)
    write_report(table, run_summary(run), out, passages, around, work_text_tokens(run), run.recall())
    click.echo(f"report written to {out}")


@cli.command("verify")
@click.argument("run_dir", required=False)
@click.option("--model", "model", default=None, help="Default: the run's model (--bundle: required).")
@click.option(
    "--bundle", default=None, help="A folder of `export --bundle`: its manifest, model files and rows."
)
@click.option(
    "--dtype",
    type=click.Choice(DTYPES),
    default=None,
    help="Re-check on another numeric path, e.g. float32 against a bf16 scan (default: the run's).",
)
@click.option(
    "--verify-engine",
    type=click.Choice(ENGINES[1:]),
    default=None,
    help="Re-check with this engine's generation: hf or vllm (default: the run's).",
)
@click.option(
    "--fragile-margin",
    type=float,
    default=None,
    help="Generation margin (logits) below which a success is fragile (default: the run's).",
)
@click.option(
    "--expect", default=None, help="--bundle: the manifest.json sha256 published with the evidence."
)
@click.option(
    "--signer",
    default=None,
    help="--bundle: the signer's ssh-ed25519 public key file; manifest.json.sig must be its signature.",
)
def verify_command(run_dir, model, bundle, dtype, verify_engine, fragile_margin, expect, signer) -> None:
    """Re-check flagged prompts by greedy generation.

    \b
    Examples:
      acr-scan verify run/ --dtype float32
      acr-scan verify --bundle evidence/ --model M --expect SHA256 --signer signer.pub

    Regenerates from every flagged prompt of RUN_DIR (or of --bundle) and lists every one that does not
    reproduce (exit 3 if any, or if the bundle's files or the model's
    differ).
    """
    # Span-based on purpose: every passage's evidence is its spans' prompts, so checking the spans checks
    # the passages; an extension is re-checked by generation from passages.parquet's extension_prompt.
    from scanner.cli.evidence import verify_main

    if run_dir is None and bundle is None:
        raise InputError("pass RUN_DIR (a scan's --out folder) or --bundle DIR")
    run = readable_run(run_dir) if run_dir is not None else None
    code = verify_main(run, bundle, model, dtype, verify_engine, fragile_margin, expect, signer)
    if code:
        sys.exit(code)


@cli.command("compare", cls=SectionedCommand, lead=COMPARE_LEAD)
@config_option
@click.argument("run_dir")
@option(
    COMPARE, "--out", "out", required=True, help="A new folder for the comparison (or its own, to resume)."
)
@option(
    MODEL,
    "--model",
    "model",
    required=True,
    help="Model B (HF hub id, local directory or .gguf) with run A's tokenizer: fine-tuned, unlearned, quantized...",
)
@option(MODEL, "--revision", default=None, help="Hub revision of B.")
@option(MODEL, "--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N.")
@option(MODEL, "--dtype", default="auto", show_default=True, type=click.Choice(DTYPES))
@option(MODEL, "--threads", type=int, default=None, help="CPU threads for torch.")
@option(MODEL, "--trust-remote-code", is_flag=True, help="Allow B's repository's own code to run.")
@option(
    COMPARE,
    "--spans",
    default=None,
    help="Comma-separated span_id values of RUN to measure (default: its memorized and certified spans, "
    "and the spans it searched and found not memorized, as controls).",
)
@option(
    COMPARE,
    "--file",
    "file",
    default=None,
    help="Compare the spans of RUN that lie inside these texts: an `acr --file` list, .txt (a text per line) or "
    ".jsonl ({'text': ...}).",
)
@option(
    COMPARE,
    "--corpus",
    "corpus",
    default=None,
    help="Where RUN's corpus lies now (default: the scan's path).",
)
@option(
    COMPARE,
    "--tighten",
    is_flag=True,
    help="Shrink below each verdict on B (default: both searches stop at their verdict, as a scan's do).",
)
@option(COMPARE, "--unit-size", type=int, default=8, show_default=True, help="Spans per resumable unit.")
@b_template_options
@executor_options
def compare_command(
    run_dir,
    out,
    model,
    revision,
    device,
    dtype,
    threads,
    trust_remote_code,
    spans,
    file,
    corpus,
    tighten,
    unit_size,
    chat,
    system_prompt,
    instruction,
    **options,
) -> None:
    """Measure a scan's spans on a second model (before/after).

    \b
    Examples:
      acr-scan compare run/ --model unlearned/ --out run-b/
      acr-scan compare run/ --model quantized.gguf --out run-q/ --executor ray
      acr-scan compare run/ --model unlearned/ --file forget-set.txt --out run-f/
      acr-scan compare run/ --model base/ --chat --system-prompt "Never quote the book." --out run-icu/

    For each span of RUN_DIR (model A) on --model B: B's certificate, completion test (k-prefix, p_z,
    greedy-match rate) and MiniPrompt warm-started from A's prompt beside a cold search on the same
    budget; a row with both sides and a verdict class per span in OUT/compare.parquet (`report OUT` draws
    the comparison page).
    """
    from scanner.config import ModelConfig
    from scanner.run.compare import compare_config, run_compare

    readable_run(run_dir)
    chosen = tuple(s.strip() for s in spans.split(",") if s.strip()) if spans is not None else None
    b = ModelConfig(
        model=model,
        revision=revision,
        device=device,
        dtype=dtype,
        threads=threads,
        trust_remote_code=trust_remote_code,
    )
    template = {"chat": chat or None, "system_prompt": system_prompt, "instruction": instruction}
    targets = tuple(t["text"] for t in read_targets((), file)) if file is not None else None
    config = compare_config(run_dir, b, chosen, tighten, unit_size, corpus, template, targets)
    with on_signals():
        summary = run_compare(config, out, executor_config(options))
    if summary["failed"]:
        for task, error in sorted(summary["failed"].items(), key=str):
            echo(f"{task} failed: {error}", err=True)
        click.echo(
            "some spans or units failed and stay pending; relaunch the same command to retry them", err=True
        )
        sys.exit(4)
    click.echo(compare_line(summary, out))


def compare_line(summary: dict, out: str) -> str:
    classes = ", ".join(f"{k} {v}" for k, v in summary["classes"].items() if v)
    cost = summary["warm_vs_cold"]
    return (
        f"{summary['spans']} spans compared into {out}: {classes or 'none'}; warm vs cold search over "
        f"{cost['spans']} spans with A's prompt: forwards {cost['warm']['forwards']} vs {cost['cold']['forwards']}, "
        f"seconds {cost['warm']['s']:.1f} vs {cost['cold']['s']:.1f}"
    )


@cli.command("demo")
@click.option("--workdir", default=None, help="Where the tiny model is trained (default: a cache folder).")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the tiny model's training, the demo's texts and its searches.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per target.")
def demo_command(workdir, seed, as_json) -> None:
    """Run the embedded demo on a tiny model.

    \b
    Example:
      acr-scan demo

    About two minutes on 2 CPU cores. Trains a tiny model that memorized planted passages (cached in --workdir), measures them and unseen
    text, then scans a small corpus with the passages hidden in it and writes report.html and
    flagged.jsonl beside the run.
    """
    from scanner.cli.demo import run_demo

    run_demo(workdir=workdir, seed=seed, as_json=as_json, echo=click.echo)


def environment_fault(err: OSError) -> bool:
    # Faults of the machine or of a path the user gave, not of the program: a full disk, no permission,
    # a file where a folder should be. Other OSErrors stay internal errors with their traceback.
    return err.errno in FIXES


FIXES = {
    errno.ENOSPC: "free space on that file system (or point --out elsewhere), then relaunch the same "
    "command: finished work is kept",
    errno.EDQUOT: "free space within your quota (or point --out elsewhere), then relaunch the same command",
    errno.EACCES: "choose a path you may write (and read), or change its permissions",
    errno.EPERM: "choose a path you may write (and read), or change its permissions",
    errno.EROFS: "the file system is read-only; choose a writable path",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.EEXIST: "a file stands where a folder is needed; choose another path or move that file",
    errno.EISDIR: "a folder stands where a file is needed; name a file",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.ENOENT: "a folder on that path does not exist or was removed meanwhile; create it or choose "
    "another path",
}


def os_error_message(err: OSError) -> str:
    where = f" ({err.filename})" if err.filename else ""
    return f"{err.strerror or err}{where}; {FIXES[err.errno]}"


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        # Ctrl-C. Every commit is atomic, so an interrupted scan loses at most its unfinished shards.
        click.echo(
            "interrupted; a scan's finished shards are kept: relaunch the same command to resume", err=True
        )
        sys.exit(130)
    except Stopped as err:  # SIGTERM / SIGUSR1: a batch system's "relaunch me", apart from Ctrl-C's 130
        echo(f"stopped: {err}", err=True)
        sys.exit(STOPPED)
    except click.ClickException as err:
        err.show()
        sys.exit(2)
    except InputError as err:  # a message may quote an id or a name that others wrote
        echo(f"error: {err}", err=True)
        sys.exit(2)
    except OSError as err:
        if not environment_fault(err):
            raise_internal()
        echo(f"error: {os_error_message(err)}", err=True)
        sys.exit(2)
    except Exception:
        raise_internal()
    sys.exit(0)


def raise_internal() -> None:
    log.exception("internal error")
    click.echo("internal error (see the traceback above); please report it", err=True)
    sys.exit(1)
