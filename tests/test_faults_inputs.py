"""Faults in the inputs, met through the CLI as a user meets them: a damaged --model, Parquet files that
are damaged behind intact magic bytes or hold text that is not UTF-8, an `acr --file` that is not JSON
Lines or not UTF-8. Each case asserts the exit code, that the message names the file (row group, row)
and the fix, and what is left behind: no run directory when the fault is found up front, a resumable
one when it is found mid-scan; the same command then completes once the input is fixed.

Kept fast: a six-document corpus of unseen text, no search (--max-candidates 0), and every fault found
up front fails before the model loads."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.studies.tiny import salad

SCAN = [
    "--span-tokens",
    "16",
    "--context-tokens",
    "8",
    "--max-candidates",
    "0",
    "--docs-per-shard",
    "3",
    "--device",
    "cpu",
    "--threads",
    "1",
]
DOCS = 6  # two row groups of three rows: shard 1 is row group 1
KEY = ["doc_id", "span_id", "token_start", "token_end", "text", "status", "reason", "greedy_match_rate"]


def texts(seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [salad(rng, 24).encode() for _ in range(DOCS)]


def write_corpus(path: Path, raw: list[bytes]) -> Path:
    """A corpus whose text column is written byte for byte (a string column; nothing checks UTF-8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    column = pa.array(raw, pa.binary()).view(pa.string())
    pq.write_table(
        pa.table({"id": [f"d{i}" for i in range(len(raw))], "text": column}), path, row_group_size=3
    )
    return path


def scan(corpus: Path, model: Path, out: Path):
    return cli("scan", corpus, "--model", model, "--out", out, *SCAN)


def rows(out: Path) -> list[dict]:
    return sorted(
        pq.read_table(out / "results", columns=KEY).to_pylist(), key=lambda r: (r["doc_id"], r["token_start"])
    )


def assert_fails(result, code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    for word in words:
        assert word in result.stderr, (word, result.stderr[-2000:])


# --- damaging a model: each takes a copy of the tiny model directory and returns the --model to pass --


def truncate_weights(model: Path) -> Path:
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:300_000])
    return model


def garble_tokenizer(model: Path) -> Path:
    (model / "tokenizer.json").write_text('{"version": "1.0", "model": {garbled')
    return model


def delete_tokenizer(model: Path) -> Path:
    (model / "tokenizer.json").unlink()
    return model


def garble_config(model: Path) -> Path:
    (model / "config.json").write_text('{"model_type": "llama", ')
    return model


def delete_weights(model: Path) -> Path:
    (model / "model.safetensors").unlink()
    return model


def bogus_gguf(model: Path) -> Path:
    path = model / "model.gguf"
    path.write_text("this is a text file renamed to .gguf\n")
    return path


