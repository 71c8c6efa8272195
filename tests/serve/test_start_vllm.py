"""serve/: the on-prem judge script, its readiness check, and a real vLLM server.

Fast tests run serve/start_vllm.sh with a fake ``nvidia-smi`` on PATH (dry runs,
and one real start against a stub server) and serve/check_judge.py against a
stub OpenAI server. The slow tests run the readiness check against a real vLLM
server (tests/vllm_server.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from vllm_server import free_port

REPO = Path(__file__).resolve().parents[2]
START = REPO / "serve" / "start_vllm.sh"
CHECK = REPO / "serve" / "check_judge.py"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

# name, memory.total in MiB (as nvidia-smi prints them) and compute capability
RTX_5090 = ("NVIDIA GeForce RTX 5090", 32607, "12.0")
H100_80GB = ("NVIDIA H100 80GB HBM3", 81559, "9.0")
L40S = ("NVIDIA L40S", 46068, "8.9")
A100_80GB = ("NVIDIA A100-SXM4-80GB", 81920, "8.0")
DRIVER_OK = "580.95.05"

# A stand-in for `vllm serve MODEL ...`: /health, /v1/models and chat completions
# answering STUB_ANSWER; it requires VLLM_API_KEY when that is set.
STUB_SERVER = textwrap.dedent(
    """
    import json, os, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    args = sys.argv[1:]
    opt = lambda name, default: args[args.index(name) + 1] if name in args else default
    host, port = opt("--host", "127.0.0.1"), int(opt("--port", "8000"))
    model = opt("--served-model-name", "radmatch-judge")
    # vLLM parses this option with json.loads and merges a request's kwargs over it
    template_defaults = json.loads(opt("--default-chat-template-kwargs", "{}"))
    key = os.environ.get("VLLM_API_KEY")
    answer = os.environ.get("STUB_ANSWER", '{"ready": true}')
    answer_model = os.environ.get("STUB_ANSWER_MODEL", model)  # the name its answers give
    extraction = os.environ.get("STUB_EXTRACTION", json.dumps({"findings": [{
        "text": "Mild cardiomegaly.", "clinical_status": "abnormal",
        "clinical_significance": "notable", "evidence": ["The heart is mildly enlarged."]}]}))
    compile_timeout = os.environ.get("STUB_COMPILE_TIMEOUT")  # a schema title
    record = os.environ.get("STUB_RECORD")  # a file: one JSON line per chat request
    card = {"id": model}
    if os.environ.get("STUB_MAX_MODEL_LEN"):  # vLLM's model card names the context
        card["max_model_len"] = int(os.environ["STUB_MAX_MODEL_LEN"])
    if os.environ.get("STUB_PROCESS"):  # a file: how it was started (argv, environment)
        with open(os.environ["STUB_PROCESS"], "w") as fh:
            json.dump({"argv": sys.argv, "env": dict(os.environ)}, fh)
    if os.environ.get("STUB_CRASH"):
        print("stub: failed to load the model", flush=True)
        sys.exit(1)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self):
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self.reply(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {})
            elif self.path == "/v1/models" and self.authorised():
                self.reply(200, {"data": [card]})
            elif self.path != "/v1/models":
                self.reply(404, {})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not self.authorised():
                return
            if body.get("model") != model:
                self.reply(404, {"error": {"message": "model not found"}})
                return
            schema = body["structured_outputs"]["json"]
            thinking = {**template_defaults, **body.get("chat_template_kwargs", {})}
            if record:
                with open(record, "a") as fh:
                    fh.write(json.dumps({"body": body, "thinking": thinking}) + "\\n")
            if compile_timeout and schema.get("title") == compile_timeout:  # vLLM's 400 past its compile limit
                self.reply(400, {"error": {"message": "Regex compilation timed out after 60s. "
                                 "The pattern may be too complex ...", "type": "BadRequestError",
                                 "code": 400}})
                return
            content, finish = answer, "stop"
            if schema.get("required") != ["ready"]:
                content, finish = "{", "length"  # a one-token answer
                if schema.get("title") == "ExtractionAnswer" and body["max_tokens"] > 1:
                    content, finish = extraction, "stop"
            self.reply(200, {"model": answer_model, "choices": [
                {"message": {"role": "assistant", "content": content}, "finish_reason": finish}
            ]})
            if content is extraction and os.environ.get("STUB_EXIT_AFTER_READY"):  # a crash later on
                threading.Timer(1, os._exit, [int(os.environ["STUB_EXIT_AFTER_READY"])]).start()

    print(f"stub: chat template defaults {json.dumps(template_defaults, sort_keys=True)}", flush=True)
    print(f"stub: serving {model} on {host}:{port}", flush=True)
    ThreadingHTTPServer((host, port), Handler).serve_forever()
    """
)


# ---- helpers -----------------------------------------------------------------


def fake_nvidia_smi(
    bin_dir: Path,
    gpus: list[tuple[str, int, str]] | None,
    driver: str = DRIVER_OK,
    knows_compute_cap: bool = True,
) -> None:
    """nvidia-smi answering `--query-gpu=name,memory.total` with one `name, MiB` line per
    GPU and `--query-gpu=driver_version,compute_cap` with `driver, cc` lines (drivers
    before 2021 refuse the compute_cap field); None: a driver failure."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    if gpus is None:
        body = (
            "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
            'driver."\nexit 9\n'
        )
    else:
        names = "".join(f"echo '{name}, {mib}'\n" for name, mib, _ in gpus)
        caps = "".join(f"echo '{driver}, {cc}'\n" for _, _, cc in gpus)
        drivers = "".join(f"echo '{driver}'\n" for _ in gpus)
        if not knows_compute_cap:
            caps = "echo 'Field \"compute_cap\" is not a valid field to query.'; exit 2\n"
        body = (
            f'case "$*" in\n*compute_cap*)\n{caps};;\n*driver_version*)\n{drivers};;\n'
            f"*)\n{names};;\nesac\n"
        )
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


def fake_python(path: Path, version: str) -> Path:
    """A python that reports `version` when asked for it and is this python otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *version_info*) echo {version}; exit 0 ;; esac\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    path.chmod(0o755)
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: HOME in tmp, no RADMATCH_*/CUDA settings, fake bin first on PATH."""
    home = tmp_path / "home"
    home.mkdir()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RADMATCH_", "XDG_", "HF_", "VLLM_", "CUDA_"))
    }
    clean.update(HOME=str(home), PATH=f"{tmp_path / 'bin'}:{SYSTEM_PATH}")
    return clean


def run(args: list[str], env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(START), *args],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_weights(folder: Path, shards: int = 2) -> Path:
    """A whole checkpoint as `hf download` leaves it: config.json, the safetensors index
    and the shards it names, each a valid safetensors file (8-byte header length, JSON
    header, then the tensor bytes the header describes)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    weight_map = {}
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        header = json.dumps({
            f"layer{i}.a": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]},
            f"layer{i}.b": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [32, 96]},
        }).encode()
        (folder / name).write_bytes(len(header).to_bytes(8, "little") + header + bytes(96))
        weight_map.update({f"layer{i}.a": name, f"layer{i}.b": name})
    index = {"metadata": {"total_size": 96 * shards}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def stand_in_vllm(path: Path) -> None:
    """A `vllm` executable for dry runs (they never run it)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)


def dry_run(
    tmp_path: Path, env: dict[str, str], gpus, *args: str, weights: bool = True,
    vllm: bool = True, **smi: object,
) -> subprocess.CompletedProcess:
    """A dry run with these GPUs; unless a test says not, on a machine where a start
    could run: whole weights (RADMATCH_MODEL_DIR) and a vllm executable."""
    if gpus is not False:
        fake_nvidia_smi(tmp_path / "bin", gpus, **smi)
    if weights and "--model-dir" not in args:
        env.setdefault("RADMATCH_MODEL_DIR", str(write_weights(tmp_path / "weights")))
    if vllm:
        venv_python = env.get("VLLM_PYTHON")
        stand_in_vllm(Path(venv_python).parent / "vllm" if venv_python else tmp_path / "bin" / "vllm")
    # python3 on PATH (the one serve/install.sh would use) fits vLLM unless a test says not
    if not (tmp_path / "bin" / "python3").exists():
        fake_python(tmp_path / "bin" / "python3", "3.12.3")
    return run(["--dry-run", *args], env)


def command_line(out: str) -> str:
    """The printed server command: `<...>/vllm serve MODEL --flag value ...`."""
    (line,) = [
        ln
        for ln in out.splitlines()
        if not ln.startswith("#") and re.match(r"^(\S*/)?vllm serve \S", ln)
    ]
    return line


def served_model(cmd: str) -> str:
    return re.match(r"^\S+ serve (\S+)", cmd).group(1)


def option(cmd: str, name: str) -> str:
    match = re.search(rf"(?:^| ){re.escape(name)} (\S+)", cmd)
    assert match, f"{name} missing from: {cmd}"
    return match.group(1)


def default_key_file(env: dict[str, str]) -> Path:
    return Path(env["HOME"]) / ".config" / "radmatch" / "judge-api-key"


# ---- no usable GPU -----------------------------------------------------------


