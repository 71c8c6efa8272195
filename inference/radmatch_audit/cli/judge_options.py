"""What the commands that ask a judge share (`evaluate`, `baseline`): the pairs' input
options, the judge's options and the note printed before a small judge runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from radmatch_audit.config import JudgeConfig

COLUMN_FLAGS = (("reference", "reference"), ("candidate", "candidate"), ("indication", "indication"),
                ("study-id", "study_id"), ("modality", "modality"), ("pair-id", "pair_id"))
SMALL_JUDGE_NOTICE = (
    "note: no judge server is configured, so RadMatch uses its embedded CPU judge "
    "(SmolLM2-135M-Instruct). It only exercises the pipeline: its clinical judgement is "
    "not meaningful. For real scores start serve/start_vllm.sh and pass --base-url "
    "(or set RADMATCH_BASE_URL)."
)


def add_pairs_arguments(parser: argparse.ArgumentParser, limit_help: str) -> None:
    """`--split`, `--limit` and the column names of the input pairs; see `pair_rows`."""
    parser.add_argument("--split", help="split of a saved DatasetDict")
    parser.add_argument("--limit", type=int, help=limit_help)
    g = parser.add_argument_group("columns")
    for flag, default in COLUMN_FLAGS:
        g.add_argument(f"--{flag}-column", default=default, metavar="NAME")


def pair_rows(args: argparse.Namespace) -> Iterator[tuple[str, str, object]]:
    """(pair_id, where, pair or problem) per row; a row's id is its own, else its position."""
    from radmatch_audit.inputs import read_pairs

    columns = {field: getattr(args, f"{field}_column") for _, field in COLUMN_FLAGS}
    for position, (where, item) in enumerate(read_pairs(args.input, columns=columns, split=args.split)):
        if args.limit and position >= args.limit:
            return
        yield (item.pair_id or str(position)), where, item


def add_judge_arguments(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The judge's options, shared by every command that asks a judge; see `judge_config`."""
    j = parser.add_argument_group(title)
    j.add_argument("--backend", choices=["auto", "vllm", "hosted", "transformers"])
    j.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1; "
                   "several comma-separated servers of the same model share the calls")
    j.add_argument("--model", help="served model name (default radmatch-judge)")
    j.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key "
                   "(default RADMATCH_API_KEY); the key itself is never a flag")
    j.add_argument("--allow-remote-endpoint", action="store_true",
                   help="allow sending report text to a non-local endpoint, or through a proxy "
                   "named by HTTP_PROXY/ALL_PROXY (ignored without this)")
    j.add_argument("--concurrency", type=int,
                   help="judge calls in flight (default 32 per server, 1 for the in-process judge); "
                   "a few more pairs than that are held open so that the judge never waits")
    j.add_argument("--timeout", type=float,
                   help="seconds for one server call, whole (default 300; the in-process judge has none)")
    j.add_argument("--retries", type=int, help="attempts per judge call on transient errors (default 3); "
                   "an answer that does not fit its schema gets one more try")
    j.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="turn a reasoning model's thinking on or off (server default if unset)")
    j.add_argument("--context-window", type=int, help="judge context in tokens, for the budget")
    j.add_argument("--temperature", type=float,
                   help="sampling temperature of the judge (default 0: greedy)")
    j.add_argument("--decoding", choices=["auto", "server", "small_model"],
                   help="list caps and token budgets: small_model for a small served model "
                   "(default auto: small_model in process, server otherwise)")
    j.add_argument("--local-model-dir", help="a transformers model folder for the in-process judge")
    j.add_argument("--no-cache", action="store_true", help="do not read or write the answer cache")
    j.add_argument("--cache-dir", help="answer cache folder (default ~/.cache/radmatch/judge)")
    return j


def judge_config(args: argparse.Namespace) -> "JudgeConfig":
    """The JudgeConfig of `add_judge_arguments`' options over the RADMATCH_* variables."""
    from radmatch_audit.config import JudgeConfig

    return JudgeConfig.from_env(
        backend=args.backend, base_url=args.base_url, model=args.model,
        api_key_env=args.api_key_env, allow_remote_endpoint=args.allow_remote_endpoint or None,
        timeout_s=args.timeout, retries=args.retries, thinking=args.thinking,
        context_window=args.context_window, local_model_dir=args.local_model_dir,
        concurrency=args.concurrency, cache=False if args.no_cache else None,
        cache_dir=args.cache_dir, decoding=args.decoding, temperature=args.temperature,
        modality=getattr(args, "modality", None), samples=getattr(args, "samples", None),
    )


def note_small_judge(config: "JudgeConfig") -> None:
    if config.is_small_local_model:
        print(SMALL_JUDGE_NOTICE, file=sys.stderr)
