#!/usr/bin/env bash
# Issue 20's CLI defects, each as a new user met them: a directory given as a text file, defaults
# longer than a small model's context (the tiny seed model has context 32), -n off by one, a budget
# printed as 0.00, flags that do not apply to the model, a one-token budget (--budget-tokens,
# --budgets Nt), NaN weights. Usage: test_reliability_cli.sh KVSIEVE TEXT CORPUS_GGUF_DIR. TEXT falls back to
# $KVSIEVE_MODELS/../text/, then to the repository's models/ref_greedy_256.txt (a clone without
# ../shared); skips with 77 only when no text is found.
set -u
exe=$1
text=$2
seeds=$3
if [ ! -f "$text" ] && [ -n "${KVSIEVE_MODELS:-}" ] && [ -f "$KVSIEVE_MODELS/../text/$(basename "$text")" ]; then
  text="$KVSIEVE_MODELS/../text/$(basename "$text")"
fi
if [ ! -f "$text" ]; then
  text="$(cd "$(dirname "$0")/.." && pwd)/models/ref_greedy_256.txt"
fi
[ -f "$text" ] || { echo "SKIP: no $text"; exit 77; }
tiny="$seeds/tiny-f32.gguf"
llada="$seeds/tiny-llada.gguf"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
# run WANT_RC FRAGMENT ARGS...: kvsieve ARGS exits WANT_RC and stdout+stderr contain FRAGMENT
run() {
  local want=$1 frag=$2
  shift 2
  "$exe" "$@" >"$dir/out" 2>"$dir/err" </dev/null
  local rc=$?
  if [ $rc -ne "$want" ] || ! cat "$dir/out" "$dir/err" | grep -q -- "$frag"; then
    echo "FAIL: kvsieve $* -> rc $rc (want $want), output lacks '$frag':"
    cat "$dir/err"
    fails=$((fails + 1))
  else
    echo "ok: kvsieve $* -> $rc, '$frag'"
  fi
}
# a directory where a text file is expected: a usage error, never a 2^63-byte malloc
run 2 "is a directory" eval -m "$tiny" --text "$dir" --windows 1
run 2 "is a directory" train --kind retention -m "$tiny" --text "$dir" --out "$dir/p.gguf" --steps 1 --ctx 16
# a FIFO with no writer: refused at once, never a blocked open (found by a fresh-clone tester)
mkfifo "$dir/fifo"
run 2 "not a regular file" eval -m "$tiny" --text "$dir/fifo" --windows 1
run 2 "not a regular file" eval --dlm --tasks "$dir/fifo"
run 2 "not a regular file" generate -m "$dir/fifo" -p Once
run 2 "not a regular file" generate -m "$tiny" -p Once --policy retention --policy-file "$dir/fifo" -n 4
# a KVS_VARIANT this CPU cannot run (NEON on x86, AVX2 on aarch64), or no such variant: a usage error
if [ "$(uname -m)" = aarch64 ]; then novar=dwt:avx2; else novar=dwt:neon; fi
KVS_VARIANT=$novar run 2 "cannot run on cpu" generate -m "$tiny" -n 4
KVS_VARIANT=dwt:nosuch run 2 "dwt" generate -m "$tiny" -n 4
# eviction on a diffusion model: refused (its next-token perplexity meant nothing), not garbage
run 2 "is a diffusion model" eval -m "$llada" --text "$text" --policies h2o --budgets 0.5 --windows 1
# d2cache on Dream (shifted logits): refused before the table's first row, as generate refuses it
# (eval --dlm failed mid-table with exit 1)
dream="$(cd "$(dirname "$0")/.." && pwd)/models/tiny-dream.gguf"
run 2 "does not support 'dream'" eval --dlm -m "$dream" --prompts "$text" --gen 32 --caches prefix,d2cache --long-prompts 0
run 2 "does not support 'dream'" generate -m "$dream" -n 32 --cache d2cache
# WaveFilter over spa: refused before decoding, not a mid-run failure
run 2 "does not run over spa" generate -m "$llada" -n 16 --block 16 --cache spa --wavefilter
# a spa proxy rank above what the model has (tiny-llada: dim 8, kv dim 4): refused with the range
# before decoding (it failed at the first step with exit 1)
run 2 "1..4 for this model" generate -m "$llada" -n 16 --block 16 --cache spa --spa-rank 100000
run 2 "1..4 for this model" eval --dlm -m "$llada" --prompts "$text" --gen 16 --block 16 --caches spa --spa-rank 5 --long-prompts 0
# an option's value that is --help shows the help (it was read as a file name)
run 0 "usage:" eval --dlm --tasks --help
# threads: more than the cores is a note, beyond 1024 a usage error naming --threads
run 0 "more than this machine" generate -m "$tiny" -n 2 --no-stream -t 1024
run 2 "--threads 1025: want 0" generate -m "$tiny" -n 2 --no-stream -t 1025
# --speculative on a model whose head_dim is not a multiple of 32: the message names --speculative
# (it named --cache-type-k, which the user never gave)
run 2 "--speculative/--draft decode on a qh8 cache" generate -m "$tiny" -n 4 --speculative
# an output that cannot be written is a failure (exit 1), never exit 0 with the result lost
if [ -c /dev/full ]; then
  "$exe" generate -m "$tiny" -n 4 --no-stream >/dev/full 2>"$dir/err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -q "cannot write the output to standard output (/dev/full): No space left on device" "$dir/err"; then
    echo "FAIL: generate > /dev/full -> rc $rc"; cat "$dir/err"; fails=$((fails + 1))
  else
    echo "ok: generate > /dev/full -> 1"
  fi
