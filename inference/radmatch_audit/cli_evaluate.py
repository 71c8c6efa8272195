"""`radmatch-audit evaluate`: pairs in, one audit record per pair out, then the corpus summary.

Order of work, so that a mistake costs nothing: the options, the input file (read
once through, ids and bad rows only), the output folder, the judge (loaded, then
checked once), and only then the output file is opened. Records stream: each is
written and flushed as its pair finishes; `--resume` keeps what an interrupted run
wrote and evaluates the rest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional, Union

from radmatch_audit.cli import EXIT_OK, EXIT_SOME_FAILED, fail, print_summary
from radmatch_audit.corpus import CorpusSummary

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


def _rows(args: argparse.Namespace):
    """(pair_id, where, pair or problem) per row; a row's id is its own, else its position."""
    from radmatch_audit.inputs import read_pairs

    columns = {field: getattr(args, f"{field}_column") for _, field in COLUMN_FLAGS}
    for position, (where, item) in enumerate(read_pairs(args.input, columns=columns, split=args.split)):
        if args.limit and position >= args.limit:
            return
        yield (item.pair_id or str(position)), where, item


SHOWN_PROBLEMS = 20


def _scan(args: argparse.Namespace, modality: str) -> tuple[int, int, dict[str, bytes]]:
    """Read the input once: (rows, bad rows, pair_id -> fingerprint of its row), naming
    the first bad rows on stderr. `--resume` evaluates again a record whose row changed.

    Raises ValueError for a repeated pair_id: nothing has been written yet.
    """
    from radmatch_audit.record_io import pair_fingerprint

    first_seen: dict[str, str] = {}
    fingerprints: dict[str, bytes] = {}
    rows = bad = 0
    for pair_id, where, item in _rows(args):
        if pair_id in first_seen:
            raise ValueError(
                f"{args.input}: pair_id {pair_id!r} of {where} already appears at "
                f"{first_seen[pair_id]}; pair ids must be unique"
            )
        first_seen[pair_id] = where
        rows += 1
        if _is_pair(item):  # the record's modality is the row's, else the run's
            fingerprints[pair_id] = pair_fingerprint(
                item.reference, item.candidate, item.indication, item.modality or modality)
        else:
            known = item.inputs
            fingerprints[pair_id] = pair_fingerprint(
                known.get("reference"), known.get("candidate"), known.get("indication"),
                known.get("modality"))
            bad += 1
            if bad <= SHOWN_PROBLEMS:
                print(f"{args.input}: {where}: {item.message}", file=sys.stderr)
    return rows, bad, fingerprints


def _is_pair(item: object) -> bool:
    from radmatch_audit.records import PairInput

    return isinstance(item, PairInput)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from radmatch_audit.judges.base import JudgeUnavailable
    from radmatch_audit.pipeline import Evaluator, freeze_setup_heap

    from radmatch_audit.record_io import RecordsWriteError, same_file

    try:
        config = judge_config(args)
        rows, bad, fingerprints = _scan(args, config.modality)
    except (ValueError, OSError) as exc:  # InputError is a ValueError
        return fail(str(exc))
    output = Path(args.output)
    if not output.parent.is_dir():
        return fail(f"cannot write {output}: the folder {output.parent} does not exist")
    if same_file(output, args.input):
        return fail(f"the output {output} is the input file {args.input} (the same file, "
                    "maybe under another name or a hard link); name another file")
    if rows == 0:
        return fail(f"{args.input} holds no pairs")
    if bad:
        print(f"{bad} row(s) of {args.input} cannot be evaluated; each gets a failed record", file=sys.stderr)

    if config.is_small_local_model:
        print(SMALL_JUDGE_NOTICE, file=sys.stderr)
    if config.samples > 1 and config.temperature == 0:
        print(f"note: {config.samples} samples at temperature 0 are greedy and repeat one "
              "another; pass --temperature (e.g. 0.7) to measure stability", file=sys.stderr)
    try:
        evaluator = Evaluator.from_config(config)
    except Exception as exc:  # bad URL, refused endpoint, missing extra: tell the user the fix
        return fail(str(exc))
    with evaluator:
        try:
            evaluator.check()
        except JudgeUnavailable as exc:
            return fail(str(exc))
        freeze_setup_heap()  # this process is ours: no full GC pass re-scans the setup
        try:
            summary = _write_records(args, evaluator, rows, fingerprints)
        except RecordsWriteError as exc:
            return fail(str(exc))
    print_summary(summary, as_json=args.json)
    failed = summary.to_dict()["n_failed"]
    if failed:
        print(f"{failed} pair(s) failed; their records carry the reason", file=sys.stderr)
    return EXIT_SOME_FAILED if failed else EXIT_OK


