"""What the commands that ask a judge share (`evaluate`, `baseline`): the pairs' input
options, the judge's options and the note printed before a small judge runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Iterator, Literal, get_args, get_origin

if TYPE_CHECKING:
    from radmatch_audit.judges.config import JudgeConfig

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
    """(pair_id, where, pair or problem) per row; a row's id is its own, else its position.

    Raises ValueError (nothing has been written yet) at an id that an earlier row holds,
    naming both rows, and saying so when one of the two ids is a position.
    """
    from radmatch_audit.files.inputs import read_pairs

    columns = {field: getattr(args, f"{field}_column") for _, field in COLUMN_FLAGS}
    seen: dict[str, tuple[str, bool]] = {}  # pair_id -> (where, whether the row gave it)
    for position, (where, item) in enumerate(read_pairs(args.input, columns=columns, split=args.split)):
        if args.limit and position >= args.limit:
            return
        pair_id = item.pair_id or str(position)
        if pair_id in seen:
            raise ValueError(f"{args.input}: {_repeated_id(pair_id, seen[pair_id], (where, bool(item.pair_id)))}")
        seen[pair_id] = where, bool(item.pair_id)
        yield pair_id, where, item


def _repeated_id(pair_id: str, first: tuple[str, bool], second: tuple[str, bool]) -> str:
    """Why two rows have one id: both give it, or one takes it as its position."""
    if first[1] and second[1]:
        return f"pair_id {pair_id!r} of {second[0]} already appears at {first[0]}; pair ids must be unique"
    positional, given = (first, second) if second[1] else (second, first)
    return (f"{positional[0]} has no pair_id and takes its position, {pair_id!r}, as its id, "
            f"which {given[0]} gives as its pair_id; give every row a pair_id")


def add_judge_arguments(parser: argparse.ArgumentParser, title: str, *,
                        run_options: bool = False) -> argparse._ArgumentGroup:
    """The judge's flags, generated from JudgeConfig's fields (each field's `Option`: flag,
    help); `run_options` adds those of a run of `evaluate` (--modality, --samples).
    Every flag's default is None: unset, the RADMATCH_* variable or the field's default holds."""
    from radmatch_audit.judges.config import JudgeConfig

    j = parser.add_argument_group(title)
    for name, option in JudgeConfig.options().items():
        if option.flag is None or (option.evaluate_only and not run_options):
            continue
        flag = option.flag or "--" + name.replace("_", "-")
        j.add_argument(flag, dest=name, default=None, help=option.help,
                       **_flag_kind(JudgeConfig.model_fields[name], option))
    return j


def _flag_kind(field, option) -> dict:
    """argparse's action, type, choices and metavar for a field, from its type."""
    kind = next((t for t in get_args(field.annotation) if t is not type(None)), field.annotation)
    if field.annotation is bool:  # a switch that sets the field to the other value than its default
        return {"action": "store_false" if field.default else "store_true"}
    if kind is bool:  # Optional[bool]: --x / --no-x, unset leaves it to the server
        return {"action": argparse.BooleanOptionalAction}
    if get_origin(kind) is Literal or get_origin(field.annotation) is Literal:
        values = get_args(kind if get_origin(kind) is Literal else field.annotation)
        return {"choices": list(values)} if option.choices else {"metavar": option.metavar}
    return {"type": kind if kind in (int, float) else str, "metavar": option.metavar}


def judge_config(args: argparse.Namespace) -> "JudgeConfig":
    """The JudgeConfig of `add_judge_arguments`' flags (those given) over the RADMATCH_* variables."""
    from radmatch_audit.judges.config import JudgeConfig

    return JudgeConfig.from_env(**{name: getattr(args, name, None) for name in JudgeConfig.model_fields})


def note_small_judge(config: "JudgeConfig") -> None:
    if config.is_small_local_model:
        print(SMALL_JUDGE_NOTICE, file=sys.stderr)
