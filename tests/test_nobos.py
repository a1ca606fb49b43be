"""A model whose tokenizer adds no BOS (GPT-NeoX / Pythia-shaped, trained here on documents packed after
`<|endoftext|>` as Pythia's were) scans at the defaults: the document separator opens the input, so a
passage at a document's first token is scored and flagged at position 0."""

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.config import PromptConfig
from scanner.engine.template import build_template, separator_id
from scanner.studies.neox import OPENINGS, build_neox
from scanner.studies.tiny import salad


@pytest.fixture(scope="module")
def neox(tmp_path_factory):
    return build_neox(tmp_path_factory.mktemp("neox") / "model")


def test_auto_opens_with_the_separator_where_no_bos_is_added(neox):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(neox)
    assert tok("Seven", add_special_tokens=True).input_ids == tok("Seven", add_special_tokens=False).input_ids
    sep, name = separator_id(tok)
    assert name == "<|endoftext|>" and tok.convert_ids_to_tokens(sep) == name
    auto = build_template(tok, PromptConfig())
    assert auto.prefix_ids == (sep,) and "document separator" in auto.bos_policy
    assert build_template(tok, PromptConfig(bos="never")).prefix_ids == ()


def test_a_scan_refuses_no_prefix_before_a_run_directory_exists(neox, tmp_path):
    corpus = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": [salad(random.Random(1), 40)]}), corpus)
    done = cli("scan", str(corpus), "--model", str(neox), "--out", str(tmp_path / "run"), "--bos", "never")
    assert done.returncode == 2 and "--bos auto" in done.stderr, done.stderr[-1500:]
    assert not (tmp_path / "run").exists()


def test_a_passage_at_a_documents_first_token_is_flagged_at_the_defaults(neox, tmp_path):
    rng = random.Random(7)
    docs = [OPENINGS[1], salad(rng, 30)]  # the passage alone (one 32-token span at token 0), unseen salad
    corpus = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["opening", "control"], "text": docs}), corpus)
    # The defaults but the budget: the best-ranked candidate is searched (the opening, decided at length 0
    # after the separator); the next would take a full default GCG search on this CPU (~75 s), stays
    # not_searched and is no false positive.
    done = cli(
        "scan", str(corpus), "--model", str(neox), "--out", str(tmp_path / "run"), "--max-candidates", "1"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pq.read_table(tmp_path / "run" / "results").to_pylist()
    first = [r for r in rows if r["doc_id"] == "opening" and r["char_start"] == 0]
    assert first and first[0]["memorized"] and first[0]["acr"] > 1, first
    assert not [r for r in rows if r["doc_id"] == "control" and r["memorized"]]
