#!/usr/bin/env bash
# Everything the GPU machine checks and times, in one call. Each step runs on its own under `timeout`
# (a step that fails or runs long does not stop the next), writes its whole output to $OUT/NAME.log
# (its JSON figure lines also to $OUT/NAME.jsonl), and gets a status: ok, failed rc N, timed out, or
# skipped with the missing package named. A summary table ends the output; $OUT/summary.json holds it.
#   machine      the GPU, driver, python packages (and which of the dev ones are absent);
#   families     bench/gpu/families.py: the family matrix (issue 26) in bf16: each family's tiny random-weight
#                model through `acr` and a small `scan` (on the GPU Llama, Phi-3 and Gemma 2, which fit its
#                limit; all eight in the rehearsal), and `acr --verify-engine vllm` on Llama where vLLM is
#                installed; first after machine, as a default that fails for one family is the first thing
#                to know;
#   library      bench/gpu/library_gpu.py: the scan's screen of a 30k-token slice on the 1B shape against one
#                raw teacher-forced pass over the same tokens (tokens/s, side by side), and GCG steps of
#                the library's search loop (s/step);
#   gpu_tests    the gpu-marked tests (canaries on CUDA in bf16, GPU vs CPU scores), without the
#                project's addopts (no pytest-xdist on the GPU image);
#   gcg_step     bench/search/gcg_step.py: 1B and 8B shapes, ours vs plain HF vs the matmul floor, then 1, 2, 4, 8
#                targets per forward on the 135M shape;
#   miniprompt   bench/search/miniprompt.py --size gpu: fast (margin) at 1 and 4 targets per forward vs paper;
#   screen_8b    bench/screen/screen_tokens.py: screening seconds per 20k-token book slice on the 8B shape, exact
#                and streamed windows (two-phase) and the bare screen, against one teacher-forced pass.
#   smollm2      gcg_step.py and screen_tokens.py as the two steps above run them, on a random-weight model of
#                SmolLM2-135M's shape (the real model users try offline): one GCG step, ours vs plain HF vs
#                the matmul floor, and the screen's tokens/s against one teacher-forced pass; the end of the
#                output sets its figures beside the 1B and 8B ones (bench/gpu/side_by_side.py).
#   probe        bench/gpu/probe_gpu.py: one GCG step's candidate scoring on the 8B shape alone against a 1B
#                draft scoring all candidates and the 8B a probe and the draft's best (probe sampling).
#   replay       bench/screen/screen_replay.py: the default screen's forwards on memorized text (a planted corpus
#                the tiny model memorized, trained there on the CPU) replayed on the 1B shape, against one
#                teacher-forced pass; last, as the step that may be cut.
# The limits sum to 545 s (+5 s grace to kill a step that overruns), inside GPU_CHECK_BUDGET_S (560), which
# caps the total anyway (a step gets at most what is left), so every step gets its turn and the call ends
# within 9.5 minutes, as one device command must (10 min). They come from the step times of the 2026-12-04
# H200 run (the GPU limits below, and bench/gpu/RESULTS.md), where the families (all eight: ~180 s), the
# 360m widths, smollm2's screen and replay overran the limits set before any GPU had timed them.
# GPU_CHECK_REHEARSAL=1: the same steps on the CPU with tiny shapes and short limits, to check the script's
# plumbing in a bare environment (the gpu tests then fail for want of CUDA, and the summary says so).
# Usage (device tool): bash bench/gpu_check.sh (which runs this file) -> $OUT (or ./bench_out). PYTHON picks
# the interpreter. Figures of a GPU session go to bench/gpu/RESULTS.md.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
out="${OUT:-bench_out}"
py="${PYTHON:-python3}"
budget="${GPU_CHECK_BUDGET_S:-560}"
grace=5
mkdir -p "$out"
rm -f "$out"/*.jsonl  # the side-by-side table reads this call's figures only, never a step an earlier call ran

if [[ "${GPU_CHECK_REHEARSAL:-0}" == 1 ]]; then
  mode=rehearsal device=cpu dtype=float32 small=tiny large=tiny both=tiny wide=tiny smol=tiny size=cpu book=2000
  cands=64
  declare -A limit=([machine]=20 [families]=400 [library]=60 [gpu_tests]=120 [gcg_step]=90 [miniprompt]=30
                    [screen_8b]=30 [smollm2]=90 [probe]=30 [replay]=60)
  fam_names=all fam_vllm=none
  tiny_args=(${ACR_TINY_DIR:+--workdir "$ACR_TINY_DIR"})  # a tiny model built before: no retraining
else
  mode=gpu device=cuda dtype=bfloat16 small=1b large=8b both=1b,8b wide=135m smol=135m size=gpu book=30000
  cands=512
  # From the 2026-12-04 H200 run's step times (bench/gpu/RESULTS.md): families 35 s to build all eight
  # and ~20 s a family, so three families (RoPE, RoPE with LongRoPE's config, soft-capping: the ones
  # bfloat16 broke); gcg_step's 1B, 8B and 135m rows fit 100 s, the 360m widths did not; smollm2's GCG row
  # took ~30 s and its screen ~15 s; miniprompt 92 s; screen_8b 23 s; probe 26 s; library 29 s.
  declare -A limit=([machine]=10 [families]=90 [library]=35 [gpu_tests]=55 [gcg_step]=95 [miniprompt]=100
                    [screen_8b]=30 [smollm2]=55 [probe]=30 [replay]=45)
  fam_names=llama,phi3,gemma2
  fam_vllm=llama
  tiny_args=()
fi
names=() statuses=() rcs=() took=() limits=() notes=()
# Random weights memorize nothing: these figures come only from the CPU benches on SmolLM2's real weights.
needs_weights=(
  "recall of planted passages, false positives: bench/validity/plants.py"
  "the screen's candidate share on real text: bench/screen/screen_share.py"
  "the paper's categories (famous quotes, Wikipedia, unseen, random): bench/validity/paper_categories.py"
  "calibration verdicts: bench/validity/calibration.py"
  "the screen's speed where a model has read the text (certificate rows run): bench/validity/smollm2.py"
)

# Which of the modules named cannot be imported (find_spec: nothing is imported, so it is quick).
missing_modules() {
  "$py" -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' "$@"
}

# What the step's log says in one line: pytest's closing counts, a missing module, or its figure rows.
note_of() {
  local log=$1 rc=$2 line
  line=$(grep -o "No module named '[^']*'" "$log" | head -n 1)
  [[ -n $line ]] && { echo "missing package: ${line#No module named }"; return; }
  line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|errors?|skipped|deselected|warnings?)|no tests ran' "$log" | tail -n 1)
  [[ -n $line ]] && { echo "pytest: $(sed -E 's/^=+ //; s/ =+$//' <<<"$line")"; return; }
  line="$(grep -c '^{' "$log") figure rows"
  [[ $rc != 0 ]] && line="$line; last: $(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-120)"
  echo "$line"
}

record() {  # name status rc seconds limit note (printable characters only: no tqdm carriage returns)
  names+=("$1") statuses+=("$2") rcs+=("$3") took+=("$4") limits+=("$5") notes+=("$(tr -cd '[:print:]' <<<"$6")")
  printf '== %s: %s (%ss of %ss) %s\n' "$1" "$2" "$4" "$5" "$6"
}

# step NAME "MODULES" COMMAND...: run COMMAND under its limit (at most the budget left), log all of it.
step() {
  local name=$1 modules=$2; shift 2
  local log="$out/$name.log" left=$((budget - SECONDS - grace)) max=${limit[$name]} start=$SECONDS rc status gone
  local shown=${*//$'\n'/ }
  ((max > left)) && max=$left
  if ((max < 10)); then record "$name" "not run: budget spent" "" 0 "$max" ""; return; fi
  # shellcheck disable=SC2086  # one module a word
  if ! gone=$(missing_modules $modules 2>&1); then
    record "$name" "skipped: $py cannot run" "" 0 "$max" "$gone"; return
  fi
  if [[ -n $gone ]]; then record "$name" "skipped: missing packages" "" 0 "$max" "missing: $gone"; return; fi
  printf '\n== %s (limit %ss): %s\n' "$name" "$max" "${shown:0:200}"
  printf '# %s\n' "$*" >"$log"
  timeout -k "$grace" "$max" "$@" >>"$log" 2>&1
  rc=$?
  grep '^{' "$log" >"$out/$name.jsonl"
  tail -n 6 "$log"  # the console shows the end; the log has everything
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${max}s" ;;
    *) status="failed rc $rc" ;;
  esac
  record "$name" "$status" "$rc" $((SECONDS - start)) "$max" "$(note_of "$log" "$rc")"
}

