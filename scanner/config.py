"""Frozen, keyword-only configs. They hold no live objects so they can be written to a run directory
and shipped to workers; validation happens at construction with messages that name the fix."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from scanner.errors import require
from scanner.search.reject import RejectRule

DTYPES = ("auto", "float32", "bfloat16", "float16")
BOS_POLICIES = ("auto", "always", "never")
LOSSES = ("ce", "margin", "wrong_ce")
SCHEDULES = ("fast", "paper")
ENGINES = ("auto", "hf", "vllm")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    model: str
    revision: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        require(bool(self.model), "--model is empty; pass a hub id, a local model directory or a .gguf file")
        require(self.dtype in DTYPES, f"unknown dtype '{self.dtype}'; choose one of {', '.join(DTYPES)}")
        require(self.threads is None or self.threads >= 1, f"--threads {self.threads} must be >= 1")


@dataclass(frozen=True, kw_only=True)
class PromptConfig:
    """How the free tokens are embedded: BOS policy, chat template, fixed text (all uncounted)."""

    chat: bool = False
    system_prompt: str | None = None
    instruction: str | None = None
    bos: str = "auto"
    allow_non_ascii: bool = False

    def __post_init__(self) -> None:
        require(self.bos in BOS_POLICIES, f"unknown BOS policy '{self.bos}'; choose one of {', '.join(BOS_POLICIES)}")
        require(self.chat or self.system_prompt is None, "--system-prompt needs --chat (a chat template)")


@dataclass(frozen=True, kw_only=True)
class GCGConfig:
    """One GCG run at a fixed prompt length. `reference()` reproduces the authors' settings."""

    top_k: int = 128
    num_candidates: int = 256
    n_replace: int = 1
    loss: str = "margin"
    patience: int | None = 60
    chunk_size: int | None = None  # candidates per forward; None sizes it from free memory

    def __post_init__(self) -> None:
        require(self.top_k >= 1, f"top_k {self.top_k} must be >= 1")
        require(self.num_candidates >= 1, f"num_candidates {self.num_candidates} must be >= 1")
        require(self.n_replace >= 1, f"n_replace {self.n_replace} must be >= 1")
        require(self.loss in LOSSES, f"unknown loss '{self.loss}'; choose one of {', '.join(LOSSES)}")
        require(self.patience is None or self.patience >= 1, f"patience {self.patience} must be >= 1")
        require(self.chunk_size is None or self.chunk_size >= 1, f"chunk_size {self.chunk_size} must be >= 1")

    @classmethod
    def reference(cls) -> GCGConfig:
        """The authors' GCG: top-k 250, 100 candidates, one swap, mean cross-entropy, no early stop."""
        return cls(top_k=250, num_candidates=100, n_replace=1, loss="ce", patience=None)


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """The MiniPrompt length search. Paper fields reproduce the authors' schedule exactly."""

    schedule: str = "fast"
    tau: float = 1.0
    seed: int = 0
    cap_factor: int = 5  # no prompt longer than cap_factor * |y| is tried (the paper's cap)
    gcg: GCGConfig = field(default_factory=GCGConfig)
    # paper schedule
    paper_start: int = 5
    paper_increment: int = 5
    paper_steps: int = 200
    paper_step_growth: float = 1.2
    # fast schedule
    try_empty: bool = True
    decide_steps: int = 400  # per attempt at the decision length
    shrink_steps: int = 200  # per attempt while minimizing a memorized target
    # A short first try below the decision length (0: none): memorized text is found there far more
    # easily than with |y| - 1 random tokens (search/schedule.py, FastSchedule).
    probe_length: int = 5
    restarts: int = 1  # extra attempts (fresh random prompt) before a length is declared failed
    verify_retries: int = 4  # teacher-forced matches that fail generation before a step moves on
    # After "not memorized", keep searching longer prompts (up to the cap, inserting tokens into the
    # best prompt so far) so the text gets a real ACR instead of the failure convention |y| / cap.
    bound_unmemorized: bool = False
    # Early rejection (search/reject.py), while nothing is found: a search whose best candidate still
    # gets under reject_min_right of the target right (teacher forced) after reject_after steps at a
    # length ends "not memorized"; an attempt stuck reject_stall steps ends without its restarts.
    # Calibrated on search trajectories (bench/early_reject.py, bench/RESULTS.md).
    early_reject: bool = True
    reject_after: int = 5  # steps at a length before the rule may stop it
    reject_min_right: float = 0.6  # share of target tokens the best candidate must get right by then
    reject_stall: int = 0  # steps without a rise in that count that stop the attempt (0: never)

    def __post_init__(self) -> None:
        require(self.schedule in SCHEDULES, f"unknown schedule '{self.schedule}'; choose one of {', '.join(SCHEDULES)}")
        require(self.tau > 0 and math.isfinite(self.tau), f"tau {self.tau} must be a positive number")
        require(self.cap_factor >= 1, f"cap_factor {self.cap_factor} must be >= 1")
        for name in ("paper_start", "paper_increment", "paper_steps", "decide_steps", "shrink_steps"):
            require(getattr(self, name) >= 1, f"{name} {getattr(self, name)} must be >= 1")
        require(self.restarts >= 0, f"restarts {self.restarts} must be >= 0")
        require(self.probe_length >= 0, f"probe_length {self.probe_length} must be >= 0 (0: no probe)")
        require(self.paper_step_growth >= 1, f"paper_step_growth {self.paper_step_growth} must be >= 1")
        require(self.reject_after >= 1, f"reject_after {self.reject_after} must be >= 1 (steps)")
        require(0 <= self.reject_min_right <= 1,
                f"reject_min_right {self.reject_min_right} must be a share in [0, 1], e.g. 0.5")
        require(self.reject_stall >= 0, f"reject_stall {self.reject_stall} must be >= 0 (0: never)")

    def reject_rule(self) -> RejectRule | None:
        """The early-rejection rule, or None when it is off."""
        if not self.early_reject:
            return None
        return RejectRule(after=self.reject_after, min_right=self.reject_min_right, stall=self.reject_stall)

    @classmethod
    def paper(cls, **overrides: Any) -> SearchConfig:
        """The authors' MiniPrompt: their length schedule with their GCG settings (no early rejection)."""
        return cls(**{"schedule": "paper", "gcg": GCGConfig.reference(), "early_reject": False, **overrides})


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Which engine gives the final word on a prompt (verify) and ranks spans (screen); the HF model
    always computes the GCG gradients. "auto" is resolved once, before a run is saved (resolved())."""

    verify: str = "auto"
    screen: str = "auto"
    # vLLM is built first and takes this share of the GPU (weights + KV cache); the HF model and the
    # GCG activations get what is left (the candidate chunk is sized from free memory).
    gpu_memory_utilization: float = 0.4
    deterministic: bool = False  # vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1; GPU only)
    # Targets whose GCG forwards are shared (search/driver.py); 0: auto (engine/batched.py, width).
    targets_per_forward: int = 0

    def __post_init__(self) -> None:
        for name in ("verify", "screen"):
            value = getattr(self, name)
            require(value in ENGINES, f"--{name}-engine {value}: choose one of {', '.join(ENGINES)}")
        require(self.targets_per_forward >= 0,
                f"--targets-per-forward {self.targets_per_forward} must be >= 0 (0: auto)")
        require(0 < self.gpu_memory_utilization < 1,
                f"--vllm-gpu-memory {self.gpu_memory_utilization} must be in (0, 1), e.g. 0.4")

    @property
    def uses_vllm(self) -> bool:
        return "vllm" in (self.verify, self.screen)

    def resolved(self, model: ModelConfig) -> EngineConfig:
        """"auto" -> vllm where vLLM is installed, a GPU is visible and the model is not a .gguf file
        (vLLM loads HF directories and hub ids here); else hf."""
        if "auto" not in (self.verify, self.screen):
            return self
        default = "vllm" if _vllm_fits(model) else "hf"
        return dataclasses.replace(self, verify=default if self.verify == "auto" else self.verify,
                                   screen=default if self.screen == "auto" else self.screen)


def _vllm_fits(model: ModelConfig) -> bool:
    import importlib.util

    if model.device == "cpu" or model.model.endswith(".gguf") or importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)
