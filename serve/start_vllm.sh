#!/usr/bin/env bash
# RadMatch judge: vLLM's OpenAI-compatible server on this workstation, with
# Gemma 4 quantised online to FP8, offline, without telemetry.
#
# Usage:
#   serve/start_vllm.sh [options]                start the judge (foreground)
#   serve/start_vllm.sh --dry-run [options]      print the plan, the command and its
#                                                environment; starts and writes nothing
#                                                (without a GPU: the plan for an example
#                                                GPU, 1 x H100 80GB, then the GPU error)
#   serve/start_vllm.sh --check-only [--url URL] [--api-key-file F] [--model NAME]
#                                                check an already running judge
#
# Options (environment variable in brackets):
#   --profile NAME       model profile from the table printed below [RADMATCH_PROFILE]
#   --model-dir DIR      local weights folder; default: the profile's model in
#                        the local Hugging Face cache [RADMATCH_MODEL_DIR]
#   --host ADDR          bind address (default 127.0.0.1) [RADMATCH_HOST]
#   --port N             port (default 8000) [RADMATCH_PORT]
#   --served-name NAME   model name clients ask for (default radmatch-judge) [RADMATCH_MODEL]
#   --api-key-file F     file holding the API key; created (mode 0600) when the
#                        server binds beyond loopback and no key is given
#                        [RADMATCH_API_KEY_FILE; the key itself: RADMATCH_API_KEY]
#   --tp N               GPUs per replica of the model (tensor parallelism: 1, 2, 4
#                        or 8); default: the fewest whose memory holds it [RADMATCH_TP]
#   --dp N               replicas (data parallelism), one API server in front of them;
#                        default: as many as the GPUs allow, GPUs / tp [RADMATCH_DP]
#   --max-model-len N    context per request (default 16384) [RADMATCH_MAX_MODEL_LEN]
#   --thinking on|off    Gemma 4's thinking when a request does not say (default on;
#                        a client's --no-thinking still turns it off per request)
#                        [RADMATCH_THINKING: 1/0/true/false/yes/no/on/off]
#   --grammar-backend B  constrained decoding: xgrammar (default) or outlines (its
#                        compiles take many times longer) [RADMATCH_GRAMMAR_BACKEND]
#   --compile-limit S    seconds a grammar compile may take before vLLM answers HTTP 400
#                        (default 600 with xgrammar, none with outlines; 0: no limit)
#                        [RADMATCH_COMPILE_LIMIT_S]
#   --log-file F         server log [RADMATCH_LOG_FILE]
#                        (default ~/.local/state/radmatch/radmatch-judge.log)
#   --url URL            with --check-only: the server [RADMATCH_BASE_URL]
#                        (default http://127.0.0.1:8000)
#   -h, --help
#
# Other environment: VLLM_PYTHON (the python of the venv that has vllm; the script
# runs `vllm serve` with the `vllm` next to it; default serve/.venv/bin/vllm, else
# `vllm` on PATH), GPU_MEMORY_UTILIZATION (default 0.92), HF_HOME / HF_HUB_CACHE.
#
# Before starting, it checks what vLLM 0.33.0 needs: Python 3.11-3.14, an NVIDIA
# driver R580 or newer (CUDA 13), GPUs of compute capability 8.0 or newer; it picks
# the KV cache's type from the compute capability (FP8 from 8.9, else BF16).
#
# First start, and how long each part takes: the weights (google/gemma-4-31B-it, BF16,
# about 70 GB of disk) are downloaded and copied in by hand beforehand (serve/README.md,
# Install); how long that takes depends on the links and is not measured here. Loading
# them onto the GPUs (FP8 quantisation at load) is not measured either: no GPU has run
# this script yet. Both are bounded: the script waits for vLLM's /health at most
# RADMATCH_HEALTH_TIMEOUT_S seconds (default 1800, 30 minutes), then exits 5. The
# readiness check then compiles RadMatch's three answer schemas (BENCHMARKS.md: with
# xgrammar 14-18 s each on 2 idle CPU cores, 54-200 s on busy ones; with outlines 7.6
# minutes for the extraction schema), each within --compile-limit + 300 s (30 minutes
# without a limit), and runs one real extraction within the same bound.
#
# Exit codes: 0 a dry run that found nothing in the way (a start runs until SIGTERM or
# Ctrl-C, then exits 143); 1 vLLM stopped on its own after it was ready (a restart may
# help); 2 usage; 3 the GPUs cannot hold the profile, or there is no GPU; 4 the
# weights are missing or incomplete, or no vllm executable; 5 the server did not come
# up (it exited, or no /health within the timeout); 6 it came up but failed the
# readiness check (see serve/check_judge.py for its own codes); 7 this machine's
# software cannot run vLLM 0.33.0 (Python, NVIDIA driver or GPU generation). A dry
# run prints the whole plan, then names every reason a start would stop for and exits
# with the code that start would give (the first of 3, 4 and 7 that applies).
#
# Under systemd (Type=notify, serve/radmatch-judge.service) the script reports its
# progress and, once the readiness check has passed, READY=1 (systemd-notify): the
# unit is "active" only when the judge is ready.
set -euo pipefail

# ---- The GPU plan -----------------------------------------------------------
# serve/gpu_plan.py makes it from nvidia-smi's answers, with the system python3: the
# model profiles (`--help` prints them), tensor parallelism (the fewest GPUs whose
# memory holds one replica), data parallelism (as many replicas as the GPUs allow),
# the memory arithmetic, the KV cache's type, and the driver, GPU generation and
# Python checks against what vLLM needs. This script runs nvidia-smi, asks it, and
# starts vLLM.

