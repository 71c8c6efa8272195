"""The paper's single-call baselines as judges that write records (docs/agreement.md).

- `count`: the judge answers `{"errors": N}`, a bare integer of clinically significant
  errors;
- `enumerate`: the judge answers `{"errors": [{"description": ...}, ...]}`, one entry
  per error, and the count is the length of the list.

Both answers are schema-constrained like RadMatch's stages and go through the same
call path (`radmatch.calls.JudgeCalls`: answer cache, in-flight sharing, retries,
validation). Their instructions are data: `prompts/baselines/<method>.md`. A baseline
record is a JSON line with `"record_type": "baseline"`, read by `radmatch agreement`;
it holds no finding-level structure, which is the point of the comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import inspect
import json
import logging
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from radmatch.records import Failure, PairInput

if TYPE_CHECKING:
    from radmatch.calls import PairSpend
    from radmatch.judges.base import Judge

log = logging.getLogger(__name__)

METHODS = ("count", "enumerate")
RECORD_TYPE = "baseline"
RECORD_VERSION = 1
MAX_COUNT = 99  # the count grammar admits 0..MAX_COUNT
# (list cap, description cap, answer tokens) for a served judge and for a small model
SERVER_CAPS = (60, 400, 8192)
SMALL_CAPS = (4, 80, 300)  # ~35 tokens an entry: a small model on a CPU fills the list
COUNT_MAX_TOKENS = 32

CountValue = Literal[tuple(range(MAX_COUNT + 1))]  # an enum: every grammar backend bounds it


class CountAnswer(BaseModel):
    """`count`: the number of clinically significant errors."""

    model_config = ConfigDict(extra="forbid")
    errors: CountValue  # type: ignore[valid-type]


class ListedError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str


def enumerate_model(max_items: Optional[int], max_chars: Optional[int]) -> type[BaseModel]:
    """`enumerate`'s answer model with the given caps (None: uncapped)."""

    class Listed(BaseModel):
        model_config = ConfigDict(extra="forbid")
        description: str = Field(max_length=max_chars) if max_chars else Field()

    class EnumerateAnswer(BaseModel):
        model_config = ConfigDict(extra="forbid")
        errors: list[Listed] = Field(max_length=max_items) if max_items else Field()

    return EnumerateAnswer


def load_prompt(method: str) -> str:
    """The instructions of a baseline (prompts/baselines/<method>.md)."""
    if method not in METHODS:
        raise ValueError(f"unknown baseline method {method!r}; expected one of {list(METHODS)}")
    return resources.files("radmatch.prompts").joinpath("baselines", f"{method}.md").read_text(encoding="utf-8")


def _prompt_version(method: str, schema: type[BaseModel]) -> str:
    payload = json.dumps({"instructions": load_prompt(method), "schema": schema.model_json_schema()},
                         sort_keys=True, separators=(",", ":"))
    return "baseline-v1-" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]


