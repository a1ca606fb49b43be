"""The GPU engine on Hugging Face transformers: target loss, its gradient over the one-hot prompt,
batched candidate scoring, and greedy verification by real generation from the prompt string.

Verification and screening can be handed to vLLM (`attach`): the HF model keeps computing gradients,
candidate scores and the teacher-forced margins, and vLLM's greedy generation gives the verdict."""

from __future__ import annotations

import inspect
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from scanner.config import PromptConfig
from scanner.engine import prefix
from scanner.engine.generate import Greedy
from scanner.engine.loading import LoadedModel
from scanner.engine.losses import token_margins
from scanner.engine.template import PromptTemplate, build_template, free_ids, retokenizes, typed_ids
from scanner.engine.vocab import allowed_token_ids
from scanner.errors import InputError

if TYPE_CHECKING:
    from scanner.engine.vllm import VLLMEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verification:
    prompt: str
    prompt_ids: list[int] | None  # free ids of the typed string (None: the template broke)
    generated_ids: list[int]
    verified_generation: bool  # greedy generation reproduced every target token
    teacher_forced: bool
    min_margin: float
    matched_tokens: int  # leading target tokens that generation reproduced
    engine: str = "hf"  # the engine whose greedy generation decided verified_generation
    # The generation's own robustness (min_margin is the teacher-forced one): the smallest margin, over
    # the first |y| generated tokens, of the token generation chose (its logit minus the best other
    # logit, read off the decoding steps themselves), and the target position where it occurs. For a
    # verified prompt the chosen tokens are the target's. None when nothing was generated.
    generation_margin: float | None = None
    generation_margin_at: int | None = None

    @property
    def disagrees(self) -> bool:
        """Generation and the teacher-forced check of the same ids disagree (kept, never hidden)."""
        return self.verified_generation != self.teacher_forced


