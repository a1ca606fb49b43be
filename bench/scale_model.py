"""A cost model for scanning a book collection on N GPUs, from measured per-span figures.

Pure arithmetic; every input says where its figure comes from (bench/RESULTS.md). The model:

    spans        = books * tokens_per_book / stride
    screen_s     = spans * screen_tokens_per_span / forward_tokens_per_s
    search_s     = spans * candidate_share * (memorized_share * steps_memorized
                                              + (1 - memorized_share) * steps_not_memorized) * step_s
    wall_s(N)    = (screen_s + search_s) / (N * parallel_efficiency)
"""

from __future__ import annotations

from dataclasses import dataclass, replace


def screen_tokens_per_span(span: int, context: int) -> int:
    """Tokens through the model per span in stages/screen.py: the window row (context + span), the span
    row, and one certificate row per context length j = 1..context (j + span tokens each)."""
    return (context + span) + span + context * (context + 1) // 2 + context * span


@dataclass(frozen=True, kw_only=True)
class CostInputs:
    books: int = 1000
    tokens_per_book: int = 120_000  # a novel of ~90k words
    span: int = 32
    stride: int = 32
    context: int = 32
    # 8B on one H200: the GCG scoring forward ran 489 candidates x 85 tokens in 1.289 s (bench/gcg_step.py,
    # bench/profile_step.py), i.e. ~32k tokens/s of batched forward; screening is the same kind of forward.
    forward_tokens_per_s: float = 489 * 85 / 1.289
    step_s: float = 1.408  # one GCG step on 8B, H200 (bench/gcg_step.py)
    candidate_share: float = 0.005  # spans passing the screen; corpus-dependent (famous books: higher)
    memorized_share: float = 0.5  # candidates that turn out memorized
    # Fast schedule: a memorized span succeeds early at the decision length then shrinks (measured on the
    # tiny model: tens of steps; 150 assumed for an 8B); a non-memorized one spends the whole budget,
    # decide_steps 400 x (1 + restarts 1).
    steps_memorized: float = 150
    steps_not_memorized: float = 800

    @property
    def spans(self) -> float:
        return self.books * self.tokens_per_book / self.stride

    def screen_gpu_s(self) -> float:
        return self.spans * screen_tokens_per_span(self.span, self.context) / self.forward_tokens_per_s

    def search_gpu_s(self) -> float:
        steps = (self.memorized_share * self.steps_memorized
                 + (1 - self.memorized_share) * self.steps_not_memorized)
        return self.spans * self.candidate_share * steps * self.step_s


GPU_FIGURES = CostInputs()


def cost_table(inputs: CostInputs, efficiency: float, gpus: tuple[int, ...],
               shares: tuple[float, ...] = (0.001, 0.005, 0.02)) -> str:
    """Markdown: GPU-hours of screening (with and without certificate rows) and of search for a few
    candidate shares, then wall-clock hours per cluster size."""
    no_cert = replace(inputs, context=0)
    lines = [f"{inputs.books:,} books x {inputs.tokens_per_book:,} tokens = {inputs.spans:,.0f} spans of "
             f"{inputs.span} tokens; parallel efficiency {efficiency:.2f} (measured, bench/scale.py)", "",
             "| candidate share | screen GPU-h (certificates / span row only) | search GPU-h | "
             + " | ".join(f"{n} GPUs wall h" for n in gpus) + " |",
             "|---" * (3 + len(gpus)) + "|"]
    for share in shares:
        case = replace(inputs, candidate_share=share)
        screen, light, search = case.screen_gpu_s() / 3600, no_cert.screen_gpu_s() / 3600, case.search_gpu_s() / 3600
        walls = " | ".join(f"{(screen + search) / (n * efficiency):,.1f}" for n in gpus)
        lines.append(f"| {share:.1%} | {screen:,.0f} / {light:,.1f} | {search:,.0f} | {walls} |")
    return "\n".join(lines)
