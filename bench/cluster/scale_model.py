"""A cost model for scanning a book collection on N GPUs, from measured per-span figures.

Pure arithmetic; every input says where its figure comes from (bench/*/RESULTS.md). The model:

    spans        = books * tokens_per_book / stride * (1 + anchored_share)
    screen_s     = spans * screen_tokens_per_span / forward_tokens_per_s
    candidates   = spans * candidate_share  (memorized_share of them memorized)
    search_steps = memorized * (1 - certified_share) * steps_memorized
                   + not_memorized * steps_not_memorized / rejection_factor
    search_s     = min(search_steps * step_s, budget_s)          (best-first under --search-budget)
    wall_s(N)    = (screen_s + search_s) / (N * parallel_efficiency)

`python bench/cluster/scale_model.py` prints the table of the issue that asked for it (1,000 books x 120k
tokens, 8B, 8 H200s, goal 24 h): the scan as it was, and with this issue's levers.
`python bench/cluster/scale_model.py --run RUN` takes every input that run measured from its `cost`
(`acr-scan status RUN`, scanner/storage/cost.py) instead of the constants below, prints each input with
where it comes from (measured in RUN, or the constant's source), and the same kind of table;
`--tokens-per-book N` sizes the collection's documents, `--timing constants` keeps the constants'
seconds (8B on an H200) for a run measured on other hardware, taking only its shares and steps.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path


def screen_tokens_per_span(span: int, context: int, certificate_share: float = 1.0) -> float:
    """Tokens through the model per span in stages/screen.py: the window row (context + span), the span
    row, and, for `certificate_share` of the spans (all of them in the exhaustive screen; those whose
    window row reaches --certificate-min-match in the two-phase one), one certificate row per context
    length j = 1..context (j + span tokens each)."""
    certificates = context * (context + 1) // 2 + context * span
    return (context + span) + span + certificate_share * certificates


@dataclass(frozen=True, kw_only=True)
class CostInputs:
    books: int = 1000
    tokens_per_book: int = 120_000  # a novel of ~90k words
    span: int = 32
    stride: int = 32
    context: int = 32
    # 8B on one H200: the GCG scoring forward ran 489 candidates x 85 tokens in 1.289 s (bench/search/gcg_step.py,
    # bench/gpu/profile_step.py), i.e. ~32k tokens/s of batched forward; screening is the same kind of forward.
    forward_tokens_per_s: float = 489 * 85 / 1.289
    step_s: float = 1.408  # one GCG step on 8B, H200 (bench/search/gcg_step.py)
    candidate_share: float = 0.005  # spans passing the screen; corpus-dependent (famous books: higher)
    memorized_share: float = 0.5  # candidates that turn out memorized
    # Fast schedule: a memorized span succeeds early at the decision length then shrinks (measured on the
    # tiny model: tens of steps; 150 assumed for an 8B); a non-memorized one spends the whole budget,
    # 800 assumed. Corrected 2026-12-01: that budget is 1,200 with the defaults, 400 at the 5-token probe
    # + decide_steps 400 x (1 + restarts 1) at the decision length, not 800.
    steps_memorized: float = 150
    steps_not_memorized: float = 800
    # The levers of the book-collection issue (1.0 / 0 / inf: the scan before it).
    certificate_share: float = 1.0  # spans given certificate rows (1: exhaustive screen)
    anchored_share: float = 0.0  # extra spans screened by anchoring, per window
    certified_share: float = 0.0  # memorized candidates settled by a verified certificate, no GCG
    rejection_factor: float = 1.0  # steps on not-memorized candidates, full budget / early rejection
    budget_gpu_h: float = float("inf")  # --search-budget over the whole cluster
    # Measured by a run (--run): screen seconds per span, which replaces the token formula above
    # (re-encoding, certificate rows and the model's speed are all inside it). None: the formula.
    screen_s_per_span: float | None = None

    @property
    def spans(self) -> float:
        return self.books * self.tokens_per_book / self.stride * (1 + self.anchored_share)

    @property
    def candidates(self) -> float:
        return self.spans * self.candidate_share

    def screen_gpu_s(self) -> float:
        if self.screen_s_per_span is not None:
            return self.spans * self.screen_s_per_span
        return self.spans * screen_tokens_per_span(self.span, self.context, self.certificate_share) / self.forward_tokens_per_s

    def steps_per_candidate(self) -> float:
        memorized = self.memorized_share * (1 - self.certified_share) * self.steps_memorized
        return memorized + (1 - self.memorized_share) * self.steps_not_memorized / self.rejection_factor

    def full_search_gpu_s(self) -> float:
        return self.candidates * self.steps_per_candidate() * self.step_s

    def search_gpu_s(self) -> float:
        return min(self.full_search_gpu_s(), self.budget_gpu_h * 3600)

    def searched_share(self) -> float:
        """Candidates the budget reaches, best first (all of them when it is not binding)."""
        full = self.full_search_gpu_s()
        return 1.0 if full <= self.search_gpu_s() else self.search_gpu_s() / full


GPU_FIGURES = CostInputs()

# This levers, each from a measurement (bench/*/RESULTS.md, 2026-12-01) or stated as assumed:
# - two-phase screen (--certificate-min-match 0.5): certificate rows for spans whose window row reaches
#   half the span; on unmemorized text about the candidate share (bench/screen/screen_tokens.py: 0.116 s vs
#   1.59 s exhaustive vs 0.058 s bare on a random book), 1 % assumed; Corrected 2026-12-01: that run has
#   random weights, no span reaches 0.5, so it is the floor, not a factor on real text;
# - anchored spans: 0.33 extra per window where every document holds a planted passage (Corrected
#   2026-12-01: not a third; bench/screen/anchors.py), an upper bound; on unmemorized text a run of 28 greedy
#   matches is rare, 2 % assumed;
# - early rejection: forwards per not-memorized candidate cut 5.9x (bench/search/early_reject.py, same run;
#   Corrected 2026-12-01: in-sample, the thresholds were fitted on the 13 trajectories it is judged on);
# - certificates: on the demo corpus 15 of 17 candidates were settled by certificates (min-match 0.8);
#   on an 8B and real books unmeasured: half of the memorized candidates assumed.
LEVERS = dict(certificate_share=0.01, anchored_share=0.02, certified_share=0.5, rejection_factor=5.9)


def cost_table(inputs: CostInputs, efficiency: float, gpus: tuple[int, ...],
               shares: tuple[float, ...] = (0.001, 0.005, 0.02)) -> str:
    """Markdown: GPU-hours of screening (with and without certificate rows) and of search for a few
    candidate shares, then wall-clock hours per cluster size."""
    no_cert = replace(inputs, context=0)
    lines = [f"{inputs.books:,} books x {inputs.tokens_per_book:,} tokens = {inputs.spans:,.0f} spans of "
             f"{inputs.span} tokens; parallel efficiency {efficiency:.2f} (measured, bench/cluster/scale.py)", "",
             "| candidate share | screen GPU-h (certificates / span row only) | search GPU-h | "
             + " | ".join(f"{n} GPUs wall h" for n in gpus) + " |",
             "|---" * (3 + len(gpus)) + "|"]
    for share in shares:
        case = replace(inputs, candidate_share=share)
        screen, light, search = case.screen_gpu_s() / 3600, no_cert.screen_gpu_s() / 3600, case.search_gpu_s() / 3600
        walls = " | ".join(f"{(screen + search) / (n * efficiency):,.1f}" for n in gpus)
        lines.append(f"| {share:.1%} | {screen:,.0f} / {light:,.1f} | {search:,.0f} | {walls} |")
    return "\n".join(lines)


def goal_table(gpus: int = 8, hours: float = 24.0, efficiency: float = 0.85,
               shares: tuple[float, ...] = (0.001, 0.005, 0.02)) -> str:
    """Markdown: wall hours on `gpus` GPUs before this issue, with its levers and no budget, and with a
    --search-budget that fits the goal (the share of candidates it searches, best first)."""
    levers = replace(GPU_FIGURES, **LEVERS)
    lines = [f"| candidate share | candidates | before: wall h | levers: screen GPU-h | levers: steps per "
             f"candidate | levers, no budget: wall h | budget for {hours:g} h: searched best-first |",
             "|---|---|---|---|---|---|---|"]
    for share in shares:
        before, after = replace(GPU_FIGURES, candidate_share=share), replace(levers, candidate_share=share)
        budget = gpus * hours * efficiency - after.screen_gpu_s() / 3600
        capped = replace(after, budget_gpu_h=budget)
        lines.append(
            f"| {share:.1%} | {after.candidates:,.0f} | {_wall(before, gpus, efficiency):,.0f} | "
            f"{after.screen_gpu_s() / 3600:,.1f} | {after.steps_per_candidate():,.0f} | "
            f"{_wall(after, gpus, efficiency):,.1f} | {capped.searched_share():.0%} in {_wall(capped, gpus, efficiency):,.1f} h |")
    return "\n".join(lines)


def _wall(inputs: CostInputs, gpus: int, efficiency: float) -> float:
    return (inputs.screen_gpu_s() + inputs.search_gpu_s()) / 3600 / (gpus * efficiency)


# Where each constant of CostInputs comes from (the comments above): what --run prints for an input
# the run did not measure.
SOURCES = {
    "books": "assumed: the issue's collection", "tokens_per_book": "assumed: a novel of ~90k words",
    "span": "the issue's scan (--span-tokens)", "stride": "the issue's scan (--stride)",
    "context": "the issue's scan (--context-tokens)",
    "forward_tokens_per_s": "measured: 8B on one H200, bench/search/gcg_step.py, bench/gpu/profile_step.py",
    "step_s": "measured: one GCG step on 8B, H200, bench/search/gcg_step.py",
    "candidate_share": "assumed: corpus-dependent", "memorized_share": "assumed",
    "steps_memorized": "assumed for an 8B (tiny model: tens of steps)",
    "steps_not_memorized": "assumed: 800 (the fast schedule's whole budget is 1,200: 400 at the probe "
                           "+ decide_steps 400 x (1 + restarts 1))",
    # Corrected 2026-12-01: the source above said 800 was that budget.
    "certificate_share": "assumed: 1, the exhaustive screen", "anchored_share": "assumed: 0",
    "certified_share": "assumed: 0", "rejection_factor": "assumed: 1, no early rejection",
    "budget_gpu_h": "none", "screen_s_per_span": "none: the token formula",
}


def _get(cost: dict, *path):
    for key in path:
        cost = cost.get(key) if isinstance(cost, dict) else None
    return cost


def measured_inputs(run: str | Path, base: CostInputs = GPU_FIGURES) -> tuple[CostInputs, dict[str, str]]:
    """`base` with every input the run's cost measured replaced, and {field: source} for all of them."""
    from scanner.storage.cost import run_cost
    from scanner.storage.rundir import RunDir

    rundir = RunDir(run)
    rundir.require_run()
    cost = run_cost(rundir)
    config = json.loads((rundir.path / "run_config.json").read_text()).get("config") or {}
    where = f"measured in {Path(run).name}"
    spans = config.get("spans") or {}
    found = _from_cost(cost, sum(s.num_docs for s in rundir.load_plan()), spans.get("stride") or spans.get("span_tokens"))
    found.update({k: v for k, v in (("span", spans.get("span_tokens")), ("stride", spans.get("stride") or spans.get("span_tokens")),
                                    ("context", (config.get("screen") or {}).get("context_tokens"))) if v is not None})
    found = {k: v for k, v in found.items() if v is not None}
    sources = {f.name: (f"{where}" if f.name in found else SOURCES[f.name]) for f in fields(CostInputs)}
    for name in ("span", "stride", "context"):
        if name in found:
            sources[name] = f"the run_config.json of {Path(run).name}"
    if "screen_s_per_span" in found:
        for name in ("forward_tokens_per_s", "certificate_share"):
            sources[name] += f" (unused: the screen seconds per span {where} replace the token formula)"
    if "steps_not_memorized" in found:
        found["rejection_factor"] = 1.0  # the measured steps already include early rejection
        sources["rejection_factor"] = f"1: {where}'s not-memorized steps include early rejection"
    return replace(base, **found), sources


