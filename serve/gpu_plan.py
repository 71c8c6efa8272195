"""The judge server's GPU plan: which profile, how many GPUs per replica (tensor
parallelism) and how many replicas (data parallelism), the memory arithmetic behind
that choice, the KV cache's type, and whether the NVIDIA driver, the GPU generation
and the Python can run the pinned vLLM.

serve/start_vllm.sh runs ``nvidia-smi`` and the Python version query itself and hands
their output to this module, which decides. Standard library only: the script runs it
with the system python3 (Ubuntu 22.04's is 3.10) before any venv exists.

Command line (what serve/start_vllm.sh calls)::

    python3 serve/gpu_plan.py plan --profile NAME --gpus-csv FILE [--caps-csv FILE]
        [--no-gpu REASON] [--visible CUDA_VISIBLE_DEVICES] [--util 0.92]
        [--tp N --tp-source WHERE] [--dp N --dp-source WHERE]
    python3 serve/gpu_plan.py python-check --exe PYTHON --version 3.12.3 [--vllm-found]
    python3 serve/gpu_plan.py profiles

``--gpus-csv`` is ``nvidia-smi --query-gpu=name,memory.total
--format=csv,noheader,nounits``, ``--caps-csv`` is ``nvidia-smi
--query-gpu=driver_version,compute_cap --format=csv,noheader`` ("-": standard input).
``plan`` and ``python-check`` print ``KEY=value`` records, each ended by a NUL byte
(values may span lines), the last one ``END=``. A ``STOP`` record's value is an exit
code, a space and the reason, in the order a start meets them. Exit codes are
start_vllm.sh's: 0 nothing in the way; 2 usage (an unknown profile, --tp or --dp
beyond the GPUs); 3 the GPUs cannot hold the profile, or there is no GPU; 7 the
driver, the GPU generation or the Python cannot run vLLM.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field

VLLM_VERSION = "0.33.0"
PYTHON_MIN_MINOR, PYTHON_MAX_MINOR = 11, 14  # Python 3.11-3.14 (the wheel's Requires-Python)
DRIVER_MIN_MAJOR = 580  # the wheel links CUDA 13: driver R580+
CC_MIN = 80  # compute capability x10: BF16 and FP8 weight kernels (Ampere+)
CC_FP8_KV = 89  # FP8 KV cache: vLLM's Triton attention (Gemma 4) refuses it below 8.9

RUNTIME_RESERVE_MIB = 1536  # per GPU: activations, CUDA graphs, NCCL buffers
TP_CHOICES = (1, 2, 4, 8)

USAGE, NO_ROOM, SOFTWARE = 2, 3, 7  # start_vllm.sh's exit codes


@dataclass(frozen=True)
class Profile:
    """A model the judge can serve.

    weights_mib: held on the GPUs after online FP8 quantisation (FP8 linear layers,
    BF16 embedding), per replica; split evenly over its tp GPUs. kv_floor_mib: the
    least FP8 KV cache worth serving with (a few concurrent RadMatch calls at
    --max-model-len), per replica; also split over tp.
    """

    name: str
    hf_id: str
    weights_mib: int
    kv_floor_mib: int
    description: str


# gemma4-31b: 28.7 GB FP8 linear weights + 2.8 GB BF16 embedding = 31.5 GB = 30041 MiB
#   (the text model: --language-model-only leaves the ~0.7 GiB vision tower out).
# gemma4-26b-a4b: estimated from ~25.2 B parameters at one byte plus a BF16
#   embedding; check "Model loading took ... GiB" in the log on first start.
PROFILES = (
    Profile("gemma4-31b", "google/gemma-4-31B-it", 30041, 4096,
            "Gemma 4 31B dense, the paper's open judge (default)"),
    Profile("gemma4-26b-a4b", "google/gemma-4-26B-A4B-it", 24800, 2048,
            "Gemma 4 26B-A4B MoE, smaller fallback (agreement not validated)"),
)
DEFAULT_PROFILE = "gemma4-31b"


@dataclass(frozen=True)
class Gpu:
    name: str
    mib: int
    cc: int = 0  # compute capability x10; 0: unknown
    cc_text: str = ""


# What a dry run plans for on a machine without a GPU: the smallest common single card
# that holds the default profile, so that an admin can read the weights check and the
# command before buying.
EXAMPLE_GPU = Gpu("NVIDIA H100 80GB HBM3", 81559, 90, "9.0")


class PlanError(ValueError):
    """A usage error (exit 2): an unknown profile, or GPUs asked for that are not there."""


@dataclass(frozen=True)
class Stop:
    code: int
    reason: str


@dataclass
class Plan:
    profile: Profile
    gpu_count: int = 0
    gpu_mib: int = 0  # the smallest GPU's memory: every GPU holds the same share
    gpu_name: str = ""
    util: str = "0.92"
    example_reason: str = ""  # set: no GPU here, the plan is for EXAMPLE_GPU
    tp: int = 0
    dp: int = 0
    fit_tp: int = 0  # the fewest GPUs that hold one replica; 0: none does
    tp_source: str = ""
    dp_source: str = ""
    driver: str = ""
    cc: int = 0
    cc_text: str = ""
    cc_name: str = ""
    kv_cache_dtype: str = "auto"
    stops: list[Stop] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    software_problems: list[str] = field(default_factory=list)

    @property
    def idle_gpus(self) -> int:
        return self.gpu_count - self.tp * self.dp

    @property
    def usable_mib(self) -> int:
        return usable_mib(self.gpu_mib, self.util)

    def exit_code(self) -> int:
        """The code a dry run of start_vllm.sh gives for this plan (0: nothing in the way)."""
        codes = [stop.code for stop in self.stops]
        if USAGE in codes:
            return USAGE
        if codes:
            return codes[0]
        return SOFTWARE if self.software_problems else 0


# ---- profiles -------------------------------------------------------------------


def profile_named(name: str) -> Profile:
    for profile in PROFILES:
        if profile.name == name:
            return profile
    names = " ".join(p.name for p in PROFILES)
    raise PlanError(f"unknown profile '{name}' (profiles: {names})")


def profile_table() -> str:
    row = "  {:<16} {:<27} {:>12} {:>13}  {}"
    lines = [
        "Profiles (weights and KV floor per replica, split over its tp GPUs; each GPU also",
        f"needs {RUNTIME_RESERVE_MIB} MiB runtime, all within GPU_MEMORY_UTILIZATION x its memory):",
        row.format("profile", "Hugging Face id", "weights MiB", "KV floor MiB", "description"),
    ]
    lines += [row.format(p.name, p.hf_id, p.weights_mib, p.kv_floor_mib, p.description)
              for p in PROFILES]
    return "\n".join(lines)


# ---- nvidia-smi -----------------------------------------------------------------


def visible_indices(cuda_visible_devices: str) -> set[str] | None:
    """The GPU indices CUDA_VISIBLE_DEVICES lists; None when it lists none (all count).
    UUIDs and MIG names are not indices: then every GPU counts, as before."""
    if re.fullmatch(r"[0-9,]+", cuda_visible_devices):
        return set(cuda_visible_devices.split(","))
    return None


def _visible_rows(rows: list[tuple[str, str]], visible: set[str] | None):
    return [row for index, row in enumerate(rows) if visible is None or str(index) in visible]


def parse_memory_csv(text: str, visible: set[str] | None = None) -> list[tuple[str, int]]:
    """(name, MiB) of each visible GPU in `nvidia-smi --query-gpu=name,memory.total
    --format=csv,noheader,nounits`; lines without a memory figure are skipped."""
    rows = []
    for line in text.splitlines():
        name, _, mib = line.partition(",")
        mib = re.sub(r"\s", "", mib)
        if mib.isascii() and mib.isdigit():
            rows.append((name.strip(), mib))
    return [(name, int(mib)) for name, mib in _visible_rows(rows, visible)]


def parse_caps_csv(text: str, visible: set[str] | None = None) -> list[tuple[str, str]]:
    """(driver version, compute capability or "") of each visible GPU in `nvidia-smi
    --query-gpu=driver_version,compute_cap --format=csv,noheader` (or driver_version
    alone: drivers before 2021 know no compute_cap field)."""
    rows = []
    for line in text.splitlines():
        driver, _, cap = line.partition(",")
        driver, cap = re.sub(r"\s", "", driver), re.sub(r"\s", "", cap)
        if re.fullmatch(r"[0-9]+(\.[0-9]+)*", driver):
            rows.append((driver, cap))
    return _visible_rows(rows, visible)


def gpus_from_csv(memory_csv: str, caps_csv: str = "", cuda_visible_devices: str = "") -> list[Gpu]:
    """The visible GPUs, each with its compute capability where nvidia-smi gives one
    (both queries list the GPUs in the same order)."""
    visible = visible_indices(cuda_visible_devices)
    memory = parse_memory_csv(memory_csv, visible)
    caps = parse_caps_csv(caps_csv, visible)
    gpus = []
    for i, (name, mib) in enumerate(memory):
        cap = caps[i][1] if i < len(caps) and len(caps) == len(memory) else ""
        match = re.fullmatch(r"([0-9]+)\.([0-9])", cap)
        cc = int(match.group(1)) * 10 + int(match.group(2)) if match else 0
        gpus.append(Gpu(name, mib, cc, cap if match else ""))
    return gpus


def driver_version(caps_csv: str, cuda_visible_devices: str = "") -> str:
    """The driver version nvidia-smi gives for the visible GPUs, or ""."""
    caps = parse_caps_csv(caps_csv, visible_indices(cuda_visible_devices))
    return caps[-1][0] if caps else ""


# ---- the memory arithmetic --------------------------------------------------------


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def need_per_gpu_mib(weights_mib: int, kv_floor_mib: int, tp: int) -> int:
    """MiB each of tp GPUs needs for one replica: its share of the weights and the KV
    floor, and the runtime reserve."""
    return ceil_div(weights_mib, tp) + RUNTIME_RESERVE_MIB + ceil_div(kv_floor_mib, tp)


def usable_mib(gpu_mib: int, util: str) -> int:
    """MiB vLLM may use of a GPU of gpu_mib under GPU_MEMORY_UTILIZATION (a fraction)."""
    return int(gpu_mib * float(util))


def smallest_fitting_tp(profile: Profile, gpu_count: int, usable: int) -> int:
    """The fewest GPUs (from TP_CHOICES, at most gpu_count) that hold one replica; 0: none."""
    for tp in TP_CHOICES:
        if tp > gpu_count:
            break
        if need_per_gpu_mib(profile.weights_mib, profile.kv_floor_mib, tp) <= usable:
            return tp
    return 0


def kv_cache_dtype(cc: int) -> str:
    """FP8 from compute capability 8.9; else (or unknown) the model's BF16 ("auto")."""
    return "fp8" if cc >= CC_FP8_KV else "auto"


