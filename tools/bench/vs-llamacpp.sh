#!/usr/bin/env bash
# kvsieve against llama.cpp on the same machine, in one run (issue 16's side-by-side table).
#
#   tools/bench/vs-llamacpp.sh LLAMA_BUILD_DIR [options]
#     LLAMA_BUILD_DIR   a llama.cpp build directory of your own holding bin/llama-diffusion-cli and
#                       bin/llama-bench
#     -t N              threads for both (default: all cores)
#     -r N              repetitions; each row reports the median and the range (default 3)
#     --kvsieve PATH    the kvsieve tool (default build/tools/kvsieve)
#     --dlm MODEL       diffusion model (default stories260K-llada-f32.gguf, looked up like kvsieve does)
#     --ar MODEL        autoregressive model (default stories260K-f32.v3.gguf)
#     --gen N           generated positions of the diffusion decode (default 256, rounded up to the block, 32;
#                       one token a step; the prompt is one block of 32 tokens)
#
# Rows, each measured R times alternately (llama.cpp, kvsieve, llama.cpp, ...):
#   diffusion, no cache     ms per denoising step: llama-diffusion-cli (its total time over its steps) vs
#                           `kvsieve generate --cache none --stats` (wall ms per step), same GGUF, same
#                           prompt, same sequence length (prompt + gen), block 32, one token per step
#   diffusion, kvsieve's    prefix / dual / elastic: kvsieve's ms per step next to llama.cpp's no-cache
#   cached schedules        step (llama.cpp has no diffusion cache)
#   autoregressive decode   tokens/s: llama-bench tg (-p 0 -n gen) vs `kvsieve generate --temp 0`
#                           (which includes its short prefill: kvsieve's figure is a lower bound)
# The ratio column is llama.cpp's time / kvsieve's (> 1: kvsieve faster). Timing is only meaningful on
# a quiet machine: the script prints the load average before and after. Not run by CI.
#
# The AVX2 code paths of an AVX-512 machine, side by side (what an AVX2-only CPU runs): a llama.cpp
# build configured with -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
# -DGGML_AVX512=OFF, and kvsieve's AVX2 variants with OpenBLAS's Haswell kernels:
#   KVS_VARIANT=matmul:avx2,attention:avx2,topk:avx2,topk_global:avx2,dwt:avx2,idwt:avx2 \
#   OPENBLAS_CORETYPE=Haswell tools/bench/vs-llamacpp.sh LLAMA_AVX2_BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
usage() { sed -n 2,24p "$0"; }
case "${1:-}" in
    "") usage; exit 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "vs-llamacpp: the first argument is the llama.cpp build directory (got option $1)" >&2; usage; exit 2 ;;
esac
LB=$1; shift
T=$(nproc); R=3; KV=$here/build/tools/kvsieve; DLM=stories260K-llada-f32.gguf; AR=stories260K-f32.v3.gguf; GEN=256
while [ $# -gt 0 ]; do
    case $1 in
        -t) T=$2; shift 2 ;;
        -r) R=$2; shift 2 ;;
        --kvsieve) KV=$2; shift 2 ;;
        --dlm) DLM=$2; shift 2 ;;
        --ar) AR=$2; shift 2 ;;
        --gen) GEN=$2; shift 2 ;;
        *) echo "vs-llamacpp: unknown option $1" >&2; exit 2 ;;
    esac
done
for b in llama-diffusion-cli llama-bench; do
    [ -x "$LB/bin/$b" ] || { echo "vs-llamacpp: $LB/bin/$b not found (build it first)" >&2; exit 2; }
done
[ -x "$KV" ] || { echo "vs-llamacpp: $KV not found (meson setup build && ninja -C build)" >&2; exit 2; }
find_model() {
    local m=$1
    for d in "" "${KVSIEVE_MODELS:-}/" "$here/models/" "$here/../shared/models/"; do
        [ -f "$d$m" ] && { echo "$d$m"; return; }
    done
    echo "vs-llamacpp: model $m not found" >&2; exit 2
}
DLM=$(find_model "$DLM"); AR=$(find_model "$AR")
# A prompt of exactly one block (32 tokens with BOS, as kvsieve counts them): llama-diffusion-cli's
# blocks tile the whole sequence (prompt included, -ub a multiple of the block) while kvsieve's start
# after the prompt (-n a multiple of the block); with a one-block prompt both decode the same rows.
STORY="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends and her big brown dog every day after school."
ntok() { "$KV" generate -m "$DLM" -p "$1" -n 32 --block 32 --steps 32 --cache none --json -t 1 2>/dev/null |
         python3 -c 'import json,sys; print(len(json.load(sys.stdin)["prompt_tokens"]))'; }
