"""The pieces of the judge path on their own: endpoints, the answer cache, input reading,
the event-loop owner, a pair's failure record, and JudgeCalls.ask's retries (run/calls.py)."""

import asyncio
import json
import os
import stat
import threading

import pytest

from radmatch_audit import Evaluator, PairInput
from radmatch_audit.files.inputs import InputError, RowProblem, read_pairs
from radmatch_audit.judges.base import JudgeError, JudgeResult, TransientJudgeError, Usage
from radmatch_audit.judges.endpoints import check_url, is_local_endpoint
from radmatch_audit.run.cache import AnswerCache, cache_key
from radmatch_audit.run.calls import JudgeCalls, PairSpend, StageFailed
from radmatch_audit.run.loop import LoopThread
from radmatch_audit.stages.stage import pair_stages
from radmatch_audit.testing.scripted import ScriptedJudge

# ---------------------------------------------------------------------- endpoints


@pytest.mark.parametrize("url, local", [
    ("http://127.0.0.1:8000/v1", True),
    ("http://localhost:8000/v1", True),
    ("http://[::1]:8000/v1", True),
    ("http://10.1.2.3/v1", True),
    ("http://192.168.0.7:8000/v1", True),
    ("http://172.16.5.5/v1", True),
    ("https://8.8.8.8/v1", False),
    ("https://93.184.216.34/v1", False),
    ("http://[2001:4860:4860::8888]/v1", False),
    ("not a url", False),
])
def test_is_local_endpoint(url, local):
    assert is_local_endpoint(url) is local


@pytest.mark.parametrize("url, problem", [
    ("http://127.0.0.1:/v1", "empty port"),
    ("http://127.0.0.1:99999/v1", "invalid port"),
    ("ftp://127.0.0.1/v1", "not an http"),
    ("127.0.0.1:8000", "not an http"),
])
def test_check_url_names_the_problem(url, problem):
    with pytest.raises(ValueError, match=problem):
        check_url(url)


# ---------------------------------------------------------------------- the answer cache


