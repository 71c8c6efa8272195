"""serve/gpu_plan.py: the judge server's GPU plan, as functions and as the command
serve/start_vllm.sh runs (tests/serve/test_start_vllm.py runs the script itself)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_PLAN = REPO / "serve" / "gpu_plan.py"

_spec = importlib.util.spec_from_file_location("gpu_plan", GPU_PLAN)
gp = importlib.util.module_from_spec(_spec)
sys.modules["gpu_plan"] = gp  # dataclasses look their module up by name
_spec.loader.exec_module(gp)

GEMMA_31B = gp.profile_named("gemma4-31b")
GEMMA_26B = gp.profile_named("gemma4-26b-a4b")
RTX_5090 = gp.Gpu("NVIDIA GeForce RTX 5090", 32607, 120, "12.0")
H100 = gp.Gpu("NVIDIA H100 80GB HBM3", 81559, 90, "9.0")
L40S = gp.Gpu("NVIDIA L40S", 46068, 89, "8.9")
A100 = gp.Gpu("NVIDIA A100-SXM4-80GB", 81920, 80, "8.0")
V100 = gp.Gpu("Tesla V100-SXM2-32GB", 32768, 70, "7.0")
RTX_4060 = gp.Gpu("NVIDIA GeForce RTX 4060 Ti", 16380, 89, "8.9")


def plan_for(gpus, profile=GEMMA_31B, driver="580.95.05", **kwargs):
    return gp.make_plan(profile, gpus, driver=driver, **kwargs)


# ---- profiles and the arithmetic ------------------------------------------------------


def test_unknown_profile_is_a_usage_error_naming_the_profiles():
    with pytest.raises(gp.PlanError, match=r"unknown profile 'gpt-7' \(profiles: gemma4-31b gemma4-26b-a4b\)"):
        gp.profile_named("gpt-7")


def test_the_profile_table_lists_every_profile():
    rows = {ln.split()[0]: ln.split()[1:4] for ln in gp.profile_table().splitlines() if ln.startswith("  gemma")}
    assert rows == {p.name: [p.hf_id, str(p.weights_mib), str(p.kv_floor_mib)] for p in gp.PROFILES}


def test_need_per_gpu_splits_weights_and_kv_floor_rounding_up():
    # 30041 / 2 = 15020.5 -> 15021; 4096 / 2 = 2048; + 1536 runtime
    assert gp.need_per_gpu_mib(30041, 4096, 1) == 35673
    assert gp.need_per_gpu_mib(30041, 4096, 2) == 18605
    assert gp.need_per_gpu_mib(30041, 4096, 8) == 3756 + 1536 + 512


def test_usable_memory_truncates_like_the_script_did():
    assert gp.usable_mib(32607, "0.92") == 29998  # 29998.44
    assert gp.usable_mib(81559, "0.92") == 75034
    assert gp.usable_mib(81559, "1") == 81559


# Every profile on the GPUs it fits (fewest GPUs first) and on those it does not.
@pytest.mark.parametrize(
    ("profile", "gpus", "tp", "dp", "need"),
    [
        (GEMMA_31B, [H100], 1, 1, 35673),
        (GEMMA_31B, [L40S], 1, 1, 35673),
        (GEMMA_31B, [RTX_5090] * 2, 2, 1, 18605),
        (GEMMA_31B, [RTX_5090] * 4, 2, 2, 18605),
        (GEMMA_31B, [H100] * 8, 1, 8, 35673),
        (GEMMA_31B, [RTX_4060] * 4, 4, 1, 7511 + 1536 + 1024),
        (GEMMA_26B, [RTX_5090], 1, 1, 24800 + 1536 + 2048),
        (GEMMA_26B, [RTX_4060] * 2, 2, 1, 12400 + 1536 + 1024),
    ],
    ids=["31b-1xH100", "31b-1xL40S", "31b-2x5090", "31b-4x5090", "31b-8xH100", "31b-4x16GB",
         "26b-1x5090", "26b-2x16GB"],
)
def test_one_replica_on_the_fewest_gpus_then_as_many_replicas_as_fit(profile, gpus, tp, dp, need):
    plan = plan_for(gpus, profile)
    assert (plan.tp, plan.dp, plan.stops, plan.software_problems) == (tp, dp, [], [])
    noun = "GPU" if len(gpus) == 1 else "GPUs"
    first, second = gp.plan_lines(plan).splitlines()
    assert first.startswith(f"{len(gpus)} {noun} x {min(g.mib for g in gpus)} MiB ")
    assert first.endswith(f"one replica needs {tp}: (model {profile.weights_mib} + KV cache "
                          f"{profile.kv_floor_mib}) / {tp} + runtime 1536 = {need} MiB per GPU")
    assert second == f"TP {tp} x DP {dp} = {tp * dp} GPU{'s' if tp * dp > 1 else ''}"


@pytest.mark.parametrize(
    ("profile", "gpus"),
    [(GEMMA_31B, [RTX_5090]), (GEMMA_31B, [RTX_4060] * 2), (GEMMA_26B, [RTX_4060])],
    ids=["31b-1x32GB", "31b-2x16GB", "26b-1x16GB"],
)
def test_too_little_gpu_memory_stops_with_exit_3(profile, gpus):
    plan = plan_for(gpus, profile)
    assert [stop.code for stop in plan.stops] == [3]
    assert plan.stops[0].reason.startswith(f"refusing to start: {profile.name} does not fit on {len(gpus)} x ")
    assert plan.exit_code() == 3
    assert "one replica does not fit" in gp.plan_lines(plan)


def test_the_refusal_shows_the_arithmetic_and_what_would_fit():
    plan = plan_for([RTX_5090])
    assert plan.tp == 1  # the arithmetic at the largest tp the GPUs allow
    assert plan.stops[0].reason == (
        "refusing to start: gemma4-31b does not fit on 1 x NVIDIA GeForce RTX 5090 (32607 MiB) "
        "at tensor parallelism 1.\n"
        "  memory per GPU at tensor parallelism 1:\n"
        "    FP8 weights     30041 MiB / 1 = 30041 MiB\n"
        "    runtime         1536 MiB (activations, CUDA graphs, NCCL)\n"
        "    KV cache floor  4096 MiB / 1 = 4096 MiB\n"
        "    needed          35673 MiB\n"
        "    usable          29998 MiB (0.92 x 32607 MiB)\n"
        "  alternatives:\n"
        "    - more GPUs: 2 x 32607 MiB GPUs (tensor parallelism 2) need 18605 MiB each, which fits;\n"
        "    - a larger GPU: one with at least 38775 MiB (e.g. a 48 GB or 80 GB card);\n"
        "    - a smaller profile: --profile gemma4-26b-a4b (Gemma 4 26B-A4B MoE, smaller fallback "
        "(agreement not validated)) needs 28384 MiB per GPU at tensor parallelism 1 and fits here;\n"
        "    - or run the judge on another workstation and point RADMATCH_BASE_URL at it."
    )


def test_mixed_gpus_are_planned_by_the_smallest():
    plan = plan_for([H100, RTX_5090])
    assert (plan.gpu_mib, plan.gpu_name, plan.tp, plan.dp) == (32607, RTX_5090.name, 2, 1)


def test_gpus_left_over_stay_idle_with_a_note():
    plan = plan_for([RTX_5090] * 3)
    assert (plan.tp, plan.dp, plan.idle_gpus) == (2, 1, 1)
    assert gp.plan_lines(plan).endswith("TP 2 x DP 1 = 2 GPUs; 1 GPU left idle (3 is not a multiple of 2)")


def test_tp_and_dp_as_given_are_named_with_where_they_came_from():
    plan = plan_for([H100] * 8, tp=2, dp=3, tp_source="--tp", dp_source="RADMATCH_DP")
    assert (plan.tp, plan.dp, plan.stops) == (2, 3, [])
    assert gp.plan_lines(plan).endswith("TP 2 x DP 3 = 6 GPUs (set by --tp 2, RADMATCH_DP 3); 2 GPUs left idle")
    assert (plan_for([H100] * 8, tp=4).tp, plan_for([H100] * 8, tp=4).dp) == (4, 2)


def test_a_tp_that_does_not_fit_is_refused_though_a_larger_one_would():
    plan = plan_for([RTX_5090] * 2, tp=1)
    assert plan.fit_tp == 2
    assert "at tensor parallelism 1." in plan.stops[0].reason
    assert plan.exit_code() == 3


@pytest.mark.parametrize(
    ("gpus", "tp", "dp", "words"),
    [
        ([RTX_5090] * 2, 4, None, "--tp 4 but only 2 GPU(s) found"),
        ([RTX_5090] * 4, None, 3, "--dp 3 x tensor parallelism 2 needs 6 GPUs but only 4 found"),
    ],
    ids=["tp", "dp"],
)
def test_more_gpus_asked_for_than_there_are_is_a_usage_error(gpus, tp, dp, words):
    plan = plan_for(gpus, tp=tp, dp=dp)
    assert plan.stops[-1] == gp.Stop(2, words)
    assert plan.exit_code() == 2
    assert ("TP", "2") not in gp.plan_records(plan)  # no plan to start from


def test_a_usage_error_comes_after_a_refusal_a_start_meets_first():
    plan = plan_for([RTX_5090], dp=3)
    assert [stop.code for stop in plan.stops] == [3, 2]  # a start stops at 3, a dry run at 2
    assert plan.exit_code() == 2


@pytest.mark.parametrize(("tp", "dp", "count"), [(None, None, 1), (2, 2, 4), (4, None, 4)])
def test_without_a_gpu_the_plan_is_for_example_gpus_and_a_start_stops(tp, dp, count):
    plan = plan_for([], no_gpu_reason="nvidia-smi not found (no NVIDIA driver on this machine?)", tp=tp, dp=dp)
    assert plan.stops[0].code == 3
    assert plan.stops[0].reason.startswith(
        "no GPU: nvidia-smi not found (no NVIDIA driver on this machine?).\n"
        "  gemma4-31b (Gemma 4 31B dense, the paper's open judge (default)) needs NVIDIA GPUs: 30041 MiB")
    assert (plan.gpu_count, plan.gpu_name, plan.kv_cache_dtype) == (count, gp.EXAMPLE_GPU.name, "fp8")
    lines = gp.plan_lines(plan).splitlines()
    assert lines[0] == ("example GPU: this machine has none (nvidia-smi not found "
                        "(no NVIDIA driver on this machine?)), so the plan is for:")
    assert "81559 MiB (NVIDIA H100 80GB HBM3, 75034 usable)" in lines[1]
    assert gp.gpu_software_lines(plan).splitlines()[0].startswith("NVIDIA driver: none on this machine")
    assert plan.warnings == [] and plan.software_problems == []  # no driver to check


def test_an_empty_gpu_list_says_nvidia_smi_lists_none():
    assert plan_for([]).example_reason == "nvidia-smi lists no usable GPU"


# ---- nvidia-smi's answers ----------------------------------------------------------------


MEMORY_CSV = "NVIDIA A100-SXM4-80GB, 81920\nNVIDIA H100 80GB HBM3, 81559\n[N/A], [N/A]\n"
CAPS_CSV = "580.95.05, 8.0\n580.95.05, 9.0\n"


def test_gpus_from_nvidia_smi_with_their_compute_capability():
    assert gp.gpus_from_csv(MEMORY_CSV, CAPS_CSV) == [A100, H100]
    assert gp.driver_version(CAPS_CSV) == "580.95.05"


def test_cuda_visible_devices_restricts_the_gpus_by_index():
    assert gp.gpus_from_csv(MEMORY_CSV, CAPS_CSV, "1") == [H100]
    assert gp.gpus_from_csv(MEMORY_CSV, CAPS_CSV, "0,1") == [A100, H100]
    assert gp.gpus_from_csv(MEMORY_CSV, CAPS_CSV, "GPU-1a2b") == [A100, H100]  # a UUID: all count


def test_a_driver_without_the_compute_cap_field_leaves_it_unknown():
    gpus = gp.gpus_from_csv(MEMORY_CSV, "575.57.08\n575.57.08\n")
    assert [(gpu.cc, gpu.cc_text) for gpu in gpus] == [(0, ""), (0, "")]
    assert gp.driver_version("575.57.08\n") == "575.57.08"


# ---- driver, GPU generation, KV cache, Python -----------------------------------------------


@pytest.mark.parametrize(
    ("driver", "refused"),
    [("575.57.08", True), ("570.153.02", True), ("580.65.06", False), ("590.12", False)],
)
def test_a_driver_older_than_r580_is_refused_with_the_fix(driver, refused):
    plan = plan_for([RTX_5090] * 2, driver=driver)
    assert gp.gpu_software_lines(plan).splitlines()[0] == (
        f"NVIDIA driver: {driver} (vLLM 0.33.0 needs R580 or newer for CUDA 13)")
    if refused:
        (problem,) = plan.software_problems
        assert problem.startswith(f"NVIDIA driver {driver} is too old: vLLM 0.33.0 is built for CUDA 13")
        assert "sudo apt install nvidia-driver-580-open" in problem
        assert plan.exit_code() == 7
    else:
        assert plan.software_problems == [] and plan.exit_code() == 0


def test_no_driver_version_is_a_warning_not_a_refusal():
    plan = plan_for([H100], driver="")
    assert plan.warnings == ["warning: nvidia-smi gave no driver version; vLLM 0.33.0 needs R580 or newer"]
    assert plan.exit_code() == 0


@pytest.mark.parametrize(
    ("gpus", "kv", "line"),
    [
        ([RTX_5090] * 2, "fp8", "compute capability: 12.0 (NVIDIA GeForce RTX 5090): FP8 weights on native FP8 kernels"),
        ([H100], "fp8", "compute capability: 9.0 (NVIDIA H100 80GB HBM3): FP8 weights on native FP8 kernels"),
        ([L40S], "fp8", "compute capability: 8.9 (NVIDIA L40S): FP8 weights on native FP8 kernels"),
        ([A100], "auto", ("compute capability: 8.0 (NVIDIA A100-SXM4-80GB): FP8 weights on weight-only "
                          "kernels (Marlin W8A16), slower than on 8.9+")),
        # the oldest GPU decides, and is the one named (not the smallest, the L40S)
        ([L40S, A100], "auto", ("compute capability: 8.0 (NVIDIA A100-SXM4-80GB): FP8 weights on weight-only "
                                "kernels (Marlin W8A16), slower than on 8.9+")),
        ([gp.Gpu("NVIDIA H100 80GB HBM3", 81559)], "auto",
         "compute capability: unknown (nvidia-smi has no compute_cap field)"),
    ],
    ids=["5090", "H100", "L40S", "A100", "L40S+A100", "unknown"],
)
def test_kv_cache_type_follows_the_compute_capability(gpus, kv, line):
    plan = plan_for(gpus)
    assert plan.kv_cache_dtype == kv
    lines = gp.gpu_software_lines(plan).splitlines()
    assert lines[1] == line
    if kv == "fp8":
        assert lines[2] == f"KV cache: FP8 (compute capability {plan.cc_text} >= 8.9)"
    elif plan.cc:
        assert lines[2].startswith("KV cache: BF16 (--kv-cache-dtype auto) (FP8 needs 8.9 or newer")
    else:
        assert lines[2] == ("KV cache: BF16 (--kv-cache-dtype auto) (compute capability unknown: "
                            "BF16, which every supported GPU runs)")


def test_gpus_before_ampere_are_refused():
    plan = plan_for([V100] * 2)
    (problem,) = plan.software_problems
    assert problem.startswith("Tesla V100-SXM2-32GB has compute capability 7.0: vLLM runs Gemma 4 in BF16 "
                              "with FP8 weights, which need 8.0 or newer")
    assert plan.exit_code() == 7


@pytest.mark.parametrize(
    ("version", "fits"),
    [("3.10.12", False), ("3.11.2", True), ("3.14.0", True), ("3.15.1", False), ("", True)],
)
def test_python_outside_vllms_range_is_refused(version, fits):
    problem = gp.python_problem("/srv/venv/bin/python", version)
    assert (problem == "") is fits
    if not fits:
        assert problem.startswith(f"/srv/venv/bin/python is Python {version}: vLLM 0.33.0 needs Python 3.11-3.14 "
                                  "(Ubuntu 22.04's python3 is 3.10).")
        assert problem.endswith("make serve/.venv with it: serve/install.sh --python python3.11")
    expected = f"/srv/venv/bin/python {version} (" if version else "/srv/venv/bin/python (version unknown; "
    assert gp.python_line("/srv/venv/bin/python", version) == f"python: {expected}vLLM 0.33.0 needs 3.11-3.14)"


# ---- the command line start_vllm.sh runs --------------------------------------------------


def run_cli(*args: str, stdin: str = "") -> tuple[int, list[tuple[str, str]]]:
    """gpu_plan.py with the python3 start_vllm.sh uses; its NUL-ended KEY=value records."""
    python = shutil.which("python3") or sys.executable
    result = subprocess.run([python, str(GPU_PLAN), *args], input=stdin, capture_output=True,
                            text=True, check=False, timeout=30)
    assert result.stderr == ""
    assert result.stdout.endswith("END=\0")
    records = [tuple(r.split("=", 1)) for r in result.stdout.split("\0")[:-2]]
    return result.returncode, records


def test_the_cli_prints_the_plan_as_records_and_exits_0():
    code, records = run_cli("plan", "--gpus-csv=-", "--caps-csv=/dev/null",
                            stdin="NVIDIA GeForce RTX 5090, 32607\n" * 4)
    values = dict(records)
    assert code == 0
    assert (values["TP"], values["DP"], values["PROFILE"], values["KV_CACHE_DTYPE"]) == ("2", "2", "gemma4-31b", "auto")
    assert values["PLAN_LINES"].splitlines()[1] == "TP 2 x DP 2 = 4 GPUs"
    assert values["MEMORY_LINES"].count("\n") == 5  # a value over lines, intact
    assert values["WARNING"].startswith("warning: nvidia-smi gave no driver version")


@pytest.mark.parametrize(
    ("args", "code", "stop"),
    [
        (["--gpus-csv=-"], 3, "3 refusing to start: gemma4-31b does not fit on 1 x NVIDIA GeForce RTX 5090"),
        (["--no-gpu=nvidia-smi failed: no driver"], 3, "3 no GPU: nvidia-smi failed: no driver."),
        (["--profile=gpt-7"], 2, "2 unknown profile 'gpt-7'"),
        (["--tp=3"], 2, "2 --tp must be one of 1 2 4 8, got '3'"),
        (["--dp=0"], 2, "2 --dp must be a positive number, got '0'"),
        (["--util=92%"], 2, "2 GPU_MEMORY_UTILIZATION must be a fraction such as 0.92, got '92%'"),
    ],
    ids=["no-room", "no-gpu", "profile", "tp", "dp", "util"],
)
def test_the_cli_exits_with_the_code_of_the_first_stop(args, code, stop):
    exit_code, records = run_cli("plan", *args, stdin="NVIDIA GeForce RTX 5090, 32607\n")
    assert exit_code == code
    assert records[0][0] == "STOP" and records[0][1].startswith(stop)


def test_the_cli_checks_a_python_and_exits_7_for_one_vllm_cannot_use():
    code, records = run_cli("python-check", "--exe=/usr/bin/python3", "--version=3.10.12")
    assert code == 7
    assert [key for key, _ in records] == ["PYTHON_LINE", "SOFTWARE_PROBLEM"]
    code, records = run_cli("python-check", "--exe=/x/python", "--version=", "--vllm-found")
    assert code == 0
    assert ("WARNING", "warning: cannot tell the version of /x/python") in records


def test_the_module_uses_the_standard_library_only():
    """It runs with the system python3 before any venv exists."""
    imports = re.findall(r"^(?:from|import) (\w+)", GPU_PLAN.read_text(), flags=re.MULTILINE)
    assert set(imports) <= {"__future__", "argparse", "re", "sys", "dataclasses"}