def truncated_gguf(model: Path) -> Path:
    import gguf

    path = model / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.ones((64, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path.write_bytes(path.read_bytes()[:-4000])
    return path


MODEL_FAULTS = [  # (damage, words the message must hold: the file and the fix)
    (truncate_weights, ["model.safetensors", "cut short", "download or copy it again"]),
    (garble_tokenizer, ["tokenizer.json", "does not load as a tokenizer", "copy the model's tokenizer.json"]),
    (delete_tokenizer, ["no tokenizer in the directory", "copy the model's tokenizer.json"]),
    (garble_config, ["config.json", "is not valid JSON", "restore it from the model's source"]),
    (delete_weights, ["no weights in the directory", "copy the model's weight files"]),
    (bogus_gguf, ["model.gguf", "is not a GGUF file", "b'this'", "pass a .gguf written by"]),
    (truncated_gguf, ["model.gguf", "does not fit the file's size", "download or copy it again"]),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.parquet", texts())


def damaged_copy(tiny_dir: Path, where: Path, damage) -> Path:
    model = where / "model"
    shutil.copytree(tiny_dir, model)
    return damage(model)


@pytest.mark.parametrize("damage, words", MODEL_FAULTS, ids=[damage.__name__ for damage, _ in MODEL_FAULTS])
def test_a_bad_model_exits_2_naming_the_file_before_it_loads(tiny_dir, tmp_path, damage, words):
    """Through `acr`, which checks before importing torch (a fraction of a second a case); `scan` runs the
    same check before its run directory exists: clean_run below shows it there."""
    model = damaged_copy(tiny_dir, tmp_path, damage)
    assert_fails(cli("acr", "--model", model, "hello"), 2, f"--model {model}", *words)


def shard_with_index(model: Path) -> Path:
    """An index naming two shards, one of them missing."""
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return model


def truncated_torch_bin(model: Path) -> Path:
    import torch

    (model / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(64, 64)}, model / "pytorch_model.bin")
    (model / "pytorch_model.bin").write_bytes((model / "pytorch_model.bin").read_bytes()[:5000])
    return model


def garble_weights_header(model: Path) -> Path:
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:20] = b"not json at!"
    weights.write_bytes(bytes(data))
    return model


def garble_tokenizer_config(model: Path) -> Path:
    (model / "tokenizer_config.json").write_text("[1, 2")
    return model


@pytest.mark.parametrize(
    "damage, words",
    [
        (
            shard_with_index,
            [
                "model.safetensors.index.json",
                "names 1 weight file(s) the directory lacks",
                "model-00002-of-00002.safetensors",
                "copy every shard",
            ],
        ),
        (
            truncated_torch_bin,
            ["pytorch_model.bin", "without its central directory", "download or copy it again"],
        ),
        (
            garble_weights_header,
            ["model.safetensors", "corrupt safetensors header", "download or copy it again"],
        ),
        (garble_tokenizer_config, ["tokenizer_config.json", "is not valid JSON", "restore it"]),
    ],
    ids=lambda v: getattr(v, "__name__", "words"),
)
def test_more_model_damage_is_named_by_the_check_in_process(tiny_dir, tmp_path, damage, words):
    """The same check as above, called directly (milliseconds a case) for the rarer layouts."""
    from scanner.config import ModelConfig
    from scanner.engine.check import check_model
    from scanner.errors import InputError

    model = damaged_copy(tiny_dir, tmp_path, damage)
    with pytest.raises(InputError) as err:
        check_model(ModelConfig(model=str(model)))
    for word in words:
        assert word in str(err.value), str(err.value)


@pytest.fixture(scope="module")
def clean_run(tiny_dir, corpus, tmp_path_factory) -> Path:
    """A bad model (exit 2, no run directory left), then the corrected command into the same --out: it
    completes, an uninterrupted run of the corpus that other tests compare with."""
    root = tmp_path_factory.mktemp("clean")
    out = root / "run"
    model = damaged_copy(tiny_dir, root, truncate_weights)
    assert_fails(scan(corpus, model, out), 2, f"--model {model}", *dict(MODEL_FAULTS)[truncate_weights])
    assert not out.exists()
    done = scan(corpus, tiny_dir, out)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_the_corrected_model_command_completes_in_the_same_run_directory(clean_run):
    table = rows(clean_run)
    assert {r["doc_id"] for r in table} == {f"d{i}" for i in range(DOCS)}
    # --max-candidates 0: the screen's candidates stay not_searched, saying why
    assert {r["status"] for r in table} <= {"screened_out", "not_searched"}
    assert all("--max-candidates" in r["reason"] for r in table if r["status"] == "not_searched")


def test_weights_that_pass_the_header_check_but_not_the_loader_are_an_input_error(tiny_dir, tmp_path):
    """In process (the CLI maps InputError to exit 2 above): a CLI load would cost a torch import."""
    from scanner.config import ModelConfig
    from scanner.engine.check import check_model
    from scanner.engine.loading import load_model
    from scanner.errors import InputError

    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(
        json.dumps({**config, "intermediate_size": 2 * config["intermediate_size"]})
    )
    check_model(ModelConfig(model=str(model)))  # the headers are intact: only loading finds the mismatch
    with pytest.raises(
        InputError,
        match=rf"--model {model}: transformers cannot load it .*config.json and "
        "the weights must belong together",
    ):
        load_model(ModelConfig(model=str(model), device="cpu"))


# --- damaged corpora ----------------------------------------------------------------------------------


def garble_footer(file: Path) -> None:
    data = bytearray(file.read_bytes())
    length = int.from_bytes(data[-8:-4], "little")
    data[-8 - length + 4 : -8 - length + 40] = b"\xab" * 36  # magic and length intact, the thrift garbled
    file.write_bytes(bytes(data))


def cut_data(file: Path) -> None:
    """The data lost, the footer intact: its offsets now point past the end of the file."""
    data = file.read_bytes()
    footer = 8 + int.from_bytes(data[-8:-4], "little")
    file.write_bytes(data[:4] + data[-footer:])


def garble_page(file: Path) -> None:
    """The header of row group 1's text page overwritten: found only when that row group is read."""
    chunk = pq.read_metadata(file).row_group(1).column(1)
    data = bytearray(file.read_bytes())
    data[chunk.data_page_offset : chunk.data_page_offset + 12] = b"\xff" * 12
    file.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, words",
    [
        (garble_footer, ["corpus.parquet", "corrupt Parquet footer", "restore it from its source"]),
        (cut_data, ["corpus.parquet", "row group", "past the end of the", "restore it from its source"]),
    ],
    ids=["corrupt_footer", "data_cut_out"],
)
def test_a_damaged_footer_exits_2_before_the_model_loads(tiny_dir, tmp_path, damage, words):
    corpus = write_corpus(tmp_path / "c" / "corpus.parquet", texts())
    damage(corpus)
    assert corpus.read_bytes()[:4] == corpus.read_bytes()[-4:] == b"PAR1"
    out = tmp_path / "run"
    assert_fails(scan(corpus, tiny_dir, out), 2, *words)
    assert not out.exists()