machine_py='
import importlib.metadata as m, platform, sys
print("python", sys.version.split()[0], platform.machine())
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, round(p.total_memory / 2**30, 1), "GiB")
for name in ("transformers", "tokenizers", "safetensors", "pyarrow", "click", "pytest", "filelock",
             "pytest-xdist", "pytest-timeout", "hypothesis", "ray", "vllm"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "absent")
'
# shellcheck disable=SC2016  # $1..$3 are bash -c's own arguments
step machine "" bash -c 'date -u +%FT%TZ; echo "mode $1"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$2" -c "$3"' machine "$mode" "$py" "$machine_py"
# Its models and runs stay out of $OUT: the device tool brings back a bounded count of files, and the
# families' hundreds crowded out the other steps' logs and summary.json (2026-12-04).
step families "torch transformers tokenizers pyarrow" "$py" bench/gpu/families.py --device "$device" --dtype "$dtype" \
  --families "$fam_names" --vllm "$fam_vllm" --out "${TMPDIR:-/tmp}/acr-families"
step library "torch transformers" "$py" bench/gpu/library_gpu.py --shapes "$small" --device "$device" --dtype "$dtype" \
  --book-tokens "$book"
step gpu_tests "pytest torch transformers filelock tokenizers" "$py" -m pytest -o addopts="" -m gpu \
  -p no:cacheprovider -W ignore::pytest.PytestConfigWarning -q -rfE tests/test_gpu.py