def test_answer_cache_round_trip_is_owner_only_and_discardable(tmp_path):
    cache = AnswerCache(tmp_path / "answers")
    key = cache_key(model="m", messages=[{"role": "user", "content": "x"}])
    assert cache.get(key) is None
    cache.put(key, {"text": "{}", "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    assert stat.S_IMODE((tmp_path / "answers").stat().st_mode) == 0o700
    on_disk = [p for p in (tmp_path / "answers").rglob("*") if p.is_file()]
    assert on_disk and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in on_disk)
    assert AnswerCache(tmp_path / "answers").get(key)["text"] == "{}"  # a new process reads it
    cache.discard(key)
    assert cache.get(key) is None and AnswerCache(tmp_path / "answers").get(key) is None
    cache.close()


def test_a_broken_answer_store_is_turned_off_not_fatal(tmp_path, caplog):
    (tmp_path / "answers").mkdir()
    (tmp_path / "answers" / "answers.sqlite3").write_bytes(b"this is not a database" * 100)
    cache = AnswerCache(tmp_path / "answers")
    cache.put("k", {"text": "{}"})  # the memo still holds it
    assert cache.get("k") == {"text": "{}"}
    assert "going on without it" in caplog.text


def test_answer_cache_memo_is_bounded():
    cache = AnswerCache(None, memo_entries=3)
    for i in range(10):
        cache.put(str(i), {"text": str(i)})
    assert [cache.get(str(i)) for i in range(7)] == [None] * 7
    assert [cache.get(str(i))["text"] for i in range(7, 10)] == ["7", "8", "9"]


def test_a_shared_call_runs_once_and_a_failure_is_not_kept():
    cache = AnswerCache(None)
    runs = []

    async def compute():
        runs.append(1)
        await asyncio.sleep(0.01)
        return {"text": "ok"}

    async def failing():
        runs.append(1)
        await asyncio.sleep(0.01)
        raise RuntimeError("down")

    async def scenario():
        shared = await asyncio.gather(*(cache.shared("k", compute) for _ in range(5)))
        assert [owner for _, owner in shared].count(True) == 1
        outcomes = await asyncio.gather(*(cache.shared("f", failing) for _ in range(3)), return_exceptions=True)
        assert all(isinstance(o, RuntimeError) for o in outcomes)
        assert cache.get("f") is None
        await cache.shared("f", compute)  # a later call tries again

    asyncio.run(scenario())
    assert len(runs) == 3


# ---------------------------------------------------------------------- input


def test_read_pairs_jsonl_keeps_ids_and_names_bad_utf8(tmp_path):
    src = tmp_path / "pairs.jsonl"
    good = json.dumps({"pair_id": "a", "reference": "R.", "candidate": "C."}).encode()
    bad = b'{"pair_id": "b", "reference": "caf\xff\xfe", "candidate": "C."}'
    src.write_bytes(good + b"\n\n" + bad + b"\n" + b'{"reference": 3, "candidate": "C."}\n')
    items = list(read_pairs(src))
    assert [where for where, _ in items] == ["line 1", "line 3", "line 4"]
    assert isinstance(items[0][1], PairInput) and items[0][1].pair_id == "a"
    problem = items[1][1]
    assert isinstance(problem, RowProblem) and problem.pair_id == "b"
    assert problem.message == "column 'reference' is not valid UTF-8 text"
    assert problem.inputs == {"candidate": "C."}
    assert items[2][1].message == "column 'reference' must be text, got int"


def test_read_pairs_csv_without_a_reference_column_is_a_file_error(tmp_path):
    src = tmp_path / "pairs.csv"
    src.write_text("ref,candidate\nR.,C.\n")
    with pytest.raises(InputError, match="no column 'reference'.*--reference-column"):
        list(read_pairs(src))
    with pytest.raises(InputError, match="no such file"):
        list(read_pairs(tmp_path / "missing.jsonl"))


def test_read_pairs_dataset_checks_its_columns_and_splits(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({
        "a": datasets.Dataset.from_dict({"reference": ["R."], "candidate": ["C."]}),
        "b": datasets.Dataset.from_dict({"text": ["R."]}),
    }).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(InputError, match="has splits"):
        list(read_pairs(tmp_path / "ds"))
    assert isinstance(next(read_pairs(tmp_path / "ds", split="a"))[1], PairInput)
    with pytest.raises(InputError, match="no column 'reference', 'candidate'"):
        list(read_pairs(tmp_path / "ds", split="b"))


# ---------------------------------------------------------------------- the loop owner


def test_loop_thread_runs_coroutines_on_one_loop_from_any_caller():
    owner = LoopThread()
    loops = []

    async def where():
        loops.append(asyncio.get_running_loop())
        return threading.current_thread().name

    assert owner.run(where()) == "radmatch"

    async def caller_with_its_own_loop():
        return owner.run(where())  # a notebook cell: blocking call from inside a running loop

    asyncio.run(caller_with_its_own_loop())
    assert loops[0] is loops[1]
    owner.close()
    assert owner.run(where()) == "radmatch"  # a closed owner starts a fresh loop on demand
    owner.close()


def test_evaluator_closes_its_judge_and_never_mutates_the_callers_pairs():
    judge = ScriptedJudge()
    pair = PairInput(reference="Small left pleural effusion.", candidate="Small left pleural effusion.")
    with Evaluator(judge) as evaluator:
        (record,) = evaluator.evaluate([pair])
    assert record.pair_id == "0" and pair.pair_id is None
    assert record.scores.actionable_errors == 0 and judge.closed


def test_context_budget_failure_names_its_stage_once():
    judge = ScriptedJudge()
    judge.context_window = 400  # the prompt alone is larger
    with Evaluator(judge) as evaluator:
        (record,) = evaluator.evaluate([PairInput(reference="No pneumothorax.", candidate="No effusion.")])
    assert record.failure.stage == "extract"
    assert record.error.startswith("extract: the pair needs ") and "extract:" not in record.error[8:]
    assert judge.calls == []


def test_records_file_is_owner_only(tmp_path):
    from radmatch_audit.core.records import failed_input
    from radmatch_audit.files.record_io import RecordWriter

    path = tmp_path / "records.jsonl"
    path.write_text("old\n")
    os.chmod(path, 0o644)
    with RecordWriter(path) as writer:
        writer.write(failed_input("x", "test"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["failure"]["stage"] == "input"


def test_a_judge_passed_in_stays_open_for_its_owner():
    from radmatch_audit import JudgeConfig

    shared = ScriptedJudge()
    pair = PairInput(reference="No pneumothorax.", candidate="No pneumothorax.")
    with Evaluator.from_config(JudgeConfig.from_env({}), judge=shared) as first:
        first.evaluate([pair])
    assert not shared.closed  # the caller's judge: a second evaluator may use it
    with Evaluator(shared) as second:  # built around the judge: this evaluator owns it
        (record,) = second.evaluate([pair])
    assert record.scores is not None and shared.closed


# ------------------------------------------------------------- JudgeCalls.ask: retries


EXTRACT = pair_stages()["extract"]


class _FlakyJudge(ScriptedJudge):
    """The scripted judge, giving `faults` first: "bad" an answer that is not JSON, or an
    exception to raise."""

    def __init__(self, *faults) -> None:
        super().__init__()
        self.faults = list(faults)
        self.attempts = 0

    async def generate(self, messages, schema, *, max_tokens):
        self.attempts += 1
        if self.faults:
            fault = self.faults.pop(0)
            if fault == "bad":
                return JudgeResult(text='{"findings": [', usage=Usage(3, 2))
            raise fault
        return await super().generate(messages, schema, max_tokens=max_tokens)


def ask_extract(judge, retries=3):
    """Ask `judge` for one extraction through a fresh JudgeCalls; (answer or error, calls, spend)."""
    async def go():
        calls = JudgeCalls(judge, cache=AnswerCache(None), retries=retries, backoff_s=0)
        spend = PairSpend()
        try:
            answer = await calls.ask(EXTRACT, "chest_xray", {"report": "Small effusion.", "indication": None}, spend)
        except StageFailed as failed:
            answer = failed
        return answer, calls, spend
    return asyncio.run(go())


def test_an_invalid_answer_is_retried_once():
    answer, calls, spend = ask_extract(_FlakyJudge("bad"))
    assert [f.text for f in answer.findings] == ["Small effusion."]
    assert calls.stats.judge_calls == 2 and spend.calls == 1 and spend.cached == 0
    assert spend.prompt_tokens == 10  # the valid answer's usage


def test_a_second_invalid_answer_fails_the_stage_by_name():
    judge = _FlakyJudge("bad", "bad", "bad")
    failed, _, _ = ask_extract(judge)
    assert isinstance(failed, StageFailed) and judge.attempts == 2
    assert failed.failure.stage == "extract" and failed.failure.attempts == 2
    assert "extract answer is not valid JSON" in failed.failure.cause
    assert str(failed).startswith("extract: the extract answer is not valid JSON")


def test_a_transient_fault_is_retried_up_to_retries_and_another_fault_fails_at_once():
    answer, _, _ = ask_extract(_FlakyJudge(TransientJudgeError("timed out")), retries=2)
    assert not isinstance(answer, StageFailed)
    judge = _FlakyJudge(*[TransientJudgeError("HTTP 503")] * 3)
    failed, _, _ = ask_extract(judge, retries=3)
    assert judge.attempts == 3 and failed.failure.cause == "HTTP 503" and failed.failure.attempts == 3
    judge = _FlakyJudge(JudgeError("HTTP 400: bad request"))
    failed, _, _ = ask_extract(judge)
    assert judge.attempts == 1 and failed.failure.message().startswith("extract: HTTP 400: bad request")


def test_a_valid_answer_is_stored_and_asked_again_comes_from_the_store():
    async def go():
        judge = ScriptedJudge()
        calls = JudgeCalls(judge, cache=AnswerCache(None))
        spend = PairSpend()
        user = {"report": "Small effusion.", "indication": None}
        first = await calls.ask(EXTRACT, "chest_xray", user, spend)
        again = await calls.ask(EXTRACT, "chest_xray", user, spend)
        other = await calls.ask(EXTRACT, "chest_xray", user, spend, sample=1)
        return first, again, other, judge, spend
    first, again, other, judge, spend = asyncio.run(go())
    assert first == again == other and len(judge.calls) == 2  # sample 1 is asked afresh
    assert spend.calls == 3 and spend.cached == 1 and spend.exemplars["extract"] > 0