def test_a_non_utf8_row_is_skipped_and_a_damaged_page_exits_2_then_resumes(tiny_dir, clean_run, tmp_path):
    """One corpus, two faults: row 1 of row group 0 is not UTF-8 (in the source itself), and the copy
    scanned has a damaged page in row group 1. The first shard commits with the row skipped and named,
    the second stops the scan naming its row group; restored from the source, the scan resumes."""
    raw = texts()
    raw[1] = raw[1][:10] + b"\xff\xfe" + raw[1][10:]
    folder = tmp_path / "corpus"
    corpus = write_corpus(folder / "corpus.PARQUET", raw)  # the extension in capitals is Parquet too
    for hidden in ("_SUCCESS", "_common.parquet", ".corpus.parquet.crc", ".tmp.Parquet"):
        (folder / hidden).write_text("not parquet: skipped as pyarrow.dataset skips it")
    source = corpus.read_bytes()
    garble_page(corpus)
    out = tmp_path / "run"
    assert_fails(
        scan(folder, tiny_dir, out),
        2,
        "'corpus.PARQUET' row group 1 cannot be read",
        "restore the file from its source or a backup and relaunch the same command",
    )
    screened = sorted(p.name for p in (out / "screen" / "done").iterdir())
    assert screened == ["00000"], "the shard before it is kept (screened, phase 1)"
    corpus.write_bytes(source)
    again = scan(folder, tiny_dir, out)
    assert again.returncode == 0, again.stderr[-2000:]
    table = rows(out)
    bad = [r for r in table if r["doc_id"] == "d1"]
    assert len(bad) == 1 and bad[0]["status"] == "skipped", bad
    for word in (
        "'corpus.PARQUET' row group 0, row 1",
        "column 'text' is not valid UTF-8",
        "byte 0xff",
        "re-encode the text as UTF-8",
    ):
        assert word in bad[0]["reason"], bad[0]["reason"]

    def others(table):  # every other row as in an uninterrupted run (span ids may name the file: left out)
        return [{k: v for k, v in r.items() if k != "span_id"} for r in table if r["doc_id"] != "d1"]

    assert others(table) == others(rows(clean_run))


