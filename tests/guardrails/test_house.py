"""The house rules: folders that show the architecture and no import cycle.

- no import cycle anywhere in ``console/``: every import counts (top level, inside a
  function, under ``TYPE_CHECKING``), since each is a dependency a reader must follow;
- no folder of ``console/`` holds more than 20 modules, no module is over 450 lines;
- the import-linter contracts that keep ``jobs/`` and ``hostprogs/`` in their rooms each
  catch a deliberate violation (the contracts themselves run in test_guardrails.py).

Each check also runs on a deliberately bad tree, so a check that passes everything fails.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MAX_MODULES_PER_FOLDER = 20
MAX_LINES_PER_MODULE = 450


def module_paths(root: Path) -> dict[str, Path]:
    """Every module under ``root/console`` by its dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for path in sorted((root / "console").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        yield source
        # ``from pkg import name``: name may be a sub-module of pkg.
        yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the console modules it imports, by every import statement in its file."""
    modules = module_paths(root)

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _imported(node, name, path.name == "__init__.py"):
                if target == "console" or target.startswith("console."):
                    found = owner(target)
                    if found is not None and found != name:
                        graph[name].add(found)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        cycles.append(sorted(group))
    return cycles


def crowded_folders(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for folder in sorted(p for p in (root / "console").rglob("*") if p.is_dir()):
        n = len(list(folder.glob("*.py")))
        if n > MAX_MODULES_PER_FOLDER:
            counts[str(folder.relative_to(root))] = n
    return counts


def long_modules(root: Path) -> dict[str, int]:
    lengths = {
        str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines())
        for p in (root / "console").rglob("*.py")
    }
    return {path: n for path, n in sorted(lengths.items()) if n > MAX_LINES_PER_MODULE}


def test_no_import_cycle_in_console() -> None:
    cycles = import_cycles(import_graph(ROOT))
    assert cycles == [], (
        "import cycles (every import counts, TYPE_CHECKING and function-level included); "
        "move the shared type down, or pass a callback / post a message up:\n"
        + "\n".join(" <-> ".join(c) for c in cycles)
    )


def test_folders_and_modules_stay_small() -> None:
    assert crowded_folders(ROOT) == {}, f"over {MAX_MODULES_PER_FOLDER} modules in a folder"
    assert long_modules(ROOT) == {}, f"modules over {MAX_LINES_PER_MODULE} lines"


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(
        ROOT / "console", tmp_path / "console", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tmp_path


def test_the_cycle_finder_finds_cycles_of_every_kind(tree_copy: Path) -> None:
    pkg = tree_copy / "console" / "jobs" / "plan"
    # Type-only, inside a function, and relative: each must count.
    (pkg / "cyc_a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from console.jobs.plan import cyc_b\n"
    )
    (pkg / "cyc_b.py").write_text("def f() -> None:\n    from . import cyc_c\n")
    (pkg / "cyc_c.py").write_text("import console.jobs.plan.cyc_a\n")
    for n in range(MAX_MODULES_PER_FOLDER):
        (tree_copy / "console" / "logs" / f"extra_{n}.py").write_text("x = 1\n")
    (tree_copy / "console" / "names.py").write_text("x = 1\n" * (MAX_LINES_PER_MODULE + 1))

    cycles = import_cycles(import_graph(tree_copy))
    assert ["console.jobs.plan.cyc_a", "console.jobs.plan.cyc_b", "console.jobs.plan.cyc_c"] in (
        cycles
    )
    assert "console/logs" in crowded_folders(tree_copy)
    assert "console/names.py" in long_modules(tree_copy)


@pytest.mark.parametrize(
    ("module", "source", "contract"),
    [
        (
            "jobs/plan/guardrail_reach.py",
            "import console.jobs.ssh.runner\n",
            "Planning and pre-flight never reach a backend",
        ),
        (
            "jobs/preflight/guardrail_reach.py",
            "import console.jobs.slurm.queue\n",
            "Planning and pre-flight never reach a backend",
        ),
        (
            "jobs/ssh/guardrail_reach.py",
            "import console.jobs.slurm.state\n",
            "The SSH backend never imports Slurm",
        ),
        (
            "hostprogs/sampler/guardrail_reach.py",
            "import console.inventory\n",
            "Host programs import nothing of the console but themselves",
        ),
    ],
)
def test_each_room_contract_catches_a_violation(
    tree_copy: Path, module: str, source: str, contract: str
) -> None:
    (tree_copy / "console" / module).write_text(source)
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree_copy,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0, done.stdout
    # lint-imports wraps long contract names; the first words and the culprit are enough.
    assert contract[:30] in done.stdout, done.stdout[-3000:]
    culprit = "console." + module.removesuffix(".py").replace("/", ".")
    assert f"{culprit} -> " in done.stdout, done.stdout[-3000:]
