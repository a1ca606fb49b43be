"""vLLM as the verifying and screening engine (METHOD.md, defect 1: an engine independent of the
search's teacher-forced check gives the final word).

- `generate`: greedy continuations of many token-id prompts in one `LLM.generate` call (temperature 0,
  max_tokens = the target's length, no detokenization); `generate_scored` also asks for the top-2
  log-probs of every step, whose difference is the generated token's logit margin (verification).
- `prompt_scores`: teacher-forced scores of many rows (the last `tail` tokens of each: a window's span,
  a streamed chunk's scored positions) from `prompt_logprobs=1`: per position the target token's
  log-prob (its NLL) and rank (rank 1: the greedy choice); for the rows that ask for it (the screen's
  windows), `prompt_logprobs=k` also gives the k best log-probs, from which the token's log-probability
  under top-k sampling follows (scanner/measures/extraction.py).

It sees token ids only (`skip_tokenizer_init`): prompt strings are typed in and re-tokenized by the
HF tokenizer the search uses, so both engines read the same ids. The `LLM` is built in `setup()`, not
in `__init__`, so the object holds settings only until it runs where the accelerator is.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
from pathlib import Path

import torch

from scanner.config import EngineConfig, ModelConfig
from scanner.engine.token_scores import TokenScores
from scanner.errors import InputError, MissingDependency
from scanner.measures.extraction import topk_from_logprobs

log = logging.getLogger(__name__)

INSTALL = (
    "pip install 'acr-scanner[gpu]' on a CUDA machine, or on a CPU: pip install torch==2.13.0 && "
    "pip install 'acr-scanner[cpu-vllm]' && pip uninstall -y torchvision torchaudio torchcodec"
)
CPU_KV_CACHE_GIB = "1"
MAX_MODEL_LEN = 8192  # prompts here are at most cap_factor * |y| + |y| tokens, far below this
# vLLM refuses prompt_logprobs above the LLM's max_logprobs (default 20), fixed when it is built: room for
# --pz-top-k up to this; above it the vLLM screen leaves p_z under top-k null (logged).
MAX_LOGPROBS = 64


def import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise MissingDependency(
            f"the vllm engine needs vLLM, which is not installed: {INSTALL}; "
            f"or pass --verify-engine hf --screen-engine hf"
        ) from err
    return vllm


def _row_scores(
    seq: list[int], tail: int, logprobs: list, asked: bool, top_k: int, temperature: float
) -> TokenScores:
    """One sequence's last `tail` tokens from vLLM's prompt log-probs: rank 1 is the greedy choice; the
    top-k log-prob (NaN when vLLM returned too few log-probs, None when not asked) from the k best."""
    matches = torch.zeros(tail, dtype=torch.bool)
    nll = torch.zeros(tail, dtype=torch.float32)
    topk = torch.full((tail,), math.nan, dtype=torch.float64) if asked else None
    for col, (token, entry) in enumerate(
        zip(seq[len(seq) - tail :], logprobs[len(seq) - tail :], strict=True)
    ):
        logprob = entry[token]
        matches[col] = logprob.rank == 1
        nll[col] = -logprob.logprob
        if asked and top_k <= MAX_LOGPROBS:
            best = [lp.logprob for lp in entry.values() if lp.rank <= top_k]
            topk[col] = topk_from_logprobs(logprob.logprob, best, logprob.rank <= top_k, temperature)
    return TokenScores(matches, nll, topk)


class VLLMEngine:
    """Settings at construction; the `LLM` (weights, KV cache, worker processes) in `setup()`."""

    def __init__(self, model: ModelConfig, engines: EngineConfig, dtype: str, device: str):
        if model.model.endswith(".gguf"):
            raise InputError(
                f"--model {model.model}: the vllm engine loads HF directories and hub ids "
                "here, not .gguf files; pass --verify-engine hf --screen-engine hf"
            )
        self.model_config, self.engines, self.dtype, self.device = model, engines, dtype, device
        # Inductor compilation costs minutes on a CPU and pays off only on long decodes; CUDA keeps it.
        self.enforce_eager = device == "cpu"
        self.llm = None
        self.version: str | None = None
        self.kv_cache_gib: str | None = None  # VLLM_CPU_KVCACHE_SPACE the engine was built with (CPU)
        self._env_before: dict[str, str | None] = {}  # the variables _environment() set, as they were

    def info(self) -> dict:
        """What every result records about the engine that verified or screened it."""
        flags = {
            "device": self.device,
            "enforce_eager": self.enforce_eager,
            "batch_invariant": self.engines.deterministic and self.device != "cpu",
            "gpu_memory_utilization": self.engines.gpu_memory_utilization if self.device != "cpu" else None,
            "cpu_kvcache_gib": self.kv_cache_gib if self.device == "cpu" else None,
        }
        return {"engine": "vllm", "version": self.version, "dtype": self.dtype, "flags": flags}

    def setup(self) -> VLLMEngine:
        if self.llm is not None:
            return self
        self._environment()
        try:
            vllm = import_vllm()
            self.version = vllm.__version__
            self._check_platform()
            self._check_attention()
            config = self.model_config
            self.llm = vllm.LLM(
                model=config.model,
                revision=config.revision,
                trust_remote_code=config.trust_remote_code,
                dtype=self.dtype,
                skip_tokenizer_init=True,
                seed=0,
                enforce_eager=self.enforce_eager,
                gpu_memory_utilization=self.engines.gpu_memory_utilization,
                max_model_len=self._max_model_len(),
                max_logprobs=MAX_LOGPROBS,
            )
        except BaseException:
            self._restore_environment()
            raise
        log.info("vLLM %s built for %s (%s, %s)", self.version, config.model, self.device, self.dtype)
        # Left to interpreter exit, vLLM's engine threads can abort the process (SIGABRT, "terminate
        # called without an active exception") after all the work is done: stop them first.
        atexit.register(self.close)
        return self

    def _check_platform(self) -> None:
        from vllm.platforms import current_platform

        built_for = current_platform.device_type
        if built_for != self.device.split(":")[0]:
            raise InputError(
                f"the installed vLLM runs on {built_for!r} but the model is on {self.device!r}; "
                f"pass --device {built_for} or --verify-engine hf --screen-engine hf"
            )

    def _check_attention(self) -> None:
        """vLLM's CPU attention has no logit soft-capping (Gemma 2's attn_logit_softcapping): it would run,
        and generate other tokens than the model does, so that verdicts verified there are wrong. Refused."""
        if self.device != "cpu":
            return
        path = Path(self.model_config.model) / "config.json"
        config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        capping = config.get("attn_logit_softcapping") or (config.get("text_config") or {}).get(
            "attn_logit_softcapping"
        )
        if capping:
            raise InputError(
                f"--verify-engine/--screen-engine vllm on the CPU: this model soft-caps its attention "
                f"logits (attn_logit_softcapping {capping}, Gemma 2), which vLLM's CPU attention does "
                "not do, so its generations would not be the model's; pass --verify-engine hf "
                "--screen-engine hf (or run vLLM on a GPU)"
            )

    def _environment(self) -> None:
        """Set what vLLM's engine processes read when they start (before the LLM exists), for this
        engine's life: close() gives the process its environment back."""
        wanted = {}
        if self.engines.deterministic:
            wanted["VLLM_BATCH_INVARIANT"] = "1"
            if self.device == "cpu":
                log.warning(
                    "--deterministic: vLLM's batch-invariant mode needs a GPU; its CPU backend "
                    "ignores it (recorded as batch_invariant false)"
                )
        if self.device == "cpu":
            # Unset, vLLM sizes the CPU KV cache from the node's free memory, which the HF model in this
            # process (and other jobs on a shared machine) need; short prompts fit easily in 1 GiB.
            wanted["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB)
            self.kv_cache_gib = wanted["VLLM_CPU_KVCACHE_SPACE"]
        self._env_before = {key: os.environ.get(key) for key in wanted}
        os.environ.update(wanted)

    def _restore_environment(self) -> None:
        for key, value in self._env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._env_before = {}

    def _max_model_len(self) -> int:
        """The model's context, capped: a long-context model would otherwise have vLLM reserve KV
        cache for 128k-token sequences inside its memory share."""
        from transformers import AutoConfig

        config = self.model_config
        try:
            hf = AutoConfig.from_pretrained(
                config.model, revision=config.revision, trust_remote_code=config.trust_remote_code
            )
        except OSError as err:  # hub id offline, or a directory without a usable config
            raise InputError(f"--model {config.model}: vLLM cannot read its config: {err}") from err
        text = hf.get_text_config()
        return min(getattr(text, "max_position_embeddings", None) or MAX_MODEL_LEN, MAX_MODEL_LEN)

    def _run(self, prompts: list[list[int]], params) -> list:
        from vllm.inputs import TokensPrompt

        if self.llm is None:
            raise RuntimeError("VLLMEngine.setup() must run before generation")
        return self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )

    def generate(
        self, prompts: list[list[int]], new_tokens: list[int], stop_ids: list[int]
    ) -> list[list[int]]:
        """Greedy continuation of each prompt, `new_tokens[i]` tokens at most, in one call. Stops at
        `stop_ids` (EOS) as HF generate does: without a tokenizer vLLM knows no EOS of its own."""
        from vllm import SamplingParams

        params = [
            SamplingParams(temperature=0.0, max_tokens=n, detokenize=False, stop_token_ids=stop_ids)
            for n in new_tokens
        ]
        return [list(out.outputs[0].token_ids) for out in self._run(prompts, params)]

    def generate_scored(
        self, prompts: list[list[int]], new_tokens: list[int], stop_ids: list[int]
    ) -> list[tuple[list[int], list[float]]]:
        """`generate`, and per generated token its margin over the best other token: from the top-2
        log-probs of each decoding step (vLLM's raw log-probs: log-softmax of the raw logits, so a
        difference of two is the difference of their logits)."""
        from vllm import SamplingParams

        params = [
            SamplingParams(
                temperature=0.0, max_tokens=n, detokenize=False, stop_token_ids=stop_ids, logprobs=2
            )
            for n in new_tokens
        ]
        return [_scored(out.outputs[0]) for out in self._run(prompts, params)]

    def prompt_scores(
        self,
        seqs: list[list[int]],
        tails: list[int],
        topk_rows: list[bool] | None = None,
        top_k: int = 40,
        temperature: float = 1.0,
    ) -> list[TokenScores]:
        """Greedy matches and NLL of the last tails[i] tokens of every sequence, in one call; for the rows
        marked in `topk_rows`, also their log-probs under top-k sampling at `temperature`."""
        from vllm import SamplingParams

        asked = topk_rows or [False] * len(seqs)
        if top_k > MAX_LOGPROBS and any(asked):
            log.warning(
                "--pz-top-k %d is above the %d log-probs the vLLM screener returns: p_z under "
                "top-k is left null; screen with --screen-engine hf to compute it",
                top_k,
                MAX_LOGPROBS,
            )
        # One generated token is the least vLLM runs; prompt log-probs skip the prefix cache by design.
        params = [
            SamplingParams(
                temperature=0.0,
                max_tokens=1,
                prompt_logprobs=top_k if a and top_k <= MAX_LOGPROBS else 1,
                detokenize=False,
            )
            for a in asked
        ]
        return [
            _row_scores(seq, tail, out.prompt_logprobs, a, top_k, temperature)
            for seq, tail, a, out in zip(seqs, tails, asked, self._run(seqs, params), strict=True)
        ]

    def close(self) -> None:
        """Stop vLLM's engine processes now rather than at interpreter exit."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
        self._restore_environment()


def _scored(output) -> tuple[list[int], list[float]]:
    """(ids, margins) of one completion: each chosen token's log-prob minus the best other log-prob
    among the returned ones (the top 2 and the chosen token, so the runner-up is always there)."""
    ids = list(output.token_ids)
    margins = []
    for token, entry in zip(ids, output.logprobs or [], strict=True):
        other = max((lp.logprob for t, lp in entry.items() if t != token), default=-math.inf)
        margins.append(entry[token].logprob - other)
    return ids, margins
