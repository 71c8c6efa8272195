"""Prefill the embedded judge's static prefixes once, at setup (scripts/setup.sh).

Above both the judge (judges.local) and the stages' prompts, so that neither imports
the other: smollm.py, below the judge, only fetches the weights.
"""

from __future__ import annotations

from typing import Optional


def warm_prefixes(modality: Optional[str] = None) -> int:
    """Prefill the embedded judge's static prefix of every stage for `modality` (default
    chest_xray) into the on-disk prefix store, so that the first run does not.
    Returns the number of prefixes prefilled."""
    from radmatch_audit.judges.local import LocalTransformersJudge
    from radmatch_audit.stages.prompt import stage_prompt
    from radmatch_audit.core.vocabulary import DEFAULT_MODALITY, STAGES

    judge = LocalTransformersJudge()
    for stage in STAGES:
        # the prefix is the fixed turns; the pair's message after them is not part of it
        judge.prefill(stage_prompt(stage, modality or DEFAULT_MODALITY).messages({}))
    return len(STAGES)
