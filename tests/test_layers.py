"""Layers import downwards only, and no module imports another's private names.

The order below is the package's architecture (README, DEVELOPERS: models <- formulations <-
solvers <- workflows/sim/federation <- service/commands), lowest first. A module may import
from its own unit (the longest declared prefix of its name) and from units in lower layers;
never from a unit in its own layer (sideways) or above. Every import counts: at module level,
inside functions (lazy imports) and under ``TYPE_CHECKING``. Every module of the package must
fall in a declared unit, so a new package has to be placed here before it can land. There is
no exception list: an import that breaks the order is fixed by moving the concept down.

A private module (``importers/_source.py``) is its package's: only its siblings import it.
Attribute access to another object's private members is ruff's ``SLF001`` (pyproject.toml,
run by tests/test_lint.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hyperplace"

#: Lowest first. Units in one tuple are one layer: they may not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("hyperplace", "hyperplace.errors", "hyperplace.deadline",  # version, errors, the clock,
     "hyperplace.words"),                      # numbers in words
    ("hyperplace.io",),                        # whole-file writes, document reading
    ("hyperplace.models",),                    # domain objects and domain rules
    ("hyperplace.instances",),                 # bundled, generated and imported instances
    ("hyperplace.costmodel",),                 # the fitted cost model and the one speed model
    ("hyperplace.check",),                     # the independent checker
    ("hyperplace.formulations",),              # problems as backend-independent data
    ("hyperplace.solvers.params",),            # tunables of every solver and the budget
    ("hyperplace.solvers.budget",),            # one solve's deadlines
    ("hyperplace.solvers.backends", "hyperplace.solvers.split",  # exact backends; the split's
     "hyperplace.solvers.schedule"),           # and the over-time schedule's solvers
    ("hyperplace.solvers.heuristics",),        # greedy rules, warm starts, stop sets
    ("hyperplace.solvers.driver",),            # solve_placement
    ("hyperplace.solvers.decompose",),         # rounds solved cluster by cluster
    ("hyperplace.solvers.workflows", "hyperplace.solvers"),  # what calls the driver
    ("hyperplace.baselines",),                 # the peers' rules
    ("hyperplace.federation", "hyperplace.sim", "hyperplace.draw"),
    ("hyperplace.fedsim",),                    # federation over time (uses both above)
    ("hyperplace.benchkit", "hyperplace.client"),
    ("hyperplace.service",),
    ("hyperplace.commands",),
    ("hyperplace.cli",),
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def unit_of(module: str) -> str | None:
    """The longest declared unit that ``module`` is or lies in."""
    best = None
    for unit in RANK:
        if (module == unit or module.startswith(unit + ".")) and (
                best is None or len(unit) > len(best)):
            best = unit
    return best


def imports(path: Path, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) of every import in the file, relative ones resolved;
    ``from pkg import sub`` names the submodule when ``sub`` is one."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                parent = parent[:len(parent) - node.level + (1 if is_package else 0)]
                base = ".".join(parent + ([base] if base else []))
            names = [a.name for a in node.names]
            subs = [n for n in names if f"{base}.{n}" in MODULES]
            out += [(node.lineno, f"{base}.{n}", []) for n in subs]
            rest = [n for n in names if n not in subs]
            if rest or not subs:
                out.append((node.lineno, base, rest))
    return out


def test_every_module_is_in_a_declared_layer():
    assert MODULES
    missing = [m for m in MODULES if unit_of(m) is None]
    assert not missing, f"place these in LAYERS: {missing}"


def test_layers_import_downwards_only():
    bad = []
    for module, path in MODULES.items():
        src = unit_of(module)
        assert src is not None
        for line, target, _ in imports(path, module):
            if not (target == "hyperplace" or target.startswith("hyperplace.")):
                continue
            dst = unit_of(target)
            if dst is None or dst == src:
                continue
            if RANK[dst] >= RANK[src]:
                how = "sideways" if RANK[dst] == RANK[src] else "upwards"
                bad.append(f"{path.relative_to(ROOT)}:{line}: {src} imports {target} ({how})")
    assert not bad, "\n".join(bad)


def test_no_private_name_is_imported_across_modules():
    bad = []
    for module, path in MODULES.items():
        for line, target, names in imports(path, module):
            if target == module:
                continue
            parent = target.rsplit(".", 1)[0]
            if target.split(".")[-1].startswith("_") and not target.endswith("__") and \
                    not (module == parent or module.startswith(parent + ".")):  # its package's
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports private module {target}")
            bad += [f"{path.relative_to(ROOT)}:{line}: imports {target}.{n}" for n in names
                    if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source, target, ok", [
    ("hyperplace.solvers.driver", "hyperplace.solvers.heuristics.greedy", True),
    ("hyperplace.solvers.heuristics.greedy", "hyperplace.solvers.driver", False),
    ("hyperplace.solvers.driver", "hyperplace.solvers.driver", True),
    ("hyperplace.sim.loop", "hyperplace.federation.solve", False),  # sideways
    ("hyperplace.models.plan", "hyperplace.formulations.mapping", False),
])
def test_the_rule_itself(source, target, ok):
    """The check above can fail: an upward and a sideways import are refused."""
    src, dst = unit_of(source), unit_of(target)
    assert src is not None and dst is not None
    assert (dst == src or RANK[dst] < RANK[src]) is ok


#: Tests of the whole project rather than of one package (README examples, these rules, lint).
PROJECT_TESTS = {"test_examples.py", "test_layers.py", "test_lint.py"}


def test_tests_mirror_the_package():
    """A test file sits in ``tests/<package>/`` of the package it tests (``tests/sim/`` for
    ``hyperplace/sim``), or at ``tests/`` when it tests the whole project; basenames are unique
    across the tree (pytest imports test files by basename)."""
    tests = ROOT / "tests"
    files = sorted(tests.rglob("test_*.py"))
    misplaced = [str(f.relative_to(tests)) for f in files
                 if not (f.parent == tests and f.name in PROJECT_TESTS)
                 and not (f.parent.parent == tests and (PACKAGE / f.parent.name).is_dir())]
    assert misplaced == [], f"put these in tests/<package>/: {misplaced}"
    names = [f.name for f in files]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