# RadMatch sends four calls per pair, 17-33k input tokens in all (paper, Tab. 6):
# one call is at most ~12k input tokens (instructions + exemplars + the pair),
# plus a few thousand output tokens when Gemma 4 thinks. 16384 = 12k + 4k; the
# client measures each prompt and drops exemplars if one would not fit.
readonly DEFAULT_MAX_MODEL_LEN=16384
readonly DEFAULT_SERVED_NAME=radmatch-judge
HEALTH_TIMEOUT_S=${RADMATCH_HEALTH_TIMEOUT_S:-1800}  # loading 31B + compiling

# Grammar compiles of RadMatch's answer schemas for a 262k vocabulary on 2 busy cores
# (BENCHMARKS.md): 14-18 s each with xgrammar on an idle machine (up to 200 s on a busy
# one), which vLLM does not time-limit for JSON schemas; with outlines the extraction
# schema took 7.6 minutes. Past the limit
# vLLM answers HTTP 400 and every pair would fail: outlines gets none unless one is set.
readonly DEFAULT_COMPILE_LIMIT_S=600 OUTLINES_COMPILE_NEEDS_S=900

SERVE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SERVE_DIR

# ---- Settings (from options, then environment, then defaults) ---------------
MODE=start
PROFILE=${RADMATCH_PROFILE:-}  # default: gpu_plan.py's
MODEL_DIR=${RADMATCH_MODEL_DIR:-}
HOST=${RADMATCH_HOST:-127.0.0.1}
PORT=${RADMATCH_PORT:-8000}
SERVED_NAME=${RADMATCH_MODEL:-$DEFAULT_SERVED_NAME}
API_KEY_FILE=${RADMATCH_API_KEY_FILE:-}
TP=${RADMATCH_TP:-}
DP=${RADMATCH_DP:-}
MAX_MODEL_LEN=${RADMATCH_MAX_MODEL_LEN:-$DEFAULT_MAX_MODEL_LEN}
THINKING=${RADMATCH_THINKING:-on}
GRAMMAR_BACKEND=${RADMATCH_GRAMMAR_BACKEND:-xgrammar}
COMPILE_LIMIT_S=${RADMATCH_COMPILE_LIMIT_S:-}  # default: after the options, by backend
LOG_FILE=${RADMATCH_LOG_FILE:-}
CHECK_URL=""
GPU_UTIL=${GPU_MEMORY_UTILIZATION:-0.92}

# Filled in by the functions below.
VLLM_VERSION="" PROFILE_ID="" PROFILE_DESC="" TP_SOURCE="" DP_SOURCE=""
GPU_MEMORY_CSV="" GPU_CAPS_CSV="" GPU_PROBLEM="" EXAMPLE_GPU_NAME=""
PLAN_LINES="" MEMORY_LINES="" GPU_SOFTWARE_LINES="" PYTHON_LINE=""
WEIGHTS_MISSING=0 WEIGHTS_PROBLEM="" FROM_HUB=0 VLLM_EXE="" VLLM_FOUND=0
PYTHON_EXE="" KV_CACHE_DTYPE=""
SOFTWARE_PROBLEMS=()
STOP_CODES=() STOP_REASONS=()  # a dry run: every reason a start would stop for
API_KEY="" API_KEY_SOURCE="" API_KEY_PENDING=""
SERVER_PID=""
CMD=()
SERVER_ENV=()

# ---- Helpers ----------------------------------------------------------------
# The header comment above, up to `set -euo pipefail`, without its "# ", then
# the profile table it refers to.
usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
    echo
    python3 "$SERVE_DIR/gpu_plan.py" profiles || echo "(the profile table needs python3: python3 serve/gpu_plan.py profiles)"
}

log() {
    local line
    line="[radmatch-judge] $*"
    printf '%s\n' "$line" >&2
    # A dry run writes nothing, not even to an existing log.
    if [[ $MODE != dry-run && -n $LOG_FILE && -d $(dirname "$LOG_FILE") ]]; then
        printf '%s %s\n' "$(date '+%F %T')" "$line" >>"$LOG_FILE"
    fi
}

die() {
    local code=$1
    shift
    log "error: $*"
    exit "$code"
}

# A reason a start would stop for (exit code $1, message $2): a start dies with it
# where it finds it; a dry run notes it, goes on with its plan and names them all.
note_stop() {
    STOP_CODES+=("$1")
    STOP_REASONS+=("$2")
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

is_loopback() {
    case $1 in
        127.* | localhost | ::1 | "[::1]") return 0 ;;
        *) return 1 ;;
    esac
}

# Never print a key: its length and a short fingerprint are enough to tell keys apart.
mask_key() {
    local fp
    fp=$(printf '%s' "$1" | sha256sum | cut -c1-8)
    printf '***(%d chars, sha256 %s)' "${#1}" "$fp"
}

# ---- GPUs and the plan --------------------------------------------------------
# nvidia-smi's name and memory (MiB) of each GPU, and its driver version and compute
# capability (drivers before 2021 know no compute_cap field). Sets GPU_MEMORY_CSV,
# GPU_CAPS_CSV, or GPU_PROBLEM when there is no nvidia-smi or it fails.
query_gpus() {
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        GPU_PROBLEM="nvidia-smi not found (no NVIDIA driver on this machine?)"
        return 0
    fi
    if ! GPU_MEMORY_CSV=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>&1); then
        GPU_PROBLEM="nvidia-smi failed: $(head -n 1 <<<"$GPU_MEMORY_CSV")"
        GPU_MEMORY_CSV=""
        return 0
    fi
    GPU_CAPS_CSV=$(nvidia-smi --query-gpu=driver_version,compute_cap --format=csv,noheader 2>/dev/null) \
        || GPU_CAPS_CSV=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null) \
        || GPU_CAPS_CSV=""
}