fi
# outputs that are a FIFO (the open would block) or a symbolic link (the rename would replace it)
run 2 "not a regular file" eval -m "$tiny" --text "$text" --policies h2o --budgets 0.5 --windows 1 --plot "$dir/fifo"
ln -s "$dir/target.gguf" "$dir/link.gguf"
run 2 "is a symbolic link" train --kind retention -m "$tiny" --text "$text" --out "$dir/link.gguf" --steps 1 --ctx 16
[ ! -e "$dir/target.gguf" ] || { echo "FAIL: train wrote through the link"; fails=$((fails + 1)); }
# WaveFilter's options without --wavefilter: refused, as the other schedules' options are
run 2 "^kvsieve generate: --wf-levels is for WaveFilter, which is not run (give --wavefilter)$" generate -m "$llada" -n 16 --block 16 --wf-levels 9
# ... also at its default value (it compared against the defaults: --wf-levels 3 passed, unused)
run 2 "--wf-levels is for WaveFilter, which is not run" generate -m "$llada" -n 16 --block 16 --wf-levels 3
# eval --dlm runs the schedules of --caches and WaveFilter at each --budgets value: generate's
# --cache, --wavefilter and --wf-budget are refused there (they were ignored), as are --wf-* when no
# WaveFilter row runs (the check generate and eval --dlm share, dlm_cache_check_flags)
run 2 "^kvsieve eval --dlm: --cache elastic: this command runs the schedules of --caches (give --caches elastic)$" \
  eval --dlm -m "$llada" --prompts "$text" --gen 16 --cache elastic
run 2 "^kvsieve eval --dlm: --wavefilter: this command runs every schedule also with WaveFilter at each --budgets" \
  eval --dlm -m "$llada" --prompts "$text" --gen 16 --wavefilter
run 2 "^kvsieve eval --dlm: --wf-budget: this command takes the WaveFilter budgets from --budgets F,F$" \
  eval --dlm -m "$llada" --prompts "$text" --gen 16 --wf-budget 0.3
run 2 "^kvsieve eval --dlm: --wf-family is for WaveFilter, which is not run (no --budgets rows)$" \
  eval --dlm -m "$llada" --prompts "$text" --gen 16 --long-prompts 0 --wf-family db2
