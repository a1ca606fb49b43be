"""Peak memory and seconds of the screen on one long document, one setting per process (a process's peak
RSS is its own: settings side by side in one process would hide each other's peaks).

    python bench/screen/screen_memory.py --shape 28m --doc-tokens 21000 --config '{"certificate_min_match": 0.5}'

A random-weight Llama of a real shape (bench/search/gcg_step.py SHAPES; "28m": a 49k vocabulary like SmolLM2's
on a small body, the shape of the figures a user reported), one random document of --doc-tokens tokens,
its 32-token windows screened by stages/screen.py with ScreenConfig(**--config): only the config fields
are read, so the same command runs against an older tree of the package (PYTHONPATH) for a before/after.
Prints one JSON line: peak RSS of the screen (resource.getrusage, MiB), the RSS after loading the model,
wall and CPU seconds (CPU time: other jobs on a shared machine stretch the wall clock), corpus tokens per
CPU second, and those of one plain teacher-forced pass over the same document after it (chunks of 1,024
tokens, full logits, argmax and NLL: bench/screen/screen_tokens.py's reference).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))  # gcg_step; bench/ is not a package
from gcg_step import SHAPES, build  # noqa: E402

from scanner.config import ScreenConfig  # noqa: E402
from scanner.engine.hf import HFEngine  # noqa: E402
from scanner.engine.loading import LoadedModel  # noqa: E402
from scanner.engine.template import PromptTemplate  # noqa: E402
from scanner.stages.screen import screen_spans  # noqa: E402
from scanner.stages.spans import Span  # noqa: E402


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def random_engine(shape: str, device: str = "cpu", dtype: torch.dtype = torch.float32, positions: int = 4096) -> HFEngine:
    """A random-weight Llama of `shape` behind a BOS-only template (no tokenizer work)."""
    model = build(shape, device, dtype)
    model.config.max_position_embeddings = max(positions, model.config.max_position_embeddings)
    loaded = LoadedModel(model=model, tokenizer=SimpleNamespace(pad_token_id=0), device=device, dtype=str(dtype),
                         source="random")
    return HFEngine.bare(loaded, PromptTemplate("", "", (1,), (1,), (), "BOS, uncounted"), list(range(3, 259)))


@torch.no_grad()
def teacher_forced_pass(engine: HFEngine, docs: list[list[int]], chunk: int) -> None:
    """One plain teacher-forced pass: each document in chunks of `chunk` tokens after the template
    prefix, several chunks per forward, the model's full logits, argmax and NLL of every token (what the
    screen is measured against)."""
    prefix = list(engine.template.prefix_ids)
    vocab = engine.model.get_output_embeddings().weight.shape[0]
    rows = max(1, (1 << 27) // (chunk * vocab))  # chunks per forward: their fp32 logits within 512 MiB
    seqs = [prefix + ids[a:a + chunk] for ids in docs for a in range(0, len(ids), chunk)]
    for i in range(0, len(seqs), rows):
        for seq in _same_length(seqs[i:i + rows]):
            ids = torch.tensor(seq, device=engine.device)
            logits = engine.model(input_ids=ids, use_cache=False).logits[:, len(prefix) - 1:-1].float()
            gold = ids[:, len(prefix):]
            (logits.argmax(-1) == gold).sum().item()
            F.cross_entropy(logits.transpose(1, 2), gold, reduction="none").sum().item()


def _same_length(seqs: list[list[int]]) -> list[list[list[int]]]:
    """Groups of equal-length sequences (a document's last chunk is shorter): no padding in the pass."""
    groups: dict[int, list[list[int]]] = {}
    for seq in seqs:
        groups.setdefault(len(seq), []).append(seq)
    return list(groups.values())


def windows(ids: list[int], span: int) -> list[Span]:
    return [Span(doc_id="doc", span_id=f"s{i}", token_start=i, token_end=i + span, char_start=i,
                 char_end=i + span, text="", target_ids=ids[i:i + span]) for i in range(0, len(ids) - span + 1, span)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="28m")
    parser.add_argument("--doc-tokens", type=int, default=21_000)
    parser.add_argument("--span", type=int, default=32)
    parser.add_argument("--config", default="{}", help="ScreenConfig fields as JSON")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU seconds are work, not spinning)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    engine = random_engine(args.shape)
    vocab = SHAPES[args.shape]["vocab_size"]
    ids = torch.randint(3, vocab, (args.doc_tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    config = ScreenConfig(**json.loads(args.config))
    loaded = peak_mib()
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        screened = screen_spans(engine, ids, windows(ids, args.span), config)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = peak_mib()  # before the teacher-forced pass, whose full logits would raise it
    tf = time.process_time()
    teacher_forced_pass(engine, [ids], 1024)
    tf = time.process_time() - tf
    print(json.dumps({"bench": "screen_memory", "shape": args.shape, "doc_tokens": args.doc_tokens,
                      "config": json.loads(args.config), "spans": len(screened), "wall_s": round(seconds, 2),
                      "cpu_s": round(cpu, 2), "corpus_tokens_per_cpu_s": round(args.doc_tokens / cpu, 1),
                      "teacher_forced_tokens_per_cpu_s": round(args.doc_tokens / tf, 1),
                      "ratio_to_teacher_forced": round(tf / cpu, 3),
                      "rss_after_load_mib": round(loaded), "peak_rss_mib": round(peak)}), flush=True)


if __name__ == "__main__":
    main()
