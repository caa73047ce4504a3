# Sourced by the scripts in scripts/: creates .venv (once) and installs the project into it from its own
# files. Re-running it is cheap: pip only reinstalls when pyproject.toml changed.
#
# The third-party packages (about 5.6 GiB with torch) are installed once per pyproject.toml, Python version
# and extras, in a venv under ~/.cache/trainguard/venvs; a new clone's .venv is a copy of that venv made of
# hard links (seconds, no space), with the project installed into it. Where hard links cannot be made (another
# file system), .venv is installed as before (minutes).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$root/.venv"
python="${TRAINGUARD_PYTHON:-python3}"
extras="${TRAINGUARD_EXTRAS:-dev,torch,k8s}"
key="$(sha256sum "$root/pyproject.toml" | cut -c1-16)-${extras//,/-}"

# _venv_new DIR: a venv with an up-to-date pip.
_venv_new() {
    "$python" -m venv "$1"
    "$1/bin/python" -m pip install -q --upgrade pip
}

# _venv_renamed DIR FROM TO: the scripts of the venv in DIR (pip, pytest, activate...) name their venv's
# folder: FROM is rewritten as TO in them. sed -i writes each as a file of its own, so that a venv made of
# hard links to another never writes through them.
_venv_renamed() {
    { grep -lIF "$2" "$1"/bin/* || true; } | xargs -r sed -i "s|$2|$3|g"
}

# _venv_deps: the cached venv of the project's dependencies (built once, under a lock, in a temporary
# folder renamed into place, so that a build cut short is never taken for a finished one); prints its path.
_venv_deps() {
    local version cache building
    version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/venvs/py$version-$key"
    mkdir -p "$(dirname "$cache")"
    (
        flock 9
        if [[ ! -x "$cache/bin/python" ]]; then
            building="$cache.building"
            rm -rf "$building"
            _venv_new "$building" >&2
            # The project with its dependencies, then the project taken out again: what stays is theirs.
            "$building/bin/python" -m pip install -q -e "$root[$extras]" >&2
            "$building/bin/python" -m pip uninstall -q -y trainguard >&2
            # Its scripts written for the folder it is renamed to, before the rename that marks it complete.
            _venv_renamed "$building" "$building" "$cache"
            mv "$building" "$cache"
        fi
    ) 9>"$cache.lock"
    echo "$cache"
}

stamp="$venv/.installed-$key"
if [[ ! -f "$stamp" ]]; then
    if [[ ! -x "$venv/bin/python" ]]; then
        deps="$(_venv_deps)"
        if cp -al "$deps" "$venv" 2>/dev/null; then
            _venv_renamed "$venv" "$deps" "$venv"
        else
            rm -rf "$venv"
            _venv_new "$venv"
        fi
    fi
    "$venv/bin/python" -m pip install -q -e "$root[$extras]"
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"