def _from_cost(cost: dict, documents: int, stride: int | None) -> dict:
    """CostInputs fields from a run's cost (None where it did not measure them)."""
    screen, search, tighten = (cost.get(k) or {} for k in ("screen", "search", "tighten"))
    outcomes = search.get("outcomes") or {}
    # the verdicts' steps and the tightening's (which shrinks the memorized verdicts) together
    steps = (search.get("steps") or 0) + (tighten.get("steps") or 0)
    seconds = (search.get("seconds") or 0.0) + (tighten.get("seconds") or 0.0)
    tokens, spans, candidates = screen.get("corpus_tokens"), screen.get("spans"), screen.get("candidates")
    settled = _get(cost, "certify", "settled") or 0
    memorized = _get(outcomes, "memorized", "candidates") or 0
    rest = [outcomes[k] for k in ("not_memorized", "rejected_early") if k in outcomes]
    rest_candidates = sum(o["candidates"] for o in rest)
    found = {"tokens_per_book": tokens / documents if tokens and documents else None,
             "screen_s_per_span": screen["seconds"] / spans if spans and screen.get("seconds") is not None else None,
             "candidate_share": screen.get("candidate_share"),
             "step_s": seconds / steps if steps and seconds else None,
             "steps_memorized": ((_get(outcomes, "memorized", "steps") or 0) + (tighten.get("steps") or 0)) / memorized
             if memorized else None,
             "steps_not_memorized": sum(o["steps"] for o in rest) / rest_candidates if rest_candidates else None}
    if spans and tokens and stride:  # short documents' last windows count too: an upper bound
        found["anchored_share"] = max(0.0, spans / (tokens / stride) - 1)
    if candidates:
        found["memorized_share"] = (settled + memorized) / candidates
    if settled + memorized:
        found["certified_share"] = settled / (settled + memorized)
    return found