def driver_problem(driver: str) -> str:
    """Why this NVIDIA driver cannot run vLLM, or "" (an unknown driver is no problem)."""
    if not driver or int(driver.split(".")[0]) >= DRIVER_MIN_MAJOR:
        return ""
    r = DRIVER_MIN_MAJOR
    return (
        f"NVIDIA driver {driver} is too old: vLLM {VLLM_VERSION} is built for CUDA 13 "
        f"(libcudart.so.13), which needs driver R{r} or newer.\n"
        f"  Fix: install the R{r} (or newer) driver for these GPUs (Ubuntu: sudo apt install "
        f"nvidia-driver-{r}-open, or the\n"
        f"  nvidia-driver-{r} package; or NVIDIA's CUDA 13 repository), reboot, and check that "
        f"nvidia-smi shows {r}.xx or newer."
    )


def gpu_generation_problem(name: str, cc: int, cc_text: str) -> str:
    """Why GPUs of this compute capability cannot run the judge, or ""."""
    if cc == 0 or cc >= CC_MIN:
        return ""
    return (
        f"{name} has compute capability {cc_text}: vLLM runs Gemma 4 in BF16 with FP8 weights, "
        "which need 8.0 or newer (A100, L40S, RTX 30/40/50 series, H100).\n"
        "  Fix: run the judge on newer GPUs and point RADMATCH_BASE_URL at them."
    )


