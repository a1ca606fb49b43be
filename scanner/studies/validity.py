"""Validity study: does ACR track what a model was made to memorize?

We train causal LMs ourselves on real text, with canary passages planted at known duplication counts,
so the truth is known: a passage seen 64 times should be more compressible than one seen once, and
text the model never saw (held-out passages from the same sources, random token strings) should not
be memorized. The corpus is real text present on any machine with this package installed: Python's
own docstrings (parsed with `ast`, nothing imported) and the METADATA and license files of the
installed distributions. bench/validity/validity.py drives it and writes the table and the plot.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import logging
import random
import re
import sysconfig
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CorpusSpec:
    counts: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    canaries_per_count: int = 3
    heldout: int = 6  # unseen passages from the same sources: the real-text negative control
    max_chars: int = 1_500_000  # background text budget (before planting)
    stdlib_packages: bool = False  # also the stdlib's sub-packages (more text), not only its top level
    # Canary length in characters; about 4 characters a token at vocabulary 1024, so 28-45 tokens:
    # long enough that in-context copying from a prompt shorter than the target cannot write it.
    passage_chars: tuple[int, int] = (100, 150)
    # Lines of predictable text (counting runs, refrains: scanner/studies/tiny.py predictable_line) planted into
    # the background, so the model learns the rules and the "predictable" group can be reached (0: none).
    predictable: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        from scanner.errors import require

        require(all(c >= 1 for c in self.counts), f"counts {self.counts} must all be >= 1")
        require(self.canaries_per_count >= 1, f"canaries_per_count {self.canaries_per_count} must be >= 1")
        require(
            self.passage_chars[0] < self.passage_chars[1],
            f"passage_chars {self.passage_chars} must be (low, high)",
        )


@dataclass(frozen=True)
class Corpus:
    documents: list[str]  # background with every canary planted `count` times
    canaries: list[tuple[str, int]]  # (passage, duplication count)
    heldout: list[str]  # passages removed from the corpus: never seen
    background: list[str] = ()  # the documents before planting: what a reference model is trained on

    @property
    def chars(self) -> int:
        return sum(len(d) for d in self.documents)


def _ascii(text: str) -> str:
    # Targets must be ASCII (the engine's default prompt vocabulary); the background follows suit.
    return text.encode("ascii", "ignore").decode()


def docstrings(packages: bool = False) -> list[str]:
    """Docstrings of the standard library's modules, classes and functions, from source (no import:
    some stdlib modules act on import)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.rglob("*.py") if packages else root.glob("*.py"))
    out = []
    for path in files:
        if "test" in path.relative_to(root).parts[0] or "site-packages" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few stdlib files are deliberately broken (lib2to3 test data and the like)
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node)
                if text:
                    out.append(text)
    return out


def distribution_texts() -> list[str]:
    """METADATA (which carries the README as its long description) and license files of every
    installed distribution, in name order."""
    out = []
    dists = sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())
    for dist in dists:
        out.append(dist.read_text("METADATA") or "")
        for file in dist.files or []:
            if re.search(r"(LICEN[CS]E|COPYING|NOTICE)", file.name, re.IGNORECASE):
                try:
                    out.append(file.read_text(encoding="utf-8"))
                except (OSError, UnicodeDecodeError):
                    continue
    return out


def _pieces(doc: str, limit: int = 2000) -> list[str]:
    """A long text (a whole README) cut at paragraph boundaries into documents of about `limit`
    characters, so that a small budget still holds enough documents to plant 64 separate copies."""
    out, current = [], ""
    for paragraph in _paragraphs(doc):
        if current and len(current) + len(paragraph) > limit:
            out.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    return [*out, current] if current else out


@functools.lru_cache(maxsize=2)
def _unique_pieces(stdlib_packages: bool) -> tuple[str, ...]:
    # Reading every docstring and package text takes seconds; studies and tests build several corpora.
    texts = (_ascii(t).strip() for t in docstrings(stdlib_packages) + distribution_texts())
    return tuple(dict.fromkeys(p for t in texts for p in _pieces(t)))


def documents_needed(spec: CorpusSpec) -> int:
    """Documents the planting needs whatever their lengths: the most-copied canary goes into that many
    distinct documents, and removing the chosen passages may empty one document per passage."""
    return max(spec.counts) + len(spec.counts) * spec.canaries_per_count + spec.heldout


def real_documents(spec: CorpusSpec) -> list[str]:
    """Unique ASCII documents, shuffled with the seed, up to `max_chars` and at least
    `documents_needed` of them: the installed packages' texts (and so the document lengths) differ
    from one environment to the next, and a character budget alone once gave 49 documents for 64 copies."""
    docs = list(_unique_pieces(spec.stdlib_packages))
    random.Random(spec.seed).shuffle(docs)
    out, total, needed = [], 0, documents_needed(spec)
    for doc in docs:
        if total >= spec.max_chars and len(out) >= needed:
            break
        out.append(doc)
        total += len(doc)
    return out


