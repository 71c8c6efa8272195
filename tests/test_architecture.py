"""The house rules of the package (docs/architecture.md), read from the code's own imports.

- the scoring core is pure: no I/O, network, clock or randomness;
- the public API is what `radmatch_audit.__all__` promises, and `import radmatch_audit`
  loads no heavy library;
- the command line sits on top: no module outside `radmatch_audit.cli` imports it, and
  none keeps an argument parser;
- no two modules import each other, directly or round a loop;
- every module has a test file that imports it (tests/<folder>/test_<module>.py).

Every import counts, at module level, inside a function or under TYPE_CHECKING alike.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "inference"
PACKAGE = ROOT / "radmatch_audit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported name) of every import of the file; relative imports made absolute,
    `from a import b` given as `a.b` (the module b, or the name b of a)."""
    name = module_name(path) if ROOT in path.parents else path.stem
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def own_module(name: str) -> str | None:
    """The module of this package that an imported name lives in, or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


# The package's folders, bottom floor first (docs/architecture.md). A module may import its
# own folder and any folder below it, never one above; folders on one floor do not import
# each other. The package's __init__ (the public API) and testing/ (tools for tests and
# benchmarks) stand beside the floors.
FLOORS: list[tuple[str, ...]] = [
    ("core",), ("scoring",), ("files",), ("judges",), ("stages",), ("run",), ("read",),
    ("agreement", "dashboard"), ("hf",), ("cli",),
]
FLOOR_OF = {folder: i for i, floor in enumerate(FLOORS) for folder in floor}
BESIDE = ("testing",)
NO_IO = {"os", "io", "socket", "time", "random", "datetime", "subprocess", "pathlib", "httpx",
         "openai", "outlines", "torch", "transformers", "requests", "urllib", "logging", "aiohttp"}


def folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and module in MODULES and
                                          MODULES[module].name == "__init__.py") else None


def test_the_package_is_its_floors_and_nothing_else():
    """Every module lives in a floor's folder (or testing/); none is left at the top."""
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(FLOOR_OF) | set(BESIDE)
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert loose == ["_moved.py"]  # the old module names, kept importable


def test_a_module_that_moved_still_imports_under_its_old_name():
    """The metric script in users' `evaluate` caches imports radmatch_audit.metric."""
    code = ("import radmatch_audit.metric as old, radmatch_audit.hf.metric as new; "
            "from radmatch_audit.record_io import RecordWriter; "
            "from radmatch_audit.files.record_io import RecordWriter as W; "
            "print(old is new, RecordWriter is W)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stderr


def test_nothing_imports_a_folder_above_it():
    for name, path in MODULES.items():
        folder = folder_of(name)
        if folder is None or folder in BESIDE or name == "radmatch_audit._moved":
            continue
        for line, imported in imports(path):
            target = own_module(imported)
            target_folder = folder_of(target) if target else None
            if target_folder is None or target_folder == folder:
                continue
            where = f"{path.relative_to(REPO)}:{line}"
            assert target_folder not in BESIDE, f"{where} imports {imported}: testing/ serves tests only"
            assert FLOOR_OF[target_folder] < FLOOR_OF[folder], (
                f"{where} imports {imported}: {target_folder}/ is not below {folder}/")


def test_the_core_and_the_scoring_core_do_no_io():
    """core/ and scoring/ import no I/O, network, clock or randomness module: every score is
    recomputed from a record with them alone. (core/thresholds.py reads the package's own
    threshold table through importlib.resources, once, at import.)"""
    for folder in ("core", "scoring"):
        for path in (PACKAGE / folder).glob("*.py"):
            for line, name in imports(path):
                assert name.split(".")[0] not in NO_IO, f"{path.relative_to(REPO)}:{line} imports {name}"


def test_the_floor_checker_sees_an_import_up():
    assert FLOOR_OF["core"] < FLOOR_OF["scoring"] < FLOOR_OF["run"] < FLOOR_OF["cli"]
    assert folder_of("radmatch_audit.core.records") == "core"
    assert folder_of("radmatch_audit.scoring") == "scoring"


def test_public_api():
    import radmatch_audit

    assert sorted(radmatch_audit.__all__) == sorted(
        ["CorpusSummary", "Evaluator", "JudgeConfig", "PairInput", "Record", "evaluate_pairs",
         "read_records", "score_pair", "score_record", "summarize"]
    )
    from radmatch_audit import scoring
    from radmatch_audit.core import records
    from radmatch_audit.files import record_io
    from radmatch_audit.judges import config
    from radmatch_audit.read import corpus, recompute
    from radmatch_audit.run import pipeline

    homes = {"CorpusSummary": corpus, "Evaluator": pipeline, "JudgeConfig": config, "PairInput": records,
             "Record": records, "evaluate_pairs": pipeline, "read_records": record_io, "score_pair": scoring,
             "score_record": scoring, "summarize": corpus}
    for name in radmatch_audit.__all__:  # each public name is the object its module defines
        assert getattr(radmatch_audit, name) is getattr(homes[name], name), name
    assert recompute.score_record is scoring.score_record  # its former home re-exports it


def test_import_radmatch_audit_loads_no_heavy_library():
    heavy = subprocess.run([sys.executable, "-c", "import sys, radmatch_audit; print(sorted(m for m in "
                            "('torch','transformers','outlines','openai') if m in sys.modules))"],
                           capture_output=True, text=True, timeout=60)
    assert heavy.stdout.strip() == "[]", heavy.stderr  # heavy imports wait until a judge is built


def test_the_command_line_is_on_top():
    """Only radmatch_audit.cli imports radmatch_audit.cli, and only it parses arguments
    (testing/ holds tools with a `python -m` of their own, for tests and benchmarks)."""
    outside = [p for p in PACKAGE.rglob("*.py") if not module_name(p).startswith("radmatch_audit.cli")]
    outside.append(REPO / "radmatch_metric.py")
    for path in outside:
        for line, name in imports(path):
            where = f"{path.relative_to(REPO)}:{line}"
            assert not (name + ".").startswith("radmatch_audit.cli."), f"{where} imports {name}"
            if "testing" not in path.parts:
                assert name.split(".")[0] != "argparse", f"{where}: argument parsing belongs in cli/"


KNOWN_CYCLES: list[list[str]] = []  # none left


def test_the_package_has_no_import_cycle():
    graph = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for _, imported in imports(path):
            target = own_module(imported)
            if target and target != name:
                graph[name].add(target)
    cycles = strongly_connected(graph)
    assert not cycles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one node that reach each other (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_the_cycle_finder_finds_a_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


# Modules no test file need import, each with the reason. Keep it short: a module belongs
# here only when importing it in a test cannot be done sensibly (it runs on import).
UNTESTED_BY_IMPORT: dict[str, str] = {}


def test_every_module_has_a_test_file_that_imports_it():
    """A test file imports each module directly (`import m`, `from m import x` or `from
    package import m`): a module reached only through others has no test of its own."""
    imported: set[str] = set()
    for path in (REPO / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    stale = sorted(set(UNTESTED_BY_IMPORT) - set(MODULES))
    assert not stale, f"UNTESTED_BY_IMPORT names modules that do not exist: {stale}"
    missing = sorted(set(MODULES) - imported - set(UNTESTED_BY_IMPORT))
    assert not missing, (
        f"{len(missing)} module(s) with no test file importing them (add "
        f"tests/<folder>/test_<module>.py): {', '.join(missing)}")