def python_problem(exe: str, version: str) -> str:
    """Why this Python ("3.10.12") cannot run vLLM, or "" (an unknown version included)."""
    match = re.match(r"3\.([0-9]+)\.", version)
    if not match or PYTHON_MIN_MINOR <= int(match.group(1)) <= PYTHON_MAX_MINOR:
        return ""
    return (
        f"{exe} is Python {version}: vLLM {VLLM_VERSION} needs Python "
        f"3.{PYTHON_MIN_MINOR}-3.{PYTHON_MAX_MINOR} (Ubuntu 22.04's python3 is 3.10).\n"
        "  Fix: install one (Ubuntu 22.04: sudo apt install python3.11 python3.11-venv; "
        "or uv python install 3.12) and\n"
        "  make serve/.venv with it: serve/install.sh --python python3.11"
    )


def python_line(exe: str, version: str) -> str:
    needs = f"vLLM {VLLM_VERSION} needs 3.{PYTHON_MIN_MINOR}-3.{PYTHON_MAX_MINOR}"
    if re.match(r"3\.[0-9]+\.", version):
        return f"python: {exe} {version} ({needs})"
    return f"python: {exe} (version unknown; {needs})"


# ---- the plan ---------------------------------------------------------------------


def make_plan(
    profile: Profile,
    gpus: list[Gpu],
    *,
    no_gpu_reason: str = "",
    driver: str = "",
    util: str = "0.92",
    tp: int | None = None,
    dp: int | None = None,
    tp_source: str = "",
    dp_source: str = "",
) -> Plan:
    """The plan for these GPUs, with every reason a start would stop for in the order it
    meets them (plan.stops; a usage error ends the plan there) and the software problems.
    Without GPUs: a stop, and the plan for as many example GPUs as tp x dp ask for."""
    plan = Plan(profile, util=util, tp_source=tp_source, dp_source=dp_source)
    if not gpus:
        plan.example_reason = no_gpu_reason or "nvidia-smi lists no usable GPU"
        plan.stops.append(Stop(NO_ROOM, no_gpu_message(plan)))
        gpus = [EXAMPLE_GPU] * ((tp or 1) * (dp or 1))
    smallest = min(gpus, key=lambda gpu: gpu.mib)  # the first of the smallest
    plan.gpu_count, plan.gpu_mib, plan.gpu_name = len(gpus), smallest.mib, smallest.name
    plan.fit_tp = smallest_fitting_tp(profile, plan.gpu_count, plan.usable_mib)
    if tp is not None and tp > plan.gpu_count:
        plan.stops.append(Stop(USAGE, f"--tp {tp} but only {plan.gpu_count} GPU(s) found"))
        return plan
    largest = max(c for c in TP_CHOICES if c <= plan.gpu_count) if plan.gpu_count else 1
    plan.tp = tp or plan.fit_tp or largest  # does not fit: refused, at the largest tp
    if need_per_gpu_mib(profile.weights_mib, profile.kv_floor_mib, plan.tp) > plan.usable_mib:
        plan.stops.append(Stop(NO_ROOM, does_not_fit(plan)))
    if dp is not None and dp * plan.tp > plan.gpu_count:
        plan.stops.append(Stop(USAGE, f"--dp {dp} x tensor parallelism {plan.tp} needs "
                                      f"{dp * plan.tp} GPUs but only {plan.gpu_count} found"))
        return plan
    plan.dp = dp or plan.gpu_count // plan.tp
    check_software(plan, gpus, driver)
    return plan