run 2 "^kvsieve eval --dlm --tasks: --cache prefix: this command runs the schedules of --caches" eval --dlm --tasks "$text" --cache prefix
# a policy file for a policy that reads none; a ThinK ratio that prunes no channel says so
run 2 "for the learned policies" generate -m "$tiny" -n 4 --policy h2o --budget 0.5 --policy-file "$dir/none.gguf"
run 0 "nothing is pruned" generate -m "$tiny" -n 8 --no-stream --policy h2o --budget 0.5 --think 0.01
# defaults longer than the model's context 32: use the context and say so
run 0 "generating 32 tokens" generate -m "$tiny" --no-stream
run 0 "using the model's context 32" eval -m "$tiny" --text "$text" --policies h2o --budgets 0.5 --windows 1
# -n = context with a one-token prompt (BOS): the last token needs no cache slot
run 0 "autoregressive" generate -m "$tiny" -n 32 --no-stream
run 2 "exceeds the model context 32" generate -m "$tiny" -n 33
run 0 "the context stays 32" generate -m "$tiny" -c 4096 -n 8 --no-stream
run 2 "exceeds the model context" generate -m "$tiny" -p "Once upon a time there" -n 30
# budgets keep their digits; a one-token budget as Nt
run 0 "^h2o  *0.001 " eval -m "$tiny" --text "$text" --policies h2o --budgets 0.001,1t --windows 1
grep -q "^h2o  *1t  *1 " "$dir/out" || { echo "FAIL: no '1t' row with 1 token:"; cat "$dir/out"; fails=$((fails + 1)); }
# flags that do not apply to the model are refused both ways
run 2 "^kvsieve generate: --temp applies to autoregressive models; .llada. is a diffusion model$" generate -m "$llada" --temp 0.5
run 2 "--seed applies to autoregressive models" generate -m "$llada" --seed 3
run 2 "--block applies to diffusion models" generate -m "$tiny" --block 8
run 2 "--steps applies to diffusion models" generate -m "$tiny" --steps 4
run 2 "--threshold is for diffusion models" generate -m "$tiny" --threshold 0.5
# --budget-tokens N: N tokens per kv head (1 was impossible: --budget 1 is 100%)
if "$exe" generate -m stories260K.bin -n 1 >/dev/null 2>&1; then
  run 0 '"budget_tokens":1' generate -m stories260K.bin -p "Once upon a time" -n 40 --policy h2o --budget-tokens 1 --json
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["stats"]; assert s["evictions"] > 0 and s["budget_tokens"] == 1, s' \
    "$dir/out" || { echo "FAIL: --budget-tokens 1 did not evict to one token"; fails=$((fails + 1)); }
else
  echo "note: stories260K.bin not found: --budget-tokens run skipped"
