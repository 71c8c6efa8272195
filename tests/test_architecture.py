"""The house rules of the package (docs/architecture.md), read from the code's own imports.

- the scoring core is pure: no I/O, network, clock or randomness;
- the public API is what `radmatch_audit.__all__` promises, and `import radmatch_audit`
  loads no heavy library;
- the command line sits on top: no module outside `radmatch_audit.cli` imports it, and
  none keeps an argument parser;
- no two modules import each other, directly or round a loop.

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


def test_scoring_core_is_pure():
    """The scoring package imports no I/O, network, clock or randomness module."""
    banned = {"os", "io", "socket", "time", "random", "datetime", "subprocess", "pathlib", "httpx",
              "openai", "outlines", "torch", "transformers", "requests", "urllib", "logging"}
    # control_strings: attribution reads a quote of a defanged marker as the report's own
    # text (docs/judge.md rule 18); records, migrations and scores: score_record reads and
    # writes the record format, which embeds the score types. They are held to the same
    # purity as the core.
    below = ("control_strings.py", "records.py", "migrations.py", "scores.py")
    # radmatch_audit.thresholds: the clinical threshold table, read once at import
    allowed = ("radmatch_audit.scoring", "radmatch_audit.schemas", "radmatch_audit.thresholds",
               "radmatch_audit.control_strings", "radmatch_audit.records", "radmatch_audit.migrations",
               "radmatch_audit.scores",
               "radmatch_audit.vocabulary")
    for path in [*(PACKAGE / "scoring").glob("*.py"), *(PACKAGE / name for name in below)]:
        for line, name in imports(path):
            top = name.split(".")[0]
            assert top not in banned, f"{path.name}:{line} imports {name}"
            if top == "radmatch_audit":
                assert name.startswith(allowed), f"{path.name}:{line} imports {name}"


def test_public_api():
    import radmatch_audit

    assert sorted(radmatch_audit.__all__) == sorted(
        ["CorpusSummary", "Evaluator", "JudgeConfig", "PairInput", "Record", "evaluate_pairs",
         "read_records", "score_pair", "score_record", "summarize"]
    )
    from radmatch_audit import config, corpus, pipeline, record_io, records, recompute, scoring

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
