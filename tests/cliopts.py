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