fi
# the summary line names the token budget, not the default fraction
run 0 "budget 4 tokens" generate -m "$tiny" -p Once -n 20 --policy h2o --budget-tokens 4 --no-stream
run 2 "not both" generate -m "$tiny" -n 8 --policy h2o --budget 0.5 --budget-tokens 1
run 2 "--budget-tokens needs --policy" generate -m "$tiny" -n 8 --budget-tokens 1
run 2 "budget-tokens must be >= 1" generate -m "$tiny" -n 8 --policy h2o --budget-tokens 0
# NaN in a weight (a damaged file): a clear error naming non-finite logits, never text decoded from
# NaN (the CPU attention used to turn a NaN softmax sum into zeros). nan_copy SRC DST TENSOR copies a
# GGUF with the first value of an F32 tensor set to NaN.
nan_copy() {
  python3 - "$@" <<'PY'
import struct, sys
# nanpatch.py IN OUT TENSOR: copies a GGUF (v2/v3) with the first value of F32 tensor TENSOR set to NaN
b = bytearray(open(sys.argv[1], 'rb').read())
o = 4
ver, = struct.unpack_from('<I', b, o); o += 4
nt, nkv = struct.unpack_from('<QQ', b, o); o += 16
def s(o):
    n, = struct.unpack_from('<Q', b, o); return b[o + 8:o + 8 + n].decode(), o + 8 + n
SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def val(t, o):
    if t == 8: return s(o)
    if t == 9:
        et, n = struct.unpack_from('<IQ', b, o); o += 12
        v = None
        for _ in range(n): v, o = val(et, o)
        return None, o
    return (struct.unpack_from({4: '<I', 5: '<i', 6: '<f', 10: '<Q', 11: '<q'}.get(t, '<B'), b, o)[0] if t in (4, 5, 6, 10, 11) else None), o + SZ[t]
align = 32
for _ in range(nkv):
    k, o = s(o)
    t, = struct.unpack_from('<I', b, o); o += 4
    v, o = val(t, o)
    if k == 'general.alignment': align = v
infos = []
for _ in range(nt):
    name, o = s(o)
    nd, = struct.unpack_from('<I', b, o); o += 4
    o += 8 * nd
    typ, off = struct.unpack_from('<IQ', b, o); o += 12
    infos.append((name, typ, off))
base = (o + align - 1) // align * align
for name, typ, off in infos:
    if name == sys.argv[3]:
        assert typ == 0, 'not F32'
        struct.pack_into('<f', b, base + off, float('nan'))
        open(sys.argv[2], 'wb').write(b)
        sys.exit(0)
sys.exit('no tensor ' + sys.argv[3])
PY
}
for t in blk.0.attn_norm.weight blk.1.ffn_down.weight output_norm.weight; do
  nan_copy "$tiny" "$dir/nan.gguf" "$t" || fails=$((fails + 1))
  run 1 "non-finite values" generate -m "$dir/nan.gguf" -p Once -n 8 --no-stream
  nan_copy "$llada" "$dir/nanl.gguf" "$t" || fails=$((fails + 1))
  run 1 "non-finite values" generate -m "$dir/nanl.gguf" -n 16 --block 16 --no-stream
done
# a bad parameter is named alone with its range, not every parameter of the schedule or command
# (a fresh-clone run got "family 0, levels 9 (1..8), rho 0.5 ([0, 1]), budget 0.5 ..." for --wf-levels 9)
run 2 "^kvsieve generate: --wf-levels 9: want 1..8$" generate -m "$llada" -n 16 --block 16 --wavefilter --wf-levels 9
run 2 "^kvsieve generate: --gamma 2: want a threshold in \[0, 1\]$" generate -m "$llada" -n 16 --block 16 --cache elastic --gamma 2
run 2 "^kvsieve generate: --spa-refresh 0: want >= 1$" generate -m "$llada" -n 16 --block 16 --cache spa --spa-refresh 0
run 2 "^kvsieve generate: --top-p 2: want a mass in (0, 1\]$" generate -m "$tiny" -n 4 --top-p 2
run 2 "^kvsieve generate: --scope, --sink need --policy$" generate -m "$tiny" -n 4 --scope head --sink 2
run 2 "^kvsieve generate: --track is for the elastic cache, which is not run$" generate -m "$llada" -n 16 --block 16 --track 2
run 2 "^kvsieve eval --dlm: --long-len 1: want >= 2$" eval --dlm -m "$llada" --prompts "$text" --long-len 1
run 2 "^kvsieve eval: --budgets ',': an empty item (want comma-separated budgets)$" eval -m "$tiny" --text "$text" --policies h2o --budgets ,
run 2 "^kvsieve bench model: --steps 40: want 1..32 (--gen)$" bench model --shape tiny --steps 40
# sizes below 0.1 MiB in KiB or bytes: the tiny model's cache read "cache peak 0.00 MiB"
run 0 "cache peak [0-9]* bytes (allocated [0-9]* bytes; K f32, V f32)" generate -m "$tiny" -p Once -n 4 --no-stream
run 0 "^model [0-9.]* KiB (" generate -m "$tiny" -p Once -n 4 --no-stream
# --no-stream prints what streaming prints (the prompt, then the generated text; it printed the
# generated text alone), --json has the prompt as its own field beside "text"
repo="$(cd "$(dirname "$0")/.." && pwd)"
for m in "$repo/models/stories260K-f32.v3.gguf" "$repo/models/stories260K-llada-f32.gguf"; do
  nb=(); case $m in *llada*) nb=(--block 16) ;; esac
  "$exe" generate -m "$m" -p "Once upon" -n 16 "${nb[@]}" >"$dir/s.txt" 2>/dev/null
  "$exe" generate -m "$m" -p "Once upon" -n 16 "${nb[@]}" --no-stream >"$dir/n.txt" 2>/dev/null
  if cmp -s "$dir/s.txt" "$dir/n.txt" && grep -q "^Once upon" "$dir/n.txt"; then echo "ok: --no-stream = streamed ($m)"
  else echo "FAIL: --no-stream differs from streaming ($m):"; cat "$dir/s.txt" "$dir/n.txt"; fails=$((fails + 1)); fi
  run 0 '"prompt":"Once upon"' generate -m "$m" -p "Once upon" -n 16 "${nb[@]}" --json
