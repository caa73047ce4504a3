# Sourced by the scripts in scripts/: creates .venv (once) and installs the project into it from its own
# files. Re-running it is cheap: pip only reinstalls when pyproject.toml changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$root/.venv"
python="${TRAINGUARD_PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)-${TRAINGUARD_EXTRAS:-dev,torch,k8s}"
if [[ ! -f "$stamp" ]]; then
    "$venv/bin/python" -m pip install -q -e "$root[${TRAINGUARD_EXTRAS:-dev,torch,k8s}]"
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"
