#!/usr/bin/env bash
# Everything the GPU machine checks and times, in one call: the timeouts below sum to 470 s, so the
# call ends within 8 minutes on an H200 even when a step runs long (its figures are then cut short):
#   1. the gpu-marked tests (canaries on CUDA in bf16, GPU vs CPU scores);
#   2. bench/gcg_step.py: 1B and 8B random-weight Llama shapes, ours vs plain HF, vs the matmul floor;
#      then 1, 2, 4, 8 targets per forward on the 135M and 360M shapes (8 targets each);
#   3. bench/miniprompt.py --size gpu: a model trained there, fast (margin) at 1 and 4 targets per
#      forward vs the paper schedule, on the canaries (the paper schedule does not finish the controls);
#   4. bench/screen_tokens.py: screening seconds per 20k-token book slice on the 8B shape, exact and
#      streamed windows (two-phase) and the bare screen, against one teacher-forced pass (x5 for the
#      100k-token-book goal).
# Usage (device tool): bash bench/gpu_check.sh   -> figures as JSON lines under $OUT (or ./bench_out).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
out="${OUT:-bench_out}"
mkdir -p "$out"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } | tee "$out/machine.txt"
timeout 90 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -5 | tee "$out/gpu_tests.txt"
timeout 150 python3 bench/gcg_step.py --shapes 1b,8b --candidates 512 --free 20 --target 64 --steps 5 \
  --widths 1,2,4,8 --width-shapes 135m,360m | tee "$out/gcg_step.jsonl"
timeout 170 python3 bench/miniprompt.py --size gpu --variants fast/margin,paper --widths 1,4 --no-controls \
  | tee "$out/miniprompt_gpu.jsonl"
timeout 60 python3 bench/screen_tokens.py --shapes 8b --book-tokens 20000 --settings exact-0.5,default,bare \
  --repeats 1 | tee "$out/screen_tokens.jsonl"