def assert_example_plan_then_gpu_error(result, problem: str, gpus: int = 1) -> None:
    """A dry run without a GPU: the plan for the stated example GPU on stdout (weights
    check and command included), then the GPU error on stderr, and exit 3."""
    assert result.returncode == 3
    out = result.stdout
    assert f"# example GPU: this machine has none ({problem}" in out
    assert f"# {gpus} GPU{'s' if gpus > 1 else ''} x 81559 MiB (NVIDIA H100 80GB HBM3, 75034 usable)" in out
    assert "# NVIDIA driver: none on this machine" in out
    assert "# weights missing: no google/gemma-4-31B-it checkpoint" in out  # the weights check
    cmd = command_line(out)
    assert option(cmd, "--kv-cache-dtype") == "fp8"  # the example's compute capability 9.0
    err = result.stderr
    # every reason a start here would stop for, the GPU's first (its code is the exit code)
    reasons = [ln for ln in err.splitlines() if ln.startswith("[radmatch-judge] error: ")]
    assert reasons[0].startswith(f"[radmatch-judge] error: no GPU: {problem}")
    assert any("weights are missing or incomplete" in ln for ln in reasons)
    assert any("vllm not found" in ln for ln in reasons)
    assert "dry run: a start would stop with exit 3: 3 reasons above" in err
    assert f"no GPU: {problem}" in err
    assert "30041 MiB" in err  # what the profile would need
    assert "plan on stdout is for an example GPU, NVIDIA H100 80GB HBM3" in err
    assert err.rstrip().endswith("plans for its own.)")  # the GPU error comes last
    assert "nvidia-smi gave no driver version" not in err


def test_no_nvidia_smi_shows_the_example_plan_then_refuses(tmp_path, env):
    if shutil.which("nvidia-smi", path=SYSTEM_PATH):
        pytest.skip("a real nvidia-smi is installed on this machine")
    result = dry_run(tmp_path, env, False, weights=False, vllm=False)
    assert_example_plan_then_gpu_error(result, "nvidia-smi not found")
    assert option(command_line(result.stdout), "--tensor-parallel-size") == "1"


def test_failing_nvidia_smi_shows_the_example_plan_then_refuses(tmp_path, env):
    result = dry_run(tmp_path, env, None, weights=False, vllm=False)
    assert_example_plan_then_gpu_error(result, "nvidia-smi failed: NVIDIA-SMI has failed")


def test_the_example_plan_follows_tp_and_dp(tmp_path, env):
    result = dry_run(tmp_path, env, None, "--tp", "2", "--dp", "2", weights=False, vllm=False)
    assert_example_plan_then_gpu_error(result, "nvidia-smi failed", gpus=4)
    cmd = command_line(result.stdout)
    assert option(cmd, "--tensor-parallel-size") == "2"
    assert option(cmd, "--data-parallel-size") == "2"


def test_a_start_without_a_gpu_stops_with_no_plan(tmp_path, env):
    fake_nvidia_smi(tmp_path / "bin", None)
    result = run([], env)
    assert result.returncode == 3
    assert "no GPU: nvidia-smi failed" in result.stderr
    assert "example GPU" not in result.stdout + result.stderr
    assert result.stdout == ""


# ---- tensor parallelism and the memory arithmetic ----------------------------


def test_one_32gb_gpu_is_refused_with_the_arithmetic_and_alternatives(tmp_path, env):
    result = dry_run(tmp_path, env, [RTX_5090])
    assert result.returncode == 3
    err = result.stderr
    assert "refusing to start: gemma4-31b does not fit on 1 x NVIDIA GeForce RTX 5090" in err
    # 30041 MiB FP8 weights + 1536 runtime + 4096 KV floor = 35673 > 0.92 x 32607 = 29998
    assert re.search(r"FP8 weights\s+30041 MiB / 1 = 30041 MiB", err)
    assert re.search(r"needed\s+35673 MiB", err)
    assert re.search(r"usable\s+29998 MiB \(0.92 x 32607 MiB\)", err)
    assert "more GPUs: 2 x 32607 MiB GPUs (tensor parallelism 2) need 18605 MiB each" in err
    assert "a larger GPU: one with at least 38775 MiB" in err
    assert "a smaller profile: --profile gemma4-26b-a4b" in err
    # the plan is still shown, at the tensor parallelism tried, and the refusal in it
    out = result.stdout
    assert "one replica does not fit: (model 30041 + KV cache 4096) / 1 + runtime 1536 = 35673 MiB" in out
    assert "# refused: refusing to start: gemma4-31b does not fit on 1 x NVIDIA GeForce RTX 5090" in out
    assert option(command_line(out), "--tensor-parallel-size") == "1"


# The plan's arithmetic for every profile and GPU count: tests/serve/test_gpu_plan.py.
# Here: the plan reaches the printed lines and vLLM's flags.
@pytest.mark.parametrize(
    ("gpus", "tp", "dp", "plan"),
    [
        ([H100_80GB], 1, 1, "TP 1 x DP 1 = 1 GPU"),
        ([RTX_5090] * 4, 2, 2, "TP 2 x DP 2 = 4 GPUs"),
    ],
    ids=["1x80GB", "4x32GB"],
)
def test_tensor_then_data_parallelism(tmp_path, env, gpus, tp, dp, plan):
    result = dry_run(tmp_path, env, gpus)
    assert result.returncode == 0, result.stderr
    cmd = command_line(result.stdout)
    assert option(cmd, "--tensor-parallel-size") == str(tp)
    if dp == 1:
        assert "--data-parallel-size" not in cmd
    else:
        assert option(cmd, "--data-parallel-size") == str(dp)
    # the arithmetic in plain words: GPUs, what one replica needs, TP x DP
    assert f"# {plan}\n" in result.stdout
    need = {1: 35673, 2: 18605}[tp]  # (30041 + 4096) / tp + 1536 runtime
    noun = "GPU" if len(gpus) == 1 else "GPUs"
    assert re.search(
        rf"^# {len(gpus)} {noun} x {gpus[0][1]} MiB .*one replica needs {tp}: .* = {need} MiB per GPU$",
        result.stdout,
        flags=re.MULTILINE,
    )


def test_tp_and_dp_can_be_set_by_option_or_environment(tmp_path, env):
    result = dry_run(tmp_path, env, [H100_80GB] * 8, "--tp", "2", "--dp", "3")
    assert result.returncode == 0, result.stderr
    cmd = command_line(result.stdout)
    assert option(cmd, "--tensor-parallel-size") == "2"
    assert option(cmd, "--data-parallel-size") == "3"
    assert "# TP 2 x DP 3 = 6 GPUs (set by --tp 2, --dp 3); 2 GPUs left idle" in result.stdout

    env["RADMATCH_TP"] = "4"
    result = dry_run(tmp_path, env, [H100_80GB] * 8)
    assert result.returncode == 0, result.stderr
    cmd = command_line(result.stdout)
    assert option(cmd, "--tensor-parallel-size") == "4"
    assert option(cmd, "--data-parallel-size") == "2"  # 8 GPUs / 4

    env["RADMATCH_DP"] = "1"
    result = dry_run(tmp_path, env, [H100_80GB] * 8)
    assert "--data-parallel-size" not in command_line(result.stdout)


def test_dp_beyond_the_gpus_is_a_usage_error(tmp_path, env):
    result = dry_run(tmp_path, env, [RTX_5090] * 4, "--dp", "3")
    assert result.returncode == 2
    assert "--dp 3 x tensor parallelism 2 needs 6 GPUs but only 4 found" in result.stderr
    assert dry_run(tmp_path, env, [RTX_5090] * 4, "--dp", "0").returncode == 2


def test_cuda_visible_devices_limits_the_gpus_counted(tmp_path, env):
    env["CUDA_VISIBLE_DEVICES"] = "1"
    result = dry_run(tmp_path, env, [RTX_5090, RTX_5090])
    assert result.returncode == 3
    assert "does not fit on 1 x" in result.stderr


def test_unknown_profile_is_a_usage_error(tmp_path, env):
    result = dry_run(tmp_path, env, [H100_80GB], "--profile", "gpt-7")
    assert result.returncode == 2
    assert "unknown profile 'gpt-7'" in result.stderr
    assert "gemma4-31b" in result.stderr


# ---- the command and its environment -----------------------------------------


def test_command_has_the_vllm_flags_and_no_telemetry(tmp_path, env):
    result = dry_run(tmp_path, env, [RTX_5090, RTX_5090])
    assert result.returncode == 0, result.stderr
    cmd = command_line(result.stdout)
    assert option(cmd, "--quantization") == "fp8_per_tensor"
    assert option(cmd, "--kv-cache-dtype") == "fp8"
    assert structured_outputs_config(cmd) == {"backend": "xgrammar", "disable_any_whitespace": True}
    assert " --language-model-only" in cmd  # no vision or audio tower on the GPUs
    assert option(cmd, "--reasoning-parser") == "gemma4"
    assert option(cmd, "--generation-config") == "vllm"
    assert option(cmd, "--served-model-name") == "radmatch-judge"
    assert option(cmd, "--max-model-len") == "16384"
    assert " --enable-prefix-caching" in cmd and "--no-enable-prefix-caching" not in cmd
    assert " --no-enable-log-requests" in cmd  # prompts are report text
    assert "--api-key" not in cmd  # the key goes through the environment (ps shows argv)
    exports = set(re.findall(r"^export (\S+)$", result.stdout, flags=re.MULTILINE))
    for var in (
        "HF_HUB_OFFLINE=1",
        "VLLM_NO_USAGE_STATS=1",
        "DO_NOT_TRACK=1",
        "VLLM_DO_NOT_TRACK=1",
        "HF_HUB_DISABLE_TELEMETRY=1",
    ):
        assert var in exports


