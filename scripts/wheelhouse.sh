#!/usr/bin/env bash
# scripts/wheelhouse.sh [jetson|x86-gpu|x86-gpu13|ci]: on a machine WITH network, download every wheel a
# classroom needs into wheelhouse/, for the target machines, so that `make lab` / `make test`
# there install with no network (scripts/env.sh uses wheelhouse/ when it exists).
#   jetson   aarch64, CPython 3.10 (JetPack 6), cupy-cuda12x on JetPack's CUDA  [default]
#   x86-gpu  x86_64, this machine's Python, cupy-cuda12x[ctk]
#   x86-gpu13 x86_64, this machine's Python, cupy-cuda13x[ctk] (machines whose driver is CUDA 13)
#   ci       x86_64, this machine's Python, compile-only (NVRTC + headers)
# Then copy the repository with its wheelhouse/ to the classroom machines.
# Set EXTRAS=peers to add torch (large; on a Jetson use NVIDIA's JetPack torch wheel instead).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-jetson}
case "$target" in
  jetson)  extra=jetson; plat=(--platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64
                               --platform manylinux_2_17_aarch64 --python-version 3.10 --implementation cp
                               --only-binary=:all:) ;;
  x86-gpu) extra=gpu; plat=() ;;
  x86-gpu13) extra=gpu13; plat=() ;;
  ci)      extra=ci; plat=() ;;
  *) echo "usage: scripts/wheelhouse.sh jetson|x86-gpu|x86-gpu13|ci" >&2; exit 2 ;;
esac
extras="$extra,test,lab${EXTRAS:+,$EXTRAS}"
mkdir -p wheelhouse
# The dependency list comes from pyproject.toml, read by pip itself (no list kept twice).
deps=$(python3 - "$extras" <<'PY'
import sys
try:
    import tomllib
except ImportError:            # Python < 3.11
    import tomli as tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
out = list(p["dependencies"])
for e in sys.argv[1].split(","):
    out += p["optional-dependencies"].get(e, [])
print("\n".join(dict.fromkeys(out)))
PY
)
echo "wheelhouse: downloading kernellab[$extras] for $target into wheelhouse/"
mapfile -t reqs <<<"$deps"
python3 -m pip download -q -d wheelhouse "${plat[@]}" "${reqs[@]}" setuptools wheel
echo "wheelhouse: $(ls wheelhouse | wc -l) files, $(du -sh wheelhouse | cut -f1). Copy the repository with it;"
echo "           on the target, \`make lab\` / \`make test\` install from it with no network."
