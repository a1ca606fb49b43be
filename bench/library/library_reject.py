"""Early rejection re-derived on the library model's search trajectories, judged on held-out ones.

The scan's rule (search/reject.py: after `after` GCG steps at a length, a search that has found
nothing ends "not memorized" when its best candidate still gets under `min_right` of the target's
tokens right) was chosen from the validity model's trajectories (bench/search/early_reject.py). Here the
library model's candidates are searched again with the full budget (early rejection off, each span's
own seed, as the scan searches it), recording per step the most target tokens any candidate got right.
With no stall bound the rule only ever cuts a search short, so what it would have done is read off a
full trajectory exactly (`simulate`, calling the rule's own `decide`). The trajectories are split in
two (seeded, memorized and not apart); thresholds are fitted on one half the way the shipped ones
were (`fit`: mid-gap, and at the tightest margin the half allows) and judged on the other: recall of what the full budget finds memorized, and the factor
of GCG steps saved on the rest. The shipped rule and one refitted on the validity trajectories
(bench/search/early_reject_trajectories.json) are judged on the same held-out half.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

from scanner.config import RejectRule
from scanner.search.reject import HOPELESS, decide

AFTERS = (3, 5, 10, 15, 20)


def pick(table: list[dict], count: int, seed: int) -> list[dict]:
    """`count` candidates to search again: those the scan ran GCG on (up to a third), then of those its
    budget never reached the best-ranked (what a larger budget would search next) and a seeded draw of
    the rest, half each."""
    from scanner.measures.budget import rank

    gcg = sorted((r for r in table if r["status"] in ("memorized", "not_memorized")
                  and r["acr_kind"] != "certificate_bound" and (r["steps"] or 0) > 0), key=lambda r: r["span_id"])
    chosen = random.Random(seed).sample(gcg, min(len(gcg), count // 3))
    waiting = rank([r for r in table if r["status"] == "not_searched"])
    following = waiting[: (count - len(chosen)) // 2]
    rest = waiting[len(following):]
    drawn = random.Random(seed + 1).sample(rest, min(len(rest), count - len(chosen) - len(following)))
    return chosen + following + drawn


def record(config, rows: list[dict]) -> list[dict]:
    """Each row's candidate searched as the scan searches it, with early rejection off."""
    from scanner.engine.build import build_engines
    from scanner.run.shard import span_seed
    from scanner.search.miniprompt import measure_many
    from scanner.search.request import Certificate, SearchRequest

    engine = build_engines(config.model, config.prompt, config.engines)
    search = replace(config.search, early_reject=False)
    jobs = [(SearchRequest(r["text"], r["target_ids"], Certificate(r["certificate_prompt"]) if r["certificate_prompt"] else None),
             replace(search, seed=span_seed(search.seed, r["span_id"]))) for r in rows]
    out = []
    for index, result in measure_many(engine, jobs, 1):
        row = rows[index]
        out.append({"span_id": row["span_id"], "category": row.get("category"), "scan_status": row["status"],
                    "scan_steps": row["steps"], "target_tokens": result.target_tokens,
                    "memorized": result.memorized, "steps": result.steps, "wall_s": round(result.wall_s, 2),
                    "attempts": [{k: a[k] for k in ("length", "warm", "steps", "success", "top_rights")}
                                 for a in result.trace]})
    return out


def _eligible(attempts: list[dict]) -> list[dict]:
    """The attempts the rule may stop: optimized ones (not the template alone, not a deletion) up to
    and including the first success (after it nothing is stopped)."""
    out = []
    for a in attempts:
        if a["success"] and a["warm"] in ("none", "deletion"):
            break
        if a["warm"] not in ("none", "deletion"):
            out.append(a)
        if a["success"]:
            break
    return out


def _stop_step(attempt: dict, target_tokens: int, rule: RejectRule) -> int | None:
    """The step at which `rule` would have stopped this attempt, or None. At a success's last step the
    match is found before the rule is asked."""
    tops = attempt["top_rights"]
    for i in range(len(tops) - 1 if attempt["success"] else len(tops)):
        if decide(tops[: i + 1], target_tokens, rule) == HOPELESS:
            return i + 1
    return None


def simulate(trajectory: dict, rule: RejectRule) -> tuple[bool, int]:
    """(memorized, steps spent) of the same search with `rule` on (stall 0: the rule only cuts, and a
    cut ends the whole search "not memorized")."""
    eligible = {id(a) for a in _eligible(trajectory["attempts"])}
    spent = 0
    for a in trajectory["attempts"]:
        stop = _stop_step(a, trajectory["target_tokens"], rule) if id(a) in eligible else None
        if stop is not None:
            return False, spent + stop
        spent += a["steps"]
    return trajectory["memorized"], spent