def constant_timing(run: str | Path, inputs: CostInputs, sources: dict[str, str]) -> CostInputs:
    """`inputs` with the seconds of the constants (8B on one H200) instead of the run's: a run on other
    hardware or another model measures shares and steps that carry over, not its seconds. The screen
    goes back to the token formula, with the share of spans given certificate rows that reproduces the
    tokens the run forwarded per span."""
    from scanner.storage.cost import run_cost
    from scanner.storage.rundir import RunDir

    screen = run_cost(RunDir(run)).get("screen") or {}
    per_span = screen["forwarded_tokens"] / screen["spans"] if screen.get("forwarded_tokens") and screen.get("spans") else None
    base = (inputs.context + inputs.span) + inputs.span
    rows = inputs.context * (inputs.context + 1) // 2 + inputs.context * inputs.span
    share = max(0.0, (per_span - base) / rows) if per_span is not None else GPU_FIGURES.certificate_share
    for name in ("step_s", "forward_tokens_per_s"):
        sources[name] = SOURCES[name] + " (--timing constants)"
    sources["screen_s_per_span"] = "none: the token formula (--timing constants)"
    sources["certificate_share"] = (f"from the tokens forwarded per span in {Path(run).name} ({per_span:,.1f})"
                                    if per_span is not None else SOURCES["certificate_share"])
    return replace(inputs, step_s=GPU_FIGURES.step_s, forward_tokens_per_s=GPU_FIGURES.forward_tokens_per_s,
                   screen_s_per_span=None, certificate_share=share)


