"""The evaluate metric (radmatch_metric.py -> radmatch_audit.hf.metric) and `radmatch-audit install-metric`.

Fast tests drive the metric with a scripted judge (orchestration only) or with a judge
endpoint that refuses connections (every pair fails: a real failure path). Loading is
tested in subprocesses with HF_EVALUATE_OFFLINE=1, from a directory outside the
checkout, the three ways users load it. Tests marked slow run the embedded SmolLM2
judge; they share one answer cache for the session, so each answer is computed once.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")  # before evaluate is imported
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import warnings

import pytest

from radmatch_audit import Evaluator, JudgeConfig, PairInput
from radmatch_audit.cli import build_parser
from radmatch_audit.files.record_io import read_records
from radmatch_audit.hf.metric import PER_PAIR_EXTRAS, MetricScorer, make_pairs, split_init_kwargs
from radmatch_audit.hf.metric_install import install_metric, script_path
from radmatch_audit.hf.reward import RadMatchReward
from radmatch_audit.judges import judge_notice
from radmatch_audit.judges.judge_notice import NotClinicalWarning
from radmatch_audit.testing.fake_server import StubServer
from radmatch_audit.testing.scripted import RecordingJudge, ScriptedJudge

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "radmatch_metric.py"
CLOSED_URL = "http://127.0.0.1:9/v1"  # loopback discard port: connection refused at once

# Short chest X-ray reports; the pairs share one reference (an epoch of a training loop).
REF = "Heart size is normal. Small right pleural effusion. No pneumothorax."
C1 = "Heart size is normal. No pleural effusion. No pneumothorax."
C2 = "Normal heart size. Small right pleural effusion."
C3 = "Small right pleural effusion. No pneumothorax."
REF2 = "Moderate cardiomegaly. Mild pulmonary vascular congestion. No pneumothorax."
C4 = "Moderate cardiomegaly. No pneumothorax."


# ---------------------------------------------------------------------------- helpers


def extract_reports(calls) -> list[str]:
    return [user["report"] for stage, user in calls if stage == "extract"]


def load_metric(**options):
    import evaluate

    return evaluate.load(str(SHIM), **options)


def offline_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a subprocess: offline, its own HF caches, no inherited judge."""
    keep = {"RADMATCH_CACHE_DIR", "RADMATCH_SMOLLM_GGUF", "RADMATCH_LOCAL_MODEL_DIR"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADMATCH_") or k in keep}
    env.update(
        HF_EVALUATE_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(tmp / "hf-home"),
        HF_MODULES_CACHE=str(tmp / "hf-modules"),
        PYTHONPATH="",  # the installed radmatch, not the checkout on sys.path
    )
    env.update(extra)
    return env


def run_python(*blocks: str, cwd: Path, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run code blocks (each dedented on its own) in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(textwrap.dedent(b) for b in blocks)],
        check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return proc


def last_json(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def install_via_cli(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`radmatch-audit install-metric`, as a user types it."""
    proc = subprocess.run(
        [sys.executable, "-m", "radmatch_audit.cli", "install-metric"],
        check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


FAILING_COMPUTE = """
    results = metric.compute(predictions=["No pleural effusion."],
                             references=["Small right pleural effusion."])
    print(json.dumps({"cls": type(metric).__name__, "features": sorted(metric.features),
                      "citation": metric.citation, "description": metric.description,
                      "homepage": metric.homepage, "license": metric.license,
                      "errors": results["actionable_errors"], "n_failed": results["n_failed"],
                      "record_error": results["records"][0]["error"]}))
"""


def check_failing_compute(out: dict) -> None:
    assert out["cls"] == "RadMatch"
    assert out["features"] == sorted(["predictions", "references", *PER_PAIR_EXTRAS])
    assert "RadMatch" in out["citation"] and "RADMATCH_BASE_URL" in out["description"]
    assert out["license"] == "Apache-2.0" and out["homepage"].startswith("https://")
    assert out["errors"] == [None] and out["n_failed"] == 1  # failed, never 0 errors
    assert out["record_error"].startswith("extract:")


# ---------------------------------------------------------------------------- loading


def test_kwargs_description_doctests_run(tmp_path):
    """The usage examples in _KWARGS_DESCRIPTION are doctests (CI runs them through this)."""
    proc = run_python(
        """
        import doctest, sys
        import radmatch_metric
        result = doctest.testmod(radmatch_metric, optionflags=doctest.ELLIPSIS)
        print(result.attempted, result.failed)
        sys.exit(1 if result.failed or result.attempted < 5 else 0)
        """,
        cwd=REPO, env=offline_env(tmp_path, PYTHONPATH=str(REPO)),
    )
    attempted, failed = map(int, proc.stdout.split()[-2:])
    assert failed == 0 and attempted >= 5


def test_load_from_checkout_file_offline(tmp_path):
    proc = run_python(
        f"""
        import json
        import evaluate
        metric = evaluate.load({str(SHIM)!r}, base_url={CLOSED_URL!r}, retries=1, cache=False)
        """,
        FAILING_COMPUTE,
        cwd=tmp_path, env=offline_env(tmp_path),
    )
    check_failing_compute(last_json(proc))


def test_load_from_installed_package_one_liner(tmp_path):
    """The documented one-liner: evaluate.load(radmatch_audit.hf.metric.script_path())."""
    proc = run_python(
        f"""
        import json
        import evaluate
        import radmatch_audit.hf.metric
        metric = evaluate.load(radmatch_audit.hf.metric.script_path(), base_url={CLOSED_URL!r}, retries=1, cache=False)
        """,
        FAILING_COMPUTE,
        cwd=tmp_path, env=offline_env(tmp_path),
    )
    check_failing_compute(last_json(proc))


def test_bare_name_after_install_metric(tmp_path):
    """`radmatch-audit install-metric`, then evaluate.load("radmatch") from another directory."""
    env = offline_env(tmp_path)
    proc = install_via_cli(tmp_path, env)
    installed = Path(proc.stdout.split(" at ", 1)[1].splitlines()[0])
    assert installed.is_file() and installed.name == "radmatch.py"
    assert installed.parents[1].name == "evaluate-metric--radmatch"
    assert str(installed).startswith(env["HF_MODULES_CACHE"])  # honours HF_MODULES_CACHE
    assert installed.read_bytes() == SHIM.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_python(
        f"""
        import json
        import evaluate
        metric = evaluate.load("radmatch", base_url={CLOSED_URL!r}, retries=1, cache=False)
        """,
        FAILING_COMPUTE,
        cwd=elsewhere, env=env,
    )
    check_failing_compute(last_json(proc))
    assert "Using the latest cached version" in proc.stderr  # resolved from the modules cache


def test_install_metric_replaces_an_earlier_install(tmp_path):
    home = tmp_path / "evaluate_modules" / "metrics" / "evaluate-metric--radmatch"
    stale = home / ("0" * 64)
    stale.mkdir(parents=True)
    (stale / "radmatch.py").write_text("# an older RadMatch\n")
    target = install_metric(tmp_path)
    assert target == install_metric(tmp_path)  # idempotent
    assert [p.name for p in home.iterdir() if p.is_dir()] == [target.parent.name]
    assert len(target.parent.name) == 64
    for folder in (tmp_path, tmp_path / "evaluate_modules", home.parent, home, target.parent):
        assert (folder / "__init__.py").is_file()


def test_install_metric_parser_help():
    args = build_parser().parse_args(["install-metric", "--modules-cache", "/x"])
    assert args.modules_cache == "/x" and callable(args.func)
    assert script_path() == str(SHIM)


# ---------------------------------------------------------------------------- options


def test_judge_options_from_environment_and_load_kwargs(tmp_path):
    env = {
        "RADMATCH_BASE_URL": "http://127.0.0.1:8000/v1",
        "RADMATCH_MODEL": "gemma-judge",
        "RADMATCH_API_KEY_ENV": "MY_JUDGE_KEY",
        "RADMATCH_CONCURRENCY": "3",
        "RADMATCH_CACHE": "0",
        "RADMATCH_JUDGE_CACHE_DIR": str(tmp_path / "answers"),
        "RADMATCH_MODALITY": "chest_ct",
        "RADMATCH_RECORDS_PATH": str(tmp_path / "records.jsonl"),
    }
    scorer = MetricScorer(env=env)
    c = scorer.config
    assert (c.base_url, c.model, c.api_key_env, c.concurrency, c.cache) == (
        "http://127.0.0.1:8000/v1", "gemma-judge", "MY_JUDGE_KEY", 3, False)
    assert c.cache_dir == str(tmp_path / "answers") and c.resolved_backend == "vllm"
    assert c.modality == "chest_ct"
    assert scorer.records_path == str(tmp_path / "records.jsonl")
    # keyword arguments (evaluate.load(..., **kwargs)) win over the environment
    scorer = MetricScorer(env=env, concurrency=5, judge_cache_dir="/other", records_path="r.jsonl")
    assert scorer.config.concurrency == 5 and scorer.config.cache_dir == "/other"
    assert scorer.records_path == "r.jsonl"


def test_unknown_load_option_is_refused():
    with pytest.raises(TypeError, match="unknown RadMatch option.*base_ur"):
        split_init_kwargs({"base_ur": "http://127.0.0.1:1"})
    module_kwargs, options = split_init_kwargs({"experiment_id": "e", "base_url": "u"})
    assert module_kwargs == {"experiment_id": "e"} and options == {"base_url": "u"}
    with pytest.raises(ValueError, match="modality"):
        MetricScorer(env={}, modality="dental")


def test_extras_are_validated():
    with pytest.raises(ValueError, match="The 'indications' parameter of RadMatch.compute"):
        make_pairs(["a", "b"], ["a", "b"], indications=["only one"])
    with pytest.raises(ValueError, match="one entry per reference"):
        make_pairs(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="modalities="):
        make_pairs(["a"], ["a"], modality="chest_xray")
    with pytest.raises(ValueError, match="modalities"):
        make_pairs(["a"], ["a"], modalities=["dental"])
    pairs = make_pairs(["a", "b"], ["c", "d"], modalities="chest_xray", study_ids=["s1", None])
    assert [p.modality for p in pairs] == ["chest_xray"] * 2 and pairs[1].study_id is None


# ---------------------------------------------------------------------------- compute


def test_compute_over_a_dataset_with_extras_and_records(tmp_path):
    import datasets

    judge = ScriptedJudge()
    records_path = tmp_path / "records.jsonl"
    metric = load_metric(judge=judge, cache=False, records_path=str(records_path))
    ds = datasets.Dataset.from_dict({
        "reference": [REF, REF, "FAIL " + REF],
        "candidate": [REF, C1, C1],
        "indication": ["Dyspnoea.", None, None],
        "study_id": ["s1", "s2", "s3"],
    })
    out = metric.compute(
        predictions=ds["candidate"], references=ds["reference"],
        indications=list(ds["indication"]), study_ids=list(ds["study_id"]),
    )
    assert out["actionable_errors"][0] == 0
    assert out["actionable_errors"][1] >= 1  # the effusion was missed
    assert out["actionable_errors"][2] is None  # failed: never 0
    assert (out["n_pairs"], out["n_scored"], out["n_failed"]) == (3, 2, 1)
    assert out["mean_actionable_errors"] == pytest.approx(sum(out["actionable_errors"][:2]) / 2)
    for key in ("triage_precision", "triage_recall", "actionable_precision", "actionable_recall"):
        assert key in out
    assert out["summary"]["outcomes"] == {
        k: sum(r["scores"]["outcomes"][k] for r in out["records"][:2]) for k in out["summary"]["outcomes"]
    }
    recs = out["records"]
    assert [r["study_id"] for r in recs] == ["s1", "s2", "s3"]
    assert recs[0]["indication"] == "Dyspnoea." and recs[0]["stages"]["indication"] == "Dyspnoea."
    assert recs[2]["scores"] is None and "scripted failure" in recs[2]["error"]
    assert out["judge_calls"] == len(judge.calls) - 1  # the call that raised gave no answer
    json.dumps(out)  # plain JSON: loggable as is
    stored = list(read_records(records_path))
    assert [r.study_id for r in stored] and sorted(r.study_id for r in stored) == ["s1", "s2", "s3"]


def test_add_batch_streaming_then_compute_with_extras():
    judge = ScriptedJudge()
    metric = load_metric(judge=judge, cache=False)
    metric.add_batch(predictions=[REF, C1], references=[REF, REF])
    metric.add_batch(predictions=[C4], references=[REF2])
    out = metric.compute(study_ids=["a", "b", "c"], modalities="chest_xray")
    assert len(out["actionable_errors"]) == 3 and None not in out["actionable_errors"]
    assert [r["study_id"] for r in out["records"]] == ["a", "b", "c"]
    assert [r["candidate"] for r in out["records"]] == [REF, C1, C4]
    # a streamed compute equals a one-shot compute of the same pairs
    once = load_metric(judge=ScriptedJudge(), cache=False).compute(
        predictions=[REF, C1, C4], references=[REF, REF, REF2])
    assert once["actionable_errors"] == out["actionable_errors"]


def test_add_batch_takes_the_per_pair_extras_like_predictions():
    """Extras go with their batch (evaluate's add_batch convention), a batch without
    them leaves its pairs' extras unset; `add` takes them by their singular names."""
    metric = load_metric(judge=ScriptedJudge(), cache=False)
    metric.add_batch(predictions=[REF, C1], references=[REF, REF], study_ids=["a", "b"],
                     indications=["Dyspnoea.", None], modalities="chest_xray")
    metric.add_batch(predictions=[C4], references=[REF2])  # no extras for this batch
    metric.add(prediction=C2, reference=REF, study_id="d", pair_id="p-d")
    out = metric.compute(progress=False)
    records = out["records"]
    assert [r["candidate"] for r in records] == [REF, C1, C4, C2]
    assert [r["study_id"] for r in records] == ["a", "b", None, "d"]
    assert [r["indication"] for r in records][:3] == ["Dyspnoea.", None, None]
    assert [r["modality"] for r in records][:2] == ["chest_xray", "chest_xray"]
    assert [r["pair_id"] for r in records] == ["0", "1", "2", "p-d"]
    with pytest.raises(ValueError, match="'study_ids' parameter.*one entry per pair \\(2\\)"):
        metric.add_batch(predictions=[REF, C1], references=[REF, REF], study_ids=["only one"])
    with pytest.raises(TypeError, match="per-pair extras"):
        metric.add_batch(predictions=[REF], references=[REF], study_id=["a"])
    with pytest.raises(ValueError, match="modalities"):
        metric.add_batch(predictions=[REF], references=[REF], modalities=["dental"])
    # compute() with the pairs takes the extras the same way; a misspelt one is refused
    once = metric.compute(predictions=[C1], references=[REF], study_ids=["z"], progress=False)
    assert once["records"][0]["study_id"] == "z"
    with pytest.raises(TypeError, match="modalities="):
        metric.compute(predictions=[C1], references=[REF], modality="chest_xray")


def test_compute_shows_the_clis_progress_bar_unless_turned_off(capsys, monkeypatch):
    monkeypatch.delenv("RADMATCH_PROGRESS", raising=False)
    metric = load_metric(judge=ScriptedJudge(), cache=False)
    capsys.readouterr()
    metric.compute(predictions=[C1, C2, C3], references=[REF, REF, REF])
    err = capsys.readouterr().err
    assert "3/3" in err and "pair" in err and "pairs_per_s" in err  # tqdm, as `radmatch-audit evaluate`
    metric.compute(predictions=[C1], references=[REF], progress=False)
    assert capsys.readouterr().err == ""
    quiet = load_metric(judge=ScriptedJudge(), cache=False, progress=False)
    quiet.compute(predictions=[C1], references=[REF])
    assert capsys.readouterr().err == ""
    assert MetricScorer(env={"RADMATCH_PROGRESS": "0"}).progress is False
    with pytest.raises(ValueError, match="progress"):
        MetricScorer(env={}, progress="sometimes")


def test_mean_actionable_errors_has_a_seeded_interval_over_studies():
    from radmatch_audit.read.resampling import mean_interval

    metric = load_metric(judge=ScriptedJudge(), cache=False, progress=False)
    kwargs = dict(
        predictions=[REF, C1, C2, C3, C4, "FAIL"], references=[REF, REF, REF, REF, REF2, REF],
        study_ids=["s1", "s1", "s2", "s2", None, "s3"],
    )
    out = metric.compute(**kwargs)
    errors = out["actionable_errors"]
    low, high = out["mean_actionable_errors_ci"]
    assert low <= out["mean_actionable_errors"] <= high
    # the failed pair is left out; the pair without a study id is its own study
    expected = mean_interval(errors[:5], ["s1", "s1", "s2", "s2", "own"])
    assert [low, high] == pytest.approx(list(expected))
    assert out["summary"]["mean_actionable_errors_ci"] == [low, high]
    assert metric.compute(**kwargs)["mean_actionable_errors_ci"] == [low, high]  # seeded


def test_second_compute_calls_the_judge_only_for_new_candidates():
    """Epoch 2 over the same references: the reference extractions are reused (memory
    memo of the metric's one evaluator; the disk cache is off here)."""
    judge = ScriptedJudge()
    metric = load_metric(judge=judge, cache=False)
    first = metric.compute(predictions=[C1, C4], references=[REF, REF2])
    assert sorted(extract_reports(judge.calls)) == sorted([REF, REF2, C1, C4])
    assert first["judge_calls"] == len(judge.calls)
    judge.calls.clear()
    second = metric.compute(predictions=[C2, C3], references=[REF, REF2])
    assert sorted(extract_reports(judge.calls)) == sorted([C2, C3])  # no reference
    assert {stage for stage, _ in judge.calls} <= {"extract", "match", "grade", "adjudicate"}
    assert second["judge_calls"] == len(judge.calls)
    assert all(r["usage"]["cached_calls"] >= 1 for r in second["records"])
    judge.calls.clear()
    again = metric.compute(predictions=[C2, C3], references=[REF, REF2])  # nothing new
    assert judge.calls == [] and again["judge_calls"] == 0
    assert again["actionable_errors"] == second["actionable_errors"]


def test_scorer_pickles_without_its_judge():
    scorer = MetricScorer(env={}, judge=ScriptedJudge(), cache=False)
    scorer.compute([C1], [REF])
    clone = pickle.loads(pickle.dumps(scorer))
    assert clone.config == scorer.config and clone._evaluator is None


def test_compute_inside_a_running_event_loop():
    import asyncio

    metric = load_metric(judge=ScriptedJudge(), cache=False)

    async def in_notebook():
        return metric.compute(predictions=[C1], references=[REF])

    assert asyncio.run(in_notebook())["n_scored"] == 1


# ---------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_bare_name_over_a_dataset_with_the_real_model_equals_the_pipeline(
    tmp_path, shared_answer_cache, local_judge
):
    """evaluate.load("radmatch") in a fresh offline process, compute over a
    datasets.Dataset with the embedded SmolLM2 judge; per-pair counts equal the
    pipeline's on the same pairs."""
    env = offline_env(tmp_path, RADMATCH_JUDGE_CACHE_DIR=str(shared_answer_cache))
    install_via_cli(tmp_path, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_python(
        f"""
        import json
        import datasets
        import evaluate
        ds = datasets.Dataset.from_dict({{"reference": [{REF!r}, {REF!r}],
                                         "candidate": [{C1!r}, {C2!r}],
                                         "study_id": ["rm-1", "rm-2"]}})
        metric = evaluate.load("radmatch")
        out = metric.compute(predictions=ds["candidate"], references=ds["reference"],
                             study_ids=list(ds["study_id"]))
        print(json.dumps({{"errors": out["actionable_errors"], "n_failed": out["n_failed"],
                          "outcomes": [r["scores"] and r["scores"]["outcomes"] for r in out["records"]],
                          "model": out["records"][0]["judge"]["model"],
                          "mean": out["mean_actionable_errors"]}}))
        """,
        cwd=elsewhere, env=env,
    )
    out = last_json(proc)
    assert out["n_failed"] == 0, out
    assert all(isinstance(e, int) and e >= 0 for e in out["errors"])
    assert out["model"] == "SmolLM2-135M-Instruct"

    evaluator = Evaluator.from_config(JudgeConfig.from_env({}, cache_dir=str(shared_answer_cache)), judge=local_judge)
    records = evaluator.evaluate([PairInput(REF, C1, study_id="rm-1"), PairInput(REF, C2, study_id="rm-2")])
    assert [r.scores.actionable_errors for r in records] == out["errors"]
    assert [r.scores.outcomes for r in records] == out["outcomes"]
    assert evaluator.stats.judge_calls == 0  # same inputs, same cache keys: no new call

    # ... and equal `radmatch-audit evaluate`'s on the same pairs (records come in finishing order)
    pairs_file = tmp_path / "pairs.jsonl"
    pairs_file.write_text("".join(
        json.dumps({"pair_id": f"rm-{i}", "reference": REF, "candidate": c}) + "\n"
        for i, c in enumerate((C1, C2), 1)
    ))
    cli = subprocess.run(
        [sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(pairs_file), "-o",
         str(tmp_path / "records.jsonl"), "--cache-dir", str(shared_answer_cache), "-q"],
        check=False, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=1800,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    by_id = {r.pair_id: r.scores.actionable_errors for r in read_records(tmp_path / "records.jsonl")}
    assert [by_id["rm-1"], by_id["rm-2"]] == out["errors"]


@pytest.mark.slow
def test_second_epoch_with_the_real_model_extracts_only_new_candidates(shared_answer_cache, local_judge):
    judge = RecordingJudge(local_judge)
    metric = load_metric(judge=judge, judge_cache_dir=str(shared_answer_cache))
    first = metric.compute(predictions=[C1, C2], references=[REF, REF])
    assert first["n_failed"] == 0
    judge.calls.clear()
    second = metric.compute(predictions=[C3], references=[REF])
    assert second["n_failed"] == 0 and isinstance(second["actionable_errors"][0], int)
    assert REF not in extract_reports(judge.calls)  # the reference is never re-extracted
    assert set(extract_reports(judge.calls)) <= {C3}
    assert second["judge_calls"] == len(judge.calls)
    assert second["records"][0]["usage"]["cached_calls"] >= 1


# docs/metric.md's blocks run in tests/docs/test_docs_blocks.py (every document's blocks, one runner).


def test_bare_name_before_install_metric_fails_with_the_message_the_docs_pair_with_the_fix(tmp_path):
    """evaluate's own error names neither RadMatch nor the fix: docs/metric.md shows it
    beside `radmatch-audit install-metric`, as the package's docstrings do."""
    import radmatch_audit
    import radmatch_audit.hf.metric

    proc = subprocess.run(
        [sys.executable, "-c", 'import evaluate; evaluate.load("radmatch")'],
        check=False, cwd=tmp_path, env=offline_env(tmp_path), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1
    message = proc.stderr.strip().splitlines()[-1].replace(str(tmp_path), "/home/me")
    assert message.startswith("FileNotFoundError: Couldn't find a module script at /home/me/radmatch")
    doc = (REPO / "docs" / "metric.md").read_text(encoding="utf-8")
    shown = doc.index(message)
    assert doc.rfind("radmatch-audit install-metric", 0, shown) > shown - 600  # the fix, beside it
    assert "radmatch-audit install-metric" in doc[shown:shown + 400]
    for module in (radmatch_audit, radmatch_audit.hf.metric):
        assert "radmatch-audit install-metric" in module.__doc__
        assert "Couldn't find a module script" in " ".join(module.__doc__.split())


class SmallJudge(ScriptedJudge):
    """The scripted answers under the embedded judge's name."""

    backend = "transformers"
    model = "SmolLM2-135M-Instruct"


def test_compute_names_a_server_judge_by_host_without_path_or_key(monkeypatch):
    monkeypatch.setenv("H3_TEST_KEY", "sk-very-secret")
    with StubServer(api_key="sk-very-secret", model="big-judge") as server:
        scorer = MetricScorer(base_url=server.base_url + "?token=q", model="big-judge",
                              api_key_env="H3_TEST_KEY", cache=False, env={})
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = scorer.compute([C1], [REF], progress=False)
        finally:
            scorer.close()
    port = server.base_url.split(":")[2].split("/")[0]
    assert result["judge"] == {"backend": "vllm", "model": "big-judge",
                               "endpoints": [f"127.0.0.1:{port}"], "embedded_small_judge": False}
    text = json.dumps(result["judge"])
    assert "secret" not in text and "/v1" not in text and "token" not in text
    assert not [w for w in caught if issubclass(w.category, NotClinicalWarning)]


def test_embedded_judge_results_warn_once_per_process(monkeypatch):
    monkeypatch.setattr(judge_notice, "_warned", False)
    scorer = MetricScorer(judge=SmallJudge(), cache=False, env={})
    reward = RadMatchReward(scorer=scorer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = scorer.compute([C1], [REF], progress=False)
        scorer.compute([C2], [REF], progress=False)
        reward(completions=[C1], reference=[REF])
    notices = [w for w in caught if issubclass(w.category, NotClinicalWarning)]
    assert len(notices) == 1 and "not clinical" in str(notices[0].message)
    assert first["judge"]["embedded_small_judge"] is True
    assert reward.judge == first["judge"] and reward.judge["model"] == "SmolLM2-135M-Instruct"
    scorer.close()