def judge(trajectories: list[dict], rule: RejectRule) -> dict:
    found = [t for t in trajectories if t["memorized"]]
    rest = [t for t in trajectories if not t["memorized"]]
    kept = sum(simulate(t, rule)[0] for t in found)
    before = sum(t["steps"] for t in rest)
    after = sum(simulate(t, rule)[1] for t in rest)
    return {"rule": {"after": rule.after, "min_right": rule.min_right}, "memorized_full": len(found),
            "memorized_kept": kept, "recall": round(kept / len(found), 4) if found else None,
            "not_memorized": len(rest), "steps_before": before, "steps_after": after,
            "factor": round(before / after, 2) if after else None}


def _shares(trajectories: list[dict], after: int) -> tuple[list[float], list[float]]:
    """Best shares right by step `after`: of succeeding attempts the rule could stop (they ran past it),
    and of every eligible attempt of a not-memorized target that ran that long."""
    won, lost = [], []
    for t in trajectories:
        for a in _eligible(t["attempts"]):
            tops = a["top_rights"]
            share = max(tops[:after], default=0) / t["target_tokens"]
            if a["success"] and len(tops) > after:
                won.append(share)
            elif not t["memorized"] and len(tops) >= after:
                lost.append(share)
    return won, lost


def _widest_gap(lost: list[float], upper: float) -> float:
    """The middle of the widest gap between the not-memorized shares below `upper` (0 and `upper`
    included): the shipped threshold was chosen so, mid-gap between unseen text and recalled text."""
    points = sorted({0.0, upper, *(x for x in lost if x < upper)})
    low, high = max(zip(points, points[1:], strict=False), key=lambda p: p[1] - p[0], default=(0.0, upper))
    return round((low + high) / 2, 3)


def _tightest(lost: list[float], upper: float) -> float:
    """Mid-way between `upper` and the highest not-memorized share below it: every not-memorized
    attempt under it is cut, at the smallest margin these trajectories allow."""
    return round((upper + max((x for x in lost if x < upper), default=0.0)) / 2, 3)


FITS = {"widest_gap": _widest_gap, "tightest": _tightest}


def fit(trajectories: list[dict], how: str = "widest_gap") -> RejectRule:
    """For each step count, a threshold below the lowest share a succeeding attempt the rule could stop
    had by then (`how`: mid-way in the widest gap of the not-memorized shares below it, or mid-way to
    the highest of them); the step count that then saves the most steps on these trajectories while
    keeping every memorized one (the fewest steps first on a tie)."""
    best, best_steps = None, None
    for after in AFTERS:
        won, lost = _shares(trajectories, after)
        rule = RejectRule(after=after, min_right=FITS[how](lost, min(won, default=1.0)), stall=0)
        result = judge(trajectories, rule)
        if result["memorized_kept"] == result["memorized_full"] and (best is None or result["steps_after"] < best_steps):
            best, best_steps = rule, result["steps_after"]
    return best or RejectRule(after=max(AFTERS), min_right=0.0, stall=0)


def split(trajectories: list[dict], seed: int) -> tuple[list[dict], list[dict]]:
    """Two halves, memorized and not-memorized trajectories dealt out alternately after a seeded shuffle."""
    rng, fit_half, held = random.Random(seed), [], []
    for group in ([t for t in trajectories if t["memorized"]], [t for t in trajectories if not t["memorized"]]):
        group = sorted(group, key=lambda t: t["span_id"])
        rng.shuffle(group)
        fit_half += group[0::2]
        held += group[1::2]
    return fit_half, held


def validity_trajectories(path: Path) -> list[dict]:
    """bench/search/early_reject_trajectories.json's full-budget searches in this module's form."""
    record_ = json.loads(path.read_text())
    return [{"span_id": f"validity-{i}", "target_tokens": r["target_tokens"], "memorized": r["memorized"],
             "steps": r["steps"], "attempts": r["attempts"]} for i, r in enumerate(record_["full"])]


def rederive(trajectories: list[dict], shipped: RejectRule, validity: Path, seed: int) -> dict:
    """The shipped rule, rules fitted on one half (both ways) and on the validity trajectories, judged
    on the held-out half (and the shipped one on all)."""
    fit_half, held = split(trajectories, seed)
    out = {"trajectories": len(trajectories), "fit_half": len(fit_half), "held_out": len(held),
           "shipped_on_all": judge(trajectories, shipped), "shipped_on_held_out": judge(held, shipped)}
    for how in FITS:
        rule = fit(fit_half, how)
        out[f"refit_{how}_on_fit_half"] = judge(fit_half, rule)
        out[f"refit_{how}_on_held_out"] = judge(held, rule)
    if validity.is_file():
        from_validity = fit(validity_trajectories(validity))
        out["validity_refit_on_held_out"] = judge(held, from_validity)
        out["validity_refit_on_all"] = judge(trajectories, from_validity)
    return out