# Runs serve/gpu_plan.py with the given arguments and takes in its KEY=value records
# (each ended by NUL; values may span lines): a STOP stops a start (a dry run notes it,
# but a usage error, code 2, stops that too); the other keys set the variables named.
read_plan_records() {
    local records=() record key value
    command -v python3 >/dev/null 2>&1 \
        || die 7 "python3 not found: the GPU plan is made by $SERVE_DIR/gpu_plan.py with the system python3 (3.10 or newer)"
    mapfile -d '' -t records < <(python3 "$SERVE_DIR/gpu_plan.py" "$@")
    if ((${#records[@]} == 0)) || [[ ${records[-1]} != END= ]]; then
        die 7 "$SERVE_DIR/gpu_plan.py gave no plan (python3 $(python3 -V 2>&1)); its error is above"
    fi
    for record in "${records[@]}"; do
        key=${record%%=*} value=${record#*=}
        case $key in
            STOP)
                [[ $MODE == dry-run && ${value%% *} != 2 ]] || die "${value%% *}" "${value#* }"
                note_stop "${value%% *}" "${value#* }"
                ;;
            WARNING) log "$value" ;;
            SOFTWARE_PROBLEM) SOFTWARE_PROBLEMS+=("$value") ;;
            VLLM_VERSION) VLLM_VERSION=$value ;;
            PROFILE) PROFILE=$value ;;
            PROFILE_ID) PROFILE_ID=$value ;;
            PROFILE_DESC) PROFILE_DESC=$value ;;
            TP) TP=$value ;;
            DP) DP=$value ;;
            KV_CACHE_DTYPE) KV_CACHE_DTYPE=$value ;;
            EXAMPLE_GPU_NAME) EXAMPLE_GPU_NAME=$value ;;
            PLAN_LINES) PLAN_LINES=$value ;;
            MEMORY_LINES) MEMORY_LINES=$value ;;
            GPU_SOFTWARE_LINES) GPU_SOFTWARE_LINES=$value ;;
            PYTHON_LINE) PYTHON_LINE=$value ;;
            END) ;;
            *) die 7 "$SERVE_DIR/gpu_plan.py gave an unknown record: ${key:0:40}" ;;
        esac
    done
}

# The plan for the GPUs nvidia-smi lists (CUDA_VISIBLE_DEVICES restricts them); without
# a GPU a start stops here (exit 3) and a dry run plans for example GPUs.
make_plan() {
    query_gpus
    # --option=value: a value may begin with "--" (--tp-source=--tp)
    read_plan_records plan "--profile=$PROFILE" "--util=$GPU_UTIL" "--tp=$TP" "--dp=$DP" \
        "--tp-source=$TP_SOURCE" "--dp-source=$DP_SOURCE" "--visible=${CUDA_VISIBLE_DEVICES:-}" \
        "--no-gpu=$GPU_PROBLEM" --gpus-csv=<(printf '%s\n' "$GPU_MEMORY_CSV") \
        --caps-csv=<(printf '%s\n' "$GPU_CAPS_CSV")
}

# The python that runs vLLM (VLLM_PYTHON, else the one next to the vllm found, else
# python3 on PATH, which would make serve/.venv), checked against the wheel's range.
check_python() {
    local version args=()
    if [[ -n ${VLLM_PYTHON:-} ]]; then
        PYTHON_EXE=$VLLM_PYTHON
    elif ((VLLM_FOUND)) && [[ -x $(dirname "$VLLM_EXE")/python ]]; then
        PYTHON_EXE=$(dirname "$VLLM_EXE")/python
    else
        PYTHON_EXE=$(command -v python3 2>/dev/null || true)
    fi
    [[ -n $PYTHON_EXE ]] || PYTHON_EXE=python3
    version=$("$PYTHON_EXE" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true)
    ((VLLM_FOUND == 0)) || args=(--vllm-found)
    read_plan_records python-check "--exe=$PYTHON_EXE" "--version=$version" "${args[@]}"
}

# One line each: the software checks and the decisions taken from them.
software_lines() {
    printf '%s\n' "$PYTHON_LINE" "$GPU_SOFTWARE_LINES"
    compile_line
}

compile_line() {
    local limit="limit $COMPILE_LIMIT_S s (VLLM_REGEX_COMPILATION_TIMEOUT_S; past it vLLM answers HTTP 400)"
    ((COMPILE_LIMIT_S > 0)) || limit="no time limit (VLLM_REGEX_COMPILATION_TIMEOUT_S=0)"
    if [[ $GRAMMAR_BACKEND == xgrammar ]]; then
        echo "grammar: xgrammar, compact JSON (disable_any_whitespace); JSON schemas compile without vLLM's limit," \
            "regex requests with $limit; the readiness check compiles RadMatch's three schemas before 'ready'"
    else
        echo "grammar: outlines, each compile with $limit; compiled schemas kept on disk in $(outlines_cache_dir)" \
            "(VLLM_V1_USE_OUTLINES_CACHE) for the next start; the readiness check compiles RadMatch's three schemas before 'ready'"
        if ((COMPILE_LIMIT_S > 0 && COMPILE_LIMIT_S <= OUTLINES_COMPILE_NEEDS_S)); then
            echo "warning: a compile limit of $COMPILE_LIMIT_S s is below what outlines needed for RadMatch's extraction schema" \
                "(458 s for a 262k vocabulary on 2 cores; give it $OUTLINES_COMPILE_NEEDS_S s or more): expect HTTP 400; use --compile-limit 0 or --grammar-backend xgrammar"
        else
            echo "note: outlines compiles RadMatch's extraction schema for many minutes on the first start (then from its disk cache)"
        fi
    fi
}

