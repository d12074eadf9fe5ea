#!/usr/bin/env bash
# Gradian's speed table on a CUDA machine, in one go (about 5 minutes on an H100), for whenever a GPU is at hand:
#   - building the index vs a plain LoRA step, on the GPU, for the tiny model and a ~1.1B Llama built from its config
#     (TinyLlama's shape; no weights are downloaded);
#   - scoring a 16 GB bfloat16 store held in GPU memory with 1, 8, 64 and 256 queries, against a torch sum over the same
#     buffer and the card's nominal HBM bandwidth;
#   - the CPU rows of benchmarks/run.py (read bandwidth, streaming a store from disk, DataInf vs graddot, analyze stages)
#     on the host, with a 1M x 2048 store.
# Usage: bash benchmarks/gpu_check.sh [extra arguments for benchmarks/run.py]
#   GPU_STORE_GB=4 bash benchmarks/gpu_check.sh          # a smaller store for a card with less memory
# Prints one table; the figures also go to benchmarks/results/speed-<stamp>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
"$PY" - <<'EOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device (torch %s); on a CPU machine run: python benchmarks/run.py" % torch.__version__)
p = torch.cuda.get_device_properties(0)
print(f"gpu_check: {p.name}, {p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
exec timeout "${GPU_CHECK_TIMEOUT:-600}" "$PY" benchmarks/run.py --device cuda --gpu-store-gb "${GPU_STORE_GB:-16}" --gpu-queries 1,8,64,256 \
    --models tiny,1b --reps 3 "$@"
