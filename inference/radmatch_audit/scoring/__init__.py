"""The pure scoring core: stage answers in, scores out (docs/scoring.md). No I/O, no judge."""

from radmatch_audit.scoring.record import ensure_scored, score_record
from radmatch_audit.scoring.results import Scores
from radmatch_audit.scoring.score import score_pair

__all__ = ["Scores", "ensure_scored", "score_pair", "score_record"]