outlines_cache_dir() { echo "${XDG_CACHE_HOME:-$HOME/.cache}/radmatch/outlines"; }

plural() { if (($1 == 1)) then echo "$1 $2"; else echo "$1 $2s"; fi; }

# The plan in plain lines, e.g.
#   4 GPUs x 32607 MiB (NVIDIA GeForce RTX 5090, 29998 usable); one replica needs 2:
#     (model 30041 + KV cache 4096) / 2 + runtime 1536 = 18605 MiB per GPU   [one line]
#   TP 2 x DP 2 = 4 GPUs
plan_lines() {
    printf '%s\n' "$PLAN_LINES"
    echo "thinking: $THINKING for requests that do not say (clients choose per request with --thinking / --no-thinking)"
}


# ---- Weights ----------------------------------------------------------------
hub_dir() { echo "${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"; }
hub_repo_dir() { echo "$(hub_dir)/models--${PROFILE_ID//\//--}"; }

# --model-dir, else the profile's snapshot in the local Hugging Face cache, and whether
# its weights are complete. Without complete weights a start stops (exit 4); a dry run
# notes it and goes on.
resolve_model_dir() {
    local repo rev snap
    if [[ -z $MODEL_DIR ]]; then
        repo=$(hub_repo_dir)
        rev=""
        [[ -f $repo/refs/main ]] && rev=$(<"$repo/refs/main")
        if [[ -n $rev && -f $repo/snapshots/$rev/config.json ]]; then
            snap=$repo/snapshots/$rev
        else
            snap=$(find "$repo/snapshots" -mindepth 2 -maxdepth 2 -name config.json 2>/dev/null \
                | sort | head -n 1 || true)
            snap=${snap%/config.json}
        fi
        if [[ -z $snap ]]; then
            WEIGHTS_MISSING=1
        else
            MODEL_DIR=$snap FROM_HUB=1
        fi
    fi
    if ((WEIGHTS_MISSING == 0)); then
        WEIGHTS_PROBLEM=$(weights_problem "$MODEL_DIR")
        [[ -z $WEIGHTS_PROBLEM ]] || WEIGHTS_MISSING=1
    fi
    if ((WEIGHTS_MISSING)); then
        [[ $MODE == dry-run ]] || die 4 "$(weights_help)"
        note_stop 4 "the $PROFILE_ID weights are missing or incomplete${WEIGHTS_PROBLEM:+ ($WEIGHTS_PROBLEM)}; the plan on stdout says how to copy them in"
    fi
}

