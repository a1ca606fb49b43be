"""The screen's share on real text (issue 37 item 4): which share of spans the default screen passes on as
candidates, per kind of text, against the recall of the planted passages, for each statistic the screen
can rank by, on SmolLM2 and on the fine-tuned model of bench/validity/plants.py.

    python bench/validity/plants.py build --work W                     # W/corpus.parquet, W/truth.json
    python bench/screen/screen_share.py corpus --work W              # W/kinds.parquet: W's corpus + seen texts
    acr-scan scan W/kinds.parquet --model M --out R --max-candidates 0 --audit-sample 0
    python bench/screen/screen_share.py shares --work W --run R      # JSON: shares per kind and statistic
    python bench/screen/screen_share.py markdown --work W --run R    # the same as a Markdown table

Kinds: "unseen" (prose and never-trained passages written for the project), "plant" (spans at least half
inside a trained passage that completes: the recall side), "seen" (licence texts installed with Python
packages, the Zen of Python: text every model has read often), "docstring" (the docstrings of Python
builtins and standard-library functions, as `help()` prints them: copied into code and tutorials
everywhere), "wikipedia" and "famous" (the paper's targets, ../shared/data/acr-paper/). The scan runs the
screen and the certificates (self-calibrated), no search. Beside the screen's statistics, two rows come
from later: "discoverable" (the span's first half greedily writes the rest) and "certificate, calibrated
memorized" (a certificate that self-calibration did not find predictable, read from the results table).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validity"))  # bench/ is not a package
from paper_categories import DATA  # noqa: E402
from plants import covered  # noqa: E402
from smollm2 import licence_texts, zen  # noqa: E402

# A statistic, its column, and whether a higher value is the more suspicious (a threshold sweep each).
STATISTICS = {"greedy_match_rate": ("greedy_match_rate", True, (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)),
              "mean_nll": ("mean_nll", False, (0.5, 1.0, 1.5, 2.0, 3.0)),
              "pz_topk": ("pz_topk", True, (1e-6, 1e-4, 1e-2, 0.1)),
              "certificate": ("certificate_tokens", None, ()),
              "discoverable": ("discoverable", None, ())}

# Builtins and standard-library callables whose docstrings are printed by help() and quoted in code and
# tutorials: text a model trained on code has seen many times. Their wording depends on the Python version
# (3.11 here), so the kinds corpus is rebuilt, not copied, on another one.
DOCSTRINGS = ("print", "open", "range", "sorted", "enumerate", "zip", "isinstance", "max", "str.split",
              "str.join", "str.format", "list.sort", "json.dumps", "json.loads", "os.path.join",
              "os.makedirs", "re.sub", "subprocess.run", "collections.Counter", "functools.lru_cache",
              "itertools.groupby", "shutil.copyfile")


CAP = 2000


def docstrings() -> dict[str, str]:
    import inspect
    import pydoc

    return {name: inspect.getdoc(pydoc.locate(name)) for name in DOCSTRINGS}


def corpus(work: Path, data: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = pq.read_table(work / "corpus.parquet").to_pylist()
    seen = {**licence_texts(), "zen-of-python": zen()}
    # The first CAP characters of each seen text: the share is per span, and a CPU screens ~10 tokens/s.
    rows = [*base, *({"id": f"seen-{k}", "text": v[:CAP]} for k, v in sorted(seen.items()))]
    rows += [{"id": f"docstring-{k}", "text": v[:CAP]} for k, v in docstrings().items()]
    quotes = list(dict.fromkeys(json.loads((data / "famous_quotes.json").read_text())))
    rows.append({"id": "famous-quotes", "text": "\n".join(quotes[:40])})
    chunks = [c for c in json.loads((data / "wikipedia.json").read_text()) if c.isascii()][:20]
    rows += [{"id": f"wikipedia-{i}", "text": c} for i, c in enumerate(chunks)]
    out = work / "kinds.parquet"
    pq.write_table(pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows]}), out)
    return out


def kind(row: dict, plants: dict, truth: dict) -> str:
    doc = row["doc_id"]
    for prefix in ("seen", "docstring", "famous", "wikipedia"):
        if doc.startswith(prefix):
            return prefix
    plant = plants.get(doc)
    if plant and plant["strength"] != "never":
        inside = covered([(plant["char_start"], plant["char_end"])], row["char_start"], row["char_end"])
        if inside >= 0.5:
            return "plant" if truth["passages"][plant["name"]]["after"]["completes"] else "plant-partial"
        return "unseen-beside-plant"
    return "unseen" if doc != "doc-salad" else "salad"


def passes(row: dict, column: str, higher: bool | None, threshold) -> bool:
    value = row.get(column)
    if column == "discoverable":
        return bool(value)
    if higher is None:  # a certificate: a natural prefix shorter than the span elicits it
        return value is not None and 0 < value < row["target_tokens"]
    if value is None:
        return False
    return value >= threshold if higher else value <= threshold


def shares(work: Path, run: Path) -> dict:
    import pyarrow.parquet as pq

    truth = json.loads((work / "truth.json").read_text())
    plants = {d["id"]: d["plant"] for d in truth["documents"] if d["plant"]}
    columns = ["span_id", "doc_id", "char_start", "char_end", "status", "target_tokens",
               *(c for c, _, _ in STATISTICS.values())]
    # The screen's own rows: the share is the screen's, before certificates or searches change a status.
    parts = sorted((run / "screen").glob("part-*.parquet"))
    rows = [r for p in parts for r in pq.read_table(p, columns=columns).to_pylist() if r["status"] != "skipped"]
    by_kind: dict[str, list[dict]] = {}
    for r in rows:
        by_kind.setdefault(kind(r, plants, truth), []).append(r)
    default = {k: _share(rs, lambda r: r["status"] != "screened_out") for k, rs in by_kind.items()}
    sweep = {}
    for name, (column, higher, thresholds) in STATISTICS.items():
        for t in thresholds or (None,):
            key = name if t is None else f"{name} {'>=' if higher else '<='} {t:g}"
            sweep[key] = {k: _share(rs, lambda r, c=column, h=higher, x=t: passes(r, c, h, x)) for k, rs in by_kind.items()}
    calibrated = _calibrated_certificates(run)
    sweep["certificate, calibrated memorized"] = {
        k: _share(rs, lambda r: passes(r, "certificate_tokens", None, None) and r["span_id"] in calibrated)
        for k, rs in by_kind.items()}
    return {"run": run.name, "spans": {k: len(v) for k, v in by_kind.items()}, "default_screen": default, "sweep": sweep}


KINDS = ("unseen", "unseen-beside-plant", "salad", "seen", "docstring", "wikipedia", "famous", "plant",
         "plant-partial")


def markdown(found: dict) -> str:
    """The shares as bench/screen/RESULTS.md's table: a row per statistic, a column per kind."""
    kinds = [k for k in KINDS if k in found["spans"]]
    cell = lambda share: share.split(" ")[0]  # noqa: E731  "3/17 (18%)" -> "3/17"
    out = ["| statistic | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|",
           "| spans | " + " | ".join(str(found["spans"][k]) for k in kinds) + " |",
           "| **the default screen** | " + " | ".join(cell(found["default_screen"][k]) for k in kinds) + " |"]
    out += [f"| {name} | " + " | ".join(cell(row[k]) for k in kinds) + " |" for name, row in found["sweep"].items()]
    return "\n".join(out)


def _calibrated_certificates(run: Path) -> set[str]:
    """Spans the results table settles by a certificate that self-calibration kept (not predictable)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(run / "results", columns=["span_id", "acr_kind", "calibrated_memorized"]).to_pylist()
    return {r["span_id"] for r in rows if r["acr_kind"] == "certificate_bound" and r["calibrated_memorized"]}


def _share(rows: list[dict], keep) -> str:
    kept = sum(1 for r in rows if keep(r))
    return f"{kept}/{len(rows)} ({kept / max(1, len(rows)):.0%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("corpus", "shares", "markdown"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--run", type=Path)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    if args.what == "corpus":
        print(corpus(args.work, args.data))
    elif args.what == "shares":
        print(json.dumps(shares(args.work, args.run), indent=1))
    else:
        print(markdown(shares(args.work, args.run)))


if __name__ == "__main__":
    main()
