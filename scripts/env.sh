#!/usr/bin/env bash
# scripts/env.sh test|lab: print the python that `make test` / `make lab` should use,
# creating .venv and installing into it only when that is needed.
#   1. .venv exists and has everything        -> use it
#   2. python3 already imports everything     -> use it: no venv, no network (offline GPU host,
#      classroom image). KERNELLAB_VENV=1 skips this and always uses .venv.
#   3. otherwise make .venv and pip install the right CuPy for this machine (scripts/env.sh --extra):
#      Jetson (JetPack 6)          -> plain cupy-cuda12x on JetPack's CUDA (CUDA_PATH=/usr/local/cuda)
#      NVIDIA GPU, CUDA 13 driver  -> cupy-cuda13x[ctk]  (nvidia-smi: "CUDA Version: 13.x")
#      NVIDIA GPU, older driver    -> cupy-cuda12x[ctk]
#      no GPU                      -> cupy-cuda12x + NVRTC + CUDA headers only (compile-only mode)
#      It says what it installs and how long it took; pip's full log: .venv/kernellab-setup.log.
#      From wheelhouse/ when it exists (`make wheelhouse` on a connected machine): no network.
#      KERNELLAB_EXTRAS=peers adds torch (the optional baselines). KERNELLAB_NO_SETUP=1: never
#      install (exit 3 instead; the tests that call make use it).
# scripts/env.sh --exports: the environment every run needs, as shell `export` lines
#   (CUDA_PATH=/usr/local/cuda on a Jetson, where CuPy finds JetPack's CUDA through it).
# scripts/env.sh --extra: the pyproject extra that brings this machine's CuPy (jetson, gpu13, gpu,
#   ci), then a tab and why; scripts/cloud_setup.py asks the same question.
set -euo pipefail
cd "$(dirname "$0")/.."
is_jetson() { [ -f /etc/nv_tegra_release ] || grep -qsi tegra /proc/device-tree/compatible; }
# The CUDA version the driver supports, as nvidia-smi's banner says it ("CUDA Version: 13.0"); empty
# when there is no working nvidia-smi.
driver_cuda() { command -v nvidia-smi >/dev/null && nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -1; }
pick_extra() {
  if is_jetson; then printf 'jetson\tJetson (JetPack): cupy-cuda12x on JetPack'"'"'s CUDA\n'; return; fi
  local v; v=$(driver_cuda || true)
  if [ -n "$v" ] && nvidia-smi -L >/dev/null 2>&1; then
    if [ "${v%%.*}" -ge 13 ] 2>/dev/null; then printf 'gpu13\tNVIDIA GPU, driver CUDA %s: cupy-cuda13x[ctk]\n' "$v"
    else printf 'gpu\tNVIDIA GPU, driver CUDA %s: cupy-cuda12x[ctk]\n' "$v"; fi
  else
    printf 'ci\tno NVIDIA GPU: cupy-cuda12x + NVRTC + CUDA headers (compile-only mode)\n'
  fi
}
purpose=${1:-test}
if [ "$purpose" = --exports ]; then
  if is_jetson; then echo "export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}"; fi
  exit 0
fi
if [ "$purpose" = --extra ]; then pick_extra; exit 0; fi
mods="cupy numpy matplotlib pandas jupytext ipykernel nbformat tokenizers"
case "$purpose" in
  test) mods="$mods pytest nbval nbclient" ;;
  lab)  mods="$mods jupyterlab ipywidgets" ;;
  *) echo "usage: scripts/env.sh test|lab|--exports|--extra" >&2; exit 2 ;;
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
IFS=$'\t' read -r extra why <<<"$(pick_extra)"
[ "$extra" = jetson ] && export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
extras="$extra,test"; [ "$purpose" = lab ] && extras="$extra,test,lab"
[ -n "${KERNELLAB_EXTRAS:-}" ] && extras="$extras,$KERNELLAB_EXTRAS"
pipopts=(--progress-bar off)
offline=
if [ -d wheelhouse ] && compgen -G "wheelhouse/*.whl" >/dev/null; then
  pipopts+=(--no-index --find-links wheelhouse); offline=1
fi
t0=$SECONDS
{
  echo "env: one-time set-up of .venv with kernellab[$extras]"
  echo "env:   this machine: $why"
  case "$purpose" in
    test) echo "env:   what: CuPy and the CUDA libraries it loads, NumPy, pandas, matplotlib, pytest, nbval, jupytext (about 0.9 GB)" ;;
    lab)  echo "env:   what: CuPy and the CUDA libraries it loads, NumPy, pandas, matplotlib, JupyterLab, ipywidgets, jupytext (about 1.1 GB)" ;;
  esac
  if [ -n "$offline" ]; then echo "env:   from wheelhouse/ (no network): usually a minute or two, longer on a Jetson's SD card"
  else echo "env:   from PyPI: about 1-3 minutes on a fast connection (longer on a slow one); progress below"; fi
} >&2
[ -x .venv/bin/python ] || python3 -m venv .venv >&2
[ -n "$offline" ] || .venv/bin/python -m pip install -q --upgrade pip >&2
log=.venv/kernellab-setup.log
# pip's own lines, shortened to what is happening: which package, how big, then the summary.
set +e
.venv/bin/python -m pip install "${pipopts[@]}" -e ".[$extras]" 2>&1 | tee "$log" | while IFS= read -r line; do
  case "$line" in
    Collecting*) echo "env:   [$((SECONDS - t0)) s] ${line%% (from *}" ;;
    Processing*) f=${line%% (from *}; echo "env:   [$((SECONDS - t0)) s] Processing ${f##*/}" ;;
    *Downloading*MB*) echo "env:   [$((SECONDS - t0)) s]   ${line#  }" ;;
    "Installing collected packages"*) echo "env:   [$((SECONDS - t0)) s] installing $(echo "$line" | tr ',' '\n' | wc -l) packages (the largest take a minute to unpack)" ;;
    "Successfully installed"*) echo "env:   [$((SECONDS - t0)) s] installed" ;;
    ERROR*|error*) echo "env:   $line" ;;
  esac
done >&2
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "env: pip failed (exit $rc); its full output is in $log. The last lines:" >&2
  tail -n 20 "$log" >&2
  exit "$rc"
fi
echo "env: set-up done in $((SECONDS - t0)) s ($(du -sh .venv 2>/dev/null | cut -f1) in .venv); later runs start at once" >&2
echo .venv/bin/python
