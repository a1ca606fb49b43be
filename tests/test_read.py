"""Read stage: real Parquet files, every validation error a user can hit, projection and fingerprints."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scanner.config import CorpusConfig
from scanner.errors import InputError
from scanner.stages.read import Corpus, Document, open_corpus


def write(path, **columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def docs(path, **options) -> list[Document]:
    return list(open_corpus(CorpusConfig(path=str(path), **options)).iter_documents())


def fails(path, *words, **options):
    with pytest.raises(InputError) as err:
        open_corpus(CorpusConfig(path=str(path), **options))
    message = str(err.value)
    for word in words:
        assert word in message, message
    return message


def test_single_file_with_id_column(tmp_path):
    file = write(tmp_path / "c.parquet", id=["a", "b"], text=["one", None])
    corpus = open_corpus(CorpusConfig(path=str(file)))
    assert isinstance(corpus, Corpus) and corpus.num_rows == 2 and corpus.id_column == "id"
    assert list(corpus.iter_documents()) == [
        Document(doc_id="a", text="one", extra={}, row="c.parquet:0"),
        Document(doc_id="b", text=None, extra={}, row="c.parquet:1"),
    ]


def test_id_auto_detection_prefers_id_then_doc_id_then_file_row(tmp_path):
    both = write(tmp_path / "both" / "x.parquet", doc_id=["d1"], id=["i1"], text=["t"])
    assert [d.doc_id for d in docs(both)] == ["i1"]
    only_doc_id = write(tmp_path / "doc" / "x.parquet", doc_id=["d1", "d2"], text=["t", "u"])
    assert [d.doc_id for d in docs(only_doc_id)] == ["d1", "d2"]
    none = write(tmp_path / "none" / "x.parquet", text=["t", "u", "v"])
    assert [d.doc_id for d in docs(none)] == ["x.parquet:0", "x.parquet:1", "x.parquet:2"]
    assert [d.doc_id for d in docs(both, id_column="doc_id")] == ["d1"]


def test_integer_ids_become_strings(tmp_path):
    file = write(tmp_path / "c.parquet", id=[7, 8], text=["a", "b"])
    assert [d.doc_id for d in docs(file)] == ["7", "8"]


def test_directory_reads_parquet_files_in_order_and_skips_markers(tmp_path):
    folder = tmp_path / "corpus"
    write(folder / "b" / "part-1.parquet", text=["c"])
    write(folder / "a.parquet", text=["a", "b"])
    (folder / "_SUCCESS").write_text("")
    (folder / ".hidden.parquet").write_text("not parquet")
    (folder / "README.md").write_text("notes")
    corpus = open_corpus(CorpusConfig(path=str(folder)))
    assert corpus.num_rows == 3
    assert [(d.doc_id, d.text) for d in corpus.iter_documents(batch_rows=1)] == [
        ("a.parquet:0", "a"),
        ("a.parquet:1", "b"),
        ("b/part-1.parquet:0", "c"),
    ]


def test_glob_input(tmp_path):
    write(tmp_path / "s1.parquet", id=["a"], text=["x"])
    write(tmp_path / "s2.parquet", id=["b"], text=["y"])
    write(tmp_path / "other.parquet", id=["c"], text=["z"])
    assert [d.doc_id for d in docs(tmp_path / "s*.parquet")] == ["a", "b"]


def test_keep_columns_are_carried_in_extra_and_only_needed_columns_are_read(tmp_path):
    file = write(
        tmp_path / "c.parquet",
        id=["a", "b"],
        text=["x", "y"],
        title=["T1", "T2"],
        year=[2001, 2002],
        blob=[b"big", b"bigger"],
    )
    corpus = open_corpus(CorpusConfig(path=str(file), keep_columns=("title", "year")))
    assert corpus.columns == ["text", "id", "title", "year"]
    assert [d.extra for d in corpus.iter_documents()] == [
        {"title": "T1", "year": 2001},
        {"title": "T2", "year": 2002},
    ]


def test_large_string_and_dictionary_text_are_accepted(tmp_path):
    file = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": pa.array(["a", "b"], pa.large_string())}), file)
    assert [d.text for d in docs(file)] == ["a", "b"]
    categorical = pa.table({"text": pa.array(["a", "a"]).dictionary_encode()})
    pq.write_table(categorical, tmp_path / "d.parquet")
    assert [d.text for d in docs(tmp_path / "d.parquet")] == ["a", "a"]


def test_non_parquet_file_is_named(tmp_path):
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"text": "x"}\n')
    fails(jsonl, "corpus.jsonl", "not a Parquet file", "directory", "glob")
    fake = tmp_path / "fake.parquet"
    fake.write_text("id,text\n1,x\n")
    fails(fake, "fake.parquet", "not a Parquet file")


def test_glob_matching_a_non_parquet_file_is_named(tmp_path):
    write(tmp_path / "a.parquet", text=["x"])
    (tmp_path / "notes.txt").write_text("hello there, this is text")
    fails(tmp_path / "*", "notes.txt", "not a Parquet file")


def test_nothing_matched(tmp_path):
    fails(tmp_path / "missing.parquet", "does not exist", "missing.parquet")
    fails(tmp_path / "*.parquet", "no files match", "*.parquet")
    (tmp_path / "empty").mkdir()
    fails(tmp_path / "empty", "no Parquet files", "empty")


def test_missing_text_column_lists_columns_and_option(tmp_path):
    file = write(tmp_path / "c.parquet", id=["a"], text=["x"])
    message = fails(file, "column 'txt' not found", "[id, text]", "--text-column", text_column="txt")
    assert "c.parquet" in message


def test_missing_id_and_keep_columns(tmp_path):
    file = write(tmp_path / "c.parquet", id=["a"], text=["x"])
    fails(file, "column 'key' not found", "[id, text]", "--id-column", id_column="key")
    fails(file, "column 'title' not found", "--keep-column", keep_columns=("title",))


def test_a_later_file_missing_the_text_column_fails_at_open(tmp_path):
    write(tmp_path / "a.parquet", text=["x"])
    write(tmp_path / "b.parquet", body=["y"])
    fails(tmp_path, "column 'text' not found", "b.parquet", "[body]")


def test_binary_text_column_suggests_a_cast(tmp_path):
    file = write(tmp_path / "c.parquet", text=[b"bytes"])
    fails(file, "text column 'text'", "binary", "not a string type", "cast")


def test_unusable_id_type(tmp_path):
    file = write(tmp_path / "c.parquet", id=[1.5], text=["x"])
    fails(file, "id column 'id'", "double", "string or integer", "--id-column")


def test_duplicate_ids_are_named_unless_allowed(tmp_path):
    write(tmp_path / "a.parquet", id=["x", "y", "x"], text=["1", "2", "3"])
    write(tmp_path / "b.parquet", id=["z", "y"], text=["4", "5"])
    message = fails(tmp_path, "duplicated ids", "'x' (2x)", "'y' (2x)", "--allow-duplicate-ids")
    assert message.index("'x'") < message.index("'y'") and "'z'" not in message
    assert len(docs(tmp_path, allow_duplicate_ids=True)) == 5


def test_null_ids_are_refused(tmp_path):
    file = write(tmp_path / "c.parquet", id=["a", None], text=["x", "y"])
    fails(file, "1 null values", "id column 'id'")


def test_empty_corpus(tmp_path):
    file = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), file)
    fails(file, "no rows", "c.parquet")


def test_config_is_frozen_and_validated():
    config = CorpusConfig(path="x.parquet")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.path = "y"  # type: ignore[misc]
    with pytest.raises(InputError, match="--text-column"):
        CorpusConfig(path="x", text_column="")
    with pytest.raises(InputError, match="corpus path is empty"):
        CorpusConfig(path="")
    with pytest.raises(TypeError):
        CorpusConfig("x")  # type: ignore[misc]


def test_fingerprint_is_stable_and_changes_with_the_files(tmp_path):
    folder = tmp_path / "c"
    write(folder / "a.parquet", id=["a"], text=["first"])
    write(folder / "b.parquet", id=["b"], text=["second"])
    config = CorpusConfig(path=str(folder))
    before = open_corpus(config).fingerprint()
    assert before == open_corpus(config).fingerprint() and len(before) == 64
    # Moving the whole corpus keeps its identity: names are relative to the corpus folder.
    moved = folder.rename(tmp_path / "moved")
    assert open_corpus(CorpusConfig(path=str(moved))).fingerprint() == before
    write(moved / "b.parquet", id=["b"], text=["secone"])  # same length, different content
    changed = open_corpus(CorpusConfig(path=str(moved))).fingerprint()
    assert changed != before
    write(moved / "c.parquet", id=["c"], text=["third"])
    assert open_corpus(CorpusConfig(path=str(moved))).fingerprint() not in (before, changed)


def test_batch_rows_must_be_positive(tmp_path):
    corpus = open_corpus(CorpusConfig(path=str(write(tmp_path / "c.parquet", text=["x"]))))
    with pytest.raises(InputError, match="batch_rows 0"):
        list(corpus.iter_documents(batch_rows=0))


def test_documents_by_range_equal_the_full_pass_across_files_and_row_groups(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    # Three files, small row groups, an empty file in the middle: every boundary a shard can cross.
    for name, start, count in (("a", 0, 7), ("b", 7, 0), ("c", 7, 11)):
        rows = range(start, start + count)
        table = pa.table(
            {
                "id": pa.array([f"d{i}" for i in rows], pa.string()),
                "text": pa.array([f"text {i}" for i in rows], pa.string()),
                "year": pa.array(list(rows), pa.int64()),
            }
        )
        pq.write_table(table, folder / f"{name}.parquet", row_group_size=3)
    corpus = open_corpus(CorpusConfig(path=str(folder), keep_columns=("year",)))
    everything = list(corpus.iter_documents())
    assert len(everything) == 18
    for start in range(19):
        for end in range(start, 19):
            assert corpus.documents(start, end) == everything[start:end], (start, end)
    with pytest.raises(InputError, match=r"\[5, 19\) is outside the corpus of 18"):
        corpus.documents(5, 19)
