"""The verdict class of a span measured on two models (`acr-scan compare`): pure, no I/O.

The completion test is the one a model builder runs after unlearning: the span's first k tokens greedily
yield the rest (discoverable, Carlini et al.), or greedy decoding after its document context reproduces
it (p_z greedy = 1). ACR's verdict is memorized at tau with a prompt verified by generation. The paper's
finding is the second class: the completion test that passed on A fails on B, yet B still compresses the
span into a short prompt.
"""

from __future__ import annotations

CLASSES = (
    "still_memorized",
    "forgotten_by_completion_still_compressible",
    "forgotten",
    "completion_only",
    "newly_memorized",
    "not_memorized",
    "failed",
)


def completion(discoverable: bool | None, pz_greedy: float | None) -> bool:
    """The completion test passed: k-prefix discoverable, or greedily generated from its context."""
    return bool(discoverable) or (pz_greedy is not None and pz_greedy >= 1.0)


def verdict_class(a_memorized: bool, b_memorized: bool | None, a_completion: bool, b_completion: bool) -> str:
    """still_memorized: ACR flags it on both (and completion did not go from pass to fail);
    forgotten_by_completion_still_compressible: flagged on both, completion passed on A and fails on B;
    forgotten: flagged on A, on B neither ACR nor completion; completion_only: flagged on A, on B ACR does
    not flag it but completion still passes; newly_memorized: flagged on B only; not_memorized: on neither;
    failed: B's measures raised (b_memorized None)."""
    if b_memorized is None:
        return "failed"
    if a_memorized and b_memorized:
        return (
            "forgotten_by_completion_still_compressible"
            if a_completion and not b_completion
            else "still_memorized"
        )
    if a_memorized:
        return "completion_only" if b_completion else "forgotten"
    return "newly_memorized" if b_memorized else "not_memorized"


def counts(classes: list[str]) -> dict[str, int]:
    """{class: rows} over every class, zeros included, in CLASSES' order."""
    out = dict.fromkeys(CLASSES, 0)
    for name in classes:
        out[name] += 1
    return out
