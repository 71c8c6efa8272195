"""The pure scoring core: stage answers in, scores out (docs/scoring.md). No I/O, no judge."""

from radmatch.scoring.results import Scores
from radmatch.scoring.score import score_pair

__all__ = ["Scores", "score_pair"]