def _paragraphs(doc: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", doc) if p.strip()]


def _normal(paragraph: str) -> str:
    return " ".join(paragraph.split())


def _is_prose(text: str, low: int, high: int) -> bool:
    """A sentence-like paragraph: the right length, mostly letters, no code or markup."""
    if not (low <= len(text) <= high) or not text.endswith("."):
        return False
    letters = sum(c.isalpha() or c == " " for c in text)
    return letters / len(text) > 0.9 and not re.search(r"[<>{}\[\]|=_*`#$\\]|>>>|::|https?:", text)


def pick_passages(docs: list[str], spec: CorpusSpec, number: int) -> list[str]:
    """`number` prose paragraphs that occur exactly once in the corpus (a passage that also sits
    elsewhere, an inherited docstring say, would have a duplication count we did not choose)."""
    counts = Counter(_normal(p) for d in docs for p in _paragraphs(d))
    text = _normal("\n".join(docs))
    # Also inside a longer paragraph elsewhere (license texts are wrapped and cut differently)?
    pool = sorted(
        p
        for p, c in counts.items()
        if c == 1
        and _is_prose(p, *spec.passage_chars)
        and text.count(p[:48]) == 1
        and text.count(p[-48:]) == 1
    )
    if len(pool) < number:
        raise ValueError(
            f"only {len(pool)} prose paragraphs of {spec.passage_chars} characters in "
            f"{len(docs)} documents, {number} needed; raise max_chars or widen passage_chars"
        )
    return random.Random(spec.seed + 1).sample(pool, number)


def _remove(docs: list[str], passages: set[str]) -> list[str]:
    out = []
    for doc in docs:
        kept = [p for p in _paragraphs(doc) if _normal(p) not in passages]
        if kept:
            out.append("\n\n".join(kept))
    return out


def plant(docs: list[str], canaries: list[tuple[str, int]], seed: int) -> list[str]:
    """Each canary inserted as its own paragraph into `count` distinct documents, at a random
    paragraph boundary (separate occurrences, as duplicated web text is, not copies in a row)."""
    rng = random.Random(seed + 2)
    out = list(docs)
    for text, count in canaries:
        if count > len(out):
            raise ValueError(f"count {count} exceeds the {len(out)} documents; raise max_chars")
        for index in rng.sample(range(len(out)), count):
            parts = _paragraphs(out[index])
            parts.insert(rng.randint(0, len(parts)), text)
            out[index] = "\n\n".join(parts)
    return out


def plant_predictable(docs: list[str], lines: int, seed: int) -> list[str]:
    """`lines` counting runs and refrains, each a paragraph of a random document."""
    from scanner.studies.tiny import predictable_line

    rng = random.Random(seed + 4)
    return plant(docs, [(predictable_line(rng), 1) for _ in range(lines)], seed + 5)


def predictable_targets() -> list[str]:
    """Counting and a refrain as a model continues them (no end: the rules go on), never planted as such."""
    from scanner.studies.tiny import counting, refrain

    return [counting(1, 16)[:-1], counting(31, 44)[:-1], refrain("sing it again", 6)[:-1]]


def build_corpus(spec: CorpusSpec) -> Corpus:
    docs = real_documents(spec)
    wanted = len(spec.counts) * spec.canaries_per_count
    passages = pick_passages(docs, spec, wanted + spec.heldout)
    canaries = [(passages[i], spec.counts[i // spec.canaries_per_count]) for i in range(wanted)]
    background = plant_predictable(_remove(docs, set(passages)), spec.predictable, spec.seed)
    corpus = Corpus(
        documents=plant(background, canaries, spec.seed),
        canaries=canaries,
        heldout=passages[wanted:],
        background=background,
    )
    log.info(
        "corpus: %d documents, %d characters, %d canaries, %d held out",
        len(corpus.documents),
        corpus.chars,
        len(canaries),
        len(corpus.heldout),
    )
    return corpus


@dataclass(frozen=True, kw_only=True)
class ModelSize:
    """One model of the study; fields as TinySpec's, so scanner.studies.tiny.train_model trains it."""

    name: str
    hidden: int
    layers: int
    heads: int
    batch: int
    lr: float
    steps: int = 0  # set by train_models from the epochs asked
    context: int = 256
    train_context: int = 128
    seed: int = 0


def train_models(
    corpus: Corpus,
    sizes: list[ModelSize],
    vocab_size: int,
    epochs: float,
    out_dir: str | Path,
    device: str = "cpu",
) -> dict[str, ModelSize]:
    """One tokenizer for the corpus, then each size for `epochs` passes over the same token stream
    (steps set from the stream's length); saved as HF directories out_dir/<name>. Returns the sizes
    as trained (steps filled in)."""
    from dataclasses import replace

    from scanner.studies.tiny import _stream, train_model, train_tokenizer

    tokenizer = train_tokenizer(corpus.documents, vocab_size)
    tokens = len(_stream(tokenizer, corpus.documents))
    trained = {}
    for size in sizes:
        size = replace(size, steps=max(1, round(epochs * tokens / (size.batch * size.train_context))))
        model = train_model(tokenizer, corpus.documents, size, device)
        model.save_pretrained(Path(out_dir) / size.name)
        tokenizer.save_pretrained(Path(out_dir) / size.name)
        trained[size.name] = size
    log.info("trained %s on %d tokens x %.1f epochs", list(trained), tokens, epochs)
    return trained


def parameters(model_dir: str | Path) -> int:
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    with torch.device("meta"):  # shapes only: no memory, no weights read
        model = LlamaForCausalLM(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())


def random_control(engine, tokens: int, rng: random.Random) -> str:
    """A string of `tokens` random prompt-vocabulary tokens: text no model can have memorized."""
    ids = [rng.choice(engine.allowed_ids) for _ in range(tokens)]
    return " ".join(engine.decode(ids).split())


def study_targets(corpus: Corpus, engine, random_controls: int, seed: int) -> list[dict]:
    rng = random.Random(seed + 3)
    rows = [{"group": "canary", "count": n, "text": t} for t, n in corpus.canaries]
    rows += [{"group": "held-out", "count": 0, "text": t} for t in corpus.heldout]
    if corpus.background and any("sing it again" in d for d in corpus.background):
        rows += [{"group": "predictable", "count": 0, "text": t} for t in predictable_targets()]
    typical = sorted(len(engine.encode_target(r["text"])) for r in rows)[len(rows) // 2]
    rows += [
        {"group": "random", "count": 0, "text": random_control(engine, typical, rng)}
        for _ in range(random_controls)
    ]
    return rows


def natural_continuation(engine, target_ids: list[int], prefix_tokens: int) -> tuple[bool, int]:
    """Carlini et al.'s extraction test: does the target's own first `prefix_tokens` tokens, typed in,
    make greedy decoding write the rest? Returns (exact match, suffix tokens matched)."""
    check = engine.verify(engine.decode(target_ids[:prefix_tokens]), target_ids[prefix_tokens:])
    return check.verified_generation, check.matched_tokens


def longest_copy(prompt_ids: list[int] | None, target_ids: list[int]) -> int:
    """Longest run of consecutive target tokens that also stands in the prompt: large values mean the
    prompt spells the target out and the model copies it in context rather than recalling it."""
    best = 0
    for i in range(len(prompt_ids or [])):
        for j in range(len(target_ids)):
            k = 0
            while (
                i + k < len(prompt_ids) and j + k < len(target_ids) and prompt_ids[i + k] == target_ids[j + k]
            ):
                k += 1
            best = max(best, k)
    return best


def measure_target(engine, row: dict, config, prefix_tokens: int, calibration=None, reference=None) -> dict:
    """One target's ACR and natural continuation; with a CalibrationConfig, memorized targets get the
    calibrated verdict (self-calibration, and `reference`, an HF engine, when given)."""
    from scanner.search.miniprompt import measure

    result = measure(engine, row["text"], config)
    natural, matched = natural_continuation(engine, result.target_ids, prefix_tokens)
    out = {
        **row,
        "schedule": config.schedule,
        "target_tokens": result.target_tokens,
        "acr": result.acr,
        "memorized": result.memorized,
        "prompt": result.prompt,
        "prompt_tokens": result.prompt_tokens,
        "copied_tokens": longest_copy(result.prompt_ids, result.target_ids),
        "natural": natural,
        "natural_matched": matched,
        "wall_s": round(result.wall_s, 2),
        "steps": result.steps,
        "calibrated": result.memorized,
        "predictable_reason": None,
    }
    if calibration is not None and result.memorized:
        out.update(_calibrated(engine, result, calibration, reference))
    return out


def _calibrated(engine, result, calibration, reference) -> dict:
    from scanner.stages.calibrate import calibrate_span, text_nll

    ids = result.target_ids
    model_nll = text_nll(engine, "", result.target, ids) / len(ids) if reference is not None else None
    columns = calibrate_span(
        engine,
        reference,
        calibration,
        text=result.target,
        target_ids=ids,
        prompt=result.prompt,
        prompt_tokens=result.prompt_tokens,
        prefix=None,
        context="",
        model_nll=model_nll,
        seed=calibration.seed,
    )
    return {
        "calibrated": columns["calibrated_memorized"],
        "predictable_reason": columns["predictable_reason"],
    }


def summarize(rows: list[dict]) -> list[dict]:
    """Average ACR, memorized share and natural-continuation share per (model, schedule, group, count)."""
    keys = list(dict.fromkeys((r["model"], r["schedule"], r["group"], r["count"]) for r in rows))
    out = []
    for key in keys:
        hits = [r for r in rows if (r["model"], r["schedule"], r["group"], r["count"]) == key]
        out.append(
            {
                "model": key[0],
                "schedule": key[1],
                "group": key[2],
                "count": key[3],
                "n": len(hits),
                "avg_acr": sum(r["acr"] for r in hits) / len(hits),
                "memorized": sum(r["memorized"] for r in hits) / len(hits),
                "calibrated": sum(r.get("calibrated", r["memorized"]) for r in hits) / len(hits),
                "natural": sum(r["natural"] for r in hits) / len(hits),
                "max_copied": max(r["copied_tokens"] for r in hits),
            }
        )
    return out