done
# generate and eval --dlm agree on short lengths: without --block a length below 32 is one block
# (eval --dlm --gen 16 ran, generate -n 16 was refused for the default --block 32); a --block given
# must divide the length in both; --steps is refused where it was cut (above -n) or ignored (--threshold)
llr="$repo/models/stories260K-llada-f32.gguf"
run 0 "16 tokens in" generate -m "$llr" -p Once -n 16 --no-stream
run 2 "^kvsieve generate: -n 16 must be a multiple of --block 32$" generate -m "$llr" -n 16 --block 32
run 2 "^kvsieve eval --dlm: --gen: bad length '16' (want a multiple of --block 32)$" \
  eval --dlm -m "$llr" --prompts "$text" --gen 16 --block 32 --long-prompts 0
run 2 "^kvsieve generate: --steps 64 exceeds -n 32" generate -m "$llr" -n 32 --steps 64
run 2 "^kvsieve generate: --steps: --threshold 0.5 commits by confidence" generate -m "$llr" -n 32 --steps 4 --threshold 0.5
# --compare says what it times (a fresh-clone run on PoCL got 0.10x: the cold kernel compiles of the
# blocks after the first were timed); the timed runs follow a full untimed decode of each
run 0 "each is timed warm" generate --help
run 0 "speedup [0-9.]*x, compute fraction" generate -m "$llr" -p Once -n 32 --cache prefix --compare --no-stream
# an unusable POCL_CACHE_DIR: PoCL lists no device (CL_DEVICE_NOT_FOUND) and the OpenCL backend read
# "0 devices" / "device 0 does not exist (0 found)"; now the error names the cache directory
if "$exe" devices --no-open 2>/dev/null | grep -q "Portable Computing Language"; then
  POCL_CACHE_DIR=/dev/null/pocl run 2 "POCL_CACHE_DIR=/dev/null/pocl: /dev/null is not a directory); set POCL_CACHE_DIR to a writable" \
    generate -m "$tiny" -n 4 --backend opencl
  POCL_CACHE_DIR=/dev/null/pocl run 1 "^opencl: error: opencl: the PoCL platform lists no device because its kernel cache" devices
else
  echo "note: no PoCL OpenCL platform: the POCL_CACHE_DIR case is skipped"
fi
# --sink / --window at least the budget in rows: the protected rows filled the budget and every
# eviction dropped the newest tokens (exit 0, eval KL 0.72 vs 0.008); refused, naming both and the budget
kjv="$repo/models/kjv-ar-hd64.gguf"
run 2 "^kvsieve generate: kvs_evictor_create: policy 'streaming' always keeps sink 1000 + window 0 rows, at least the budget of 16 rows" \
  generate -m "$kjv" -n 64 --policy streaming --budget 0.25 --sink 1000
run 2 "policy 'h2o' always keeps sink 0 + window 1000 rows, at least the budget of 16 rows" \
  generate -m "$kjv" -n 64 --policy h2o --budget 0.25 --window 1000
