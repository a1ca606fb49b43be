"""One run, one model, one corpus: what a relaunch, a compare or an export trusts is checked.

Each case is an attack or a mistake, met as a user or an attacker meets it, and what must hold against it:
- compare checks model B's bytes: a relaunch on a doctored B must not mix two Bs in one table, and its
  workers run the check a scan's workers run;
- run_config.json's hash covers the whole identity, not only its `config`: another corpus's fingerprint
  (or row counts, schema version, model digest) written by hand is refused;
- compare refuses another tokenizer whenever it cuts A's texts otherwise, other merges of the same
  vocabulary included;
- `export --bundle` checks RUN/model.json against the sealed digest: a hand-edited weight hash must not
  pass `verify --expect`;
- `scan --out` into a user's folder with results/ and logs/ is refused, and so is `compare --out` inside
  run A;
- compare: an empty --file names the file, `--spans ''` is refused, and a relaunch with other options
  names the option that changed.

One scan of one document (doc-0: its certificates settle the canary, no span searched) and one comparison
of two of its spans on a copy of the tiny model (--steps 10: seconds) are shared by every case; each case
damages a copy or is refused before a model loads."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.config import CorpusConfig, ModelConfig
from scanner.errors import InputError

SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "6",
    "--context-tokens",
    "16",
    "--min-match-rate",
    "0.8",
    "--steps",
    "10",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
    "--max-candidates",
    "0",
    "--calibration-prompts",
    "0",
    "--extend-tokens",
    "0",
]


@dataclass(frozen=True)
class Scanned:
    tiny: Path
    root: Path
    corpus: Path  # doc-0 of the demo
    other: Path  # doc-1 of the demo: another corpus of as many documents
    run: Path
    b: Path  # a copy of the tiny model: model B
    compared: Path  # run compared on B: two spans, one per unit
    spans: tuple[str, ...]


@pytest.fixture(scope="module")
def ctx(tiny_dir, tmp_path_factory) -> Scanned:
    root = tmp_path_factory.mktemp("identity38")
    demo = pq.read_table(demo_corpus(root / "demo.parquet"))
    corpus, other = root / "doc-0.parquet", root / "doc-1.parquet"
    pq.write_table(demo.slice(0, 1), corpus)
    pq.write_table(demo.slice(1, 1), other)
    run = root / "a"
    done = cli("scan", corpus, "--model", tiny_dir, "--out", run, *SCAN)
    assert done.returncode == 0, done.stderr
    spans = tuple(r["span_id"] for r in _two_spans(run))
    b = shutil.copytree(tiny_dir, root / "b")
    compared = root / "a-vs-b"
    # B named by a relative path: a copy of B and of the comparison in another folder is the same comparison
    done = cli(*compare_args(run, compared.name), cwd=root)
    assert done.returncode == 0, done.stderr
    return Scanned(Path(tiny_dir), root, corpus, other, run, b, compared, spans)


def compare_args(run: Path, out: str, *more) -> list:
    """The shared comparison's command, B as ./b, its two spans one per unit."""
    spans = ",".join(r["span_id"] for r in _two_spans(run))
    return ["compare", run, "--model", "b", "--out", out, "--spans", spans, "--unit-size", "1", *more]


def _two_spans(run: Path) -> list[dict]:
    """A memorized span of the run and another (two units of one span each)."""
    results = pq.read_table(run / "results").to_pylist()
    return [
        next(r for r in results if r["status"] == "memorized"),
        next(r for r in results if r["status"] != "memorized"),
    ]


def copied(c: Scanned, tmp: Path) -> Path:
    """The shared comparison and its B copied into `tmp` (run from there: the same comparison)."""
    shutil.copytree(c.b, tmp / "b")
    return shutil.copytree(c.compared, tmp / "cmp")


def assert_clean(result, code: int, *words: str) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == code, (result.returncode, out[-3000:])
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    for word in words:
        assert word in out, (word, out[-3000:])


def flip_last_byte(weights: Path) -> None:
    """Doctored weights of the same size (they still load)."""
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))


def edited(run: Path, where: Path, **values) -> Path:
    """A copy of the run whose run_config.json says `values` (top-level keys), its hash left as it was."""
    copy = shutil.copytree(run, where)
    saved = json.loads((copy / "run_config.json").read_text())
    (copy / "run_config.json").write_text(json.dumps({**saved, **values}))
    return copy


def fingerprint(corpus: Path) -> str:
    from scanner.stages.read import open_corpus

    return open_corpus(CorpusConfig(path=str(corpus))).fingerprint()


# --- the attacks: each returns the CLI's answer (and leaves what a check below reads) -----------------


