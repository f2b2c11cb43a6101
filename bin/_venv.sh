# Sourced by bin/farm and bin/test: make (or refresh) a virtualenv beside this checkout and
# install farm into it, with the extras given. Reinstalls when pyproject.toml changes.
# FARM_VENV picks another folder; PYTHON another interpreter (3.11 or newer).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FARM_VENV:-$root/.venv}"

ensure_venv() {  # ensure_venv EXTRAS STAMP_NAME [STAMP_THAT_ALSO_WILL_DO...]
  local extras="$1" stamp="$venv/$2" python="${PYTHON:-python3}" name
  shift
  for name in "$@"; do  # an install with more extras serves a command that needs fewer
    if [ -f "$venv/$name" ] && [ "$venv/$name" -nt "$root/pyproject.toml" ]; then
      return 0
    fi
  done
  if ! command -v "$python" >/dev/null 2>&1; then
    echo "farm: needs Python 3.11 or newer: no '$python' on PATH (set PYTHON=/path/to/python3)" >&2
    exit 2
  fi
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "farm: needs Python 3.11 or newer, '$python' is $("$python" --version 2>&1) (set PYTHON=/path/to/python3.11)" >&2
    exit 2
  fi
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || {
      echo "farm: could not create a virtualenv at $venv (on Debian/Ubuntu: apt-get install python3-venv)" >&2
      exit 2
    }
  fi
  echo "farm: installing farm${extras} and its dependencies into $venv (first use; a minute or two)" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root$extras" >&2
  # farm history's change points: Apache Otava's analysis needs only numpy and scipy (farm's own);
  # its declared dependencies serve its BigQuery, Postgres and Slack connectors and pin numpy 2.2,
  # which would downgrade farm's: so without them
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "apache-otava==0.8.0" >&2
  touch "$stamp"
}