def check_software(plan: Plan, gpus: list[Gpu], driver: str) -> None:
    """The driver and the GPU generation against what vLLM needs; the KV cache's type.
    The oldest GPU decides; a machine without a GPU has no driver to check."""
    known = [gpu for gpu in gpus if gpu.cc]
    oldest = min(known, key=lambda gpu: gpu.cc) if known else None
    if oldest:
        plan.cc, plan.cc_text, plan.cc_name = oldest.cc, oldest.cc_text, oldest.name
    plan.kv_cache_dtype = kv_cache_dtype(plan.cc)
    if plan.example_reason:
        return
    plan.driver = driver
    if not driver:
        plan.warnings.append(f"warning: nvidia-smi gave no driver version; vLLM {VLLM_VERSION} "
                             f"needs R{DRIVER_MIN_MAJOR} or newer")
    problems = [driver_problem(driver), gpu_generation_problem(plan.cc_name, plan.cc, plan.cc_text)]
    plan.software_problems += [p for p in problems if p]


# ---- what the plan says -------------------------------------------------------------


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def no_gpu_message(plan: Plan) -> str:
    p = plan.profile
    return (
        f"no GPU: {plan.example_reason}.\n"
        f"  {p.name} ({p.description}) needs NVIDIA GPUs: {p.weights_mib} MiB of FP8 weights plus\n"
        f"  {RUNTIME_RESERVE_MIB} MiB runtime and a {p.kv_floor_mib} MiB KV cache floor "
        "(e.g. two 32 GB or one 48 GB GPU).\n"
        "  Run this script on the GPU workstation. To try the client without a GPU, see\n"
        "  scripts/setup_vllm_cpu.sh (CPU vLLM with a tiny model: structure only, not clinical quality)."
    )