class Baseline:
    """Runs one single-call baseline over pairs, through one judge.

    `small_model` sets the caps a small model needs (a short list, short descriptions,
    a small token budget); a capable served judge runs uncapped.
    """

    def __init__(
        self,
        judge: "Judge",
        method: str,
        *,
        cache_dir: Optional[Path] = None,
        small_model: bool = False,
        retries: int = 3,
        concurrency: int = 1,
        close_judge: bool = True,
    ) -> None:
        from radmatch.cache import AnswerCache
        from radmatch.calls import JudgeCalls
        from radmatch.loop import LoopThread
        from radmatch.schemas import SERVER_LIMITS

        self.method = method
        self.instructions = load_prompt(method)
        items, chars, tokens = SMALL_CAPS if small_model else SERVER_CAPS
        if method == "count":
            self.schema, self.max_tokens = CountAnswer, COUNT_MAX_TOKENS
        else:
            self.schema, self.max_tokens = enumerate_model(items, chars if small_model else None), tokens
        self.version = _prompt_version(method, self.schema)
        self.judge = judge
        self.concurrency = max(1, concurrency)
        # JudgeCalls' own path (cache, sharing, retries, validation) with our messages
        self.calls = JudgeCalls(judge, limits=SERVER_LIMITS, max_tokens={}, cache=AnswerCache(cache_dir),
                                retries=retries)
        self._loop = LoopThread(f"radmatch-{method}")
        self._close_judge = close_judge

    def close(self) -> None:
        try:
            if self._close_judge:
                self._loop.run(self.judge.aclose())
        finally:
            self._loop.close()

    def __enter__(self) -> "Baseline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self) -> None:
        self._loop.run(self.judge.check())

    def messages(self, pair: PairInput) -> list[dict[str, str]]:
        user: dict[str, Any] = {"reference": pair.reference, "candidate": pair.candidate}
        if pair.indication and pair.indication.strip():
            user["indication"] = pair.indication.strip()
        return [
            {"role": "system", "content": self.instructions},
            {"role": "user", "content": json.dumps(user, ensure_ascii=False)},
        ]

    async def _ask(self, pair: PairInput, spend: "PairSpend") -> BaseModel:
        from radmatch.cache import cache_key
        from radmatch.calls import StageFailed, _schema_digest

        messages = self.messages(pair)
        stage = f"baseline_{self.method}"
        window = self.judge.context_window
        if window is not None:
            needed = self.judge.count_tokens(messages) + self.max_tokens
            if needed > window:
                raise StageFailed(Failure(stage=stage, cause=(
                    f"the pair needs {needed} tokens, more than the judge's context of {window}")))
        key = cache_key(
            model=self.judge.model, backend=self.judge.backend,
            settings=getattr(self.judge, "settings", None), prompt_version=self.version,
            exemplars=0, pair_message=messages[-1]["content"], schema=_schema_digest(self.schema),
            max_tokens=self.max_tokens,
        )
        calls = self.calls
        answer = calls._stored(key, self.schema)
        if answer is not None:
            spend.cached += 1
            return answer
        # JudgeCalls._call is private and its signature moves (a call priority was added):
        # pass what it takes. A public "ask with these messages" would remove this.
        takes = inspect.signature(calls._call).parameters
        extra = {"priority": getattr(spend, "priority", 0.0)} if "priority" in takes else {}
        (entry, answer), owner = await calls.cache.shared(
            key, lambda: calls._call(key, stage, messages, self.schema, self.schema, self.max_tokens, **extra)
        )
        if owner:
            spend.prompt_tokens += entry["usage"]["prompt_tokens"]
            spend.completion_tokens += entry["usage"]["completion_tokens"]
            spend.calls += 1
        else:
            spend.cached += 1
        return answer

    async def _one(self, pair_id: str, pair: PairInput, source: Optional[str]) -> dict[str, Any]:
        from radmatch.calls import PairSpend, StageFailed

        record = base_record(pair_id, pair, self.method, source)
        record["judge"] = {"backend": self.judge.backend, "model": self.judge.model,
                           "prompt_version": self.version}
        spend, started = PairSpend(), time.perf_counter()
        if hasattr(spend, "priority"):
            spend.priority = started  # first come, first served
        try:
            if not pair.reference.strip():
                raise StageFailed(Failure(stage="input", cause="the reference report is empty"))
            answer = await self._ask(pair, spend)
            record["answer"] = answer.model_dump()
            record["errors"] = answer.errors if self.method == "count" else len(answer.errors)
        except StageFailed as exc:
            record["failure"] = exc.failure.model_dump()
            record["error"] = exc.failure.message()
            log.warning("pair %s failed (%s)", pair_id, exc.failure.stage)  # no report text
        except Exception as exc:  # a bug must not take the other pairs down
            failure = Failure(stage="internal", cause=f"internal error: {type(exc).__name__}")
            record["failure"], record["error"] = failure.model_dump(), failure.message()
        record["timings_s"] = {"total": round(time.perf_counter() - started, 4)}
        record["usage"] = {"prompt_tokens": spend.prompt_tokens, "completion_tokens": spend.completion_tokens,
                           "judge_calls": spend.calls, "cached_calls": spend.cached}
        return record

    def run(self, jobs: Iterable[tuple[str, PairInput, Optional[str]]],
            on_record: Callable[[dict[str, Any]], None]) -> None:
        """Run every (pair_id, pair, source) job; `on_record` gets each record as it ends."""

        async def main() -> None:
            slots = asyncio.Semaphore(self.concurrency)
            running: set[asyncio.Task] = set()

            async def one(job) -> None:
                try:
                    on_record(await self._one(*job))
                finally:
                    slots.release()

            try:
                for job in jobs:
                    await slots.acquire()
                    task = asyncio.ensure_future(one(job))
                    running.add(task)
                    task.add_done_callback(running.discard)
                await asyncio.gather(*running)
            except BaseException:
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)
                raise

        self._loop.run(main())


