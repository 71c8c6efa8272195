#!/usr/bin/env bash
# Install the judge server's software in serve/.venv: vLLM 0.33.0 and what the
# readiness check needs (serve/requirements.txt).
#
# Usage:
#   serve/install.sh [--python PYTHON]     make serve/.venv with PYTHON and install
#   serve/install.sh --check [--python P]  only say which python would be used
#
# vLLM 0.33.0 needs Python 3.11-3.14. Without --python the first of python3.12,
# python3.13, python3.11, python3.14 and python3 on PATH that fits is used; none
# fitting (Ubuntu 22.04's python3 is 3.10) stops here with what to install.
#
# Exit codes: 0 installed (or --check found a python); 2 usage; 7 no Python 3.11-3.14;
# pip's own code when the install fails.
set -euo pipefail

readonly MIN_MINOR=11 MAX_MINOR=14
SOURCE=${BASH_SOURCE[0]}
[[ $SOURCE == */* ]] || SOURCE=./$SOURCE
SERVE_DIR=$(cd "${SOURCE%/*}" && pwd)
readonly SERVE_DIR
PYTHON="" CHECK_ONLY=0

say() { printf '[radmatch-judge install] %s\n' "$*" >&2; }

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }

# "3.12.3" for a python that runs, else nothing.
version_of() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true; }

fits() { [[ $1 =~ ^3\.([0-9]+)\. ]] && ((BASH_REMATCH[1] >= MIN_MINOR && BASH_REMATCH[1] <= MAX_MINOR)); }

while (($#)); do
    case $1 in
        --python) PYTHON=${2:?--python needs a python executable}; shift ;;
        --check) CHECK_ONLY=1 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; say "error: unknown argument: $1"; exit 2 ;;
    esac
    shift
done

if [[ -z $PYTHON ]]; then
    for candidate in python3.12 python3.13 python3.11 python3.14 python3; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        if fits "$(version_of "$candidate")"; then
            PYTHON=$candidate
            break
        fi
    done
    PYTHON=${PYTHON:-python3}
fi
VERSION=$(version_of "$PYTHON")
if ! fits "$VERSION"; then
    WHAT="not a python that runs"
    [[ -z $VERSION ]] || WHAT="Python $VERSION"
    say "error: $PYTHON is $WHAT: vLLM 0.33.0 needs Python 3.$MIN_MINOR-3.$MAX_MINOR (pip would find no vllm 0.33.0 for it)."
    say "  Ubuntu 22.04's python3 is 3.10. Install a newer one, for example:"
    say "    sudo apt install python3.11 python3.11-venv        (Ubuntu 22.04; 24.04 has 3.12)"
    say "    or: uv python install 3.12"
    say "  then: serve/install.sh --python python3.11"
    exit 7
fi
say "python: $(command -v "$PYTHON" || echo "$PYTHON") $VERSION (vLLM 0.33.0 needs 3.$MIN_MINOR-3.$MAX_MINOR)"
((CHECK_ONLY == 0)) || exit 0

if [[ -x $SERVE_DIR/.venv/bin/python ]]; then
    existing=$(version_of "$SERVE_DIR/.venv/bin/python")
    if ! fits "$existing"; then
        say "error: $SERVE_DIR/.venv exists with Python ${existing:-?}; remove it (rm -r $SERVE_DIR/.venv) and run this again"
        exit 7
    fi
    say "using the existing $SERVE_DIR/.venv (Python $existing)"
elif ! "$PYTHON" -m venv "$SERVE_DIR/.venv"; then
    say "error: $PYTHON cannot make a venv; on Debian/Ubuntu: sudo apt install python3.$(cut -d. -f2 <<<"$VERSION")-venv"
    exit 7
fi
"$SERVE_DIR/.venv/bin/pip" install -r "$SERVE_DIR/requirements.txt"
say "installed in $SERVE_DIR/.venv; next: serve/start_vllm.sh --dry-run"