PROMPT=""
read -r -a words <<<"$STORY"
for ((k = 1; k <= ${#words[@]}; k++)); do
    p="${words[*]:0:k}"
    n=$(ntok "$p")
    if [ "$n" -eq 32 ]; then PROMPT=$p; break; fi
    [ "$n" -gt 32 ] && break
done
[ -n "$PROMPT" ] || { echo "vs-llamacpp: no prefix of the story is exactly 32 tokens for this tokenizer" >&2; exit 2; }
GEN=$(( (GEN + 31) / 32 * 32 )); UB=$((32 + GEN))

median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f %.3f %.3f\n", m, a[1], a[NR]}'; }
llama_step() {
    # ms per forward: its "total time" over the steps it ran (one progress line each; a block whose
    # tokens are all decoded early ends early, so total / --diffusion-steps would undercount). Its log
    # through a pipe came back cut short now and then (seen 2026-12-02): up to 3 tries.
    local r
    for _ in 1 2 3; do r=$(llama_step_once 2>/dev/null) && { echo "$r"; return; }; done
    llama_step_once
}
llama_step_once() {
    "$LB/bin/llama-diffusion-cli" -m "$DLM" -p "$PROMPT" -ub "$UB" -c "$UB" -b "$UB" --diffusion-steps "$UB" \
        --diffusion-block-length 32 --temp 0 -t "$T" -tb "$T" 2>&1 |
        python3 -c 'import re,sys; t=sys.stdin.read(); n=len(re.findall(r"diffusion step: \d+/", t))
m=re.search(r"total time: ([0-9.]+)ms", t)
if not m or n == 0: sys.exit("vs-llamacpp: llama-diffusion-cli printed no timing (did it fail? run it by hand)")
print("%.3f" % (float(m.group(1)) / n))'
}
kv_step() {
    "$KV" generate -m "$DLM" -p "$PROMPT" -n "$GEN" --block 32 --steps "$GEN" --cache "$1" -t "$T" --stats 2>&1 |
        sed -n 's/.*per step (ms.*total \([0-9.]*\).*/\1/p'
}
llama_tg() {
    "$LB/bin/llama-bench" -m "$AR" -p 0 -n "$GEN" -t "$T" -r 1 -o csv 2>/dev/null |
        python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin))
if not r or "avg_ts" not in r[-1]: sys.exit("vs-llamacpp: llama-bench printed no result (did it fail? run it by hand)")
print(r[-1]["avg_ts"])'
}
kv_tg() {
    "$KV" generate -m "$AR" -p "$PROMPT" -n "$GEN" --temp 0 -t "$T" 2>&1 |
        sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p'
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
isa=$(grep -o -w -E 'avx512f|avx2|asimd|sve' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $cpu ($(nproc) cores; ISA: $isa); threads $T; $R repetitions, median [min-max]"
echo "llama.cpp: $LB ($("$LB/bin/llama-bench" --version 2>&1 | head -1 || true))"
echo "kvsieve: $KV; variants ${KVS_VARIANT:-auto}; OpenBLAS core ${OPENBLAS_CORETYPE:-auto}"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A S
for i in $(seq "$R"); do
    S[ll_step]+="$(llama_step) "
    for c in none prefix dual elastic; do S[kv_$c]+="$(kv_step $c) "; done
    S[ll_tg]+="$(llama_tg) "
    S[kv_tg]+="$(kv_tg) "
done
row() { echo "$1" | tr ' ' '\n' | grep -v '^$' | median; }
read -r LL LLmin LLmax <<<"$(row "${S[ll_step]}")"
printf '\n%-44s %22s %22s %8s\n' "row ($(basename "$DLM"), seq $UB, gen $GEN)" "llama.cpp" "kvsieve" "ratio"
for c in none prefix dual elastic; do
    read -r K Kmin Kmax <<<"$(row "${S[kv_$c]}")"
    printf '%-44s %9.2f [%5.2f-%5.2f] %9.2f [%5.2f-%5.2f] %7.2fx\n' "diffusion ms/step, kvsieve --cache $c" \
        "$LL" "$LLmin" "$LLmax" "$K" "$Kmin" "$Kmax" "$(echo "$LL / $K" | bc -l)"
done
read -r LT LTmin LTmax <<<"$(row "${S[ll_tg]}")"
read -r KT KTmin KTmax <<<"$(row "${S[kv_tg]}")"
printf '%-44s %9.1f [%5.0f-%5.0f] %9.1f [%5.0f-%5.0f] %7.2fx\n' "AR decode tokens/s ($(basename "$AR"))" \
    "$LT" "$LTmin" "$LTmax" "$KT" "$KTmin" "$KTmax" "$(echo "$KT / $LT" | bc -l)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
