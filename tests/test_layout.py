"""The layout by role holds: every import inside the package points to its own folder or one below
(docs/architecture.md's floors), no module imports another in a cycle, and the package root holds only
the modules every folder shares and the API above them. Imports are read from the source (ast), lazy ones
included."""

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "scanner"
# docs/architecture.md: a folder may import its own modules and any folder on a lower floor.
FLOORS = {
    "__main__": 11,
    "cli": 10,
    "api": 9,
    "run": 8,
    "studies": 8,
    "executors": 7,
    "stages": 6,
    "search": 5,
    "results": 5,
    "ingest": 5,
    "engine": 4,
    "storage": 4,
    "measures": 3,
    "config": 2,
    "confine": 2,
    "schema": 1,
    "errors": 1,
    "stop": 1,
    "__init__": 0,
}
ROOT_MODULES = {"__init__.py", "__main__.py", "api.py", "config.py", "confine.py", "errors.py", "stop.py"}
# The package root names the API (scanner.measure, scanner.scan) and loads it on first use (PEP 562), so
# `import scanner`, which every module does for __version__, imports nothing else.
FACADE = {("scanner", "scanner.api")}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imported(path: Path, known: set[str]) -> set[str]:
    """The package's modules that `path` imports (a `from scanner.x import y` of a module y counts y)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("scanner")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scanner"):
            subs = {f"{node.module}.{a.name}" for a in node.names}
            names |= {s for s in subs if s in known} or {node.module}
    return {n for n in names if n in known and n != "scanner"}


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imported(p, set(mods)) for m, p in mods.items()}


def test_every_folder_has_a_floor():
    assert {folder(m) for m in modules()} <= set(FLOORS), "a new folder needs its floor here and in the doc"


def test_importing_the_package_loads_no_module_of_it():
    code = "import sys, scanner; print(sorted(m for m in sys.modules if m.startswith('scanner.')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_package_root_holds_only_the_shared_modules():
    assert {p.name for p in PACKAGE.glob("*.py")} == ROOT_MODULES


def test_imports_point_down():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            here, there = folder(module), folder(target)
            if here != there and FLOORS[there] >= FLOORS[here] and (module, target) not in FACADE:
                upward.append(f"{module} -> {target}")
    assert not upward, f"imports that do not point down: {upward}"


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state[nxt] == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif state[nxt] == 0:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if state[node] == 0:
            visit(node, [node])
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("pure", ["measures", "storage", "results", "config", "schema"])
def test_pure_and_reading_folders_import_no_torch_at_module_level(pure):
    heavy = []
    for module, path in modules().items():
        if folder(module) != pure:
            continue
        for node in ast.parse(path.read_text()).body:  # module level only; lazy imports may load torch
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                heavy += [
                    f"{module}: {n}" for n in names if n.split(".")[0] in ("torch", "transformers", "vllm")
                ]
    assert not heavy, f"{pure}/ imports a heavy library at module level: {heavy}"


def test_configs_and_the_schema_never_import_torch_even_lazily():
    """Configs hold no live objects and never look at the machine: "auto" is decided in engine/."""
    heavy = []
    for module, path in modules().items():
        if folder(module) not in ("config", "schema"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                heavy += [
                    f"{module}: {n}" for n in names if n.split(".")[0] in ("torch", "transformers", "vllm")
                ]
    assert not heavy, heavy