def structured_outputs_config(cmd: str) -> dict:
    """--structured-outputs-config as vLLM parses it (JSON)."""
    args = shlex.split(cmd)
    return json.loads(args[args.index("--structured-outputs-config") + 1])


def exports(out: str) -> dict[str, str]:
    return dict(re.findall(r"^export ([A-Z_0-9]+)=(.*)$", out, flags=re.MULTILINE))


# ---- what vLLM 0.33.0 needs from the machine: Python, driver, GPU generation ---------


@pytest.mark.parametrize(
    ("version", "fits"),
    [("3.10.12", False), ("3.11.2", True)],  # the range itself: tests/serve/test_gpu_plan.py
)
def test_python_outside_vllms_range_is_refused(tmp_path, env, version, fits):
    env["VLLM_PYTHON"] = str(fake_python(tmp_path / "venv" / "bin" / "python", version))
    result = dry_run(tmp_path, env, [H100_80GB])
    assert f"# python: {env['VLLM_PYTHON']} {version} (vLLM 0.33.0 needs 3.11-3.14)" in result.stdout
    if fits:
        assert result.returncode == 0, result.stderr
        assert "refused" not in result.stdout
    else:
        assert result.returncode == 7
        assert f"# refused: {env['VLLM_PYTHON']} is Python {version}: vLLM 0.33.0 needs Python 3.11-3.14" in result.stdout
        assert "serve/install.sh --python python3.11" in result.stdout
        assert "cannot run vLLM 0.33.0" in result.stderr
        assert command_line(result.stdout)  # the rest of the plan is still shown


def test_python3_on_path_is_what_the_install_would_use(tmp_path, env):
    fake_python(tmp_path / "bin" / "python3", "3.10.12")  # Ubuntu 22.04's
    result = dry_run(tmp_path, env, [H100_80GB])
    if (REPO / "serve" / ".venv" / "bin" / "vllm").exists():
        pytest.skip("serve/.venv has vLLM: its python is the one checked")
    assert result.returncode == 7
    assert "Ubuntu 22.04's python3 is 3.10" in result.stdout


INSTALL = REPO / "serve" / "install.sh"


