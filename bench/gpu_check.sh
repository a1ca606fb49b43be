#!/usr/bin/env bash
# The GPU machine's one call: every check and timing of bench/gpu/gpu_check.sh, which says what each step
# runs. Figures of a GPU session go to bench/gpu/RESULTS.md.
#   bash bench/gpu_check.sh   -> $OUT (or ./bench_out); GPU_CHECK_REHEARSAL=1 rehearses it on the CPU.
exec bash "$(dirname "$0")/gpu/gpu_check.sh" "$@"
