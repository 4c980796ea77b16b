#!/usr/bin/env bash
# scripts/env.sh test|lab: print the python that `make test` / `make lab` should use,
# creating .venv and installing into it only when that is needed.
#   1. .venv exists and has everything        -> use it
#   2. python3 already imports everything     -> use it: no venv, no network (offline GPU host,
#      classroom image). KERNELLAB_VENV=1 skips this and always uses .venv.
#   3. otherwise make .venv and pip install the right CuPy for this machine:
#      Jetson (JetPack 6) -> plain cupy-cuda12x on JetPack's CUDA (CUDA_PATH=/usr/local/cuda)
#      x86 + NVIDIA GPU    -> cupy-cuda12x[ctk]
#      no GPU              -> cupy-cuda12x + NVRTC + CUDA headers only (compile-only mode)
#      From wheelhouse/ when it exists (`make wheelhouse` on a connected machine): no network.
#      KERNELLAB_EXTRAS=peers adds torch (the optional baselines). KERNELLAB_NO_SETUP=1: never
#      install (exit 3 instead; the tests that call make use it).
# scripts/env.sh --exports: the environment every run needs, as shell `export` lines
#   (CUDA_PATH=/usr/local/cuda on a Jetson, where CuPy finds JetPack's CUDA through it).
set -euo pipefail
cd "$(dirname "$0")/.."
is_jetson() { [ -f /etc/nv_tegra_release ] || grep -qsi tegra /proc/device-tree/compatible; }
purpose=${1:-test}
if [ "$purpose" = --exports ]; then
  if is_jetson; then echo "export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}"; fi
  exit 0
fi
mods="cupy numpy matplotlib pandas jupytext ipykernel nbformat"
case "$purpose" in
  test) mods="$mods pytest nbval nbclient" ;;
  lab)  mods="$mods jupyterlab ipywidgets" ;;
  *) echo "usage: scripts/env.sh test|lab|--exports" >&2; exit 2 ;;
esac
have() { "$1" - $mods >/dev/null 2>&1 <<'PY'
import importlib, sys
for m in sys.argv[1:]:
    importlib.import_module(m)
PY
}
if [ -x .venv/bin/python ] && have .venv/bin/python; then echo .venv/bin/python; exit 0; fi
if [ -z "${KERNELLAB_VENV:-}" ] && command -v python3 >/dev/null && have python3; then
  echo "env: python3 already has everything; using it (no venv, no network)" >&2
  echo python3; exit 0
fi
if [ -n "${KERNELLAB_NO_SETUP:-}" ]; then
  echo "env: no python with [$mods] and KERNELLAB_NO_SETUP is set: not installing anything" >&2; exit 3
fi
if is_jetson; then
  extra=jetson; export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  extra=gpu
else
  extra=ci
fi
extras="$extra,test"; [ "$purpose" = lab ] && extras="$extra,test,lab"
[ -n "${KERNELLAB_EXTRAS:-}" ] && extras="$extras,$KERNELLAB_EXTRAS"
pipopts=(-q)
if [ -d wheelhouse ] && compgen -G "wheelhouse/*.whl" >/dev/null; then
  pipopts+=(--no-index --find-links wheelhouse)
  echo "env: installing from wheelhouse/ (offline)" >&2
fi
echo "env: creating .venv with kernellab[$extras] (one-time set-up)" >&2
[ -x .venv/bin/python ] || python3 -m venv .venv >&2
[ ${#pipopts[@]} -gt 1 ] || .venv/bin/python -m pip install -q --upgrade pip >&2
.venv/bin/python -m pip install "${pipopts[@]}" -e ".[$extras]" >&2
echo .venv/bin/python