gcg_args=(--device "$device" --dtype "$dtype" --candidates "$cands" --free 20 --target 64 --steps 5)
screen_args=(--device "$device" --dtype "$dtype" --book-tokens "$((book * 2 / 3))" --settings exact-0.5,default,bare
             --repeats 1)
step gcg_step "torch transformers" "$py" bench/search/gcg_step.py --shapes "$both" "${gcg_args[@]}" \
  --widths 1,2,4,8 --width-shapes "$wide"
step miniprompt "torch transformers tokenizers" "$py" bench/search/miniprompt.py --size "$size" --device "$device" \
  --variants fast/margin,paper --widths 1,4 --no-controls "${tiny_args[@]}"
step screen_8b "torch transformers" "$py" bench/screen/screen_tokens.py --shapes "$large" "${screen_args[@]}"
# shellcheck disable=SC2016  # $0..$3 are bash -c's own arguments; the args hold no spaces
step smollm2 "torch transformers" bash -c '"$0" bench/search/gcg_step.py --shapes "$1" $2; rc=$?
  "$0" bench/screen/screen_tokens.py --shapes "$1" $3 && exit $rc' "$py" "$smol" "${gcg_args[*]}" "${screen_args[*]}"
step probe "torch transformers" "$py" bench/gpu/probe_gpu.py --target "$large" --draft "$small" --device "$device" \
  --dtype "$dtype" --candidates "$cands" --steps 3
step replay "torch transformers tokenizers" "$py" bench/screen/screen_replay.py --model-dir "${TMPDIR:-/tmp}/acr-planted" \
  --shapes "$small" --device "$device" --dtype "$dtype"

json() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
printf '\n%-11s %-34s %7s %7s  %s\n' step status seconds limit note
failed=0 rows=""
for i in "${!names[@]}"; do
  printf '%-11s %-34s %7s %7s  %s\n' "${names[i]}" "${statuses[i]}" "${took[i]}" "${limits[i]}" "${notes[i]}"
  [[ ${statuses[i]} == ok ]] || failed=$((failed + 1))
  rows+="${rows:+, }$(printf '{"name": %s, "status": %s, "rc": %s, "seconds": %s, "limit_s": %s, "note": %s, "log": %s}' \
    "$(json "${names[i]}")" "$(json "${statuses[i]}")" "${rcs[i]:-null}" "${took[i]}" "${limits[i]}" \
    "$(json "${notes[i]}")" "$(json "${names[i]}.log")")"
done
side=$("$py" bench/gpu/side_by_side.py --json "$out" smollm2 gcg_step,screen_8b 2>/dev/null) || side=null
weights=""
for w in "${needs_weights[@]}"; do weights+="${weights:+, }$(json "$w")"; done
printf '{"mode": %s, "date": %s, "total_s": %s, "budget_s": %s, "steps": [%s], "side_by_side": %s, %s: [%s]}\n' \
  "$(json "$mode")" "$(json "$(date -u +%FT%TZ)")" "$SECONDS" "$budget" "$rows" "${side:-null}" '"needs_real_weights"' \
  "$weights" >"$out/summary.json"
printf '\nthe GCG step and the screen by shape (random weights):\n'
"$py" bench/gpu/side_by_side.py "$out" smollm2 gcg_step,screen_8b || echo "(no figures: $py cannot read them)"
printf '\nneeds real weights, so not measured here (the CPU benches on SmolLM2 measure them):\n'
printf '  %s\n' "${needs_weights[@]}"
echo "total ${SECONDS}s of ${budget}s; ${failed} of ${#names[@]} steps not ok; logs and summary.json in $out"
((failed == 0))
