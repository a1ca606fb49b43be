"""The text of `acr-scan verify` (a run or a bundle, on the scan's numeric path or another) and of
`export --bundle`: what a reader of the evidence is told, line by line."""

from __future__ import annotations

from scanner.cli.output import calibration_line, echo


def path_label(info: dict) -> str:
    """'hf float32 on cpu': the engine, dtype and device a re-check ran on."""
    device = (info.get("flags") or {}).get("device")
    return f"{info['engine']} {info['dtype']}" + (f" on {device}" if device else "")


def scan_label(rows: list[dict]) -> str:
    paths = sorted(
        {f"{r.get('verify_engine')} {r.get('verify_dtype')}" for r in rows if r.get("verify_engine")}
    )
    return ", ".join(paths) or "unrecorded"


def _disagreement(check, where: str) -> str:
    row = check.row
    why = "; the prompt string types into other ids than the evidence records" if check.retyped else ""
    return (
        f"NOT REPRODUCED {row.get('doc_id')} {row.get('span_id')} tokens {row.get('token_start')}: "
        f"{check.matched}/{len(row['target_ids'])} tokens matched under {where}{why}; prompt {row['prompt']!r}"
    )


def _margins_line(recheck) -> str:
    measured = [c for c in recheck.checks if c.generation_margin is not None]
    if not measured:
        return "no generation margin measured"
    weakest = min(measured, key=lambda c: c.generation_margin)
    return (
        f"{len(recheck.fragile)} fragile under this path (generation margin below {recheck.fragile_below:g}); "
        f"smallest margin {weakest.generation_margin:.4f} ({weakest.row.get('span_id')} token "
        f"{weakest.generation_margin_at})"
    )


def recheck_lines(recheck) -> list[str]:
    """Every disagreement, then the totals: reproduced on which path against the scan's, fragile."""
    where = path_label(recheck.path)
    rows = [c.row for c in recheck.checks]
    lines = [_disagreement(c, where) for c in recheck.disagreements]
    good = len(recheck.checks) - len(recheck.disagreements)
    lines.append(
        f"{good}/{len(recheck.checks)} flagged spans reproduce under {where} "
        f"(the scan verified with {scan_label(rows)})"
    )
    lines.append(_margins_line(recheck))
    return lines


def _published_line(digest: str, expect: str | None, signer: str | None) -> str:
    """What tied the manifest to its publisher: --expect, --signer, or nothing (a rewritten manifest,
    its files re-hashed, passes every other check)."""
    checked = [
        what
        for what, given in (
            ("the expected digest (--expect)", expect),
            (f"its signature by {signer}", signer),
        )
        if given
    ]
    if checked:
        return f"manifest.json sha256 {digest}, checked against {' and '.join(checked)}"
    return (
        f"manifest.json sha256 {digest}: NOT checked against a published figure; a rewritten manifest "
        "passes the checks above, so compare it with the figure published with the evidence "
        "(--expect SHA256) or check its signature (--signer KEY.pub)"
    )


def completeness_line(bundle: str) -> str:
    """Whether the scan was complete when the bundle was written, and its denominators."""
    import json
    from pathlib import Path

    from scanner.errors import InputError
    from scanner.results.bundle import DENOMINATORS
    from scanner.results.denominators import denominators_line
    from scanner.results.verify import bundle_file

    try:  # through the confinement rule: a link named denominators.json must not read a file elsewhere
        counts = json.loads(bundle_file(Path(bundle), DENOMINATORS).read_text(encoding="utf-8"))
        line = denominators_line(counts["run"])
    except (OSError, ValueError, KeyError, TypeError, InputError):
        return f"the bundle has no readable {DENOMINATORS}: it does not say whether its scan was complete"
    if counts.get("complete") is True:
        return f"the scan was complete when exported; {line}"
    return (
        f"PARTIAL: the scan was unfinished when exported (phase {counts.get('phase')}, "
        f"{counts.get('shards_done')} of {counts.get('shards_total')} shards): the evidence covers its finished "
        f"part only; {line}"
    )


def verify_lines(
    recheck, table=None, bundle: str | None = None, expect: str | None = None, signer: str | None = None
) -> list[str]:
    """A bundle's problems first (files, model, recipe), then the re-check's lines."""
    lines = [f"PROBLEM {problem}" for problem in recheck.problems]
    if bundle is not None:
        from pathlib import Path

        from scanner.results.bundle import MANIFEST, sha256_bytes
        from scanner.results.verify import bundle_file

        digest = sha256_bytes(bundle_file(Path(bundle), MANIFEST).read_bytes())
        state = (
            f"{len(recheck.problems)} problem(s) in the bundle"
            if recheck.problems
            else "bundle intact: every file matches its manifest, the model's files match model.json"
        )
        lines += [state, _published_line(digest, expect, signer), completeness_line(bundle)]
    lines += recheck_lines(recheck)
    if table is not None:  # a run's: the flagged spans by whose words their prompts hold, and the counts
        from scanner.results.denominators import denominators, denominators_line
        from scanner.results.verify import prompt_source_line

        failures = [check.row for check in recheck.disagreements]
        lines += [
            prompt_source_line(table, failures),
            denominators_line(denominators(table)),
            calibration_line(table),
        ]
    return lines


def verify_main(
    run,
    bundle: str | None,
    model: str | None,
    dtype: str | None,
    verify_engine: str | None,
    fragile_margin: float | None,
    expect: str | None = None,
    signer: str | None = None,
) -> int:
    """Run the re-check, print it, return the exit code (0: all reproduce and the bundle is intact; 3: not)."""
    from scanner.errors import require
    from scanner.results.verify import verify_bundle, verify_run

    if bundle is not None:
        require(run is None, "pass RUN_DIR or --bundle DIR, not both")
        require(model is not None, "--bundle needs --model: the model files to check the evidence against")
        recheck = verify_bundle(bundle, model, dtype, verify_engine, fragile_margin, expect, signer)
        lines = verify_lines(recheck, bundle=bundle, expect=expect, signer=signer)
    else:
        require(expect is None and signer is None, "--expect and --signer check a bundle; pass --bundle DIR")
        recheck = verify_run(str(run.path), model, dtype, verify_engine, fragile_margin)
        lines = verify_lines(recheck, table=run.read_results())
    for line in lines:  # ids, names and prompts are the bundle's or the corpus's: printed terminal-safe
        echo(line)
    return 0 if recheck.ok else 3


def export_bundle(
    run,
    bundle: str,
    tau: str,
    calibrated: bool,
    model: str | None,
    sign: str | None = None,
    leave_out_shared: bool = False,
) -> None:
    from pathlib import Path

    from scanner.results.bundle import MANIFEST, write_bundle

    done = write_bundle(
        run, bundle, tau=tau, calibrated=calibrated, model=model, sign=sign, leave_out_shared=leave_out_shared
    )
    signed = f", signed ({MANIFEST}.sig)" if done["signed"] else ""
    echo(
        f"bundle of {done['rows']} rows written to {bundle} ({done['files']} files{signed}); {MANIFEST} sha256 "
        f"{done['manifest_sha256']} (publish it with the evidence); re-check it with: python "
        f"{Path(bundle) / 'recheck.py'} --model MODEL --expect {done['manifest_sha256']}"
    )
    if not done["complete"]:
        echo(
            "warning: the scan is unfinished; the bundle says so (denominators.json) and covers its "
            "finished part only",
            err=True,
        )
