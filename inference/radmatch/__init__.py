"""RadMatch: auditable radiology report evaluation by finding-level matching.

    >>> from radmatch import Evaluator, JudgeConfig, PairInput
    >>> evaluator = Evaluator.from_config(JudgeConfig.from_env())      # doctest: +SKIP
    >>> records = evaluator.evaluate([PairInput(reference=..., candidate=...)])  # doctest: +SKIP

Heavy modules (torch, transformers, outlines, openai) load only when a judge is built.
"""

from radmatch.config import JudgeConfig
from radmatch.corpus import CorpusSummary, summarize
from radmatch.pipeline import Evaluator, evaluate_pairs
from radmatch.record_io import read_records
from radmatch.records import PairInput, Record
from radmatch.recompute import score_record
from radmatch.scoring import score_pair

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