def explain_memory(plan: Plan, tp: int) -> str:
    """The memory arithmetic of the plan's profile at tensor parallelism tp."""
    p = plan.profile
    need = need_per_gpu_mib(p.weights_mib, p.kv_floor_mib, tp)
    return (
        f"  memory per GPU at tensor parallelism {tp}:\n"
        f"    FP8 weights     {p.weights_mib} MiB / {tp} = {ceil_div(p.weights_mib, tp)} MiB\n"
        f"    runtime         {RUNTIME_RESERVE_MIB} MiB (activations, CUDA graphs, NCCL)\n"
        f"    KV cache floor  {p.kv_floor_mib} MiB / {tp} = {ceil_div(p.kv_floor_mib, tp)} MiB\n"
        f"    needed          {need} MiB\n"
        f"    usable          {plan.usable_mib} MiB ({plan.util} x {plan.gpu_mib} MiB)"
    )


def alternatives(plan: Plan) -> str:
    """What would hold the profile when these GPUs do not."""
    p, usable = plan.profile, plan.usable_mib
    lines = ["  alternatives:"]
    for tp in TP_CHOICES:
        need = need_per_gpu_mib(p.weights_mib, p.kv_floor_mib, tp)
        if tp > plan.gpu_count and need <= usable:
            lines.append(f"    - more GPUs: {tp} x {plan.gpu_mib} MiB GPUs (tensor parallelism {tp}) "
                         f"need {need} MiB each, which fits;")
            break
    larger = int(need_per_gpu_mib(p.weights_mib, p.kv_floor_mib, 1) / float(plan.util) + 0.999)
    lines.append(f"    - a larger GPU: one with at least {larger} MiB (e.g. a 48 GB or 80 GB card);")
    for other in PROFILES:
        tp = smallest_fitting_tp(other, plan.gpu_count, usable) if other != p else 0
        if tp:
            need = need_per_gpu_mib(other.weights_mib, other.kv_floor_mib, tp)
            lines.append(f"    - a smaller profile: --profile {other.name} ({other.description}) "
                         f"needs {need} MiB per GPU at tensor parallelism {tp} and fits here;")
    lines.append("    - or run the judge on another workstation and point RADMATCH_BASE_URL at it.")
    return "\n".join(lines)


def does_not_fit(plan: Plan) -> str:
    return (
        f"refusing to start: {plan.profile.name} does not fit on {plan.gpu_count} x {plan.gpu_name} "
        f"({plan.gpu_mib} MiB) at tensor parallelism {plan.tp}.\n"
        f"{explain_memory(plan, plan.tp)}\n{alternatives(plan)}"
    )