def base_record(pair_id: str, pair: PairInput, method: str, source: Optional[str] = None) -> dict[str, Any]:
    """A baseline record before its answer: the documented keys, in order."""
    return {
        "record_type": RECORD_TYPE, "schema_version": RECORD_VERSION, "method": method,
        "pair_id": pair_id, "study_id": pair.study_id, "modality": pair.modality, "source": source,
        "reference": pair.reference, "candidate": pair.candidate, "indication": pair.indication,
        "judge": {}, "answer": None, "errors": None, "error": None, "failure": None,
    }


# --------------------------------------------------------------------------- command line

COLUMN_FLAGS = (("reference", "reference"), ("candidate", "candidate"), ("indication", "indication"),
                ("study-id", "study_id"), ("modality", "modality"), ("pair-id", "pair_id"))


def cmd_baseline(args: argparse.Namespace) -> int:
    from radmatch.cli import EXIT_OK, EXIT_SOME_FAILED, fail
    from radmatch.config import JudgeConfig
    from radmatch.inputs import read_pairs
    from radmatch.judges.base import JudgeUnavailable
    from radmatch.record_io import open_private

    try:
        config = JudgeConfig.from_env(
            backend=args.backend, base_url=args.base_url, model=args.model,
            api_key_env=args.api_key_env, allow_remote_endpoint=args.allow_remote_endpoint or None,
            timeout_s=args.timeout, retries=args.retries, thinking=args.thinking,
            context_window=args.context_window, local_model_dir=args.local_model_dir,
            concurrency=args.concurrency, cache=False if args.no_cache else None,
            cache_dir=args.cache_dir, decoding=args.decoding,
        )
        columns = {field: getattr(args, f"{field}_column") for _, field in COLUMN_FLAGS}
        jobs, bad = [], []
        for position, (where, item) in enumerate(read_pairs(args.input, columns=columns, split=args.split)):
            if args.limit and position >= args.limit:
                break
            pair_id = item.pair_id or str(position)
            if isinstance(item, PairInput):
                jobs.append((pair_id, item, where))
            else:
                bad.append((pair_id, where, item))
    except (ValueError, OSError) as exc:
        return fail(str(exc))
    ids = [job[0] for job in jobs] + [b[0] for b in bad]
    if len(set(ids)) != len(ids):
        return fail(f"{args.input}: pair ids must be unique")
    if not ids:
        return fail(f"{args.input} holds no pairs")
    output = Path(args.output)
    if not output.parent.is_dir():
        return fail(f"cannot write {output}: the folder {output.parent} does not exist")
    if config.is_small_local_model:
        from radmatch.cli_evaluate import SMALL_JUDGE_NOTICE

        print(SMALL_JUDGE_NOTICE, file=sys.stderr)
    try:
        runner = Baseline(
            config.build_judge(), args.method, cache_dir=config.answer_cache_dir(),
            small_model=config.small_model_decoding, retries=config.retries,
            concurrency=config.resolved_concurrency,
        )
    except Exception as exc:  # bad URL, refused endpoint, missing extra
        return fail(str(exc))
    done = failed = 0
    errors_total = 0.0
    started = time.perf_counter()
    with runner:
        try:
            runner.check()
        except JudgeUnavailable as exc:  # before OUT is created
            return fail(str(exc))
        with open_private(output, "w") as out:
            for pair_id, where, item in bad:  # nothing is lost: a bad row becomes a failed record
                record = base_record(pair_id, PairInput(reference="", candidate=""), args.method, where)
                record.update({k: v for k, v in item.inputs.items() if v is not None})
                failure = Failure(stage="input", cause=f"{where}: {item.message}")
                record["failure"], record["error"] = failure.model_dump(), failure.message()
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                failed += 1

            def on_record(record: dict[str, Any]) -> None:
                nonlocal done, failed, errors_total
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
                if record["errors"] is None:
                    failed += 1
                else:
                    done += 1
                    errors_total += record["errors"]

            runner.run(jobs, on_record)
    elapsed = time.perf_counter() - started
    mean = f"{errors_total / done:.2f}" if done else "n/a"
    print(f"{args.method}: {done} pair(s) scored, {failed} failed, mean errors {mean}, "
          f"{elapsed:.1f} s ({elapsed / max(1, len(jobs)):.2f} s per pair); records in {output}")
    return EXIT_SOME_FAILED if failed else EXIT_OK


