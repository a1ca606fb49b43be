"""The command line's shared options and their translation into configs (no live objects): what
`acr`, `scan` and the Ray actors' configs are made of. main.py holds the commands.

A default that is a config field's is read from the dataclass (default_of), so the two cannot drift;
a default of None means the config decides later (by schedule, by span length, by the cluster)."""

from __future__ import annotations

import dataclasses

import click

from scanner.cli.sections import (
    BUDGET,
    CALIBRATION,
    CORPUS,
    ENGINE,
    EXECUTOR,
    EXTRACTION,
    MODEL,
    PASSAGES,
    PROMPT,
    REJECT,
    SEARCH,
    SPANS,
    option,
)
from scanner.config import (
    BOS_POLICIES,
    ENGINES,
    EXECUTORS,
    LOSSES,
    SCHEDULES,
    SCREEN_WINDOWS,
    CalibrationConfig,
    CorpusConfig,
    DraftConfig,
    EngineConfig,
    ExecutorConfig,
    ExtractionConfig,
    GCGConfig,
    ModelConfig,
    PassageConfig,
    PromptConfig,
    ScanConfig,
    ScreenConfig,
    SearchConfig,
    SpanConfig,
)


def default_of(config: type, name: str):
    """The default of field `name` of the config dataclass, for a click option to show and use."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    if name not in fields:
        raise ValueError(f"{config.__name__} has no field {name!r}; its fields are {sorted(fields)}")
    field = fields[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise ValueError(f"{config.__name__}.{name} has no default; give the option required=True instead")


def stack(f, options: list):
    """Apply decorators so that they list in --help in the order written."""
    for decorate in reversed(options):
        f = decorate(f)
    return f


def template_options(note: str = "") -> list:
    """--chat, --system-prompt, --instruction: the fixed text around the free tokens (`acr`, `scan`; `compare`
    applies them on model B's side, `note` says so in each help)."""
    return [
        option(
            PROMPT,
            "--chat",
            is_flag=True,
            help=f"Put the free tokens in the user turn of the chat template{note}.",
        ),
        option(
            PROMPT,
            "--system-prompt",
            default=None,
            help=f"Fixed system prompt (uncounted){note}; needs --chat.",
        ),
        option(
            PROMPT,
            "--instruction",
            default=None,
            help=f"Fixed text before the free tokens (uncounted){note}.",
        ),
    ]


def b_template_options(f):
    """`compare`'s template options: model B's side only (in-context unlearning: A with a fixed prompt)."""
    return stack(f, template_options(" on model B (default: run A's)"))


def model_options(f):
    return stack(
        f,
        [
            option(
                MODEL, "--model", "model", required=True, help="HF hub id, local HF directory or .gguf file."
            ),
            option(MODEL, "--revision", default=None, help="Hub revision (branch, tag or commit)."),
            option(
                MODEL,
                "--device",
                default=default_of(ModelConfig, "device"),
                show_default=True,
                help="auto, cpu, cuda, cuda:N.",
            ),
            option(
                MODEL,
                "--dtype",
                default=default_of(ModelConfig, "dtype"),
                show_default=True,
                help="auto (bf16 on GPU, fp32 on CPU), float32, bfloat16, float16.",
            ),
            option(MODEL, "--threads", type=int, default=None, help="CPU threads for torch."),
            option(
                MODEL,
                "--trust-remote-code",
                is_flag=True,
                help="Allow the model repository's own code to run.",
            ),
            *template_options(),
            option(
                PROMPT,
                "--bos",
                default=default_of(PromptConfig, "bos"),
                show_default=True,
                type=click.Choice(BOS_POLICIES),
                help="The uncounted token before the input. auto: the BOS the tokenizer (or GGUF file) adds, "
                "else the document separator the family was pretrained with (<|endoftext|>, else BOS, "
                "else EOS); always: the BOS token; separator: the separator even where a BOS is added; "
                "never: nothing (acr only).",
            ),
            option(
                PROMPT, "--allow-non-ascii", is_flag=True, help="Admit non-ASCII prompt tokens and targets."
            ),
        ],
    )


def search_options(f):
    # None: the schedule's own value (SearchConfig() for fast, SearchConfig.paper() for paper). Hidden:
    # probe sampling and the bound of unmemorized spans, off by default (docs/config.md lists them).
    return stack(
        f,
        [
            option(
                SEARCH,
                "--schedule",
                default=default_of(SearchConfig, "schedule"),
                show_default=True,
                type=click.Choice(SCHEDULES),
                help="fast: verdict first, warm starts; paper: the authors' exact search.",
            ),
            option(
                SEARCH,
                "--tau",
                type=float,
                default=default_of(SearchConfig, "tau"),
                show_default=True,
                help="Memorization threshold on ACR.",
            ),
            option(
                SEARCH,
                "--seed",
                type=int,
                default=default_of(SearchConfig, "seed"),
                show_default=True,
                help="Random seed of the search.",
            ),
            option(
                SEARCH,
                "--cap-factor",
                type=int,
                default=default_of(SearchConfig, "cap_factor"),
                show_default=True,
                help="Longest prompt tried: this x target tokens.",
            ),
            option(
                SEARCH,
                "--steps",
                type=int,
                default=None,
                help="GCG steps per attempt (fast: at the decision length; paper: at the first length).",
            ),
            option(SEARCH, "--top-k", type=int, default=None, help="GCG top-k per position."),
            option(SEARCH, "--candidates", type=int, default=None, help="GCG candidates per step."),
            option(SEARCH, "--loss", type=click.Choice(LOSSES), default=None, help="GCG target loss."),
            option(
                SEARCH,
                "--restarts",
                type=int,
                default=None,
                help="Fresh restarts before a length fails (fast).",
            ),
            option(
                SEARCH,
                "--fragile-margin",
                type=float,
                default=default_of(SearchConfig, "fragile_margin"),
                show_default=True,
                help="A verified prompt whose generation margin (logits) is below this is "
                "marked fragile (column fragile).",
            ),
            option(
                SEARCH,
                "--draft-model",
                default=None,
                hidden=True,
                help="Probe sampling: a smaller model of the same tokenizer (HF dir, hub id or .gguf) scores "
                "every GCG candidate, the model only a probe and the draft's best; verdicts stay the model's.",
            ),
            option(
                SEARCH,
                "--probe-size",
                type=int,
                hidden=True,
                default=default_of(DraftConfig, "probe_size"),
                show_default=True,
                help="Probe sampling: candidates the model scores at random each step to measure agreement.",
            ),
            option(
                SEARCH,
                "--probe-reduction",
                type=float,
                hidden=True,
                default=default_of(DraftConfig, "reduction"),
                show_default=True,
                help="Probe sampling: the model also scores (1 - agreement) x candidates / this of the draft's best.",
            ),
            option(
                SEARCH,
                "--probe-min-kept",
                type=int,
                hidden=True,
                default=default_of(DraftConfig, "min_kept"),
                show_default=True,
                help="Probe sampling: the model scores at least this many of the draft's best.",
            ),
            option(
                SEARCH,
                "--bound-unmemorized",
                is_flag=True,
                hidden=True,
                help="fast: after 'not memorized', search longer prompts for a real ACR below tau.",
            ),
            option(
                REJECT,
                "--early-reject/--no-early-reject",
                default=None,
                help="Stop a search the model's teacher-forced tokens right say will not succeed "
                "(result field rejected_early). Default: on for fast, off for paper.",
            ),
            option(
                REJECT,
                "--reject-after",
                type=int,
                default=None,
                help="Early rejection: GCG steps at a length before it may stop the search.",
            ),
            option(
                REJECT,
                "--reject-min-right",
                type=float,
                default=None,
                help="Early rejection: share of target tokens the best candidate must get right by then.",
            ),
            option(
                REJECT,
                "--reject-stall",
                type=int,
                default=None,
                help="Early rejection: steps without more tokens right that end an attempt (0: never).",
            ),
        ],
    )


def engine_options(screen: bool):
    """--verify-engine (and, where spans are screened, --screen-engine), vLLM's memory share, determinism."""
    options = [
        option(
            ENGINE,
            "--verify-engine",
            default=default_of(EngineConfig, "verify"),
            show_default=True,
            type=click.Choice(ENGINES),
            help="Greedy generation that verifies every prompt: hf (transformers) or vllm; "
            "auto: vllm where it is installed and a GPU is visible, else hf.",
        )
    ]
    if screen:
        options.append(
            option(
                ENGINE,
                "--screen-engine",
                default=default_of(EngineConfig, "screen"),
                show_default=True,
                type=click.Choice(ENGINES),
                help="Teacher-forced screen of the spans: hf or vllm (prompt log-probs); "
                "auto as for --verify-engine.",
            )
        )
    options += [
        option(
            ENGINE,
            "--vllm-gpu-memory",
            type=float,
            default=default_of(EngineConfig, "gpu_memory_utilization"),
            show_default=True,
            help="vLLM's share of the GPU (gpu_memory_utilization), built before the HF "
            "model, which gets the rest.",
        ),
        option(
            ENGINE,
            "--deterministic",
            is_flag=True,
            help="vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1; GPU only).",
        ),
        option(
            ENGINE,
            "--targets-per-forward",
            type=int,
            default=default_of(EngineConfig, "targets_per_forward"),
            show_default=True,
            help="Targets searched together, their GCG forwards shared (fills a GPU that one small model's "
            "candidates leave idle); 0: auto (1 on the CPU, by model size on a GPU).",
        ),
    ]
    return lambda f: stack(f, options)


def calibration_options(f):
    """Memorized or merely predictable: the calibrated verdict of every memorized span (scanner/measures/calibration.py)."""
    return stack(
        f,
        [
            option(
                CALIBRATION,
                "--reference-model",
                default=None,
                help="A model that did not see the corpus (HF dir, hub id or .gguf; any tokenizer): a "
                "memorized span it also writes, or finds nearly as likely, is marked predictable.",
            ),
            option(
                CALIBRATION,
                "--reference-margin",
                type=float,
                default=default_of(CalibrationConfig, "nll_margin"),
                show_default=True,
                help="Nats per token: the reference's NLL of a span within this of the model's = predictable.",
            ),
            option(
                CALIBRATION,
                "--calibration-prompts",
                type=int,
                default=default_of(CalibrationConfig, "random_prompts"),
                show_default=True,
                help="Self-calibration: unrelated prompts per memorized span (0: off).",
            ),
        ],
    )


def calibration_config(o: dict) -> CalibrationConfig:
    # The reference model's files are checked by the API (scanner/api.py check_reference) before any work.
    return CalibrationConfig(
        reference_model=o["reference_model"],
        nll_margin=o["reference_margin"],
        random_prompts=o["calibration_prompts"],
        seed=o["seed"],
    )


def engine_config(o: dict) -> EngineConfig:
    # `acr` has no screen: its engines never include a vLLM screener.
    return EngineConfig(
        verify=o["verify_engine"],
        screen=o.get("screen_engine", "hf"),
        gpu_memory_utilization=o["vllm_gpu_memory"],
        deterministic=o["deterministic"],
        targets_per_forward=o["targets_per_forward"],
    )


def model_config(o: dict) -> ModelConfig:
    return ModelConfig(
        model=o["model"],
        revision=o["revision"],
        device=o["device"],
        dtype=o["dtype"],
        threads=o["threads"],
        trust_remote_code=o["trust_remote_code"],
    )


def prompt_config(o: dict) -> PromptConfig:
    return PromptConfig(
        chat=o["chat"],
        system_prompt=o["system_prompt"],
        instruction=o["instruction"],
        bos=o["bos"],
        allow_non_ascii=o["allow_non_ascii"],
    )


def search_config(o: dict) -> SearchConfig:
    base = SearchConfig.paper() if o["schedule"] == "paper" else SearchConfig()
    gcg = {
        k: v
        for k, v in (("top_k", o["top_k"]), ("num_candidates", o["candidates"]), ("loss", o["loss"]))
        if v is not None
    }
    steps = {"paper_steps": o["steps"]} if o["schedule"] == "paper" else {"decide_steps": o["steps"]}
    gcg["draft"] = DraftConfig(
        model=o["draft_model"],
        probe_size=o["probe_size"],
        reduction=o["probe_reduction"],
        min_kept=o["probe_min_kept"],
    )
    fields = {
        "tau": o["tau"],
        "seed": o["seed"],
        "cap_factor": o["cap_factor"],
        "fragile_margin": o["fragile_margin"],
        "gcg": GCGConfig(**{**base.gcg.__dict__, **gcg}),
    }
    fields.update({k: v for k, v in steps.items() if v is not None})
    optional = ("restarts", "early_reject", "reject_after", "reject_min_right", "reject_stall")
    fields.update({name: o[name] for name in optional if o.get(name) is not None})
    fields["bound_unmemorized"] = o["bound_unmemorized"]
    return SearchConfig(**{**base.__dict__, **fields})


def scan_options(f):
    return stack(
        f,
        [
            option(
                CORPUS,
                "--out",
                "out",
                required=True,
                help="Run directory (created, or resumed when it exists).",
            ),
            option(
                CORPUS,
                "--text-column",
                default=default_of(CorpusConfig, "text_column"),
                show_default=True,
                help="The corpus column that holds the text.",
            ),
            option(CORPUS, "--id-column", default=None, help="Default: id, else doc_id, else file:row."),
            option(
                CORPUS, "--keep-columns", default="", help="Comma-separated corpus columns carried through."
            ),
            option(
                CORPUS,
                "--allow-duplicate-ids",
                is_flag=True,
                help="Scan documents that share an id (spans are keyed by their corpus row); refused otherwise.",
            ),
            option(
                SPANS,
                "--span-tokens",
                type=int,
                default=default_of(SpanConfig, "span_tokens"),
                show_default=True,
                help="Tokens per span: the text a verdict is about.",
            ),
            option(
                SPANS,
                "--stride",
                type=int,
                default=None,
                help="Default: --span-tokens; larger only with --allow-gaps.",
            ),
            option(
                SPANS,
                "--allow-gaps",
                is_flag=True,
                help="Admit a --stride larger than --span-tokens (text between "
                "windows is never scanned: a sample, not a scan).",
            ),
            option(
                SPANS,
                "--anchors/--no-anchors",
                default=default_of(SpanConfig, "anchors"),
                show_default=True,
                help="Add spans aligned to runs of teacher-forced greedy matches, so a memorized passage "
                "a span long is not split across two windows (stages/anchor.py).",
            ),
            option(
                SPANS,
                "--anchor-min-run",
                type=int,
                default=None,
                help="Greedy matches a run needs to get anchored spans; default: --span-tokens minus 4.",
            ),
            option(
                SPANS,
                "--anchor-max-gap",
                type=int,
                default=default_of(SpanConfig, "anchor_max_gap"),
                show_default=True,
                help="Consecutive misses bridged inside a run of matches.",
            ),
            option(
                EXTRACTION,
                "--pz-top-k",
                type=int,
                default=default_of(ExtractionConfig, "top_k"),
                show_default=True,
                help="p_z: k of the top-k sampling scheme (Hayes et al. 2024; greedy p_z is always given).",
            ),
            option(
                EXTRACTION,
                "--pz-temperature",
                type=float,
                default=default_of(ExtractionConfig, "temperature"),
                show_default=True,
                help="p_z: temperature of the top-k sampling scheme.",
            ),
            option(
                EXTRACTION,
                "--pz-n",
                type=int,
                default=default_of(ExtractionConfig, "n"),
                show_default=True,
                help="(n, p)-discoverable: samples an extractor draws.",
            ),
            option(
                EXTRACTION,
                "--pz-p",
                type=float,
                default=default_of(ExtractionConfig, "p"),
                show_default=True,
                help="(n, p)-discoverable: the chance of one exact sample required.",
            ),
            option(
                SPANS,
                "--context-tokens",
                type=int,
                default=default_of(ScreenConfig, "context_tokens"),
                show_default=True,
                help="Preceding document tokens screened with each span (and the longest certificate).",
            ),
            option(
                SPANS,
                "--certificate-min-match",
                type=float,
                default=default_of(ScreenConfig, "certificate_min_match"),
                show_default=True,
                help="Screen: span and certificate rows only for spans whose window reaches this "
                "greedy-match rate (0: every span, the exhaustive screen).",
            ),
            option(
                SPANS,
                "--certificate-max-tokens",
                type=int,
                default=None,
                help="Screen: the longest natural-prefix certificate tried (default: one token shorter than the "
                "span, the longest that proves ACR > 1; at most --context-tokens).",
            ),
            option(
                SPANS,
                "--screen-window",
                type=click.Choice(SCREEN_WINDOWS),
                default=default_of(ScreenConfig, "window"),
                show_default=True,
                help="Screen: window statistics from one row per span with exactly --context-tokens before it "
                "(exact), or from one causal pass over long chunks of each document, each span seeing at "
                "least --context-tokens before it (stream); auto: stream unless a chat template's suffix "
                "sits between context and span.",
            ),
            option(
                SPANS,
                "--chunk-tokens",
                type=int,
                default=default_of(ScreenConfig, "chunk_tokens"),
                show_default=True,
                help="Screen: document tokens per streamed chunk (the model's positions cap it).",
            ),
            option(
                SPANS,
                "--min-match-rate",
                type=float,
                default=default_of(ScanConfig, "min_match_rate"),
                show_default=True,
                help="Screen: spans below this greedy-match rate and without a certificate are not searched.",
            ),
            option(
                BUDGET,
                "--max-candidates-per-doc",
                type=int,
                default=None,
                help="Keep at most this many candidates of each document; default: all.",
            ),
            option(
                BUDGET,
                "--max-candidates",
                type=int,
                default=None,
                help="Search at most this many candidates, corpus-wide, best screen evidence first; the "
                "rest stay not_searched.",
            ),
            option(
                BUDGET,
                "--search-budget",
                default=None,
                help="Decide candidates best-first, then shrink the decided prompts, until this is spent: GCG "
                "steps ('20000steps') or search seconds summed over workers ('3600s', '90m', '2h'); "
                "'auto' decides until fewer than 1 of the last 64 decided candidates was memorized "
                "('auto:M/W' sets the rule, 'auto:2h' or 'auto:1/64:2h' adds a ceiling); the "
                "undecided stay not_searched, with the reason.",
            ),
            option(
                BUDGET,
                "--audit-sample",
                default=default_of(ScanConfig, "audit_sample"),
                show_default=True,
                envvar="ACR_AUDIT_SAMPLE",
                show_envvar=True,
                help="Recall audit: after the budgeted search, search spans drawn at random (seeded, stratified by "
                "screen score) from the candidates left unsearched and the spans the screen dropped, and "
                "estimate with an exact interval how many memorized spans those still hold (recall.json, "
                "status, report). Its size follows the work: a share of the seconds the budgeted search "
                "spent ('25%') or a time ('10m'), bought at this scan's measured seconds per search (at "
                "most 64 searches; none when the share buys less than one search), or a number of "
                "searches ('16'). 0: no audit. Outside --search-budget.",
            ),
            option(
                BUDGET,
                "--tighten",
                is_flag=True,
                help="Also shrink the prompts of spans their natural-prefix certificate settled (with the "
                "decided ones, once every candidate has its verdict, while budget remains), keeping "
                "the shorter prompt.",
            ),
            option(
                BUDGET,
                "--unit-size",
                type=int,
                default=default_of(ScanConfig, "unit_size"),
                show_default=True,
                help="Candidates per search unit, the resumable unit of the search phase.",
            ),
            option(
                CORPUS,
                "--docs-per-shard",
                type=int,
                default=default_of(ScanConfig, "docs_per_shard"),
                show_default=True,
                help="Documents per shard, the resumable unit of the screen.",
            ),
            option(
                CORPUS,
                "--work-text-tokens",
                type=int,
                default=default_of(ScanConfig, "work_text_tokens"),
                show_default=True,
                help="Evidence: a prompt that shares a run of this many tokens with its document is "
                "prompt_source work_text (certificates always are); else free.",
            ),
            option(
                PASSAGES,
                "--extend-tokens",
                type=int,
                default=default_of(PassageConfig, "extend_tokens"),
                show_default=True,
                help="Passages: greedy generation this many tokens past each memorized passage, checked "
                "against the document (0: no extension). Changing it rebuilds passages only.",
            ),
            option(
                PASSAGES,
                "--shared-text-min-docs",
                type=int,
                default=None,
                help="Passages: text held by at least this many documents is shared text (a header, a licence), "
                "shown once in the report and not counted as a book's own. Default: half the corpus's "
                "documents, at least 3. Changing it rebuilds passages only.",
            ),
        ],
    )


def executor_options(f):
    return stack(
        f,
        [
            option(
                EXECUTOR,
                "--executor",
                default=default_of(ExecutorConfig, "kind"),
                show_default=True,
                type=click.Choice(EXECUTORS),
                help="local: this process; ray: long-lived actors on a Ray cluster.",
            ),
            option(
                EXECUTOR,
                "--ray-address",
                default=None,
                help="Ray cluster to join ('auto': the one this job runs in); default: start a local Ray.",
            ),
            option(
                EXECUTOR,
                "--num-actors",
                type=int,
                default=None,
                help="Ray actors; default: one per GPU slot, else one per --cpus-per-actor CPUs.",
            ),
            option(
                EXECUTOR,
                "--gpus-per-actor",
                type=float,
                default=None,
                help="GPUs per actor; default 1 where the cluster has GPUs, else 0 (CPU actors).",
            ),
            option(
                EXECUTOR,
                "--cpus-per-actor",
                type=float,
                default=default_of(ExecutorConfig, "cpus_per_actor"),
                show_default=True,
                help="CPUs each Ray actor reserves; its torch threads unless --threads.",
            ),
            option(
                EXECUTOR,
                "--max-retries",
                type=int,
                default=default_of(ExecutorConfig, "max_retries"),
                show_default=True,
                help="Re-runs of a shard whose actor died or whose node was lost.",
            ),
            option(
                EXECUTOR,
                "--hung-after",
                type=float,
                default=default_of(ExecutorConfig, "hung_after"),
                show_default=True,
                help="Seconds a running task's heartbeat may stay still before its Ray actor is killed and "
                "the task re-queued (a retry); 0: never.",
            ),
        ],
    )


def executor_config(o: dict):
    return ExecutorConfig(
        kind=o["executor"],
        address=o["ray_address"],
        num_actors=o["num_actors"],
        gpus_per_actor=o["gpus_per_actor"],
        cpus_per_actor=o["cpus_per_actor"],
        max_retries=o["max_retries"],
        hung_after=o["hung_after"],
    )


def scan_config(o: dict, corpus: str):
    keep = tuple(c for c in o["keep_columns"].split(",") if c)
    return ScanConfig(
        corpus=CorpusConfig(
            path=corpus,
            text_column=o["text_column"],
            id_column=o["id_column"],
            keep_columns=keep,
            allow_duplicate_ids=o["allow_duplicate_ids"],
        ),
        model=model_config(o),
        prompt=prompt_config(o),
        search=search_config(o),
        engines=engine_config(o),
        spans=SpanConfig(
            span_tokens=o["span_tokens"],
            stride=o["stride"],
            allow_gaps=o["allow_gaps"],
            anchors=o["anchors"],
            anchor_min_run=o["anchor_min_run"],
            anchor_max_gap=o["anchor_max_gap"],
        ),
        screen=ScreenConfig(
            context_tokens=o["context_tokens"],
            certificate_min_match=o["certificate_min_match"],
            certificate_max_tokens=o["certificate_max_tokens"],
            window=o["screen_window"],
            chunk_tokens=o["chunk_tokens"],
            extraction=ExtractionConfig(
                top_k=o["pz_top_k"], temperature=o["pz_temperature"], n=o["pz_n"], p=o["pz_p"]
            ),
        ),
        min_match_rate=o["min_match_rate"],
        max_candidates_per_doc=o["max_candidates_per_doc"],
        max_candidates=o["max_candidates"],
        search_budget=o["search_budget"],
        audit_sample=o["audit_sample"],
        tighten=o["tighten"],
        unit_size=o["unit_size"],
        docs_per_shard=o["docs_per_shard"],
        work_text_tokens=o["work_text_tokens"],
        calibration=calibration_config(o),
    )


def passage_config(o: dict):
    return PassageConfig(extend_tokens=o["extend_tokens"], shared_text_min_docs=o["shared_text_min_docs"])


def all_scan_options(f):
    """Every option of `scan` (model, search, engines, calibration, corpus and spans, executor): also
    `plan`'s, which scans a sample with the same options."""
    for decorate in reversed(
        (
            model_options,
            search_options,
            engine_options(screen=True),
            calibration_options,
            scan_options,
            executor_options,
        )
    ):
        f = decorate(f)
    return f
