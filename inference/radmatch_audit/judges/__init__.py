"""Judge backends behind one contract (`Judge.generate`). Heavy imports stay in each module."""

from radmatch_audit.judges.base import (
    EndpointRefusedError,
    InvalidAnswerError,
    Judge,
    JudgeError,
    JudgeResult,
    JudgeUnavailable,
    TransientJudgeError,
    Usage,
)
from radmatch_audit.judges.factory import build_judge

__all__ = [
    "EndpointRefusedError",
    "InvalidAnswerError",
    "Judge",
    "JudgeError",
    "JudgeResult",
    "JudgeUnavailable",
    "TransientJudgeError",
    "Usage",
    "build_judge",
]
