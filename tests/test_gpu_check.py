"""bench/gpu/gpu_check.sh fits one device command: the GPU machine gives a command 10 minutes, and a
session's whole device time is 15, so a limit that overruns loses the steps after it (2026-12-04: four
steps overran limits set before any GPU had timed them)."""

from __future__ import annotations

import re
from pathlib import Path

SCRIPT = (Path(__file__).resolve().parents[1] / "bench" / "gpu" / "gpu_check.sh").read_text()
DEVICE_COMMAND_S = 600  # the device tool's limit for one command


def limits(mode: str) -> dict[str, int]:
    """The `declare -A limit=(...)` of the rehearsal (the `then` branch) or the GPU (the `else` branch)."""
    blocks = re.findall(r"declare -A limit=\((.*?)\)\n", SCRIPT, flags=re.S)
    assert len(blocks) == 2, "gpu_check.sh declares its limits once per mode"
    block = blocks[0] if mode == "rehearsal" else blocks[1]
    return {name: int(seconds) for name, seconds in re.findall(r"\[(\w+)\]=(\d+)", block)}


def test_every_step_has_a_limit_in_both_modes():
    steps = re.findall(r"^step (\w+) ", SCRIPT, flags=re.M)
    assert len(steps) == len(set(steps)) >= 10
    for mode in ("rehearsal", "gpu"):
        assert sorted(limits(mode)) == sorted(steps), mode


def test_the_gpu_limits_fit_the_budget_and_the_budget_fits_one_device_command():
    budget = int(re.search(r'budget="\$\{GPU_CHECK_BUDGET_S:-(\d+)\}"', SCRIPT).group(1))
    grace = int(re.search(r"^grace=(\d+)$", SCRIPT, flags=re.M).group(1))
    gpu = limits("gpu")
    stated = int(re.search(r"# The limits sum to (\d+) s", SCRIPT).group(1))
    assert sum(gpu.values()) == stated, "the comment states the sum of the GPU limits"
    assert sum(gpu.values()) + grace <= budget, gpu
    # The last step may run `grace` past its limit before it is killed; then the summary prints.
    assert budget + grace + 20 <= DEVICE_COMMAND_S