def install_check(tmp_path: Path, pythons: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """serve/install.sh --check with only these pythons (name -> version) on PATH."""
    bin_dir = tmp_path / "only-pythons"
    for name, version in pythons.items():
        fake_python(bin_dir / name, version)
    bin_dir.mkdir(exist_ok=True)
    return subprocess.run(
        [shutil.which("bash"), str(INSTALL), "--check", *args], env={"PATH": str(bin_dir)},
        check=False, capture_output=True, text=True, timeout=30,
    )


def test_install_refuses_a_python_vllm_cannot_use(tmp_path):
    result = install_check(tmp_path, {"python3": "3.10.12"})
    assert result.returncode == 7
    assert "python3 is Python 3.10.12: vLLM 0.33.0 needs Python 3.11-3.14" in result.stderr
    assert "sudo apt install python3.11 python3.11-venv" in result.stderr
    assert "serve/install.sh --python python3.11" in result.stderr


def test_install_finds_a_python_that_fits(tmp_path):
    result = install_check(tmp_path, {"python3": "3.10.12", "python3.11": "3.11.9"})
    assert result.returncode == 0, result.stderr
    assert "python3.11 3.11.9 (vLLM 0.33.0 needs 3.11-3.14)" in result.stderr
    too_new = install_check(tmp_path, {"python3.15": "3.15.0"}, "--python", "python3.15")
    assert too_new.returncode == 7
    assert "python3.15 is Python 3.15.0" in too_new.stderr


@pytest.mark.parametrize(
    ("driver", "refused"),
    [("575.57.08", True), ("580.65.06", False)],  # more: tests/serve/test_gpu_plan.py
)
def test_a_driver_older_than_r580_is_refused_with_the_fix(tmp_path, env, driver, refused):
    result = dry_run(tmp_path, env, [RTX_5090] * 2, driver=driver)
    assert f"# NVIDIA driver: {driver} (vLLM 0.33.0 needs R580 or newer for CUDA 13)" in result.stdout
    if refused:
        assert result.returncode == 7
        assert f"# refused: NVIDIA driver {driver} is too old" in result.stdout
        assert "install the R580 (or newer) driver" in result.stdout
        assert "nvidia-driver-580" in result.stdout
    else:
        assert result.returncode == 0, result.stderr


def test_a_start_with_an_old_driver_stops_before_vllm(tmp_path, env, stub_vllm):
    fake_nvidia_smi(tmp_path / "bin", [H100_80GB], driver="575.57.08")
    model_dir = write_weights(tmp_path / "weights")
    log_file = tmp_path / "judge.log"
    env["VLLM_PYTHON"] = str(stub_vllm.parent / "python")
    result = run(["--model-dir", str(model_dir), "--log-file", str(log_file)], env)
    assert result.returncode == 7
    assert "NVIDIA driver 575.57.08 is too old" in result.stderr
    assert "stub: serving" not in (log_file.read_text() if log_file.exists() else "")


@pytest.mark.parametrize(
    ("gpus", "kv", "words"),
    [
        ([H100_80GB], "fp8", "compute capability: 9.0"),
        # the oldest GPU decides; every generation: tests/serve/test_gpu_plan.py
        ([L40S, A100_80GB], "auto", "compute capability: 8.0 (NVIDIA A100-SXM4-80GB): FP8 weights on weight-only kernels (Marlin W8A16)"),
    ],
    ids=["H100", "L40S+A100"],
)
def test_kv_cache_type_follows_the_compute_capability(tmp_path, env, gpus, kv, words):
    result = dry_run(tmp_path, env, gpus)
    assert result.returncode == 0, result.stderr
    assert option(command_line(result.stdout), "--kv-cache-dtype") == kv
    assert f"# {words}" in result.stdout
    if kv == "fp8":
        assert "# KV cache: FP8 (compute capability" in result.stdout
    else:
        assert "# KV cache: BF16 (--kv-cache-dtype auto) (FP8 needs 8.9 or newer" in result.stdout


def test_cuda_visible_devices_choose_whose_compute_capability_counts(tmp_path, env):
    env["CUDA_VISIBLE_DEVICES"] = "1"
    result = dry_run(tmp_path, env, [A100_80GB, H100_80GB])
    assert result.returncode == 0, result.stderr
    assert option(command_line(result.stdout), "--kv-cache-dtype") == "fp8"


def test_an_nvidia_smi_without_compute_cap_gets_a_bf16_kv_cache(tmp_path, env):
    result = dry_run(tmp_path, env, [H100_80GB], knows_compute_cap=False)
    assert result.returncode == 0, result.stderr
    assert option(command_line(result.stdout), "--kv-cache-dtype") == "auto"
    assert "# compute capability: unknown" in result.stdout
    assert f"# NVIDIA driver: {DRIVER_OK}" in result.stdout


# ---- grammar backend and compile limit -----------------------------------------------


def test_xgrammar_by_default_with_a_raised_compile_limit(tmp_path, env):
    result = dry_run(tmp_path, env, [H100_80GB])
    assert result.returncode == 0, result.stderr
    assert exports(result.stdout)["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == "600"  # vLLM's own: 5
    assert "VLLM_V1_USE_OUTLINES_CACHE" not in result.stdout
    assert "# grammar: xgrammar, compact JSON (disable_any_whitespace)" in result.stdout
    assert "compiles RadMatch's three schemas before 'ready'" in result.stdout


def test_outlines_backend_keeps_compiled_schemas_on_disk(tmp_path, env):
    result = dry_run(tmp_path, env, [H100_80GB], "--grammar-backend", "outlines")
    assert result.returncode == 0, result.stderr
    cache = Path(env["HOME"]) / ".cache" / "radmatch" / "outlines"
    assert structured_outputs_config(command_line(result.stdout)) == {"backend": "outlines"}
    assert exports(result.stdout)["VLLM_V1_USE_OUTLINES_CACHE"] == "1"
    assert exports(result.stdout)["OUTLINES_CACHE_DIR"] == str(cache)
    # outlines needed 7.6 minutes for the extraction schema on 2 cores: no limit unless set
    assert exports(result.stdout)["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == "0"
    assert "# grammar: outlines, each compile with no time limit" in result.stdout
    assert "# note: outlines compiles RadMatch's extraction schema for many minutes" in result.stdout
    assert "warning" not in result.stdout
    assert not cache.exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("args", "limit", "words"),
    [
        (["--compile-limit", "0"], "0", "no time limit (VLLM_REGEX_COMPILATION_TIMEOUT_S=0)"),
        (["--compile-limit", "1200"], "1200", "limit 1200 s"),
        (["--grammar-backend", "outlines", "--compile-limit", "60"], "60",
         "warning: a compile limit of 60 s is below what outlines needed"),
    ],
    ids=["lifted", "raised", "outlines-too-low"],
)
def test_compile_limit_can_be_set(tmp_path, env, args, limit, words):
    result = dry_run(tmp_path, env, [H100_80GB], *args)
    assert result.returncode == 0, result.stderr
    assert exports(result.stdout)["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == limit
    assert words in result.stdout
    env["RADMATCH_COMPILE_LIMIT_S"] = limit
    again = dry_run(tmp_path, env, [H100_80GB], *args[:-2])
    assert exports(again.stdout)["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == limit


def test_bad_grammar_settings_are_usage_errors(tmp_path, env):
    bad = dry_run(tmp_path, env, [H100_80GB], "--grammar-backend", "guidance")
    assert bad.returncode == 2
    assert "must be xgrammar or outlines, got 'guidance'" in bad.stderr
    bad = dry_run(tmp_path, env, [H100_80GB], "--compile-limit", "ten")
    assert bad.returncode == 2
    assert "--compile-limit (RADMATCH_COMPILE_LIMIT_S) must be a number" in bad.stderr


def thinking_default(result: subprocess.CompletedProcess) -> bool:
    """The enable_thinking default in the printed command, parsed as vLLM parses it."""
    args = shlex.split(command_line(result.stdout).split(" --served-model-name ")[1])
    return json.loads(args[args.index("--default-chat-template-kwargs") + 1])["enable_thinking"]


def test_gemma_thinks_unless_the_server_or_the_request_says_not(tmp_path, env):
    # Gemma 4's chat template thinks only when enable_thinking is set: RadMatch sets it
    # as the server's default (JUDGE rule 5); a request's own setting still wins in vLLM.
    result = dry_run(tmp_path, env, [H100_80GB])
    assert result.returncode == 0, result.stderr
    assert thinking_default(result) is True
    assert "# thinking: on for requests that do not say" in result.stdout
    assert thinking_default(dry_run(tmp_path, env, [H100_80GB], "--thinking", "off")) is False
    env["RADMATCH_THINKING"] = "no"
    assert thinking_default(dry_run(tmp_path, env, [H100_80GB])) is False
    assert thinking_default(dry_run(tmp_path, env, [H100_80GB], "--thinking", "on")) is True
    bad = dry_run(tmp_path, env, [H100_80GB], "--thinking", "maybe")
    assert bad.returncode == 2
    assert "--thinking (RADMATCH_THINKING) must be on or off, got 'maybe'" in bad.stderr


def test_weights_come_from_the_local_hf_cache(tmp_path, env):
    snapshot = tmp_path / "hf" / "hub" / "models--google--gemma-4-31B-it" / "snapshots" / "abc123"
    write_weights(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    env["HF_HOME"] = str(tmp_path / "hf")
    result = dry_run(tmp_path, env, [H100_80GB], weights=False)
    assert result.returncode == 0, result.stderr
    assert served_model(command_line(result.stdout)) == str(snapshot)
    assert "missing" not in result.stdout + result.stderr


def test_missing_weights_are_explained_and_the_plan_still_shown(tmp_path, env):
    result = dry_run(tmp_path, env, [RTX_5090] * 4, weights=False)
    assert result.returncode == 4, result.stderr
    out = result.stdout
    assert "MISSING" not in out  # no made-up snapshot path in the command
    hub = Path(env["HOME"]) / ".cache" / "huggingface" / "hub"
    assert (
        "# weights missing: no google/gemma-4-31B-it checkpoint in the local Hugging Face cache"
        in out
    )
    # where the script looks, the layout, and the commands that put them there
    assert f"layout the script looks for, in {hub}:" in out
    assert "models--google--gemma-4-31B-it/snapshots/<revision>/" in out
    assert "hf download google/gemma-4-31B-it --cache-dir hub" in out
    assert re.search(
        rf"rsync -a hub/models--google--gemma-4-31B-it \S+:{re.escape(str(hub))}/", out
    )
    assert "--model-dir" in out
    assert "weights are missing" in result.stderr
    # the rest of the plan
    cmd = command_line(out)
    assert served_model(cmd) == "<google/gemma-4-31B-it"
    assert "weights: missing, see above>" in cmd
    assert option(cmd, "--data-parallel-size") == "2"
    assert "# TP 2 x DP 2 = 4 GPUs" in out


def test_missing_weights_in_a_given_folder(tmp_path, env):
    nowhere = tmp_path / "nowhere"
    result = dry_run(tmp_path, env, [H100_80GB], "--model-dir", str(nowhere))
    assert result.returncode == 4
    assert f"# weights missing: {nowhere} has no config.json." in result.stdout
    assert "hf download google/gemma-4-31B-it --local-dir gemma-4-31B-it" in result.stdout
    assert re.search(rf"rsync -a gemma-4-31B-it/ \S+:{re.escape(str(nowhere))}/", result.stdout)
    assert served_model(command_line(result.stdout)) == str(nowhere)


def test_missing_weights_stop_a_start(tmp_path, env, stub_vllm):
    fake_nvidia_smi(tmp_path / "bin", [H100_80GB])
    env["VLLM_PYTHON"] = str(stub_vllm.parent / "python")
    result = run([], env)
    assert result.returncode == 4
    assert "weights missing: no google/gemma-4-31B-it checkpoint" in result.stderr
    assert "hf download google/gemma-4-31B-it" in result.stderr


def test_help_prints_the_profile_table(env):
    result = run(["--help"], env)
    assert result.returncode == 0
    assert "from the table printed below" in result.stdout
    rows = {
        ln.split()[0]: ln.split() for ln in result.stdout.splitlines() if ln.startswith("  gemma4")
    }
    assert rows["gemma4-31b"][1:4] == ["google/gemma-4-31B-it", "30041", "4096"]
    assert rows["gemma4-26b-a4b"][1:4] == ["google/gemma-4-26B-A4B-it", "24800", "2048"]
    assert "--dp N" in result.stdout


# ---- a dry run writes nothing ----------------------------------------------------


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(path.relative_to(root)): (
            path.stat().st_mode,
            path.stat().st_size,
            path.stat().st_mtime_ns,
        )
        for path in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_dry_run_writes_nothing(tmp_path, env, host):
    home = Path(env["HOME"])
    # the key and state folders as a judge that ran before leaves them
    (home / ".config" / "radmatch").mkdir(parents=True)
    (home / ".local" / "state" / "radmatch").mkdir(parents=True)
    (home / ".local" / "state" / "radmatch" / "radmatch-judge.log").write_text("earlier run\n")
    before = tree(home)
    result = dry_run(tmp_path, env, [RTX_5090] * 2, "--host", host)
    assert result.returncode == 0, result.stderr
    assert tree(home) == before
    assert not default_key_file(env).exists()
    if host == "0.0.0.0":
        assert "generated with mode 0600 on start" in result.stdout
        assert not re.search(r"^export VLLM_API_KEY", result.stdout, flags=re.MULTILINE)


# ---- `vllm serve` ------------------------------------------------------------------


def test_the_server_is_started_with_vllm_serve(tmp_path, env, stub_vllm):
    result = dry_run(tmp_path, env, [H100_80GB], vllm=False)
    cmd = command_line(result.stdout)
    assert cmd.split()[1] == "serve"
    assert "vllm.entrypoints" not in result.stdout
    if not (REPO / "serve" / ".venv" / "bin" / "vllm").exists() and not shutil.which(
        "vllm", path=SYSTEM_PATH
    ):
        assert cmd.split()[0] == "vllm"  # nothing installed: named, and noted
        assert "# vllm not found" in result.stdout
    # the vllm next to VLLM_PYTHON (the venv the systemd unit names)
    env["VLLM_PYTHON"] = str(stub_vllm.parent / "python")
    result = dry_run(tmp_path, env, [H100_80GB])
    assert command_line(result.stdout).split()[:2] == [str(stub_vllm), "serve"]
    assert f"# vllm: {stub_vllm}" in result.stdout


def test_a_start_without_vllm_stops(tmp_path, env):
    fake_nvidia_smi(tmp_path / "bin", [H100_80GB])
    model_dir = write_weights(tmp_path / "weights")
    env["VLLM_PYTHON"] = str(tmp_path / "empty-venv" / "bin" / "python")
    result = run(["--model-dir", str(model_dir)], env)
    assert result.returncode == 4
    assert "no vllm executable next to VLLM_PYTHON" in result.stderr


# ---- bind address and API key ------------------------------------------------


def test_loopback_by_default_without_a_key(tmp_path, env):
    result = dry_run(tmp_path, env, [H100_80GB])
    assert result.returncode == 0, result.stderr
    assert option(command_line(result.stdout), "--host") == "127.0.0.1"
    assert "VLLM_API_KEY" not in result.stdout
    assert "# API key: none (bound to loopback 127.0.0.1)" in result.stdout
    assert not default_key_file(env).exists()
    assert not (Path(env["HOME"]) / ".config").exists()


def test_binding_beyond_loopback_generates_a_private_key_on_start(tmp_path, env, stub_vllm):
    key_file = default_key_file(env)
    with started_judge(tmp_path, env, stub_vllm, "--host", "0.0.0.0") as lines:
        # the stub requires the key it was given, so the readiness check used it too
        assert any(ln.startswith("ready: radmatch-judge") for ln in lines)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    key = key_file.read_text().strip()
    assert len(key) >= 32
    output = "".join(lines)
    assert key not in output and key[4:12] not in output
    assert f"generated an API key in {key_file}" in output

    again = dry_run(tmp_path, env, [H100_80GB], "--host", "0.0.0.0")
    assert again.returncode == 0, again.stderr
    assert key_file.read_text().strip() == key  # reused, not rotated
    assert "generated" not in again.stderr
    assert key not in again.stdout + again.stderr
    assert re.search(
        r"^export VLLM_API_KEY=\*\*\*\(\d+ chars, sha256 [0-9a-f]{8}\)$",
        again.stdout,
        flags=re.MULTILINE,
    )
    assert option(command_line(again.stdout), "--host") == "0.0.0.0"


def test_key_from_the_environment_is_masked(tmp_path, env):
    env["RADMATCH_API_KEY"] = "hospital-secret-key-0123456789"
    result = dry_run(tmp_path, env, [H100_80GB], "--host", "10.1.2.3")
    assert result.returncode == 0, result.stderr
    assert "hospital-secret" not in result.stdout + result.stderr
    assert "export VLLM_API_KEY=***(30 chars" in result.stdout
    assert not default_key_file(env).exists()


def test_key_file_readable_by_others_is_refused(tmp_path, env):
    key_file = tmp_path / "key"
    key_file.write_text("some-key-0123456789abcdef\n")
    key_file.chmod(0o644)
    result = dry_run(
        tmp_path, env, [H100_80GB], "--host", "0.0.0.0", "--api-key-file", str(key_file)
    )
    assert result.returncode == 2
    assert "chmod 600" in result.stderr
    assert "some-key" not in result.stdout + result.stderr


# ---- the readiness check against a stub server --------------------------------


@pytest.fixture
def stub_vllm(tmp_path: Path) -> Path:
    """`<venv>/bin/vllm`, which, run as `vllm serve MODEL --host H --port P ...`, serves
    the stub; VLLM_PYTHON=<venv>/bin/python makes start_vllm.sh use it."""
    server = tmp_path / "stub_server.py"
    server.write_text(STUB_SERVER)
    venv_bin = tmp_path / "stub-venv" / "bin"
    venv_bin.mkdir(parents=True)
    launcher = venv_bin / "vllm"
    launcher.write_text(f'#!/bin/sh\nshift\nexec "{sys.executable}" "{server}" "$@"\n')
    launcher.chmod(0o755)
    # the venv's python (it runs the readiness check): this one, which has pydantic
    (venv_bin / "python").symlink_to(sys.executable)
    return launcher


def start_stub(stub_vllm: Path, port: int, *, key: str | None = None, **extra: str):
    env = {**os.environ, **extra}
    env.pop("VLLM_API_KEY", None)
    if key:
        env["VLLM_API_KEY"] = key
    proc = subprocess.Popen(
        [
            str(stub_vllm),
            "serve",
            "x",
            "--port",
            str(port),
            "--served-model-name",
            "radmatch-judge",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    return proc


@pytest.fixture
def stub(stub_vllm):
    procs = []

    def start(**kwargs) -> str:
        port = free_port()
        procs.append(start_stub(stub_vllm, port, **kwargs))
        check = subprocess.run(
            [
                sys.executable,
                str(CHECK),
                "--url",
                f"http://127.0.0.1:{port}",
                "--health-only",
                "--wait",
                "10",
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def check(
    url: str, *args: str, key: str | None = None, python: tuple[str, ...] = (sys.executable,),
    timeout: float = 60, **extra_env: str,
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADMATCH_")}
    env.update(extra_env)
    if key:
        env["RADMATCH_API_KEY"] = key
    return subprocess.run(
        [*python, str(CHECK), "--url", url, *args],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_check_passes_on_schema_valid_json(stub):
    url = stub(key="k-123")
    result = check(url, key="k-123")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ready: radmatch-judge at")


def test_check_reports_a_wrong_key(stub):
    url = stub(key="k-123")
    result = check(url + "/v1", key="k-456")
    assert result.returncode == 4
    assert "401" in result.stderr and "wrong API key" in result.stderr
    assert "k-456" not in result.stderr


def test_check_reports_a_missing_key(stub):
    url = stub(key="k-123")
    result = check(url)
    assert result.returncode == 4
    assert "requires an API key" in result.stderr


def test_check_reports_invalid_json(stub):
    url = stub(STUB_ANSWER="Sure! Here is the JSON: {ready: yes}")
    result = check(url)
    assert result.returncode == 6
    assert "invalid JSON answer" in result.stderr


def test_check_reports_an_unserved_model(stub):
    url = stub()
    result = check(url, "--model", "other")
    assert result.returncode == 5
    assert "served: radmatch-judge" in result.stderr


@pytest.mark.parametrize("with_key_and_model", [False, True])
def test_check_reports_a_server_down(tmp_path, with_key_and_model):
    # a key and a model change nothing: where nothing listens, the answer is "down"
    args = []
    if with_key_and_model:
        key_file = tmp_path / "api-key"
        key_file.write_text("k-123\n")
        key_file.chmod(0o600)
        args = ["--api-key-file", str(key_file), "--model", "radmatch-judge"]
    with socket.socket() as held:  # bound, not listening: refused, and no one else can take it
        held.bind(("127.0.0.1", 0))
        result = check(f"http://127.0.0.1:{held.getsockname()[1]}", *args)
    assert result.returncode == 3
    assert result.stderr.startswith("not ready: server down")


def test_check_only_mode_reads_the_key_file(stub, tmp_path, env):
    url = stub(key="k-123")
    key_file = tmp_path / "key"
    key_file.write_text("k-123\n")
    result = run(["--check-only", "--url", url, "--api-key-file", str(key_file)], env)
    assert result.returncode == 0, result.stderr
    assert "ready:" in result.stdout


# ---- RadMatch's own schemas and a real extraction ------------------------------------


def recorded(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_check_compiles_the_client_schemas_and_runs_a_real_extraction(stub, tmp_path):
    from radmatch_audit.judges.config import SERVER_MAX_TOKENS
    from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
    from radmatch_audit.core.schemas import SERVER_LIMITS, answer_models
    from radmatch_audit.stages import load_instructions

    record = tmp_path / "requests.jsonl"
    url = stub(STUB_RECORD=str(record))
    result = check(url)
    assert result.returncode == 0, result.stderr
    assert "answer schemas compiled (extract " in result.stdout
    assert "a real extraction with the server's default thinking gave 1 valid finding(s)" in result.stdout

    requests = recorded(record)
    assert len(requests) == 6  # the test schema, four answer schemas, one extraction
    client = OpenAICompatibleJudge(base_url=url + "/v1", model="radmatch-judge")
    models = answer_models(SERVER_LIMITS)
    for request, stage in zip(requests[1:5], ["extract", "match", "grade", "adjudicate"]):
        sent = request["body"]["structured_outputs"]["json"]
        wanted = client.constraint(models.for_stage(stage))["structured_outputs"]["json"]
        # byte for byte what the client sends: the server's grammar cache is keyed on it
        assert json.dumps(sent) == json.dumps(wanted)
        assert request["body"]["max_tokens"] == 1
    extraction = requests[5]["body"]
    assert "chat_template_kwargs" not in extraction  # the server's default thinking
    assert extraction["max_tokens"] == SERVER_MAX_TOKENS["extract"]
    assert extraction["messages"][0] == {"role": "system", "content": load_instructions("extract")}
    assert len(extraction["messages"]) > 3  # the exemplars too: the prompt RadMatch sends


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (('{"findings": [{"text": "Effusion.", "clinical_status": "present", '
         '"clinical_significance": "notable"}]}'), "(findings.0.clinical_status: "),
        ('{"findings": [{"text": "' + "x" * 500 + '", "clinical_status": "abnormal", '
         '"clinical_significance": "notable"}]}', "(findings.0.text: "),
        ('The user wants findings. {"findings": []}', "thinking text landed in the answer"),
    ],
    ids=["wrong-enum", "over-the-canonical-cap", "thinking-in-content"],
)
def test_check_validates_the_extraction_with_radmatchs_answer_model(stub, answer, words):
    url = stub(STUB_EXTRACTION=answer)
    result = check(url)
    assert result.returncode == 6, result.stderr
    assert "the real extraction is not a valid RadMatch answer" in result.stderr
    assert words in result.stderr


def test_the_real_extraction_fits_the_servers_context_as_the_client_does(stub, tmp_path):
    from radmatch_audit.judges.base import estimate_tokens
    from radmatch_audit.stages import build_messages

    sys.path.insert(0, str(REPO / "serve"))
    from check_judge import SAMPLE_INDICATION, SAMPLE_REPORT, AnswerKit

    kit = AnswerKit()
    user = {"report": SAMPLE_REPORT, "indication": SAMPLE_INDICATION}
    one = estimate_tokens(build_messages("extract", "chest_xray", user, 1)) + kit.max_tokens
    record = tmp_path / "requests.jsonl"
    url = stub(STUB_RECORD=str(record), STUB_MAX_MODEL_LEN=str(one))  # room for one exemplar
    result = check(url)
    assert result.returncode == 0, result.stderr
    extraction = recorded(record)[5]["body"]
    assert len(extraction["messages"]) == 4  # instructions, one exemplar (2 turns), the report
    assert extraction["messages"][0]["role"] == "system"
    none = estimate_tokens(build_messages("extract", "chest_xray", user, 0)) + kit.max_tokens
    result = check(stub(STUB_MAX_MODEL_LEN=str(none - 1)))
    assert result.returncode == 7
    assert "the real extraction does not fit the server's context" in result.stderr


def test_check_names_a_compile_limit_reached(stub):
    url = stub(STUB_COMPILE_TIMEOUT="MatchingAnswer")
    result = check(url)
    assert result.returncode == 8
    assert "HTTP 400 for the match answer schema: the server's grammar compile limit was reached" in result.stderr
    assert "--compile-limit" in result.stderr


def test_check_says_when_it_cannot_import_the_answer_models(stub):
    url = stub()
    bare = check(url, python=(sys.executable, "-S"))  # no site-packages: no pydantic
    assert bare.returncode == 0, bare.stderr
    assert "RadMatch's answer schemas not checked: No module named" in bare.stdout
    required = check(url, "--answer-schemas", "on", python=(sys.executable, "-S"))
    assert required.returncode == 2
    assert "cannot import RadMatch's answer models" in required.stderr
    off = check(url, "--answer-schemas", "off")
    assert "not asked (--answer-schemas off)" in off.stdout


# ---- deadlines and odd answers: the check always ends, with one clean line ----------


@contextlib.contextmanager
def loopback_server(handle):
    """An HTTP server on 127.0.0.1 whose every GET and POST is `handle(handler)`; its
    threads are daemons, so a handler still trickling never outlives the test."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            handle(self)

        do_POST = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def answer(handler, status: int, body: object) -> None:
    if handler.command == "POST":
        handler.rfile.read(int(handler.headers["Content-Length"]))
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def trickle(handler) -> None:
    """A 200 answer sent one byte every half second, for up to a minute."""
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
    with contextlib.suppress(OSError):
        for byte in response[:120]:
            handler.wfile.write(bytes([byte]))
            time.sleep(0.5)


def timed_check(url: str, *args: str, limit: float = 20) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    try:
        result = check(url, *args, timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"check_judge.py {' '.join(args)} still running after {limit:g} s")
    return result, time.monotonic() - started


def test_a_trickling_health_answer_ends_at_the_deadline_as_server_down():
    with loopback_server(trickle) as url:
        result, took = timed_check(url, "--wait", "2", "--timeout", "3")
    assert result.returncode == 3, result.stderr
    assert took < 12  # one whole /health request of 3 s, past the 2 s wait
    assert result.stderr.startswith("not ready: server down:")
    assert "no whole answer within 3 s" in result.stderr


def test_a_trickling_chat_answer_ends_at_the_deadline_with_exit_7():
    def handle(handler):
        if handler.path == "/health":
            answer(handler, 200, {})
        else:
            trickle(handler)

    with loopback_server(handle) as url:
        result, took = timed_check(url, "--wait", "2", "--timeout", "3", "--answer-schemas", "off")
    assert result.returncode == 7, result.stderr
    assert took < 12
    assert "no whole answer to the test schema within 3 s" in result.stderr


ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e"  # clear screen, set title, CSI, bidi


@pytest.mark.parametrize(
    ("chat", "models", "code", "words"),
    [
        ((404, {}), {"data": ["x"]}, 5, "served: unknown"),
        ((404, {}), ["x"], 5, "served: unknown"),
        ((404, {}), {"data": [{"id": "judge" + ESCAPES}]}, 5, "served: judge\\x1b[2J"),
        ((500, {"error": {"message": "boom" + ESCAPES + "\nsecond line"}}), {}, 7,
         "boom\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202e\\nsecond line"),
        ((500, {"error": ["a", "list"]}), {}, 7, "HTTP 500"),
        ((200, {"choices": "none"}), {}, 7, "not an OpenAI chat completion"),
    ],
    ids=["models-data-strings", "models-a-list", "model-name-escapes", "error-escapes",
         "error-a-list", "choices-a-string"],
)
def test_odd_answers_end_in_one_clean_line(chat, models, code, words):
    def handle(handler):
        if handler.path == "/health":
            answer(handler, 200, {})
        elif handler.path == "/v1/models":
            answer(handler, 200, models)
        else:
            answer(handler, *chat)

    with loopback_server(handle) as url:
        result, _ = timed_check(url, "--answer-schemas", "off")
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("not ready: ") and result.stderr.count("\n") == 1
    assert words in result.stderr
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", result.stdout + result.stderr)


def test_a_server_that_does_not_speak_http_is_a_protocol_error():
    def handle(handler):
        handler.wfile.write(b"SSH-2.0-OpenSSH_9.6" + ESCAPES.encode() + b"\r\n")

    with loopback_server(handle) as url:
        result, _ = timed_check(url, "--answer-schemas", "off", "--wait", "1")
    assert result.returncode == 3  # /health never answered in HTTP: not a judge server
    assert "not an HTTP answer" in result.stderr and "Traceback" not in result.stderr


def test_a_model_name_with_escapes_is_printed_and_logged_inert(tmp_path, env, stub_vllm):
    log_file = tmp_path / "judge.log"
    env["STUB_ANSWER_MODEL"] = "radmatch-judge" + ESCAPES
    with started_judge(tmp_path, env, stub_vllm, "--log-file", str(log_file)) as lines:
        ready = [ln for ln in lines if ln.startswith("ready: ")]
        assert ready and ready[0].startswith("ready: radmatch-judge\\x1b[2J\\x1b]0;owned")
    log = log_file.read_text()
    assert "ready: radmatch-judge\\x1b[2J" in log
    assert not re.search("[\x1b\x07\x9b\u202e]", log + "".join(lines))


def test_check_help_lists_its_exit_codes_and_where_the_key_comes_from():
    result = subprocess.run([sys.executable, str(CHECK), "--help"], capture_output=True,
                            text=True, check=False, timeout=30)
    assert result.returncode == 0
    out = " ".join(result.stdout.split())
    codes = out.split("exit codes:")[1]
    for code, words in [("0", "ready"), ("2", "usage"), ("3", "server down"),
                        ("4", "the API key was refused"), ("5", "the model name is not served"),
                        ("6", "the answer is not valid JSON"),
                        ("7", "any other HTTP or protocol error"),
                        ("8", "the server's grammar compile limit")]:
        assert f" {code} {words}" in f" {codes}", code
    key_help = out.rsplit("--api-key-file FILE", 1)[1].split("--wait")[0]
    assert "read the API key from this file" in key_help
    assert "the key itself is taken from the RADMATCH_API_KEY environment variable" in key_help


def test_a_bad_url_is_a_usage_error():
    result = check("http://127.0.0.1:port")
    assert result.returncode == 2
    assert result.stderr.startswith("not ready: --url http://127.0.0.1:port:")
    assert "Traceback" not in result.stderr


# ---- proxies: the check talks to its server directly -----------------------------


@contextlib.contextmanager
def recording_proxy():
    """An HTTP proxy on loopback that records each request (and its Authorization
    header) and answers 502 without forwarding anything."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    seen: list[tuple[str, str, str | None]] = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _record(self):
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_CONNECT = _record

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def proxy_env(proxy: str) -> dict[str, str]:
    names = ("http_proxy", "https_proxy", "all_proxy")
    return {**{n: proxy for n in names}, **{n.upper(): proxy for n in names},
            "no_proxy": "", "NO_PROXY": ""}


def test_check_never_goes_through_a_proxy(stub):
    url = stub(key="k-123")
    with recording_proxy() as (proxy, seen):
        result = check(url, key="k-123", **proxy_env(proxy))
    assert result.returncode == 0, result.stderr
    assert seen == []  # neither the requests nor the key reached the proxy


# ---- a real start, with a stub in place of vLLM --------------------------------


@contextlib.contextmanager
def started_judge(tmp_path: Path, env: dict[str, str], stub_vllm: Path, *args: str):
    """start_vllm.sh with the stub as vLLM, until ready; yields its stderr lines so far,
    then stops it with SIGTERM (exit 143, the server gone)."""
    fake_nvidia_smi(tmp_path / "bin", [RTX_5090, RTX_5090])
    model_dir = write_weights(tmp_path / "weights")
    env["VLLM_PYTHON"] = str(stub_vllm.parent / "python")
    port = free_port()
    proc = subprocess.Popen(
        ["bash", str(START), "--model-dir", str(model_dir), "--port", str(port), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "the judge is ready" in line or not line:
                break
        assert "the judge is ready" in lines[-1], "".join(lines)
        assert f"RADMATCH_BASE_URL=http://127.0.0.1:{port}/v1" in lines[-1]
        yield lines
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        assert check(f"http://127.0.0.1:{port}").returncode == 3  # the server is gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_start_waits_for_health_checks_and_stops_on_sigterm(tmp_path, env, stub_vllm):
    log_file = tmp_path / "logs" / "judge.log"
    env["RADMATCH_API_KEY"] = "k-789"
    with started_judge(tmp_path, env, stub_vllm, "--log-file", str(log_file)) as lines:
        assert any(ln.startswith("ready: radmatch-judge") for ln in lines)
        # The stub requires the key, so the key reached both the server and the check.
        assert any("TP 2 x DP 1 = 2 GPUs" in ln for ln in lines)
        assert any(f"with {stub_vllm} serve" in ln for ln in lines)
    log = log_file.read_text()
    assert "stub: serving radmatch-judge" in log
    assert "k-789" not in log + "".join(lines)
    # the argument reached `vllm serve` as the JSON vLLM parses: Gemma 4 thinks by default
    assert 'stub: chat template defaults {"enable_thinking": true}' in log


def test_a_start_behind_proxy_variables_still_sees_its_own_server(tmp_path, env, stub_vllm):
    with recording_proxy() as (proxy, seen):
        env.update(proxy_env(proxy))
        env["RADMATCH_API_KEY"] = "k-proxy-0123"
        with started_judge(tmp_path, env, stub_vllm) as lines:
            assert any(ln.startswith("ready: radmatch-judge") for ln in lines)
            assert any("answer schemas compiled" in ln for ln in lines)
    assert seen == []


def test_thinking_can_be_turned_off_for_the_whole_server(tmp_path, env, stub_vllm):
    log_file = tmp_path / "judge.log"
    env["RADMATCH_THINKING"] = "0"
    with started_judge(tmp_path, env, stub_vllm, "--log-file", str(log_file)) as lines:
        assert any("thinking: off for requests that do not say" in ln for ln in lines)
    assert 'stub: chat template defaults {"enable_thinking": false}' in log_file.read_text()


def test_start_reports_a_server_that_dies(tmp_path, env, stub_vllm):
    fake_nvidia_smi(tmp_path / "bin", [H100_80GB])
    model_dir = write_weights(tmp_path / "weights")
    env.update(VLLM_PYTHON=str(stub_vllm.parent / "python"), STUB_CRASH="1")
    result = run(
        [
            "--model-dir",
            str(model_dir),
            "--port",
            str(free_port()),
            "--log-file",
            str(tmp_path / "judge.log"),
        ],
        env,
        timeout=60,
    )
    assert result.returncode == 5
    assert "the server exited during start-up" in result.stderr
    assert "stub: failed to load the model" in result.stderr


# ---- the dry run's exit code: every reason a start would stop for -------------------


def make_old_python3(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin" / "python3", "3.10.12")  # Ubuntu 22.04's


@pytest.mark.parametrize(
    ("piece", "code", "words"),
    [
        ("weights", 4, "the google/gemma-4-31B-it weights are missing or incomplete"),
        ("vllm", 4, "vllm not found"),
        ("python", 7, "this machine cannot run vLLM 0.33.0: " + "{bin}/python3 is Python 3.10.12"),
        ("driver", 7, "this machine cannot run vLLM 0.33.0: NVIDIA driver 575.57.08 is too old"),
        ("gpu-memory", 3, "refusing to start: gemma4-31b does not fit on 1 x NVIDIA GeForce RTX 5090"),
    ],
)
def test_a_dry_run_exits_as_a_start_would_for_each_missing_piece(tmp_path, env, piece, code, words):
    if piece in ("vllm", "python") and (REPO / "serve" / ".venv" / "bin" / "vllm").exists():
        pytest.skip("serve/.venv has vLLM: its vllm and python are the ones used")
    if piece == "python":
        make_old_python3(tmp_path)
    result = dry_run(
        tmp_path, env, [RTX_5090] if piece == "gpu-memory" else [H100_80GB],
        weights=piece != "weights", vllm=piece != "vllm",
        driver="575.57.08" if piece == "driver" else DRIVER_OK,
    )
    assert result.returncode == code, result.stderr
    assert f"[radmatch-judge] error: {words.format(bin=tmp_path / 'bin')}" in result.stderr
    assert f"dry run: a start would stop with exit {code}: 1 reason above" in result.stderr
    assert result.stdout.count("# refused: ") == 1
    assert command_line(result.stdout)  # the plan is still printed in full
    assert "# log file: " in result.stdout
    if piece == "vllm":  # the fix serve/README.md gives
        assert f"install it (serve/README.md, Install): {REPO}/serve/install.sh" in result.stdout
        assert "python3 -m venv" not in result.stdout + result.stderr


def test_a_dry_run_with_nothing_in_the_way_exits_0(tmp_path, env):
    result = dry_run(tmp_path, env, [H100_80GB])
    assert result.returncode == 0, result.stderr
    assert "refused" not in result.stdout and "error" not in result.stderr


def test_a_dry_run_names_every_reason_in_the_order_a_start_meets_them(tmp_path, env):
    if (REPO / "serve" / ".venv" / "bin" / "vllm").exists():
        pytest.skip("serve/.venv has vLLM: its vllm and python are the ones used")
    make_old_python3(tmp_path)
    result = dry_run(tmp_path, env, [RTX_5090], weights=False, vllm=False, driver="575.57.08")
    assert result.returncode == 3  # a start stops at the GPUs first
    reasons = [ln.removeprefix("[radmatch-judge] error: ")
               for ln in result.stderr.splitlines() if ln.startswith("[radmatch-judge] error: ")]
    assert reasons[0].startswith("refusing to start: gemma4-31b does not fit")
    assert reasons[1].startswith("the google/gemma-4-31B-it weights are missing or incomplete")
    assert reasons[2].startswith("vllm not found")
    assert reasons[3].startswith("this machine cannot run vLLM 0.33.0: NVIDIA driver 575.57.08 is too old")
    assert reasons[4].startswith(f"this machine cannot run vLLM 0.33.0: {tmp_path / 'bin' / 'python3'} is Python 3.10.12")
    assert reasons[5] == ("dry run: a start would stop with exit 3: 5 reasons above, "
                          "each 'refused' on stdout.")
    assert result.stdout.count("# refused: ") == 5
    assert command_line(result.stdout)
    assert all(ln.startswith(("#", "export ")) or ln == command_line(result.stdout)
               for ln in result.stdout.splitlines())  # every reason's lines are comments


# ---- whole weights, not only a config.json ---------------------------------------------


def cut(path: Path, size: int) -> None:
    with path.open("r+b") as fh:
        fh.truncate(size)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("config-only", "has config.json but no model.safetensors.index.json and no *.safetensors weights"),
        ("shard-missing", "1 of 2 weight files in {dir} are not whole: model-00002-of-00002.safetensors is missing"),
        ("shard-empty", "model-00001-of-00002.safetensors is empty (0 bytes)"),
        ("shard-cut-short", "model-00002-of-00002.safetensors is cut short ({short} of {full} bytes)"),
        ("both-cut", "2 of 2 weight files in {dir} are not whole"),
    ],
)
def test_weights_must_be_whole(tmp_path, env, damage, words):
    folder = tmp_path / "model"
    full = 0
    if damage == "config-only":
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    else:
        write_weights(folder)
        first, second = sorted(folder.glob("model-*.safetensors"))
        if damage == "shard-missing":
            second.unlink()
        elif damage == "shard-empty":
            cut(first, 0)
        elif damage == "shard-cut-short":  # the tensors cut, the header whole
            full = second.stat().st_size
            cut(second, full - 10)
        else:
            cut(first, 100)
            cut(second, 4)
    result = dry_run(tmp_path, env, [H100_80GB], "--model-dir", str(folder))
    assert result.returncode == 4, result.stderr
    assert words.format(dir=folder, short=full - 10, full=full) in result.stdout
    assert "weights are missing or incomplete" in result.stderr
    assert "rsync -a gemma-4-31B-it/ " in result.stdout  # how to finish the copy


def test_a_whole_checkpoint_passes_with_an_index_or_as_one_file(tmp_path, env):
    assert dry_run(tmp_path, env, [H100_80GB], "--model-dir", str(write_weights(tmp_path / "m"))).returncode == 0
    single = write_weights(tmp_path / "single", shards=1)
    (single / "model.safetensors.index.json").unlink()
    (single / "model-00001-of-00001.safetensors").rename(single / "model.safetensors")
    result = dry_run(tmp_path, env, [H100_80GB], "--model-dir", str(single))
    assert result.returncode == 0, result.stderr
    assert f"# weights: {single}" in result.stdout


def test_an_unfinished_copy_into_the_hf_cache_stops_a_start(tmp_path, env, stub_vllm):
    repo = tmp_path / "hf" / "hub" / "models--google--gemma-4-31B-it"
    snapshot = write_weights(repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "model-00002-of-00002.safetensors").unlink()  # rsync had not got there
    env.update(HF_HOME=str(tmp_path / "hf"), VLLM_PYTHON=str(stub_vllm.parent / "python"))
    fake_nvidia_smi(tmp_path / "bin", [H100_80GB])
    log_file = tmp_path / "judge.log"
    result = run(["--log-file", str(log_file)], env)
    assert result.returncode == 4
    assert f"weights incomplete: 1 of 2 weight files in {snapshot} are not whole" in result.stderr
    assert "rsync -a hub/models--google--gemma-4-31B-it " in result.stderr
    assert "stub: serving" not in (log_file.read_text() if log_file.exists() else "")


# ---- the API key never on a command line ----------------------------------------------


def test_the_api_key_reaches_vllm_only_through_its_environment(tmp_path, env, stub_vllm):
    """`env VLLM_API_KEY=... vllm serve` showed the key in /proc/PID/cmdline: every
    command the script runs through PATH is recorded here, and vLLM's own argv."""
    commands = tmp_path / "commands.log"
    for name in ("env", "nohup", "setsid", "sudo", "runuser"):
        real = shutil.which(name, path=SYSTEM_PATH)
        if real:
            stand_in = tmp_path / "bin" / name
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text(f'#!/bin/sh\nprintf "%s\\n" "{name} $*" >>"{commands}"\nexec "{real}" "$@"\n')
            stand_in.chmod(0o755)
    process = tmp_path / "vllm-process.json"
    key = "k-secret-on-the-command-line-0123"
    env.update(RADMATCH_API_KEY=key, STUB_PROCESS=str(process))
    with started_judge(tmp_path, env, stub_vllm, "--host", "0.0.0.0") as lines:
        assert any(ln.startswith("ready: radmatch-judge") for ln in lines)  # the stub wants the key
    started = json.loads(process.read_text())
    assert started["env"]["VLLM_API_KEY"] == key
    assert all(key not in arg for arg in started["argv"])
    assert key not in (commands.read_text() if commands.exists() else "")


# ---- systemd: "active" means ready, and no restart that cannot help -------------------


UNIT = REPO / "serve" / "radmatch-judge.service"


def unit_settings() -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in UNIT.read_text().splitlines()
        if re.match(r"^[A-Za-z]+=", line)
    )


def test_the_unit_is_active_only_once_the_judge_is_ready():
    settings = unit_settings()
    assert settings["Type"] == "notify"
    assert settings["NotifyAccess"] == "all"  # systemd-notify runs as the script's child
    # systemd's own 90 s would stop a start that loads 31B weights: 30 min for /health plus
    # the readiness check's bounds (serve/README.md) come first
    minutes = int(re.fullmatch(r"(\d+)min", settings["TimeoutStartSec"]).group(1))
    assert minutes * 60 > 1800 + 120 + 4 * 900


def test_no_restart_for_an_exit_that_a_restart_cannot_fix():
    """Every exit code of start_vllm.sh but 1 (vLLM stopped after it was ready) and 143
    (stopped) needs a person: 2 usage, 3 GPUs, 4 weights/vLLM, 5 no /health, 6 not ready,
    7 software."""
    script = START.read_text()
    codes = {int(c) for c in re.findall(r"\b(?:die|exit) (\d+)\b", script)} - {0, 1, 143}
    assert codes == {2, 3, 4, 5, 6, 7}
    prevented = {int(c) for c in unit_settings()["RestartPreventExitStatus"].split()}
    assert codes <= prevented
    assert 1 not in prevented


def fake_systemd_notify(tmp_path: Path) -> Path:
    record = tmp_path / "notify.log"
    script = tmp_path / "bin" / "systemd-notify"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>"{record}"\n')
    script.chmod(0o755)
    return record


def test_systemd_hears_ready_only_after_the_readiness_check(tmp_path, env, stub_vllm):
    record = fake_systemd_notify(tmp_path)
    process = tmp_path / "vllm-process.json"
    env.update(NOTIFY_SOCKET=str(tmp_path / "notify.sock"), STUB_PROCESS=str(process))
    with started_judge(tmp_path, env, stub_vllm) as lines:
        assert any(ln.startswith("ready: radmatch-judge") for ln in lines)
        sent = record.read_text().splitlines()
    assert sent[0].startswith("--status=loading gemma4-31b; waiting for /health (at most 1800 s)")
    assert sent[1].startswith("--status=/health answered; compiling")
    assert sent[-1].startswith("--ready --status=ready: RADMATCH_BASE_URL=http://127.0.0.1:")
    assert "NOTIFY_SOCKET" not in json.loads(process.read_text())["env"]  # vLLM cannot say ready


def test_a_judge_that_fails_its_readiness_check_never_tells_systemd_ready(tmp_path, env, stub_vllm):
    record = fake_systemd_notify(tmp_path)
    env.update(NOTIFY_SOCKET=str(tmp_path / "notify.sock"), STUB_ANSWER="not json",
               VLLM_PYTHON=str(stub_vllm.parent / "python"))
    fake_nvidia_smi(tmp_path / "bin", [H100_80GB])
    result = run(["--model-dir", str(write_weights(tmp_path / "weights")), "--port", str(free_port()),
                  "--log-file", str(tmp_path / "judge.log")], env, timeout=90)
    assert result.returncode == 6, result.stderr
    assert "--ready" not in (record.read_text() if record.exists() else "")


def test_vllm_stopping_after_ready_exits_1_whatever_its_own_code(tmp_path, env, stub_vllm):
    env.update(STUB_EXIT_AFTER_READY="4", VLLM_PYTHON=str(stub_vllm.parent / "python"))
    fake_nvidia_smi(tmp_path / "bin", [H100_80GB])
    result = run(["--model-dir", str(write_weights(tmp_path / "weights")), "--port", str(free_port()),
                  "--log-file", str(tmp_path / "judge.log")], env, timeout=90)
    assert "the judge is ready" in result.stderr
    assert result.returncode == 1  # restartable; vLLM's own 4 would read as "no weights"
    assert "vLLM stopped on its own after it was ready (its exit code 4)" in result.stderr


def test_help_bounds_the_first_start_in_words(env):
    out = " ".join(run(["--help"], env).stdout.split())
    assert "RADMATCH_HEALTH_TIMEOUT_S seconds (default 1800, 30 minutes)" in out
    assert "not measured" in out  # download, copy and load: no GPU has run it yet
    assert "with xgrammar 14-18 s each on 2 idle CPU cores" in out  # BENCHMARKS.md
    assert "about 70 GB of disk" in out


# ---- shellcheck ------------------------------------------------------------------


def test_shell_scripts_are_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed (apt-get install shellcheck)")
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    scripts = [*sorted((REPO / "serve").glob("*.sh")), REPO / "scripts" / "setup_vllm_cpu.sh"]
    result = subprocess.run(
        ["shellcheck", *map(str, scripts)], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


# ---- the readiness check against a real vLLM server (CPU, tiny model) ----------


@pytest.fixture
def key_file(tmp_path, vllm_server) -> Path:
    path = tmp_path / "api-key"
    path.write_text(vllm_server.api_key + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.slow
def test_real_server_passes_the_readiness_check(vllm_server, key_file, env):
    base_url, _, model = vllm_server
    result = run(  # the timeout bounds it: a grammar compile on busy CPU cores takes a while
        ["--check-only", "--url", base_url, "--api-key-file", str(key_file), "--model", model],
        env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ready: {model} at ")
    assert "schema-valid JSON" in result.stdout


@pytest.mark.slow
def test_real_server_rejects_a_wrong_key(vllm_server, tmp_path, env):
    wrong = tmp_path / "wrong-key"
    wrong.write_text("not-the-key\n")
    result = run(
        [
            "--check-only",
            "--url",
            vllm_server.base_url,
            "--api-key-file",
            str(wrong),
            "--model",
            vllm_server.model,
        ],
        env,
        timeout=120,
    )
    assert result.returncode == 4
    assert "HTTP 401" in result.stderr and "wrong API key" in result.stderr


@pytest.mark.slow
def test_real_server_without_a_key_is_refused(vllm_server):
    result = check(vllm_server.base_url, "--model", vllm_server.model)
    assert result.returncode == 4
    assert "requires an API key" in result.stderr


# ---- the client, when the server's compile limit is reached ----------------------------


def test_client_names_the_compile_limit_when_vllm_answers_400(tmp_path):
    """vLLM answers HTTP 400 when a schema's grammar outlives its compile limit: the
    pair's error says so and names the fix, instead of a bare 400."""
    import asyncio
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    from radmatch_audit.judges.base import JudgeError, TransientJudgeError
    from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
    from radmatch_audit.core.schemas import SERVER_LIMITS, answer_models

    posts = []

    class VLLM(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            posts.append(self.path)
            body = json.dumps({"error": {
                "message": "Regex compilation timed out after 60s. The pattern may be too "
                "complex or contain constructs that cause exponential state-space explosion "
                "(e.g. nested quantifiers). Pattern: \\\\{[ ]?\"findings\"",
                "type": "BadRequestError", "param": None, "code": 400}}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), VLLM)
    Thread(target=server.serve_forever, daemon=True).start()
    judge = OpenAICompatibleJudge(
        base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="radmatch-judge"
    )

    async def one_call():
        try:
            await judge.generate([{"role": "user", "content": "x"}],
                                 answer_models(SERVER_LIMITS).extract, max_tokens=16)
        finally:
            await judge.aclose()

    try:
        with pytest.raises(JudgeError) as caught:
            asyncio.run(one_call())
    finally:
        server.shutdown()
        server.server_close()
    assert not isinstance(caught.value, TransientJudgeError)  # final: retrying cannot help
    message = str(caught.value)
    assert "the server's grammar compile limit was reached" in message
    assert "--compile-limit" in message and "xgrammar" in message
    assert posts == ["/v1/chat/completions"]
