"""Option lists several CLI tests share."""


def salad_search(steps: int, unit_size: int, *more: str) -> list[str]:
    """Slow candidates: 12-token spans of word salad the model never saw, every span a candidate, no early
    rejection, so each search runs its whole schedule (`steps` GCG steps at every length it tries, 96
    candidates a step), `unit_size` candidates to a unit."""
    return [
        *("--span-tokens", "12", "--stride", "12", "--context-tokens", "16", "--min-match-rate", "0"),
        *(
            "--steps",
            str(steps),
            "--candidates",
            "96",
            "--top-k",
            "64",
            "--restarts",
            "0",
            "--no-early-reject",
        ),
        *("--calibration-prompts", "0", "--unit-size", str(unit_size), *more),
    ]