class HFEngine:
    """A loaded model, its template and prompt vocabulary. Shared by every target it measures."""

    def __init__(self, loaded: LoadedModel, prompt: PromptConfig):
        template = build_template(loaded.tokenizer, prompt, loaded.adds_bos)
        rows = loaded.model.get_input_embeddings().weight.shape[0]
        allowed = allowed_token_ids(loaded.tokenizer, rows, prompt.allow_non_ascii)
        if not allowed:
            raise InputError("the prompt vocabulary is empty; pass --allow-non-ascii")
        self._setup(loaded, prompt, template, allowed)

    @classmethod
    def bare(cls, loaded: LoadedModel, template: PromptTemplate, allowed_ids: list[int]) -> HFEngine:
        """An engine without tokenizer work, for benchmarks on random-weight models of real shapes."""
        engine = cls.__new__(cls)
        engine._setup(loaded, PromptConfig(), template, allowed_ids)
        return engine

    def _setup(
        self, loaded: LoadedModel, prompt: PromptConfig, template: PromptTemplate, allowed_ids: list[int]
    ) -> None:
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.threads_before = loaded.threads_before
        # Reference models (stages/calibrate.py), loaded on first use and closed with this engine.
        self.references: dict[str, HFEngine] = {}
        self.device, self.dtype = loaded.device, loaded.dtype
        self.prompt_config, self.template, self.allowed_ids = prompt, template, allowed_ids
        rows = self.model.get_input_embeddings().weight.shape[0]
        self.allowed_mask = torch.zeros(rows, dtype=torch.bool, device=self.device)
        self.allowed_mask[self.allowed_ids] = True
        self.max_positions = _max_positions(self.model)
        self.attention_window = _sliding_window(self.model)
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self.chunk_size: int | None = None  # candidates per forward, fixed; None: sized from free memory
        # (tokens a chunk fit in after an out-of-memory, calls since): batched.scores' learned ceiling
        self.oom_ceiling: tuple[int, int] | None = None
        pad = getattr(self.tokenizer, "pad_token_id", None)
        self.greedy = Greedy(self.model, 0 if pad is None else pad)  # HF generation (engine/generate.py)
        self.batchable: bool | None = None  # several targets per forward work (engine/batched.py)
        self.cache_prefix = (
            True  # GCG forwards reuse the prefix's keys and values where it holds (engine/prefix.py)
        )
        self._prefix: prefix.PrefixCache | bool | None = None  # computed on first use; False: not cached
        self.forwards = 0  # sequences through the model (candidates, gradients, verifications)
        self.verify_s = 0.0  # seconds in verify_many so far: a unit reads its share as a difference
        self.verifier: VLLMEngine | None = None  # greedy generation elsewhere (vLLM); None: HF generate
        self.screener: VLLMEngine | None = None  # teacher-forced screen elsewhere (vLLM); None: HF
        # A draft model of the same tokenizer that screens GCG candidates (engine/draft.py); None: off.
        self.draft: HFEngine | None = None
        self.draft_name: str | None = None  # the --draft-model it was loaded from
        self.draft_load_s = 0.0

    def attach(self, fast: VLLMEngine | None, verify: bool, screen: bool) -> None:
        """Hand verification and/or screening to a set-up vLLM engine of the same model."""
        self.verifier = fast if verify else None
        self.screener = fast if screen else None

    def close(self) -> None:
        """Stop an attached vLLM's processes now, close the draft and reference models loaded for this
        engine, and give torch's thread count back where --threads set it."""
        for fast in {id(e): e for e in (self.verifier, self.screener) if e is not None}.values():
            fast.close()
        for other in [self.draft, *self.references.values()]:
            if other is not None:
                other.close()
        self.references.clear()
        if self.threads_before is not None:
            torch.set_num_threads(self.threads_before)
            self.threads_before = None

    def info(self) -> dict:
        """Engine, version, dtype and flags of this HF model, as results record them."""
        import transformers

        return {
            "engine": "hf",
            "version": transformers.__version__,
            "dtype": self.dtype,
            "flags": {"device": str(self.device), "torch": torch.__version__},
        }

    def verify_info(self) -> dict:
        return self.verifier.info() if self.verifier is not None else self.info()

    def screen_info(self) -> dict:
        return self.screener.info() if self.screener is not None else self.info()

    def encode_target(self, text: str) -> list[int]:
        if not text or not text.strip():
            raise InputError("the target text is empty; pass a non-empty TEXT")
        if not self.prompt_config.allow_non_ascii and not text.isascii():
            bad = next(c for c in text if not c.isascii())
            raise InputError(f"target contains the non-ASCII character {bad!r}; pass --allow-non-ascii")
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def check_fits(self, target_tokens: int, prompt_tokens: int) -> None:
        total = len(self.template.prefix_ids) + prompt_tokens + len(self.template.suffix_ids) + target_tokens
        if self.max_positions and total > self.max_positions:
            raise InputError(
                f"the target has {target_tokens} tokens; with a prompt of up to {prompt_tokens} tokens the "
                f"input needs {total} positions but the model has {self.max_positions}; shorten the text "
                f"or lower the cap (--cap-factor)"
            )

    def retokenizes(self, prompts: list[list[int]]) -> list[bool]:
        return retokenizes(self.tokenizer, self.template, prompts)

    def decode(self, prompt_ids: list[int]) -> str:
        return self.tokenizer.decode(
            prompt_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def prefix_cache(self) -> prefix.PrefixCache | None:
        """The template's prefix run once for every GCG forward; None where it is recomputed (why: logged once)."""
        if not self.cache_prefix:
            return None
        if self._prefix is None:
            # All but the prefix's last token: a forward always feeds that one, so the position that predicts
            # the first target token is in the forward even for an empty prompt with no suffix.
            ids = list(self.template.prefix_ids)[:-1]
            reason = prefix.why_not(self.model, ids, self.attention_window, self.allowed_ids)
            self._prefix = prefix.compute(self.model, ids) if reason is None else False
            log.info(
                "prefix of %d tokens %s", len(ids), "cached" if reason is None else f"recomputed: {reason}"
            )
        return self._prefix or None

    def logits(self, input_ids: torch.Tensor | None = None, keep: int = 0, **kwargs) -> torch.Tensor:
        """Logits of the last `keep` positions (all when 0), computing the LM head only there; with
        `past_key_values` (a prefix cache), of the positions after it."""
        if self._keeps_logits and keep:
            kwargs["logits_to_keep"] = keep
        cached = kwargs.get("past_key_values") is not None
        out = self.model(input_ids=input_ids, use_cache=cached, **kwargs).logits
        self.forwards += out.shape[0]
        return out[:, -keep:] if keep else out

    def verify(self, prompt: str, target_ids: list[int]) -> Verification:
        """Greedy generation from the typed prompt string, compared token by token with the target."""
        return self.verify_many([prompt], target_ids)[0]

    def verify_many(self, prompts: list[str], target_ids: list[int]) -> list[Verification]:
        """`verify` of every prompt, all generations batched (vLLM's in one call when attached)."""
        return self.verify_each([(p, target_ids) for p in prompts])

    def verify_each(self, pairs: list[tuple[str, list[int]]]) -> list[Verification]:
        """`verify` of every (prompt, target ids), all generations batched: certificates of many spans."""
        if not pairs:
            return []
        start = time.perf_counter()
        try:
            return self._verify_each(pairs)
        finally:  # the figure a cost model of verification needs, read per unit (run/tasks.py)
            self.verify_s += time.perf_counter() - start

    def _verify_each(self, pairs: list[tuple[str, list[int]]]) -> list[Verification]:
        typed = typed_ids(self.tokenizer, self.template, [p for p, _ in pairs])
        live = [(ids, target) for ids, (_, target) in zip(typed, pairs, strict=True) if ids]
        generated = iter(self._scored_many([ids for ids, _ in live], [len(t) for _, t in live]))
        margins = iter(self._teacher_forced_margins(live))
        engine = "hf" if self.verifier is None else "vllm"
        return [
            _verification(p, self.template, ids, *next(generated), next(margins), target, engine)
            if ids
            else Verification(p, [], [], False, False, float("-inf"), 0, engine)
            for (p, target), ids in zip(pairs, typed, strict=True)
        ]

    def verify_first(self, prompts: list[str], target_ids: list[int]) -> tuple[Verification | None, int]:
        """The first prompt, in order, that generation verifies, and how many before it were refuted.
        HF checks the first alone (the best-loss match, which mostly holds) and then doubling groups, one
        batch each, stopping at the group of a success; vLLM checks them all in one call."""
        done, size = 0, 1 if self.verifier is None else len(prompts)
        while done < len(prompts):
            checks = self.verify_many(prompts[done : done + size], target_ids)
            rank = next((i for i, check in enumerate(checks) if check.verified_generation), None)
            if rank is not None:
                return checks[rank], done + rank
            done, size = done + size, 2 * size
        return None, len(prompts)

    def generate_ids(self, inputs: list[list[int]], new_tokens: int | list[int]) -> list[list[int]]:
        """Greedy continuation ids of each full input (template included), in the verify engine;
        `new_tokens`: one length for every input or one per input (vLLM still runs them in one call)."""
        return self._generate_many(inputs, new_tokens)

    def _generate_many(self, inputs: list[list[int]], new_tokens: int | list[int]) -> list[list[int]]:
        lengths = [new_tokens] * len(inputs) if isinstance(new_tokens, int) else list(new_tokens)
        if self.verifier is not None and inputs:
            self.forwards += len(inputs)
            return self.verifier.generate(inputs, lengths, self._eos_ids())
        return [ids for ids, _ in self._scored_many(inputs, lengths)]

    def _scored_many(
        self, inputs: list[list[int]], new_tokens: list[int]
    ) -> list[tuple[list[int], list[float]]]:
        """(ids, each chosen token's margin) of every greedy continuation, in the verify engine: HF's in
        left-padded batches whose near ties are generated again alone (engine/generate.py)."""
        if not inputs:
            return []
        if self.verifier is None:
            before = self.greedy.sequences
            try:
                return self.greedy.many(inputs, new_tokens)
            finally:
                self.forwards += self.greedy.sequences - before
        self.forwards += len(inputs)
        return self.verifier.generate_scored(inputs, new_tokens, self._eos_ids())

    def stop_ids(self) -> list[int]:
        """The EOS ids greedy generation stops at (the model's generation_config)."""
        return self._eos_ids()

    def _eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)

    def _generate(self, ids: list[int], new_tokens: int) -> list[int]:
        return self._generate_scored(ids, new_tokens)[0]

    def _generate_scored(self, ids: list[int], new_tokens: int) -> tuple[list[int], list[float]]:
        """Greedy continuation ids of one input, unpadded, and per generated token its logit minus the best
        other logit at that decoding step (the raw logits of the KV-cached generation, not a teacher-forced pass)."""
        self.forwards += 1
        return self.greedy.alone(ids, new_tokens)

    @torch.no_grad()
    def _teacher_forced_margins(self, pairs: list[tuple[list[int], list[int]]]) -> list[torch.Tensor]:
        """[T] margins of each (input, target); pairs of one input and target length share a forward (no
        padding, so no drift)."""
        by_length: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, (ids, target) in enumerate(pairs):
            by_length[len(ids), len(target)].append(i)
        out: list[torch.Tensor] = [torch.empty(0)] * len(pairs)
        for (_, size), rows in by_length.items():
            seq = torch.tensor([pairs[i][0] + pairs[i][1] for i in rows], device=self.device)
            target = torch.tensor([pairs[i][1] for i in rows], device=self.device)
            margins = token_margins(self.logits(seq, keep=size + 1)[:, :-1], target).cpu()
            for i, m in zip(rows, margins, strict=True):
                out[i] = m
        return out


