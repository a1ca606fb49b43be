"""Probe sampling (issue 20): a draft model screens GCG's candidates, the target scores a few.

    nice -n 10 python bench/probe_sampling.py --threads 1 --workdir <dir>

Trains the validity study's two smallest sizes on one corpus (scanner/studies/validity.py: real text
with canaries planted at known duplication counts), the small one as the draft of the large one, then
measures every canary and the controls (held-out passages, random token strings) with the fast
schedule, with and without the draft, interleaved target by target so machine load hits both alike.
Per target: verdict, ACR, steps, target candidate forwards per step, wall and CPU seconds per
searched candidate, the draft's forwards and seconds. Writes bench/probe_sampling.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path

from scanner.cli.demo import default_workdir
from scanner.studies.validity import CorpusSpec, ModelSize, build_corpus, parameters, study_targets, train_models

log = logging.getLogger("probe_sampling")

CORPUS = CorpusSpec(counts=(1, 64), canaries_per_count=3, heldout=2, max_chars=70_000)
VOCAB, EPOCHS, RANDOM_CONTROLS = 1024, 10, 2
DRAFT = ModelSize(name="draft-2x64", hidden=64, layers=2, heads=4, batch=8, lr=6e-3)
TARGET = ModelSize(name="target-4x128", hidden=128, layers=4, heads=4, batch=8, lr=6e-3)


def train(workdir: Path) -> dict:
    """Both sizes on one tokenizer and token stream, or the models of an earlier run with these settings."""
    key = json.dumps({"corpus": asdict(CORPUS), "vocab": VOCAB, "epochs": EPOCHS,
                      "models": [asdict(DRAFT), asdict(TARGET)]}, sort_keys=True)
    marker, start = workdir / "probe.json", time.perf_counter()
    if marker.is_file() and json.loads(marker.read_text())["key"] == key:
        return json.loads(marker.read_text())["info"]
    sizes = train_models(build_corpus(CORPUS), [DRAFT, TARGET], VOCAB, EPOCHS, workdir)
    info = {"train_s": round(time.perf_counter() - start, 1),
            "models": {n: {**asdict(s), "parameters": parameters(workdir / n)} for n, s in sizes.items()}}
    marker.write_text(json.dumps({"key": key, "info": info}))
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workdir", default=None, help="trained models (default: the cache)")
    parser.add_argument("--train-only", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    workdir = Path(args.workdir) if args.workdir else default_workdir().parent / "probe-sampling"
    info = train(workdir)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