# Why the checkpoint in $1 is not whole, or nothing: config.json, and every shard that
# model.safetensors.index.json names (without an index: every *.safetensors), each
# present and as long as its own header says. A copy cut short stops here, not in vLLM.
weights_problem() {
    local dir=$1 index=$1/model.safetensors.index.json shard problem shards=() bad=()
    if [[ ! -f $dir/config.json ]]; then
        echo "$dir has no config.json"
        return 0
    fi
    if [[ -f $index ]]; then
        mapfile -t shards < <(grep -o '"[^"/]*\.safetensors"' "$index" | tr -d '"' | sort -u)
        if ((${#shards[@]} == 0)); then
            echo "$index names no .safetensors file"
            return 0
        fi
    else
        mapfile -t shards < <(find "$dir" -mindepth 1 -maxdepth 1 -name '*.safetensors' -printf '%f\n' | sort)
        if ((${#shards[@]} == 0)); then
            echo "$dir has config.json but no model.safetensors.index.json and no *.safetensors weights"
            return 0
        fi
    fi
    for shard in "${shards[@]}"; do
        problem=$(shard_problem "$dir/$shard")
        [[ -z $problem ]] || bad+=("$shard $problem")
    done
    ((${#bad[@]} == 0)) && return 0
    printf '%s of %s weight files in %s are not whole: %s' "${#bad[@]}" "${#shards[@]}" "$dir" "${bad[0]}"
    ((${#bad[@]} == 1)) || printf '; %s' "${bad[@]:1:2}"
    ((${#bad[@]} <= 3)) || printf '; ...'
    echo
}

# A safetensors file is 8 bytes (little-endian header length N), N bytes of JSON
# header, then the tensors, which end at the largest data_offsets end in the header.
shard_problem() {
    local file=$1 size header_len end expected
    if [[ ! -f $file ]]; then
        echo "is missing"
        return 0
    fi
    size=$(stat -L -c %s "$file")
    if ((size <= 8)); then
        echo "is empty ($size bytes)"
        return 0
    fi
    header_len=$(od -An -tu8 -N8 --endian=little "$file" | tr -d '[:space:]')
    if ! [[ $header_len =~ ^[0-9]{1,12}$ ]] || ((8 + header_len > size)); then
        echo "is cut short or not safetensors ($size bytes)"
        return 0
    fi
    end=$(head -c $((8 + header_len)) "$file" | tail -c "$header_len" \
        | grep -oE '"data_offsets"[[:space:]]*:[[:space:]]*\[[[:space:]]*[0-9]+[[:space:]]*,[[:space:]]*[0-9]+' \
        | grep -oE '[0-9]+$' | sort -n | tail -n 1 || true)
    expected=$((8 + header_len + ${end:-0}))
    ((size >= expected)) || echo "is cut short ($size of $expected bytes)"
}

# What is missing, where the script expects it, and how to copy it in.
weights_help() {
    local hub repo name=${PROFILE_ID#*/} host=${HOSTNAME:-this-workstation}
    hub=$(hub_dir)
    repo=$(hub_repo_dir)
    if ((FROM_HUB)); then
        cat <<EOF
weights incomplete: $WEIGHTS_PROBLEM
  (a copy that did not finish?). Copy the model's folder again; rsync sends only what
  is missing or different:
    rsync -a hub/models--${PROFILE_ID//\//--} $host:$hub/
  from the cache folder you downloaded into (hf download $PROFILE_ID --cache-dir hub).
EOF
    elif [[ -n $MODEL_DIR ]]; then
        cat <<EOF
weights missing: ${WEIGHTS_PROBLEM:-$MODEL_DIR has no config.json}.
  Put the whole $PROFILE_ID checkpoint (BF16, as downloaded) there, flat:
    $MODEL_DIR/config.json, tokenizer*.json, model.safetensors.index.json, model-*.safetensors, ...
  On a machine with internet (after accepting the Gemma licence on Hugging Face):
    hf download $PROFILE_ID --local-dir $name
  then copy it in (again, if a copy did not finish: rsync sends only what is missing):
    rsync -a $name/ $host:$MODEL_DIR/
EOF
    else
        cat <<EOF
weights missing: no $PROFILE_ID checkpoint in the local Hugging Face cache
  ($repo has no snapshots/<revision>/config.json).
  On a machine with internet (after accepting the Gemma licence on Hugging Face),
  download it into a cache folder and copy that model's folder in:
    hf download $PROFILE_ID --cache-dir hub
    rsync -a hub/models--${PROFILE_ID//\//--} $host:$hub/
  which gives the layout the script looks for, in $hub:
    models--${PROFILE_ID//\//--}/refs/main                 (the revision)
    models--${PROFILE_ID//\//--}/snapshots/<revision>/     (config.json, tokenizer, *.safetensors)
  Or keep a plain folder anywhere and name it with --model-dir (RADMATCH_MODEL_DIR):
    hf download $PROFILE_ID --local-dir $name
    rsync -a $name/ $host:/srv/models/$name/     then --model-dir /srv/models/$name
EOF
    fi
}

# ---- API key ----------------------------------------------------------------
# Loopback: a key only if one is given. Beyond loopback: RADMATCH_API_KEY, else
# the key file, created with mode 0600 when absent (on a start; a dry run only
# says it would be).
resolve_api_key() {
    local default_file="${XDG_CONFIG_HOME:-$HOME/.config}/radmatch/judge-api-key"
    is_loopback "$HOST" || log "binding to $HOST: /v1 needs the API key; /health and /metrics" \
        "stay open (no report text): firewall port $PORT to the RadMatch clients"
    if [[ -n ${RADMATCH_API_KEY:-} ]]; then
        API_KEY=$RADMATCH_API_KEY API_KEY_SOURCE="RADMATCH_API_KEY"
        return 0
    fi
    if [[ -n $API_KEY_FILE && -f $API_KEY_FILE ]]; then
        read_key_file "$API_KEY_FILE"
        return 0
    fi
    if is_loopback "$HOST"; then
        [[ -z $API_KEY_FILE ]] || die 2 "API key file $API_KEY_FILE does not exist"
        API_KEY_SOURCE="none (bound to loopback $HOST)"
        return 0
    fi
    API_KEY_FILE=${API_KEY_FILE:-$default_file}
    if [[ -f $API_KEY_FILE ]]; then
        read_key_file "$API_KEY_FILE"
    elif [[ $MODE == dry-run ]]; then
        API_KEY_PENDING=$API_KEY_FILE
        API_KEY_SOURCE="file $API_KEY_FILE (absent: generated with mode 0600 on start)"
    else
        generate_key_file "$API_KEY_FILE"
    fi
}

read_key_file() {
    local mode
    mode=$(stat -c '%a' "$1")
    [[ $mode =~ ^[0-7]00$ ]] || die 2 "API key file $1 has mode $mode; make it private: chmod 600 $1"
    API_KEY=$(tr -d '[:space:]' <"$1")
    [[ -n $API_KEY ]] || die 2 "API key file $1 is empty"
    API_KEY_SOURCE="file $1"
}

generate_key_file() {
    local dir
    dir=$(dirname "$1")
    if [[ ! -d $dir ]]; then
        mkdir -p "$dir"
        chmod 700 "$dir"
    fi
    (
        umask 077
        printf 'rmj-%s\n' "$(head -c 32 /dev/urandom | base64 | tr -d '/+=\n')" >"$1"
    )
    chmod 600 "$1"
    API_KEY=$(tr -d '[:space:]' <"$1")
    API_KEY_SOURCE="file $1 (generated, mode 0600)"
    log "generated an API key in $1 (mode 0600); give it to RadMatch clients as RADMATCH_API_KEY"
}

# ---- Command ----------------------------------------------------------------
# `vllm serve`: the vllm executable next to VLLM_PYTHON, else in serve/.venv,
# else on PATH. Sets VLLM_EXE and VLLM_FOUND; a start stops without it.
resolve_vllm() {
    if [[ -n ${VLLM_PYTHON:-} ]]; then
        VLLM_EXE=$(dirname "$VLLM_PYTHON")/vllm
    elif [[ -x $SERVE_DIR/.venv/bin/vllm ]]; then
        VLLM_EXE=$SERVE_DIR/.venv/bin/vllm
    else
        VLLM_EXE=$(command -v vllm 2>/dev/null || true)
    fi
    if [[ -n $VLLM_EXE && -f $VLLM_EXE && -x $VLLM_EXE ]]; then
        VLLM_FOUND=1
    else
        VLLM_EXE=${VLLM_EXE:-vllm}
        [[ $MODE == dry-run ]] || die 4 "$(vllm_help)"
        note_stop 4 "$(vllm_help)"
    fi
}

vllm_help() {
    if [[ -n ${VLLM_PYTHON:-} ]]; then
        echo "no vllm executable next to VLLM_PYTHON=$VLLM_PYTHON ($VLLM_EXE)"
    else
        echo "vllm not found (neither $SERVE_DIR/.venv/bin/vllm nor vllm on PATH)"
    fi
    echo "  install it (serve/README.md, Install): $SERVE_DIR/install.sh" \
        "(or $SERVE_DIR/install.sh --python python3.11 where python3 is older than 3.11, as on Ubuntu 22.04)"
}

build_command() {
    # Weights missing from the cache (dry run): a placeholder, not a made-up path;
    # a --model-dir without weights stays, it is where they are to go.
    local model=${MODEL_DIR:-"<$PROFILE_ID weights: missing, see above>"}
    SERVER_ENV=(
        HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
        HF_HUB_DISABLE_TELEMETRY=1
        VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1 DO_NOT_TRACK=1
        VLLM_LOGGING_LEVEL=INFO  # DEBUG would log prompts, i.e. report text
        # vLLM's default compile limit is 5 s, then HTTP 400 for the request; outlines
        # needs minutes for RadMatch's extraction schema with Gemma's 262k vocabulary.
        "VLLM_REGEX_COMPILATION_TIMEOUT_S=$COMPILE_LIMIT_S"
    )
    # outlines: keep compiled schemas on disk (the key of the cache is schema and
    # vocabulary), so that a restart does not compile for minutes again. The folder is
    # the judge's own (mode 0700): vLLM warns not to share it with untrusted clients.
    [[ $GRAMMAR_BACKEND != outlines ]] \
        || SERVER_ENV+=(VLLM_V1_USE_OUTLINES_CACHE=1 "OUTLINES_CACHE_DIR=$(outlines_cache_dir)")
    # The key travels in the environment, not on the command line (ps shows that).
    [[ -z $API_KEY ]] || SERVER_ENV+=("VLLM_API_KEY=$API_KEY")
    CMD=(
        "$VLLM_EXE" serve "$model"
        --served-model-name "$SERVED_NAME"
        --host "$HOST" --port "$PORT"
        --tensor-parallel-size "$TP"
    )
    # DP replicas behind this one API server, each on TP GPUs of its own.
    ((DP == 1)) || CMD+=(--data-parallel-size "$DP")
    CMD+=(
        --quantization fp8_per_tensor
        --kv-cache-dtype "$KV_CACHE_DTYPE"
        --gpu-memory-utilization "$GPU_UTIL"
        --max-model-len "$MAX_MODEL_LEN"
        --enable-prefix-caching
        # text only: the vision (and audio) towers are not loaded (about 0.7 GiB less)
        --language-model-only
        --structured-outputs-config "$(structured_outputs_config)"
        --reasoning-parser gemma4
        # Gemma 4's chat template thinks only when asked (enable_thinking); this is
        # the server's answer for requests that do not ask, which is RadMatch's default.
        --default-chat-template-kwargs "{\"enable_thinking\":$([[ $THINKING == on ]] && echo true || echo false)}"
        --generation-config vllm
        --no-enable-log-requests
        # GET /tokenizer_info lists the tokenizer's special tokens: RadMatch's pre-flight
        # reads them, so that a report holding one reaches the model as plain text
        --enable-tokenizer-info-endpoint
    )
}

# xgrammar also drops optional whitespace between JSON tokens (fewer decode steps);
# vLLM allows that for xgrammar and guidance only.
structured_outputs_config() {
    if [[ $GRAMMAR_BACKEND == xgrammar ]]; then
        echo '{"backend":"xgrammar","disable_any_whitespace":true}'
    else
        echo '{"backend":"outlines"}'
    fi
}

print_dry_run() {
    local var arg
    echo "# RadMatch judge, dry run: nothing was started or written."
    echo "# profile $PROFILE: $PROFILE_DESC"
    plan_lines | sed 's/^/# /'
    printf '%s\n' "$MEMORY_LINES" | sed 's/^/#/'
    software_lines | sed 's/^/# /'
    if ((WEIGHTS_MISSING)); then
        weights_help | sed 's/^/# /'
    else
        echo "# weights: $MODEL_DIR"
    fi
    if ((VLLM_FOUND)); then
        echo "# vllm: $VLLM_EXE"
    else
        vllm_help | sed 's/^/# /'
    fi
    echo "# API key: $API_KEY_SOURCE"
    echo "# log file: $LOG_FILE"
    for var in "${SERVER_ENV[@]}"; do
        if [[ $var == VLLM_API_KEY=* ]]; then
            echo "export VLLM_API_KEY=$(mask_key "$API_KEY")"
        else
            echo "export $var"
        fi
    done
    [[ -z $API_KEY_PENDING ]] || echo "# VLLM_API_KEY: the key generated in $API_KEY_PENDING on start"
    printf '%q' "${CMD[0]}"
    for arg in "${CMD[@]:1}"; do
        if [[ -z $MODEL_DIR && $arg == "<$PROFILE_ID weights: missing, see above>" ]]; then
            printf ' %s' "$arg"  # a placeholder, not a path: shown as it reads
        else
            printf ' %q' "$arg"
        fi
    done
    echo
    refuse_or_pass
}

# The end of a dry run: every reason a start would stop for, on stdout ("# refused:")
# and stderr, in the order a start meets them; exit with the code of the first.
refuse_or_pass() {
    local problem i note=""
    for problem in "${SOFTWARE_PROBLEMS[@]}"; do
        note_stop 7 "$problem"
    done
    ((${#STOP_CODES[@]})) || return 0
    for i in "${!STOP_CODES[@]}"; do
        printf 'refused: %s\n' "${STOP_REASONS[i]}" | sed 's/^/# /'
    done
    for i in "${!STOP_CODES[@]}"; do
        if ((STOP_CODES[i] == 7)); then
            log "error: this machine cannot run vLLM $VLLM_VERSION: ${STOP_REASONS[i]}"
        else
            log "error: ${STOP_REASONS[i]}"
        fi
    done
    [[ -z $EXAMPLE_GPU_NAME ]] || note=" (The plan on stdout is for an example GPU, $EXAMPLE_GPU_NAME; on the workstation a dry run plans for its own.)"
    die "${STOP_CODES[0]}" "dry run: a start would stop with exit ${STOP_CODES[0]}:" \
        "$(plural "${#STOP_CODES[@]}" reason) above, each 'refused' on stdout.$note"
}

# A start stops here when the software cannot run vLLM.
refuse_software_problems() {
    local problem
    ((${#SOFTWARE_PROBLEMS[@]})) || return 0
    for problem in "${SOFTWARE_PROBLEMS[@]}"; do
        log "error: $problem"
    done
    exit 7
}

# ---- Running ----------------------------------------------------------------
check_url() {
    local host=$HOST
    [[ $host == 0.0.0.0 || $host == "::" ]] && host=127.0.0.1
    [[ $host == *:* && $host != \[* ]] && host="[$host]"
    echo "http://$host:$PORT"
}

# Readiness check: the constrained requests of serve/check_judge.py, run by the python
# of vLLM's venv (it can import RadMatch's answer models), else python3.
run_check() {
    local url=$1 python=python3
    shift
    if [[ -n ${VLLM_PYTHON:-} && -x ${VLLM_PYTHON:-} ]]; then
        python=$VLLM_PYTHON
    elif ((VLLM_FOUND)) && [[ -x $(dirname "$VLLM_EXE")/python ]]; then
        python=$(dirname "$VLLM_EXE")/python
    elif [[ -x $SERVE_DIR/.venv/bin/python ]]; then
        python=$SERVE_DIR/.venv/bin/python
    fi
    "$python" "$SERVE_DIR/check_judge.py" --url "$url" --model "$SERVED_NAME" "$@"
}

stop_server() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        log "stopping the server (pid $SERVER_PID)"
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}

start_server() {
    local url deadline line
    url=$(check_url)
    plan_lines | while IFS= read -r line; do log "$line"; done
    log "starting $PROFILE on $HOST:$PORT (TP $TP x DP $DP) with $VLLM_EXE serve; API key: $API_KEY_SOURCE"
    log "server output goes to $LOG_FILE"
    software_lines | while IFS= read -r line; do log "$line"; done
    if [[ $GRAMMAR_BACKEND == outlines ]]; then
        mkdir -p "$(outlines_cache_dir)"
        chmod 700 "$(outlines_cache_dir)"
    fi
    notify_systemd --status="loading $PROFILE; waiting for /health (at most $HEALTH_TIMEOUT_S s); vLLM's log: $LOG_FILE"
    (
        # export is a shell builtin: the key never appears in a command line (ps, /proc)
        for var in "${SERVER_ENV[@]}"; do
            export "${var?}"
        done
        unset NOTIFY_SOCKET  # readiness is this script's to report, not vLLM's
        exec "${CMD[@]}"
    ) >>"$LOG_FILE" 2>&1 &
    SERVER_PID=$!
    trap 'stop_server; exit 143' TERM INT
    trap stop_server EXIT

    deadline=$((SECONDS + HEALTH_TIMEOUT_S))
    until run_check "$url" --health-only >/dev/null 2>&1; do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            log "the server exited during start-up; last lines of $LOG_FILE:"
            tail -n 20 "$LOG_FILE" >&2
            SERVER_PID=""
            exit 5
        fi
        ((SECONDS < deadline)) || die 5 "no /health after ${HEALTH_TIMEOUT_S} s; see $LOG_FILE"
        sleep 2
    done
    log "/health answered; checking constrained decoding, compiling RadMatch's answer schemas, one real extraction"
    notify_systemd --status="/health answered; compiling RadMatch's answer schemas, then one real extraction"
    # The key reaches the check through its environment, never its arguments.
    if ! RADMATCH_API_KEY=$API_KEY run_check "$url" --answer-schemas on \
        --answer-timeout $((COMPILE_LIMIT_S > 0 ? COMPILE_LIMIT_S + 300 : 1800)) 2>&1 \
        | tee -a "$LOG_FILE" >&2; then
        die 6 "the server is up but failed the readiness check"
    fi
    notify_systemd --ready --status="ready: RADMATCH_BASE_URL=$url/v1 RADMATCH_MODEL=$SERVED_NAME"
    log "the judge is ready: RADMATCH_BASE_URL=$url/v1 RADMATCH_MODEL=$SERVED_NAME"
    local code=0
    wait "$SERVER_PID" || code=$?
    SERVER_PID=""
    # Not vLLM's own code: that could read as one of this script's (2-7), which stop the unit.
    die 1 "vLLM stopped on its own after it was ready (its exit code $code); see $LOG_FILE"
}

# Under systemd with Type=notify (NOTIFY_SOCKET set): progress for `systemctl status`,
# and READY=1 once the readiness check has passed.
notify_systemd() {
    [[ -n ${NOTIFY_SOCKET:-} ]] || return 0
    if ! command -v systemd-notify >/dev/null 2>&1; then
        log "warning: NOTIFY_SOCKET is set but systemd-notify is not installed: systemd will not hear $*"
        return 0
    fi
    systemd-notify "$@" || log "warning: systemd-notify $1 failed"
}

# ---- Main -------------------------------------------------------------------
parse_args() {
    [[ -z $TP ]] || TP_SOURCE=RADMATCH_TP
    [[ -z $DP ]] || DP_SOURCE=RADMATCH_DP
    while (($#)); do
        case $1 in
            --dry-run) MODE=dry-run ;;
            --check-only) MODE=check ;;
            --profile) PROFILE=${2:?--profile needs a value}; shift ;;
            --model-dir) MODEL_DIR=${2:?--model-dir needs a value}; shift ;;
            --host) HOST=${2:?--host needs a value}; shift ;;
            --port) PORT=${2:?--port needs a value}; shift ;;
            --served-name | --model) SERVED_NAME=${2:?$1 needs a value}; shift ;;
            --api-key-file) API_KEY_FILE=${2:?--api-key-file needs a value}; shift ;;
            --tp) TP=${2:?--tp needs a value} TP_SOURCE=--tp; shift ;;
            --dp) DP=${2:?--dp needs a value} DP_SOURCE=--dp; shift ;;
            --max-model-len) MAX_MODEL_LEN=${2:?--max-model-len needs a value}; shift ;;
            --thinking) THINKING=${2:?--thinking needs on or off}; shift ;;
            --grammar-backend) GRAMMAR_BACKEND=${2:?--grammar-backend needs xgrammar or outlines}; shift ;;
            --compile-limit) COMPILE_LIMIT_S=${2:?--compile-limit needs seconds}; shift ;;
            --log-file) LOG_FILE=${2:?--log-file needs a value}; shift ;;
            --url) CHECK_URL=${2:?--url needs a value}; shift ;;
            -h | --help) usage; exit 0 ;;
            *) usage >&2; die 2 "unknown argument: $1" ;;
        esac
        shift
    done
    is_uint "$PORT" || die 2 "--port must be a number, got '$PORT'"
    is_uint "$MAX_MODEL_LEN" || die 2 "--max-model-len must be a number, got '$MAX_MODEL_LEN'"
    [[ $HEALTH_TIMEOUT_S =~ ^[1-9][0-9]*$ ]] \
        || die 2 "RADMATCH_HEALTH_TIMEOUT_S must be a number of seconds, got '$HEALTH_TIMEOUT_S'"
    case ${THINKING,,} in
        1 | true | yes | on) THINKING=on ;;
        0 | false | no | off) THINKING=off ;;
        *) die 2 "--thinking (RADMATCH_THINKING) must be on or off, got '$THINKING'" ;;
    esac
    [[ $GRAMMAR_BACKEND == xgrammar || $GRAMMAR_BACKEND == outlines ]] \
        || die 2 "--grammar-backend (RADMATCH_GRAMMAR_BACKEND) must be xgrammar or outlines, got '$GRAMMAR_BACKEND'"
    if [[ -z $COMPILE_LIMIT_S ]]; then
        COMPILE_LIMIT_S=$DEFAULT_COMPILE_LIMIT_S
        [[ $GRAMMAR_BACKEND != outlines ]] || COMPILE_LIMIT_S=0
    fi
    is_uint "$COMPILE_LIMIT_S" \
        || die 2 "--compile-limit (RADMATCH_COMPILE_LIMIT_S) must be a number of seconds (0: no limit), got '$COMPILE_LIMIT_S'"
}

main() {
    parse_args "$@"
    if [[ $MODE == check ]]; then
        local args=()
        [[ -z $API_KEY_FILE ]] || args=(--api-key-file "$API_KEY_FILE")
        run_check "${CHECK_URL:-${RADMATCH_BASE_URL:-$(check_url)}}" "${args[@]}"
        return
    fi
    LOG_FILE=${LOG_FILE:-${XDG_STATE_HOME:-$HOME/.local/state}/radmatch/radmatch-judge.log}
    [[ $MODE == dry-run ]] || mkdir -p "$(dirname "$LOG_FILE")"

    make_plan
    resolve_model_dir
    resolve_vllm
    check_python
    resolve_api_key
    build_command
    if [[ $MODE == dry-run ]]; then
        print_dry_run
    else
        refuse_software_problems
        start_server
    fi
}

main "$@"