run 2 "^kvsieve eval: kvs_evictor_create: policy 'streaming' always keeps sink 64 + window 0 rows" \
  eval -m "$kjv" --text "$text" --ctx 64 --windows 1 --policies streaming --budgets 0.5 --sink 64
run 0 "eviction: streaming, budget 0.25" generate -m "$kjv" -n 64 --policy streaming --budget 0.25 --sink 4 --stats
# -c N without -n: the automatic -n fitted the model's context (63 tokens for context 64), not -c
run 0 "^kvsieve generate: -n not given: generating 8 tokens after the 9-token prompt (--ctx-size 16)$" \
  generate -m "$kjv" -c 16 -p "And God said" --no-stream
# --json "text" is the generated text exactly as streamed after the prompt (it dropped the leading space)
"$exe" generate -m "$kjv" -p "And God said" -n 4 --no-stream >"$dir/plain" 2>/dev/null
"$exe" generate -m "$kjv" -p "And God said" -n 4 --json >"$dir/json" 2>/dev/null
if python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); s=open(sys.argv[2]).read().rstrip("\n"); sys.exit(0 if j["prompt"]+j["text"]==s and j["text"].startswith(" ") else 1)' "$dir/json" "$dir/plain"; then
  echo "ok: --json prompt + text == the streamed text"
else
  echo "FAIL: --json prompt + text differs from the streamed text: $(cat "$dir/plain") vs $(head -3 "$dir/json")"
  fails=$((fails + 1))
fi
# --speculative -n 1: the prefill's cache rows were not counted ("cache peak 0 bytes (allocated 576 bytes)")
run 0 "cache peak 576 bytes (allocated 576 bytes" generate -m "$kjv" -n 1 --speculative --no-stream
# silently accepted values: an empty --budgets item was dropped, a token budget above the context kept
# everything, --seed -1 was a fixed seed (llama.cpp: random)
run 2 "^kvsieve eval: --budgets '0.5,,0.25': an empty item" eval -m "$kjv" --text "$text" --budgets 0.5,,0.25 --windows 1
run 2 "^kvsieve eval: --budgets: '100000' is above the window of --ctx 64 tokens" \
  eval -m "$kjv" --text "$text" --ctx 64 --budgets 0.5,100000 --windows 1
run 2 "^kvsieve generate: --budget 100000: a token count above the model context" generate -m "$kjv" -n 8 --policy h2o --budget 100000
run 2 "^kvsieve generate: --budget-tokens 100: a token count above the --ctx-size 32" \
  generate -m "$kjv" -n 8 -c 32 --policy h2o --budget-tokens 100
run 0 "^kvsieve generate: --seed -1: random seed [0-9]*$" generate -m "$kjv" -n 4 --temp 1 --seed -1 --no-stream
run 2 "^kvsieve generate: --seed -2: want >= 0, or -1 for a random seed$" generate -m "$kjv" -n 4 --temp 1 --seed -2
run 2 "^kvsieve eval --dlm: --gen: an empty item in the comma-separated list$" eval --dlm -m "$llr" --prompts "$text" --gen 32,,64
# diffusion-schedule options on an autoregressive model were silently ignored (on a diffusion model
# they are refused without their schedule); --window / --rerotate without --policy likewise
for f in "--gamma 0.5" "--track 2" "--reload 2" "--wf-levels 2" "--wf-budget 0.5" "--spa-rank 4" "--spa-uniform" \
  "--elastic-sim rows" "--elastic-block-refresh 0"; do
  # shellcheck disable=SC2086
  run 2 "^kvsieve generate: ${f%% *} is for diffusion models; 'llama' is autoregressive$" generate -m "$kjv" -n 8 $f
done
run 2 "^kvsieve generate: --window needs --policy on autoregressive models ('llama')$" generate -m "$kjv" -n 8 --window 8
run 2 "^kvsieve generate: --rerotate needs --policy on autoregressive models ('llama')$" generate -m "$kjv" -n 8 --rerotate
echo "$fails failures"
[ $fails -eq 0 ]