def _write_records(args: argparse.Namespace, evaluator, rows: int, fingerprints: dict[str, bytes]) -> CorpusSummary:
    from radmatch_audit.record_io import RecordWriter, iter_lines
    from radmatch_audit.record_io import BadLine as BadLineType
    from radmatch_audit.records import failed_input

    summary = CorpusSummary(streaming=True)
    with RecordWriter(args.output, resume=args.resume, inputs=fingerprints) as writer:
        resumed = writer.resumed
        if writer.done:
            print(f"resuming: {len(writer.done)} pair(s) of {args.output} are done", file=sys.stderr)
        if resumed.changed:
            print(f"resuming: {resumed.changed} record(s) of {args.output} do not match their "
                  "input row (reference, candidate, indication or modality changed); "
                  "those pairs are evaluated again", file=sys.stderr)
        if resumed.not_in_input:
            print(f"resuming: {len(resumed.not_in_input)} record(s) of {args.output} are of "
                  f"pairs not in {args.input}; they stay in the file but are not counted "
                  "in this summary", file=sys.stderr)
        progress = _progress(rows - len(writer.done), quiet=args.quiet)

        def on_record(record) -> None:
            writer.write(record)
            summary.add(record)
            progress.update(1)
            progress.set_postfix(pairs_per_s=f"{evaluator.stats.pairs_per_s:.3g}", failed=evaluator.stats.failed)

        def jobs() -> Iterator[tuple[str, object, Optional[str]]]:
            for pair_id, where, item in _rows(args):
                if pair_id in writer.done:
                    continue
                if _is_pair(item):
                    yield pair_id, item, where
                else:  # nothing is lost: a bad row becomes a failed record
                    on_record(failed_input(pair_id, f"{where}: {item.message}", source=where, **item.inputs))

        try:
            evaluator.run(jobs(), on_record=on_record)
        except KeyboardInterrupt:
            print(f"\ninterrupted; records so far are in {args.output}: add --resume to go on",
                  file=sys.stderr)
            raise
        finally:
            progress.close()
    if writer.done:  # the summary covers the input's pairs in the file, resumed ones included
        summary = CorpusSummary(streaming=True)
        for _, record in iter_lines(args.output):
            if not isinstance(record, BadLineType) and record.pair_id in fingerprints:
                summary.add(record)
    return summary


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


def add_evaluate_parser(sub: Union[argparse._SubParsersAction, None]) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score candidate reports against references with the judge",
        description="Run the judge pipeline over pairs from JSONL, CSV or a `datasets` "
        "dataset saved on disk, write one audit record per pair to OUT as it goes, then "
        "print the corpus summary. Without a judge server the embedded CPU judge runs "
        "(pipeline check only). Every option also has a RADMATCH_* environment variable.",
    )
    p.add_argument("input", metavar="INPUT", help="pairs: .jsonl, .csv, or a folder from Dataset.save_to_disk")
    p.add_argument("-o", "--output", required=True, metavar="RECORDS.jsonl",
                   help="records file, created owner-only (it holds report text)")
    p.add_argument("--resume", action="store_true",
                   help="keep the complete records already in OUT and evaluate only the rest "
                   "(pairs whose judge failed, or whose input row changed, are evaluated "
                   "again; records of pairs no longer in INPUT stay but are not counted)")
    p.add_argument("--split", help="split of a saved DatasetDict")
    p.add_argument("--limit", type=int, help="evaluate only the first N rows")
    g = p.add_argument_group("columns")
    for flag, default in COLUMN_FLAGS:
        g.add_argument(f"--{flag}-column", default=default, metavar="NAME")
    j = add_judge_arguments(p, "judge (defaults from RADMATCH_* variables)")
    j.add_argument("--modality", help="few-shot set: chest_xray (default), chest_ct, "
                   "abdomen_pelvis_ct, head_ct, brain_mri")
    j.add_argument("--samples", type=int, metavar="K",
                   help="run the stages K times per pair and store every sample, to see how "
                   "stable a score is (default 1; use with --temperature above 0)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_evaluate)
