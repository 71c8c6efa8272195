"""One home per judge stage: its instructions, exemplars, answer models, caps, budget, version.

- `exemplars`: the instructions (`prompts/*.md`) and few-shot exemplars (`fewshots/`),
  loaded and checked;
- `prompt`: a stage's fixed turns and their version, made from one reading; the pair's
  messages within the judge's context;
- `stage`: each stage as one object (`JudgeStage`; RadMatch's three: `pair_stages`);
- `baselines`: the paper's single-call baselines as stages;
- `flow`: one pair through extract, match and grade;
- `adjudication`: the error adjudication of a scored pair's units.
"""

from radmatch_audit.core.schemas import ANSWER_MODELS, SERVER_MAX_TOKENS, SMALL_MODEL_MAX_TOKENS
from radmatch_audit.stages.exemplars import FEWSHOT_ENV, FewshotError, fewshot_dir, load_exemplars, load_instructions
from radmatch_audit.stages.flow import find_indication, rows_to_grade, run_stages
from radmatch_audit.stages.prompt import (
    ContextBudgetError, Prompt, build_messages, compact_answer, drop_defaults, finding_view,
    load_prompt, prompt_version, stage_prompt,
)
from radmatch_audit.stages.stage import CHAIN, JudgeStage, PairStage, pair_stages
from radmatch_audit.core.vocabulary import MODALITIES, STAGES

__all__ = [
    "ANSWER_MODELS", "CHAIN", "FEWSHOT_ENV", "MODALITIES", "SERVER_MAX_TOKENS",
    "SMALL_MODEL_MAX_TOKENS", "STAGES", "ContextBudgetError", "FewshotError", "JudgeStage",
    "PairStage", "Prompt", "build_messages", "compact_answer", "drop_defaults", "fewshot_dir",
    "find_indication", "finding_view", "load_exemplars", "load_instructions", "load_prompt",
    "pair_stages", "prompt_version", "rows_to_grade", "run_stages", "stage_prompt",
]
