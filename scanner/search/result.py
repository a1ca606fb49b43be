"""The result record of one target's MiniPrompt search (search/miniprompt.py), and what the driver
adds to it once the search ends: the forwards and seconds it attributed, in total and by stage."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from scanner.search.gcg import DECIDING, SHRINKING


@dataclass
class AcrResult:
    target: str
    target_ids: list[int]
    target_tokens: int
    prompt: str | None
    prompt_ids: list[int] | None
    prompt_tokens: int | None
    acr: float
    memorized: bool  # at the configured tau
    thresholds: dict[str, dict]
    success: bool  # a prompt was found and verified by generation
    verified_generation: bool
    teacher_forced: bool
    min_margin: float | None
    certificate_tokens: int | None  # length of a natural-prefix certificate, when one verified
    cap: int
    schedule: str
    tau: float
    steps: int
    forwards: int
    rejected_matches: int  # teacher-forced matches that generation refuted (METHOD.md defect 1)
    # The engine whose greedy generation decided `success` (hf or vllm), its version, dtype and flags.
    verify_engine: str
    verify_version: str
    verify_dtype: str
    verify_flags: dict
    # That generation and HF's teacher-forced check of the reported prompt disagree (None: no prompt).
    verify_disagrees: bool | None
    wall_s: float
    seed: int
    bos: str
    # Nothing found, and the early-rejection rule stopped at least one attempt before its budget
    # (search/reject.py); steps and forwards count what was spent.
    rejected_early: bool = False
    # A verdict-only search (SearchConfig.verdict_only) stopped at its first success while its schedule
    # had shorter lengths left: acr is the bound that success proves, not the schedule's minimum.
    bounded: bool = False
    # The length of the decided prompt this search shrank from (search/request.py Decided); None otherwise.
    decided_tokens: int | None = None
    # The verify engine's own generation of the prompt (HFEngine.verify): its smallest margin over the
    # span, where it occurs, and the threshold under which the success counts as fragile (None: no prompt).
    generation_margin: float | None = None
    generation_margin_at: int | None = None
    fragile_below: float | None = None
    trace: list[dict] = field(default_factory=list)
    # {stage: {"steps", "forwards", "seconds"}}: deciding is the attempts up to and including the first
    # verified success (all of them when none succeeded), shrinking the attempts after it (the driver's).
    stages: dict[str, dict] = field(default_factory=dict)
    # Probe sampling (config.DraftConfig): the draft model's forwards and seconds (inside wall_s); 0 without.
    draft_forwards: int = 0
    draft_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def stage_steps(trace: list[dict], decided: bool = False) -> dict[str, int]:
    """GCG steps of the deciding and the shrinking attempts of a search's trace (`decided`: it shrank a
    decided prompt, so all of them shrink)."""
    first = -1 if decided else next((i for i, attempt in enumerate(trace) if attempt["success"]), len(trace))
    return {
        DECIDING: sum(a["steps"] for a in trace[: first + 1]),
        SHRINKING: sum(a["steps"] for a in trace[first + 1 :]),
    }


def finish(done) -> AcrResult:
    """The search's result with what the driver attributed to it (driver.Finished), in total and by stage."""
    steps = stage_steps(done.value.trace, done.value.decided_tokens is not None)
    stages = {
        name: {
            "steps": steps[name],
            **done.stages.get(name, {}),
            "forwards": done.stages.get(name, {}).get("forwards", 0),
            "seconds": done.stages.get(name, {}).get("seconds", 0.0),
        }
        for name in (DECIDING, SHRINKING)
    }
    return replace(
        done.value,
        wall_s=done.seconds,
        forwards=done.forwards,
        stages=stages,
        draft_forwards=done.draft_forwards,
        draft_s=done.draft_seconds,
    )