def _verification(
    prompt: str,
    template: PromptTemplate,
    ids: list[int],
    generated: list[int],
    chosen_margins: list[float],
    margins: torch.Tensor,
    target_ids: list[int],
    engine: str,
) -> Verification:
    matched = next(
        (i for i, (a, b) in enumerate(zip(generated, target_ids, strict=False)) if a != b),
        min(len(generated), len(target_ids)),
    )
    weakest, at = smallest(chosen_margins[: len(target_ids)])
    return Verification(
        prompt=prompt,
        prompt_ids=free_ids(template, ids),
        generated_ids=generated,
        verified_generation=generated[: len(target_ids)] == target_ids,
        teacher_forced=bool((margins > 0).all()),
        min_margin=float(margins.min()),
        matched_tokens=matched,
        engine=engine,
        generation_margin=weakest,
        generation_margin_at=at,
    )


def smallest(values: list[float]) -> tuple[float | None, int | None]:
    """(the smallest value, its first position); (None, None) for no values."""
    if not values:
        return None, None
    at = min(range(len(values)), key=values.__getitem__)
    return float(values[at]), at


def _sliding_window(model) -> int | None:
    """The sliding window of local attention layers (Mistral, Gemma 2/3, Qwen2 when enabled); None if none.
    A token further back than the window is out of sight of those layers."""
    config = model.config.get_text_config()
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or window <= 0 or getattr(config, "use_sliding_window", True) is False:
        return None
    return window


def _max_positions(model) -> int | None:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None) or getattr(config.get_text_config(), name, None)
        if value:
            return int(value)
    return None