def plan_lines(plan: Plan) -> str:
    """The parallelism arithmetic in plain lines, e.g.
    4 GPUs x 32607 MiB (NVIDIA GeForce RTX 5090, 29998 usable); one replica needs 2: ...
    TP 2 x DP 2 = 4 GPUs"""
    p = plan.profile
    fit = plan.fit_tp or plan.tp  # it does not fit (a dry run): the arithmetic at the tp tried
    need = need_per_gpu_mib(p.weights_mib, p.kv_floor_mib, fit)
    lines = []
    if plan.example_reason:
        lines.append(f"example GPU: this machine has none ({plan.example_reason}), so the plan is for:")
    gpus = (f"{plural(plan.gpu_count, 'GPU')} x {plan.gpu_mib} MiB "
            f"({plan.gpu_name}, {plan.usable_mib} usable);")
    sums = f"(model {p.weights_mib} + KV cache {p.kv_floor_mib}) / {fit} + runtime {RUNTIME_RESERVE_MIB}"
    if plan.fit_tp:
        lines.append(f"{gpus} one replica needs {fit}: {sums} = {need} MiB per GPU")
    else:
        lines.append(f"{gpus} one replica does not fit: {sums} = {need} MiB per GPU "
                     f"at tensor parallelism {fit}")
    sources = [f"{source} {value}" for source, value in
               ((plan.tp_source, plan.tp), (plan.dp_source, plan.dp)) if source]
    note = f" (set by {', '.join(sources)})" if sources else ""
    if plan.idle_gpus > 0:
        note += f"; {plural(plan.idle_gpus, 'GPU')} left idle"
        if not plan.dp_source:
            note += f" ({plan.gpu_count} is not a multiple of {plan.tp})"
    lines.append(f"TP {plan.tp} x DP {plan.dp} = {plural(plan.tp * plan.dp, 'GPU')}{note}")
    return "\n".join(lines)


def gpu_software_lines(plan: Plan) -> str:
    """The driver, the compute capability and the KV cache's type, one line each."""
    needs = f"(vLLM {VLLM_VERSION} needs R{DRIVER_MIN_MAJOR} or newer for CUDA 13)"
    driver = "none on this machine" if plan.example_reason else plan.driver or "unknown"
    lines = [f"NVIDIA driver: {driver} {needs}"]
    if plan.cc == 0:
        why = "compute capability unknown: BF16, which every supported GPU runs"
        lines.append("compute capability: unknown (nvidia-smi has no compute_cap field)")
    elif plan.cc >= CC_FP8_KV:
        why = f"compute capability {plan.cc_text} >= 8.9"
        lines.append(f"compute capability: {plan.cc_text} ({plan.cc_name}): FP8 weights on native FP8 kernels")
    else:
        why = (f"FP8 needs 8.9 or newer: Gemma 4's Triton attention refuses it on {plan.cc_text}; "
               "the same KV memory holds half the tokens")
        lines.append(f"compute capability: {plan.cc_text} ({plan.cc_name}): FP8 weights on "
                     "weight-only kernels (Marlin W8A16), slower than on 8.9+")
    kv = "FP8" if plan.kv_cache_dtype == "fp8" else "BF16 (--kv-cache-dtype auto)"
    lines.append(f"KV cache: {kv} ({why})")
    return "\n".join(lines)


def plan_records(plan: Plan) -> list[tuple[str, str]]:
    """What start_vllm.sh reads: stops first, in the order a start meets them."""
    records = [("STOP", f"{stop.code} {stop.reason}") for stop in plan.stops]
    records += [("VLLM_VERSION", VLLM_VERSION), ("PROFILE", plan.profile.name),
                ("PROFILE_ID", plan.profile.hf_id), ("PROFILE_DESC", plan.profile.description)]
    if plan.dp:  # a usage error leaves no plan
        records += [
            ("TP", str(plan.tp)), ("DP", str(plan.dp)), ("KV_CACHE_DTYPE", plan.kv_cache_dtype),
            ("EXAMPLE_GPU_NAME", EXAMPLE_GPU.name if plan.example_reason else ""),
            ("PLAN_LINES", plan_lines(plan)), ("MEMORY_LINES", explain_memory(plan, plan.tp)),
            ("GPU_SOFTWARE_LINES", gpu_software_lines(plan)),
        ]
    records += [("WARNING", warning) for warning in plan.warnings]
    records += [("SOFTWARE_PROBLEM", problem) for problem in plan.software_problems]
    return records


