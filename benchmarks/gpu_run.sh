#!/usr/bin/env bash
# Everything the course verifies on a real GPU, in one run (the device machine has CuPy, NumPy,
# PyTorch and pytest but no Jupyter: nbgrader and its dependencies travel as wheels in .whl/).
#
#   bash benchmarks/gpu_run.sh OUTDIR [STEPS]      STEPS: any of tests,evidence,demo (default: all)
#
# 1. the runtime tests with the GPU backend (every test parametrised over backends runs on both)
# 2. benchmarks/gpu_evidence.py: solutions and wrong kernels checked on the GPU, the same
#    sources compared between GPU and emulator, timings and plots
# 3. the README's main job (python -m grader demo) with the GPU backend: nbgrader end to end
# Results: OUTDIR/gpu_results.tar.gz (JSON, plots, logs), extracted into benchmarks/results/.
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_run.sh OUTDIR [tests,evidence,demo]}
steps=${2:-tests,evidence,demo}
want() { [[ ",$steps," == *",$1,"* ]]; }
work=$(mktemp -d)
# re-packed after every step, so a run cut short still returns what it finished
pack() { tar -czf "$out/gpu_results.tar.gz" -C "$work" --exclude=cache .; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRADER_CACHE_DIR=$work/cache
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=$PYTHONPATH:/tmp/site PATH=/tmp/site/bin:$PATH
  # nbconvert finds its HTML templates (the wheel's data files) through JUPYTER_PATH
  JUPYTER_PATH=$(dirname "$(find /tmp/site -type d -path '*share/jupyter/nbconvert' | head -1)")
  export JUPYTER_PATH
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 --version; } > "$work/device.txt" 2>&1
cat "$work/device.txt"

if want tests; then
  echo "== 1. runtime tests on the GPU backend"
  python3 -m pytest -q -p no:cacheprovider tests/runtime tests/checks/test_reference.py 2>&1 | tee "$work/pytest_gpu.txt" | tail -5
  pack
fi

if want evidence; then
  echo "== 2. GPU evidence"
  python3 benchmarks/gpu_evidence.py --out "$work" 2>&1 | tee "$work/gpu_evidence.txt"
  pack
fi

if want demo; then
  echo "== 3. nbgrader demo on the GPU backend"
  GRADER_BACKEND=gpu timeout 400 python3 -m grader demo 2>&1 | tee "$work/demo_gpu.txt" | tail -25
  pack
fi
