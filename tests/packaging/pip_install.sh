#!/usr/bin/env bash
# pip install as Debian 12 wants it (PEP 668): a virtual environment over /usr/bin/python3
# with the system's site packages, Debian's meson-python as the build backend, no network.
# pip builds a copy of the source tree (pyproject.toml), and the package it installed (not
# the build tree: pcoll.__file__ is checked) runs a round at P=2 under the pcollrun the
# wheel installed into the environment.
# Usage: pip_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
if ! /usr/bin/python3 -c 'import mesonpy, venv, ensurepip' 2>/dev/null; then
  echo "pip_install: needs python3-mesonpy, python3-venv and python3-pip (scripts/install-deps.sh)"
  exit 77
fi
# A fixed place under the build directory, so that ccache finds the objects of the last run.
work="$build/pip-test"
rm -rf "$work"
mkdir -p "$work/src"
trap 'rm -rf "$work"' EXIT

# The working tree as a clone would hold it, with local changes: tracked and untracked
# files git does not ignore (the build directories are ignored).
if git -C "$source" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$source" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e $source/$f ]] && printf '%s\0' "$f"; done |
    tar -C "$source" --null -T - -cf - | tar -C "$work/src" -xf -
else
  tar -C "$source" --exclude='./build*' -cf - . | tar -C "$work/src" -xf -
fi

started=$SECONDS
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# Unoptimised (-O0, no debug info): the test is about the packaging (the wheel's contents,
# its install, a round from it), and a release build of the whole library took about two
# of CI's minutes here. A real `pip install` builds with the package's defaults (release).
"$work/venv/bin/pip" install --quiet --no-build-isolation --no-index \
  --config-settings builddir="$work/wheel-build" \
  --config-settings setup-args=-Doptimization=0 --config-settings setup-args=-Ddebug=false "$work/src"
echo "pip_install: venv and pip install took $((SECONDS - started)) s"

cat > "$work/round.py" <<'PY'
import os, sys
import numpy as np
import pcoll
venv = os.environ["PIP_TEST_VENV"]
assert pcoll.__file__.startswith(venv + "/lib/"), f"pcoll imported from {pcoll.__file__}, not from {venv}"
with pcoll.init() as comm:
    with comm.allreduce(4, dtype="int64", op="sum", mode="sync") as ar:
        buf = np.full(4, comm.rank + 1, np.int64)
        ar.run(buf, buf)
        assert (buf == comm.size * (comm.size + 1) // 2).all(), buf
print(f"rank {comm.rank}: a round from {pcoll.__file__}", flush=True)
PY
cd "$work"
env -u PYTHONPATH -u LD_LIBRARY_PATH PIP_TEST_VENV="$work/venv" \
  timeout 60 "$work/venv/bin/pcollrun" -n 2 --timeout-ms 20000 "$work/venv/bin/python" "$work/round.py"
# The extension carries the library: nothing of the build tree is loaded.
if ldd "$work"/venv/lib/python3*/site-packages/pcoll/_core*.so | grep -q libpcoll; then
  echo "pip_install: the installed extension links libpcoll.so instead of carrying it"
  exit 1
fi
echo "pip_install: the installed package ran a round"