def inputs_table(inputs: CostInputs, sources: dict[str, str]) -> str:
    lines = ["| input | value | source |", "|---|---|---|"]
    for f in fields(CostInputs):
        value = getattr(inputs, f.name)
        shown = "-" if value is None else f"{value:,.6g}" if isinstance(value, float) else f"{value:,}"
        lines.append(f"| {f.name} | {shown} | {sources[f.name]} |")
    return "\n".join(lines)


def run_table(inputs: CostInputs, efficiency: float, gpus: tuple[int, ...]) -> str:
    """Markdown: spans, screen GPU-h, candidates, steps per candidate, search GPU-h, wall h per cluster."""
    screen, search = inputs.screen_gpu_s() / 3600, inputs.search_gpu_s() / 3600
    head = "| spans | screen GPU-h | candidates | steps per candidate | search GPU-h | " + " | ".join(
        f"{n} GPUs wall h" for n in gpus) + " |"
    walls = " | ".join(f"{(screen + search) / (n * efficiency):,.2f}" for n in gpus)
    return "\n".join([head, "|---" * (5 + len(gpus)) + "|",
                      f"| {inputs.spans:,.0f} | {screen:,.3f} | {inputs.candidates:,.1f} | "
                      f"{inputs.steps_per_candidate():,.1f} | {search:,.3f} | {walls} |"])


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", help="a run directory: its cost replaces every constant it measured")
    parser.add_argument("--books", type=int, default=GPU_FIGURES.books, help="documents of the collection")
    parser.add_argument("--tokens-per-book", type=int, default=None,
                        help="tokens of each document of the collection (default: the run's mean)")
    parser.add_argument("--timing", choices=("run", "constants"), default="run",
                        help="seconds per step and per screened token: the run's, or the constants' (8B, H200)")
    parser.add_argument("--efficiency", type=float, default=0.85, help="parallel efficiency (bench/cluster/scale.py)")
    parser.add_argument("--gpus", default="1,8,64", help="cluster sizes, comma-separated")
    parser.add_argument("--candidate-share", type=float, default=None,
                        help="spans the screen passes on, measured elsewhere (bench/screen/screen_share.py on real "
                             "weights) instead of the run's own")
    args = parser.parse_args(argv)
    if args.run is None:
        return goal_table()
    inputs, sources = measured_inputs(args.run)
    inputs = replace(inputs, books=args.books)
    sources["books"] = "given (--books)" if args.books != GPU_FIGURES.books else sources["books"]
    if args.tokens_per_book is not None:
        inputs = replace(inputs, tokens_per_book=args.tokens_per_book)
        sources["tokens_per_book"] = "given (--tokens-per-book)"
    if args.candidate_share is not None:
        inputs = replace(inputs, candidate_share=args.candidate_share)
        sources["candidate_share"] = "given (--candidate-share, bench/screen/screen_share.py)"
    if args.timing == "constants":
        inputs = constant_timing(args.run, inputs, sources)
    gpus = tuple(int(n) for n in args.gpus.split(","))
    return (inputs_table(inputs, sources) + "\n\n" + f"parallel efficiency {args.efficiency:g} (assumed; "
            "bench/cluster/scale.py measures it)\n\n" + run_table(inputs, args.efficiency, gpus))


if __name__ == "__main__":
    print(main())
