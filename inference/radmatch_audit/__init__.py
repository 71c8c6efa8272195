"""RadMatch: auditable radiology report evaluation by finding-level matching.

    >>> from radmatch_audit import Evaluator, JudgeConfig, PairInput
    >>> evaluator = Evaluator.from_config(JudgeConfig.from_env())      # doctest: +SKIP
    >>> records = evaluator.evaluate([PairInput(reference=..., candidate=...)])  # doctest: +SKIP

Heavy modules (torch, transformers, outlines, openai) load only when a judge is built.

The `evaluate` metric: run `radmatch-audit install-metric` once, then
`evaluate.load("radmatch")`; without that step evaluate fails with "Couldn't find a module
script at .../radmatch/radmatch.py" (docs/metric.md).

The package is in floors, each a folder, bottom first; a module imports its own floor
and those below it, never one above (docs/architecture.md):

    core/       vocabularies, thresholds, answer models, scores, records and migrations
    scoring/    stage answers in, scores out: pure
    files/      records files, input pairs, paths
    judges/     the judge backends and their configuration
    stages/     each judge call's prompt, exemplars, answer model and budget
    run/        the Evaluator: methods, the judge-call path, cache, loop, progress
    read/       what reads records back: reader, corpus, compare, recompute, red team
    agreement/, dashboard/   agreement with radiologists; the HTML audit page
    hf/         the `evaluate` metric and the RL reward
    cli/        the `radmatch-audit` command

testing/ (a fake judge server, a toy judge) serves tests and benchmarks. Modules that
lived at the top before 2026-12-05 (`radmatch_audit.metric`, `radmatch_audit.record_io`,
...) still import under their old names (`_moved`).
"""

from radmatch_audit import _moved

_moved.install()

from radmatch_audit.core.records import PairInput, Record
from radmatch_audit.files.record_io import read_records
from radmatch_audit.judges.config import JudgeConfig
from radmatch_audit.read.corpus import CorpusSummary, summarize
from radmatch_audit.run.pipeline import Evaluator, evaluate_pairs
from radmatch_audit.scoring import score_pair, score_record

__version__ = "0.1.0"

__all__ = [
    "CorpusSummary",
    "Evaluator",
    "JudgeConfig",
    "PairInput",
    "Record",
    "evaluate_pairs",
    "read_records",
    "score_pair",
    "score_record",
    "summarize",
]
