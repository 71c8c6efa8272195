"""The `radmatch` command line.

Exit codes: 0 all went well; 1 some lines or pairs failed (the rest were processed);
2 the command could not run (bad arguments, unreadable file, bad configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from radmatch.corpus import CorpusSummary, format_summary
from radmatch.records import BadLine, iter_lines

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE = 0, 1, 2
WRITE_BUFFER = 1 << 20  # bytes; output records are ~10-20 kB each


def _report_bad(path: str, bad: list[BadLine]) -> None:
    for item in bad:
        print(f"{path}:{item.line_no}: {item.message}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} line(s) of {path} could not be processed", file=sys.stderr)


def _open_input(path: str):
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise SystemExit(_fail(f"cannot read {path}: {exc.strerror}"))


def _fail(message: str) -> int:
    print(f"radmatch: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_recompute(args: argparse.Namespace) -> int:
    from radmatch.recompute import recompute_lines

    summary = CorpusSummary()
    if Path(args.output).resolve() == Path(args.input).resolve():
        return _fail("the output must be a different file from the input")
    with _open_input(args.input) as src, open(
        args.output, "w", encoding="utf-8", buffering=WRITE_BUFFER
    ) as dst:
        bad = recompute_lines(src, dst.write, summary)
    _report_bad(args.input, bad)
    _print_summary(summary, as_json=args.json)
    return EXIT_SOME_FAILED if bad else EXIT_OK


def cmd_summary(args: argparse.Namespace) -> int:
    from radmatch.recompute import ensure_scored

    summary = CorpusSummary()
    bad: list[BadLine] = []
    with _open_input(args.input) as src:
        for line_no, item in iter_lines(src):
            if not isinstance(item, BadLine):
                try:
                    summary.add(ensure_scored(item))
                    continue
                except ValueError as exc:
                    item = BadLine(line_no, str(exc), "")
            bad.append(item)
    _report_bad(args.input, bad)
    _print_summary(summary, as_json=args.json)
    return EXIT_SOME_FAILED if bad else EXIT_OK


SMALL_JUDGE_NOTICE = (
    "note: no judge server is configured, so RadMatch uses its embedded CPU judge "
    "(SmolLM2-135M-Instruct). It only exercises the pipeline: its clinical judgement is "
    "not meaningful. For real scores start serve/start_vllm.sh and pass --base-url "
    "(or set RADMATCH_BASE_URL)."
)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from radmatch.config import JudgeConfig
    from radmatch.inputs import RowProblem, read_pairs
    from radmatch.pipeline import Evaluator
    from radmatch.records import Record, RecordWriter

    try:
        config = JudgeConfig.from_env(
            backend=args.backend, base_url=args.base_url, model=args.model,
            api_key_env=args.api_key_env, allow_remote_endpoint=args.allow_remote_endpoint or None,
            timeout_s=args.timeout, retries=args.retries, thinking=args.thinking,
            context_window=args.context_window, local_model_dir=args.local_model_dir,
            concurrency=args.concurrency, cache=False if args.no_cache else None,
            cache_dir=args.cache_dir, modality=args.modality,
        )
    except ValueError as exc:
        return _fail(str(exc))
    columns = {
        "reference": args.reference_column, "candidate": args.candidate_column,
        "indication": args.indication_column, "study_id": args.study_id_column,
        "modality": args.modality_column, "pair_id": args.pair_id_column,
    }
    if not Path(args.input).exists():
        return _fail(f"cannot read {args.input}: no such file or directory")
    pairs, problems = [], []
    for where, item in read_pairs(args.input, columns=columns, split=args.split):
        if isinstance(item, RowProblem):
            problems.append(item)
        else:
            pairs.append(item)
        if args.limit and len(pairs) >= args.limit:
            break
    for problem in problems:
        print(f"{args.input}: {problem.row}: {problem.message}", file=sys.stderr)

    if config.is_small_local_model:
        print(SMALL_JUDGE_NOTICE, file=sys.stderr)
    try:
        evaluator = Evaluator.from_config(config)
    except Exception as exc:  # bad URL, refused endpoint, missing extra: tell the user the fix
        return _fail(str(exc))

    summary = CorpusSummary()
    progress = _progress(len(pairs), quiet=args.quiet)
    with RecordWriter(args.output) as writer:
        for problem in problems:  # nothing is lost: a bad row becomes a failed record
            record = Record(pair_id=problem.row, reference="", candidate="",
                            error=f"input {problem.row}: {problem.message}")
            writer.write(record)
            summary.add(record)

        def on_record(record) -> None:
            writer.write(record)
            summary.add(record)
            progress.update(1)
            progress.set_postfix(
                pairs_per_s=f"{evaluator.stats.pairs_per_s:.3g}", failed=evaluator.stats.failed
            )

        try:
            evaluator.evaluate(pairs, on_record=on_record)
        except ValueError as exc:  # e.g. a repeated pair_id
            progress.close()
            return _fail(str(exc))
        finally:
            progress.close()
    _print_summary(summary, as_json=args.json)
    failed = summary.to_dict()["n_failed"]
    if failed:
        print(f"{failed} pair(s) failed; their records carry the error", file=sys.stderr)
    return EXIT_SOME_FAILED if failed else EXIT_OK


def _progress(total: int, *, quiet: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    if quiet or tqdm is None:
        class _Silent:
            def update(self, n: int) -> None: ...
            def set_postfix(self, **kw) -> None: ...
            def close(self) -> None: ...

        return _Silent()
    return tqdm(total=total, unit="pair", file=sys.stderr, dynamic_ncols=True)


def _add_evaluate_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score candidate reports against references with the judge",
        description="Run the judge pipeline over pairs from JSONL, CSV or a `datasets` "
        "dataset saved on disk, write one audit record per pair to OUT as it goes, then "
        "print the corpus summary. Without a judge server the embedded CPU judge runs "
        "(pipeline check only). Every option also has a RADMATCH_* environment variable.",
    )
    p.add_argument("input", metavar="INPUT", help="pairs: .jsonl, .csv, or a folder from Dataset.save_to_disk")
    p.add_argument("-o", "--output", required=True, metavar="RECORDS.jsonl")
    p.add_argument("--split", help="split of a saved DatasetDict")
    p.add_argument("--limit", type=int, help="evaluate only the first N pairs")
    g = p.add_argument_group("columns")
    for field, default in (("reference", "reference"), ("candidate", "candidate"),
                           ("indication", "indication"), ("study-id", "study_id"),
                           ("modality", "modality"), ("pair-id", "pair_id")):
        g.add_argument(f"--{field}-column", default=default, metavar="NAME")
    j = p.add_argument_group("judge (defaults from RADMATCH_* variables)")
    j.add_argument("--modality", help="few-shot set: chest_xray (default), chest_ct, "
                   "abdomen_pelvis_ct, head_ct, brain_mri")
    j.add_argument("--backend", choices=["auto", "vllm", "hosted", "transformers"])
    j.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    j.add_argument("--model", help="served model name (default radmatch-judge)")
    j.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key "
                   "(default RADMATCH_API_KEY); the key itself is never a flag")
    j.add_argument("--allow-remote-endpoint", action="store_true",
                   help="allow sending report text to a non-local endpoint")
    j.add_argument("--concurrency", type=int, help="pairs in flight (default 8)")
    j.add_argument("--timeout", type=float, help="seconds per judge call (default 300)")
    j.add_argument("--retries", type=int, help="attempts per judge call on transient errors (default 3)")
    j.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="turn a reasoning model's thinking on or off (server default if unset)")
    j.add_argument("--context-window", type=int, help="judge context in tokens, for the budget")
    j.add_argument("--local-model-dir", help="a transformers model folder for the in-process judge")
    j.add_argument("--no-cache", action="store_true", help="do not read or write the answer cache")
    j.add_argument("--cache-dir", help="answer cache folder (default ~/.cache/radmatch/judge)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_evaluate)


def _print_summary(summary: CorpusSummary, *, as_json: bool) -> None:
    data = summary.to_dict()
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print(format_summary(data))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radmatch",
        description="Score AI-written radiology reports against reference reports by "
        "counting clinically actionable errors, with a finding-level audit record.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "recompute",
        help="re-derive scores of every record from its stored stages (no judge)",
        description="Re-derive `scores` and `repairs` of every record from its stored "
        "stages, without any judge, write them to OUT and print the corpus summary.",
    )
    p.add_argument("input", metavar="IN.jsonl")
    p.add_argument("-o", "--output", required=True, metavar="OUT.jsonl")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_recompute)

    p = sub.add_parser(
        "summary",
        help="print the corpus summary of a records file",
        description="Print the corpus summary (pooled safety with 95%% Wilson intervals, "
        "outcome counts, mean actionable errors) of a records file. Stored scores are "
        "used; a record stored without scores is scored from its stages.",
    )
    p.add_argument("input", metavar="IN.jsonl")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_summary)

    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Commands defined next to their code; each module imports only what parsing needs."""
    from radmatch.dashboard import add_dashboard_parser
    from radmatch.metric import add_install_metric_parser

    return [_add_evaluate_parser, add_dashboard_parser, add_install_metric_parser]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("radmatch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