# --- acr --file ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, words",
    [
        (
            "t.jsonl",
            b'{"text": "one"}\n\n{"text": "two"}\nnot json\n',
            ["t.jsonl line 4: not JSON", 'like {"text": "..."}'],
        ),
        ("t.jsonl", b'{"text": "one"}\n["text"]\n', ["t.jsonl line 2: expected one JSON object per line"]),
        (
            "t.jsonl",
            b'{"text": "one"}\n{"text": "caf\xe9"}\n',
            ["t.jsonl line 2: not valid UTF-8", "byte 0xe9 at column 14", "save the file as UTF-8"],
        ),
        (
            "t.txt",
            b"first\nsecond\ncaf\xe9 third\n",
            ["t.txt line 3: not valid UTF-8", "column 4", "save the file as UTF-8"],
        ),
    ],
    ids=["not_json", "not_an_object", "jsonl_not_utf8", "txt_not_utf8"],
)
def test_a_bad_target_file_exits_2_naming_the_line(tiny_dir, tmp_path, name, content, words):
    file = tmp_path / name
    file.write_bytes(content)
    assert_fails(cli("acr", "--model", tiny_dir, "--file", file), 2, f"--file {file}", *words)


# --- the read stage on its own (in process: milliseconds) ----------------------------------------------


@pytest.mark.parametrize("text_type", ["string", "large_string", "string_view", "dictionary"])
def test_every_text_type_reads_a_bad_row_as_a_problem_in_both_read_paths(tmp_path, text_type):
    from scanner.config import CorpusConfig
    from scanner.stages.read import open_corpus

    raw = pa.array([b"one", b"tw\xc3o", b"three", b"four", None], pa.binary()).view(pa.string())
    text = raw.dictionary_encode() if text_type == "dictionary" else raw.cast(getattr(pa, text_type)())
    keep = pa.array([b"k0", b"k1", b"k2", b"\xe9", b"k4"], pa.binary()).view(pa.string())
    table = pa.table({"id": [f"d{i}" for i in range(5)], "text": text, "k": keep})
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=2)
    corpus = open_corpus(CorpusConfig(path=str(tmp_path / "c.parquet"), keep_columns=("k",)))
    docs = list(corpus.iter_documents(batch_rows=1))
    assert docs == corpus.documents(0, 5)
    assert [d.text for d in docs] == ["one", None, "three", "four", None]
    assert [d.extra["k"] for d in docs] == ["k0", "k1", "k2", None, "k4"]
    assert [d.problem is None for d in docs] == [True, False, True, False, True]  # a null text is no problem
    assert docs[1].problem.startswith(
        "'c.parquet' row group 0, row 1 (0-based, counted in the file): column "
        "'text' is not valid UTF-8 (byte 0xc3 at byte 2)"
    )
    assert docs[3].problem.startswith(
        "'c.parquet' row group 1, row 3 (0-based, counted in the file): column "
        "'k' is not valid UTF-8 (byte 0xe9 at byte 0)"
    )


def test_an_id_that_is_not_utf8_is_refused_at_open_naming_its_place(tmp_path):
    from scanner.config import CorpusConfig
    from scanner.errors import InputError
    from scanner.stages.read import open_corpus

    ids = pa.array([b"a", b"b", b"c", b"\xff", b"e\xfe"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": ids, "text": ["t"] * 5}), tmp_path / "c.parquet", row_group_size=2)
    with pytest.raises(
        InputError,
        match=r"id column 'id' in .*c.parquet' row group 1, row 3 .* is not valid "
        r"UTF-8 \(byte 0xff at byte 0\), 2 such id\(s\) in the file; re-encode",
    ):
        open_corpus(CorpusConfig(path=str(tmp_path / "c.parquet")))


@pytest.mark.parametrize(
    "options, fix",
    [
        (["--text-column", "body"], "pass --text-column with one of them"),
        (["--id-column", "key"], "pass --id-column with one of them"),
        (["--keep-columns", "id,genre"], "drop 'genre' from --keep-columns or name one of them there"),
    ],
    ids=["text-column", "id-column", "keep-columns"],
)
def test_a_missing_corpus_column_names_the_option_that_asked_for_it(tmp_path, options, fix):
    """Found when the corpus is opened, before the model loads: no run directory is left."""
    corpus = write_corpus(tmp_path / "c.parquet", texts())
    got = cli(
        "scan", corpus, "--model", tmp_path / "no-model-needed", "--out", tmp_path / "run", *SCAN, *options
    )
    assert_fails(got, 2, f"not found in '{corpus}'", "columns are [id, text]", fix)
    assert not (tmp_path / "run").exists()
