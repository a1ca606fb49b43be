"""Option lists several CLI tests share."""

# Word salad the model never saw, searched to the end of its schedule: every span a candidate, no early
# rejection, 96 candidates a step, no calibration.
SALAD = (
    "--span-tokens 12 --stride 12 --context-tokens 16 --min-match-rate 0 --candidates 96 --top-k 64 "
    "--restarts 0 --no-early-reject --calibration-prompts 0"
).split()


def salad_search(steps: int, unit_size: int, *more: str) -> list[str]:
    """SALAD with `steps` GCG steps at every length a search tries and `unit_size` candidates to a unit."""
    return [*SALAD, "--steps", str(steps), "--unit-size", str(unit_size), *more]


# The tiny model's corpus in fine spans: 12 tokens every 2, candidates at a 0.8 greedy match, a 10-step
# search of 64 candidates, no restarts or calibration, one candidate to a unit.
FINE_SPANS = (
    "--span-tokens 12 --stride 2 --context-tokens 16 --min-match-rate 0.8 --steps 10 --candidates 64 "
    "--top-k 64 --restarts 0 --calibration-prompts 0 --unit-size 1"
).split()