# ---- command line -------------------------------------------------------------------


def write_records(records: list[tuple[str, str]], out=None) -> None:
    out = out or sys.stdout
    for key, value in [*records, ("END", "")]:
        out.write(f"{key}={value}\0")
    out.flush()


def read_text(path: str | None) -> str:
    if not path:
        return ""
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def usage_problems(util: str, tp: str, dp: str) -> list[str]:
    """What is wrong with GPU_MEMORY_UTILIZATION, --tp and --dp as given ("": not given)."""
    problems = []
    if not re.fullmatch(r"(0?\.[0-9]+|1(\.0*)?)", util):
        problems.append(f"GPU_MEMORY_UTILIZATION must be a fraction such as 0.92, got '{util}'")
    if tp and tp not in [str(choice) for choice in TP_CHOICES]:
        problems.append(f"--tp must be one of {' '.join(map(str, TP_CHOICES))}, got '{tp}'")
    if dp and not re.fullmatch(r"[1-9][0-9]*", dp):
        problems.append(f"--dp must be a positive number, got '{dp}'")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_plan.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    plan_args = commands.add_parser("plan", help="the GPU plan, as NUL-ended KEY=value records")
    plan_args.add_argument("--profile", default="", help=f"default: {DEFAULT_PROFILE}")
    plan_args.add_argument("--gpus-csv", help="nvidia-smi --query-gpu=name,memory.total ... ('-': stdin)")
    plan_args.add_argument("--caps-csv", help="nvidia-smi --query-gpu=driver_version,compute_cap ...")
    plan_args.add_argument("--no-gpu", default="", help="why nvidia-smi gave no GPUs")
    plan_args.add_argument("--visible", default="", help="CUDA_VISIBLE_DEVICES")
    plan_args.add_argument("--util", default="0.92", help="GPU_MEMORY_UTILIZATION")
    plan_args.add_argument("--tp", default="", help="GPUs per replica ('': the fewest that hold it)")
    plan_args.add_argument("--dp", default="", help="replicas ('': as many as the GPUs allow)")
    plan_args.add_argument("--tp-source", default="", help="where --tp came from, for the plan's note")
    plan_args.add_argument("--dp-source", default="")
    check = commands.add_parser("python-check", help="the Python that is to run vLLM")
    check.add_argument("--exe", required=True)
    check.add_argument("--version", default="", help="its version, e.g. 3.12.3 ('': unknown)")
    check.add_argument("--vllm-found", action="store_true", help="warn when the version is unknown")
    commands.add_parser("profiles", help="the profile table")
    args = parser.parse_args(argv)

    if args.command == "profiles":
        print(profile_table())
        return 0
    if args.command == "python-check":
        return python_check(args.exe, args.version, args.vllm_found)
    problems = usage_problems(args.util, args.tp, args.dp)
    try:
        profile = profile_named(args.profile or DEFAULT_PROFILE)
    except PlanError as error:
        problems.append(str(error))
    if problems:
        write_records([("STOP", f"{USAGE} {problems[0]}")])
        return USAGE
    caps = read_text(args.caps_csv)
    plan = make_plan(
        profile, gpus_from_csv(read_text(args.gpus_csv), caps, args.visible),
        no_gpu_reason=args.no_gpu, driver=driver_version(caps, args.visible), util=args.util,
        tp=int(args.tp) if args.tp else None, dp=int(args.dp) if args.dp else None,
        tp_source=args.tp_source, dp_source=args.dp_source,
    )
    write_records(plan_records(plan))
    return plan.exit_code()


def python_check(exe: str, version: str, vllm_found: bool) -> int:
    records = [("PYTHON_LINE", python_line(exe, version))]
    if not re.match(r"3\.[0-9]+\.", version) and vllm_found:
        records.append(("WARNING", f"warning: cannot tell the version of {exe}"))
    problem = python_problem(exe, version)
    if problem:
        records.append(("SOFTWARE_PROBLEM", problem))
    write_records(records)
    return SOFTWARE if problem else 0


if __name__ == "__main__":
    sys.exit(main())