def add_baseline_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "baseline",
        help="the paper's single-call baselines (count, enumerate) as records",
        description="Ask the judge, once per pair, for the number of clinically significant "
        "errors (--method count: a bare integer) or for the list of them (--method enumerate: "
        "the count is its length), schema-constrained, and write one baseline record per pair "
        "(docs/agreement.md), which `radmatch agreement` reads beside RadMatch's records. "
        "Judge options and RADMATCH_* variables are those of `radmatch evaluate`.",
    )
    p.add_argument("input", metavar="INPUT", help="pairs: .jsonl, .csv, or a saved `datasets` folder")
    p.add_argument("--method", required=True, choices=list(METHODS))
    p.add_argument("-o", "--output", required=True, metavar="RECORDS.jsonl",
                   help="baseline records, created owner-only (they hold report text)")
    p.add_argument("--split", help="split of a saved DatasetDict")
    p.add_argument("--limit", type=int, help="run only the first N rows")
    g = p.add_argument_group("columns")
    for flag, default in COLUMN_FLAGS:
        g.add_argument(f"--{flag}-column", default=default, metavar="NAME")
    j = p.add_argument_group("judge (as for `radmatch evaluate`)")
    j.add_argument("--backend", choices=["auto", "vllm", "hosted", "transformers"])
    j.add_argument("--base-url", help="OpenAI-compatible server(s), comma-separated")
    j.add_argument("--model", help="served model name (default radmatch-judge)")
    j.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    j.add_argument("--allow-remote-endpoint", action="store_true",
                   help="allow sending report text to a non-local endpoint")
    j.add_argument("--concurrency", type=int, help="pairs in flight (default 8 with a server, 1 in process)")
    j.add_argument("--timeout", type=float, help="seconds for one server call, whole (default 300)")
    j.add_argument("--retries", type=int, help="attempts per call on transient errors (default 3)")
    j.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="turn a reasoning model's thinking on or off")
    j.add_argument("--context-window", type=int, help="judge context in tokens, for the budget")
    j.add_argument("--decoding", choices=["auto", "server", "small_model"],
                   help="caps for a small model (default: small_model in process, server otherwise)")
    j.add_argument("--local-model-dir", help="a transformers model folder for the in-process judge")
    j.add_argument("--no-cache", action="store_true", help="do not read or write the answer cache")
    j.add_argument("--cache-dir", help="answer cache folder (default ~/.cache/radmatch/judge)")
    p.set_defaults(func=cmd_baseline)