def b_doctored_after_a_kill(c: Scanned, tmp: Path):
    """Severe: compare killed after its first unit, B's weights replaced by a doctored copy of the same
    size, relaunched. Must not: resume and measure unit 0 on one B and unit 1 on another in one table."""
    out = copied(c, tmp)
    (out / "compare" / "done" / "00001").unlink()  # the kill: unit 1 never committed
    for name in ("compare.parquet", "compare_summary.json"):
        (out / name).unlink()
    flip_last_byte(tmp / "b" / "model.safetensors")
    return cli(*compare_args(c.run, "cmp"), cwd=tmp)


def one_b_only(c: Scanned, tmp: Path) -> None:
    """The refused relaunch committed nothing: unit 1 stays pending, no table of two Bs is written."""
    assert sorted(os.listdir(tmp / "cmp" / "compare" / "done")) == ["00000"]
    assert not (tmp / "cmp" / "compare.parquet").exists()


def run_config_sealed_field(field, value):
    def attack(c: Scanned, tmp: Path):
        """Severe: a key of run_config.json outside `config` edited by hand, its hash left alone. Must not
        be believed: the hash covers every key of the run's identity, not only `config`."""
        value_now = fingerprint(c.other) if value == "OTHER" else value
        return cli("export", edited(c.run, tmp / "run", **{field: value_now}), "--bundle", tmp / "bundle")

    return attack


def relaunch_on_another_corpus(c: Scanned, tmp: Path):
    """Severe: the fingerprint set to another corpus's and the scan relaunched on that corpus. Must not:
    accept the run as complete and export doc-0's memorized rows under doc-1's identity."""
    run = edited(c.run, tmp / "run", corpus_fingerprint=fingerprint(c.other))
    return cli("scan", c.other, "--model", c.tiny, "--out", run, *SCAN)


def compare_of_an_edited_run(c: Scanned, tmp: Path):
    run = edited(c.run, tmp / "run", num_docs=2)
    return cli("compare", run, "--model", c.b, "--out", tmp / "cmp", "--spans", c.spans[0])


