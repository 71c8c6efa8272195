"""RadMatch: auditable radiology report evaluation by finding-level matching.

    >>> from radmatch_audit import Evaluator, JudgeConfig, PairInput
    >>> evaluator = Evaluator.from_config(JudgeConfig.from_env())      # doctest: +SKIP
    >>> records = evaluator.evaluate([PairInput(reference=..., candidate=...)])  # doctest: +SKIP

Heavy modules (torch, transformers, outlines, openai) load only when a judge is built.

The `evaluate` metric: run `radmatch-audit install-metric` once, then
`evaluate.load("radmatch")`; without that step evaluate fails with "Couldn't find a module
script at .../radmatch/radmatch.py" (docs/metric.md).
"""

from radmatch_audit.config import JudgeConfig
from radmatch_audit.corpus import CorpusSummary, summarize
from radmatch_audit.pipeline import Evaluator, evaluate_pairs
from radmatch_audit.record_io import read_records
from radmatch_audit.records import PairInput, Record
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
