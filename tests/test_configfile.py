"""`--config FILE` and `acr-scan config RUN`: a file's keys become the command's options (dashes or
underscores, its argument too), the command line overrides them, an unknown key or a wrong type stops the
command with exit 2 before anything runs, and a run's configuration printed as a file and scanned again
gives the same run_config.json."""

from __future__ import annotations

import json
import tomllib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

import scanner
from scanner.cli.configfile import FIELDS, NOT_RECORDED, toml_string
from scanner.cli.main import cli as group
from scanner.config import CorpusConfig, GCGConfig, ModelConfig, ScanConfig, SearchConfig
from scanner.errors import InputError
from scanner.studies.tiny import salad


def params(tmp_path, name: str, text: str, *args: str) -> dict:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return group.commands[name].make_context(name, ["--config", str(path), *args]).params


def test_the_files_keys_are_option_names_and_the_command_line_overrides_them(tmp_path):
    text = (
        'corpus = "c.parquet"\nmodel = "m"\nout = "r"\nspan-tokens = 12\nsearch_budget = "2h"\ntighten = true\n'
        "anchors = false\naudit-sample = 16\ntau = 2\n"
    )
    o = params(tmp_path, "scan", text, "--span-tokens", "16")
    assert (o["corpus"], o["model"], o["out"], o["search_budget"], o["tighten"], o["anchors"]) == (
        "c.parquet",
        "m",
        "r",
        "2h",
        True,
        False,
    )
    assert (
        o["span_tokens"] == 16 and o["audit_sample"] in ("16", "0") and o["tau"] == 2.0
    )  # ACR_AUDIT_SAMPLE wins
    assert params(tmp_path, "scan", text, "other.parquet")["corpus"] == "other.parquet"
    plan = params(tmp_path, "plan", 'model = "m"\nout = "p"\nsample = 0.1\njson = true\n', "c.parquet")
    assert (plan["sample"], plan["as_json"]) == ("0.1", True)
    compare = params(tmp_path, "compare", 'run_dir = "a"\nmodel = "b"\nout = "c"\ntighten = true\n')
    assert (compare["run_dir"], compare["model"], compare["tighten"]) == ("a", "b", True)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'serch-budget = "2h"',
            r"'serch-budget' is not an option of acr-scan scan; did you mean 'search-budget'\?",
        ),
        (
            'span-tokens = "32"',
            r"span-tokens = \"32\" is a string; span-tokens takes a whole number, e.g. span-tokens = 8",
        ),
        ("span-tokens = 3.5", r"is a number; span-tokens takes a whole number"),
        ("tighten = 1", r"tighten = 1 is a whole number; tighten takes true or false"),
        ('screen-window = "fast"', r"'fast' is not one of 'auto', 'exact', 'stream'"),
        ("[search]\ntau = 1", r"\[search\] is a table; the file holds its keys at the top level"),
        ("model = \ntau = 1", r"is not valid TOML \(Invalid value \(at line 1, column 9\)\)"),
        ('config = "other.toml"', r"'config' is not an option"),
        ('keep-columns = ["a", "b"]', r"keep-columns is an array; keep-columns takes a string"),
        ('tau = 1\nsearch-budget = "2h"\nsearch_budget = "1h"', r"search-budget is set twice"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key_the_file_and_the_fix(tmp_path, text, message):
    with pytest.raises(InputError, match=message) as err:
        params(tmp_path, "scan", text)
    assert "scan.toml" in str(err.value)


def test_a_bad_file_exits_2_before_anything_runs(tmp_path):
    (tmp_path / "bad.toml").write_text('model = "m"\nserch-budget = "2h"\n')
    out = cli("scan", "--config", tmp_path / "bad.toml", "c.parquet", "--out", tmp_path / "run", cwd=tmp_path)
    assert out.returncode == 2 and "'serch-budget' is not an option" in out.stderr
    assert not (tmp_path / "run").exists()
    missing = cli("plan", "--config", tmp_path / "none.toml", "c.parquet", cwd=tmp_path)
    assert missing.returncode == 2 and "none.toml: no such file" in missing.stderr


def test_every_scan_option_is_exported_or_said_not_to_be_part_of_a_run():
    names = {p.name for p in group.commands["scan"].params if p.expose_value}
    assert names == set(FIELDS) | set(NOT_RECORDED) | {"steps", "keep_columns", "corpus"}


def test_strings_are_written_as_toml_that_reads_back_and_prints_safely():
    for text in ['say "hi" \\ there', "line\nbreak\x1b]0;title\x07", "caf\u00e9", "\u202eevil", "\x7f"]:
        written = toml_string(text)
        assert tomllib.loads(f"k = {written}")["k"] == text
        assert written.isprintable() and "\u202e" not in written


ROUND_TRIP = [
    "--span-tokens",
    "12",
    "--stride",
    "6",
    "--context-tokens",
    "16",
    "--docs-per-shard",
    "2",
    "--min-match-rate",
    "0.95",
    "--schedule",
    "paper",
    "--steps",
    "30",
    "--tau",
    "1.5",
    "--keep-columns",
    "title",
    "--no-anchors",
    "--tighten",
    "--search-budget",
    "2000steps",
    "--instruction",
    'Say "it":\n',
    "--calibration-prompts",
    "2",
    "--probe-size",
    "8",
    "--reject-after",
    "7",
    "--device",
    "cpu",
]


def small_corpus(path) -> str:
    # Unseen word salad: the screen finds no candidate, so a scan is a screen and a table.
    import random

    rng = random.Random(5)
    pq.write_table(
        pa.table(
            {"id": ["a", "b", "c"], "text": [salad(rng, 20) for _ in range(3)], "title": ["A", "B", "C"]}
        ),
        path,
    )
    return str(path)


def test_a_runs_configuration_as_a_file_scans_the_same_run_again(tiny_dir, tmp_path):
    corpus = small_corpus(tmp_path / "corpus.parquet")
    first = cli("scan", corpus, "--model", tiny_dir, "--out", tmp_path / "one", *ROUND_TRIP)
    assert first.returncode == 0, first.stderr
    exported = cli("config", tmp_path / "one")
    assert exported.returncode == 0 and exported.stderr == "", exported.stderr
    (tmp_path / "one.toml").write_text(exported.stdout, encoding="utf-8")
    assert tomllib.loads(exported.stdout)["keep-columns"] == "title"
    again = cli("scan", "--config", tmp_path / "one.toml", "--out", tmp_path / "two")
    assert again.returncode == 0, again.stderr
    saved = [json.loads((tmp_path / run / "run_config.json").read_text())["config"] for run in ("one", "two")]
    assert saved[0] == saved[1]
    assert saved[0]["search"]["paper_steps"] == 30 and saved[0]["prompt"]["instruction"] == 'Say "it":\n'
    assert cli("config", tmp_path / "two").stdout.split("\n", 1)[1] == exported.stdout.split("\n", 1)[1]


def test_settings_no_option_has_are_listed_and_warned_about(tiny_dir, tmp_path):
    corpus = small_corpus(tmp_path / "corpus.parquet")
    search = SearchConfig(shrink_steps=33, gcg=GCGConfig(patience=7))
    config = ScanConfig(
        corpus=CorpusConfig(path=corpus),
        model=ModelConfig(model=str(tiny_dir), device="cpu"),
        search=search,
        min_match_rate=0.95,
        audit_sample=0,
    )
    scanner.scan(config, tmp_path / "api")
    exported = cli("config", tmp_path / "api")
    assert exported.returncode == 0
    assert "search.shrink_steps = 33" in exported.stderr and "search.gcg.patience = 7" in exported.stderr
    assert "#   search.shrink_steps = 33" in exported.stdout
    tomllib.loads(exported.stdout)  # still a file scan reads


def test_the_export_refuses_a_folder_that_is_no_run(tmp_path):
    out = cli("config", tmp_path)
    assert out.returncode == 2 and "is not a run directory" in out.stderr