def b_of_other_merges(c: Scanned, tmp: Path):
    """Medium: B's tokenizer of A's vocabulary with half its merges gone. Must be refused before any work,
    not accepted to fail every span ("B's tokenizer cuts the document", exit 4) at every relaunch."""
    b = shutil.copytree(c.b, tmp / "b")
    spec = json.loads((b / "tokenizer.json").read_text())
    merges = spec["model"]["merges"]
    spec["model"]["merges"] = merges[: len(merges) // 2]
    (b / "tokenizer.json").write_text(json.dumps(spec))
    return cli("compare", c.run, "--model", b, "--out", tmp / "cmp")


def hand_edited_model_record(c: Scanned, tmp: Path):
    """Medium: RUN/model.json's weight hash edited (to claim other weights). Must not be copied into a
    bundle that would then pass `verify --expect` against a model of those weights."""
    run = shutil.copytree(c.run, tmp / "run")
    record = json.loads((run / "model.json").read_text())
    weight = next(f for f in record["files"] if f["role"] == "weight")
    weight["sha256"] = "0" * 64
    (run / "model.json").write_text(json.dumps(record))
    return cli("export", run, "--bundle", tmp / "bundle")


def user_folder_with_results_and_logs(c: Scanned, tmp: Path):
    """Medium: --out a user's folder whose results/ and logs/ hold the user's files. Must not: mix the
    scan's parts with them."""
    out = tmp / "mine"
    for name in ("results", "logs"):
        (out / name).mkdir(parents=True)
        (out / name / "mine.txt").write_text("the user's own")
    return cli("scan", c.corpus, "--model", c.tiny, "--out", out, *SCAN)


def compare_out_inside_run_a(c: Scanned, tmp: Path):
    """Medium: `compare --out RUN_A/cmp`. Must not: write a comparison into the scan's folder."""
    return cli("compare", c.run, "--model", c.b, "--out", c.run / "cmp", "--spans", c.spans[0])


def empty_file(c: Scanned, tmp: Path):
    (tmp / "empty.txt").write_text("\n\n")
    return cli("compare", c.run, "--model", c.b, "--out", tmp / "cmp", "--file", tmp / "empty.txt")


def empty_spans(c: Scanned, tmp: Path):
    """Low: `--spans ''`. Must not: compare 0 spans and exit 0."""
    return cli("compare", c.run, "--model", c.b, "--out", tmp / "cmp", "--spans", "")


def relaunch_with_an_instruction(c: Scanned, tmp: Path):
    """Low: a relaunch with another option. Must name the option that changed, not "(changed: scan)"."""
    copied(c, tmp)
    return cli(*compare_args(c.run, "cmp", "--instruction", "Do not quote."), cwd=tmp)


def no_comparison_folder(c: Scanned, tmp: Path) -> None:
    assert not (tmp / "cmp").exists() and not (c.run / "cmp").exists()


def users_files_untouched(c: Scanned, tmp: Path) -> None:
    assert sorted(os.listdir(tmp / "mine")) == ["logs", "results"]
    assert os.listdir(tmp / "mine" / "results") == ["mine.txt"] and os.listdir(tmp / "mine" / "logs") == [
        "mine.txt"
    ]


CASES = {  # name: (attack, exit code, words the answer holds, what it must have left as it was)
    "compare relaunched on a doctored B": (
        b_doctored_after_a_kill,
        2,
        (
            "its files are not the bytes this comparison measured as model B",
            "model.safetensors (weight): other bytes",
            "restore the model's files, or compare into a new --out",
        ),
        one_b_only,
    ),
    "run_config corpus_fingerprint of another corpus": (
        run_config_sealed_field("corpus_fingerprint", "OTHER"),
        2,
        ("run_config.json was edited after the run started", "corpus fingerprint"),
        None,
    ),
    "run_config num_docs": (
        run_config_sealed_field("num_docs", 7),
        2,
        ("was edited after the run started",),
        None,
    ),
    "run_config docs_per_shard": (
        run_config_sealed_field("docs_per_shard", 7),
        2,
        ("was edited after the run started",),
        None,
    ),
    "run_config schema_version": (
        run_config_sealed_field("schema_version", "1"),
        2,
        ("was edited after the run started",),
        None,
    ),
    "run_config model_files": (
        run_config_sealed_field("model_files", "0" * 64),
        2,
        ("was edited after the run started",),
        None,
    ),
    "relaunch on the corpus whose fingerprint was written in": (
        relaunch_on_another_corpus,
        2,
        ("was edited after the run started",),
        None,
    ),
    "compare of a run whose row count was edited": (
        compare_of_an_edited_run,
        2,
        ("was edited after the run started",),
        no_comparison_folder,
    ),
    "compare with B of A's vocabulary and other merges": (
        b_of_other_merges,
        2,
        ("tokenizer is not run A's", "sample texts into other token ids"),
        no_comparison_folder,
    ),
    "export of a hand-edited model.json": (
        hand_edited_model_record,
        2,
        ("is not the record of the model this run scanned", "restore model.json as the scan wrote it"),
        None,
    ),
    "scan --out a user folder with results/ and logs/": (
        user_folder_with_results_and_logs,
        2,
        ("holds files that are not a run directory's", "'logs', 'results'", "pass a new --out"),
        users_files_untouched,
    ),
    "compare --out inside run A": (
        compare_out_inside_run_a,
        2,
        ("is inside run A", "pass a folder outside it"),
        no_comparison_folder,
    ),
    "compare --file of an empty file": (
        empty_file,
        2,
        ("empty.txt holds no target text", "it is empty"),
        no_comparison_folder,
    ),
    "compare --spans ''": (empty_spans, 2, ("--spans names no span_id",), no_comparison_folder),
    "compare relaunched with another option": (
        relaunch_with_an_instruction,
        2,
        ('changed: scan.prompt.instruction null -> "Do not quote."',),
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_a_run_trusts_is_checked(ctx, tmp_path, case):
    attack, code, words, unchanged = CASES[case]
    assert_clean(attack(ctx, tmp_path), code, *words)
    if unchanged is not None:
        unchanged(ctx, tmp_path)


def test_a_compare_worker_checks_the_b_it_loaded(ctx, tmp_path):
    """As a scan's worker does: a Ray actor whose copy of B is not the recorded bytes measures nothing."""
    from scanner.run.compare import CompareWorker, compare_config

    out = shutil.copytree(ctx.compared, tmp_path / "cmp")
    b = shutil.copytree(ctx.b, tmp_path / "b")  # the actor's own copy, on its own disk
    flip_last_byte(b / "model.safetensors")
    worker = CompareWorker(compare_config(str(ctx.run), ModelConfig(model=str(b), device="cpu")), str(out))
    with pytest.raises(InputError, match=r"model.safetensors \(weight\): other bytes"):
        worker.setup()
    worker.close()


def test_a_b_whose_tokenizer_cuts_as_a_does_is_accepted_and_the_run_sealed(ctx):
    """The other side of the checks: B, a copy of A (its tokenizer cuts A's spans alike), was compared and
    recorded by its bytes; the run's identity seals the digest of its model.json and its corpus."""
    from scanner.engine.identity import files_digest
    from scanner.storage.rundir import run_hash

    saved = json.loads((ctx.run / "run_config.json").read_text())
    record = json.loads((ctx.run / "model.json").read_text())
    assert saved["model_files"] == files_digest(record["files"]) and saved["run_hash"] == run_hash(saved)
    assert saved["corpus_fingerprint"] == fingerprint(ctx.corpus)
    assert json.loads((ctx.compared / "model.json").read_text())["files"] == record["files"]  # B's own record
    b = json.loads((ctx.compared / "compare_summary.json").read_text())["models"]["b"]
    assert b["model_hash"] == files_digest(record["files"])  # B known by its bytes, not its path
