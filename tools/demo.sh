#!/usr/bin/env bash
# tools/demo.sh — the first command to run: installs what is missing (as root; otherwise prints the
# apt-get command), configures and builds kvsieve, then shows what it is for, in under a minute on a
# 2-core machine after the build:
#   1. a diffusion decode twice — no cache, then the elastic cache with threshold decoding — the two
#      answers side by side with the wall-time speedup, the compute fraction and whether they agree;
#   2. an autoregressive decode of stories260K with H2O eviction at a 25% cache budget next to the
#      full cache, and the teacher-forced KL / top-1 agreement of that budget;
#   3. the bundled trained model kjv-ar-hd64 (models/) greedy with an f16 KV cache and with q8_0 keys
#      and q4_0 values, side by side, with the cache bytes of each;
#   4. QuantSpec self-speculative decoding on the same model (--speculative: qh8 cache, draft 3): its
#      acceptance rate and whether the output equals plain greedy decoding;
#   5. every diffusion cache schedule against no cache (speedup, agreement) as a table and an SVG
#      plot, written to build/demo/dlm-schedules.svg (the path is printed).
# Extra arguments go to every decode, e.g. `tools/demo.sh --backend vulkan`.
# Environment: DEMO_DLM_MODEL / DEMO_DLM_PROMPTS override the diffusion model and its prompts;
# DEMO_TASKS (default 4) the task cases evaluated from a task file; DEMO_THREADS (default 1) the CPU
# threads of every decode: the bundled models are so small that more threads mostly measure thread
# start-up and, on a busy 2-core machine, scheduling stalls.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kvs_setup

kvs_log "models: $(kvs_model_dirs | paste -sd " " -)"

# ---- the diffusion model: the one variable to change ------------------------------------------------
# The task-trained DLM (models/task-dlm/: a GGUF and a task file) replaces the small stories260K-llada
# when it is there. A task file is JSON lines {"task", "prompt", "answer", ...} (kvsieve eval --dlm
# --tasks) or plain text, one prompt a line.
DLM_MODEL="${DEMO_DLM_MODEL:-stories260K-llada-f32.gguf}"
DLM_PROMPTS="${DEMO_DLM_PROMPTS:-$KVSIEVE_ROOT/tools/data/dlm-prompts.txt}"
if [[ -z "${DEMO_DLM_MODEL:-}" ]] && compgen -G "$KVSIEVE_ROOT/models/task-dlm/*.gguf" >/dev/null; then
  DLM_MODEL="$(compgen -G "$KVSIEVE_ROOT/models/task-dlm/*.gguf" | head -1)"
  task="$(compgen -G "$KVSIEVE_ROOT/models/task-dlm/*.jsonl" | head -1 || true)"
  [[ -z "$task" ]] && task="$(compgen -G "$KVSIEVE_ROOT/models/task-dlm/*.txt" | head -1 || true)"
  [[ -z "${DEMO_DLM_PROMPTS:-}" && -n "$task" ]] && DLM_PROMPTS="$task"
fi
kvs_model_path "$DLM_MODEL" >/dev/null || kvs_die "diffusion model '$DLM_MODEL' not found in: $(kvs_model_dirs | paste -sd " " -)"
threads=(--threads "${DEMO_THREADS:-1}")
out_dir="$KVSIEVE_BUILD_DIR/demo"
mkdir -p "$out_dir"
# From the prompts: the first two, one a line (eval --dlm --prompts), and the first one as it is
# (newlines kept) with, from a JSON-lines task file, its expected answer, length and block; the first
# DEMO_TASKS cases (default 4) go to build/demo/tasks.jsonl for eval --dlm --tasks.
python3 - "$DLM_PROMPTS" "$out_dir" "${DEMO_TASKS:-4}" <<'PY'
import json, os, sys
prompts, answer, tasks, first, gen, block = [], "", [], None, 128, 32
for line in open(sys.argv[1], encoding="utf-8"):
    if line.lstrip().startswith("{") and len(tasks) < int(sys.argv[3]):
        tasks.append(line.rstrip("\n"))
    line = line.rstrip("\n")
    if not line.strip() or line.startswith("#"):
        continue
    if line.lstrip().startswith("{"):
        case = json.loads(line)
        if not prompts:
            answer, gen, block = case.get("answer", ""), case.get("gen", 64), case.get("block", 32)
        line = case["prompt"]
    if first is None:
        first = line
    if len(prompts) < 2:
        prompts.append(line.replace("\n", " "))
out = lambda name, text: open(os.path.join(sys.argv[2], name), "w", encoding="utf-8").write(text)
out("prompts.txt", "\n".join(prompts) + "\n")
out("prompt.txt", first or "")
out("answer.txt", answer)
out("gen.txt", "%d %d\n" % (gen, block))
out("tasks.jsonl", "".join(t + "\n" for t in tasks))
PY
prompt="$(cat "$out_dir/prompt.txt")"
read -r gen block <"$out_dir/gen.txt"

"$KVSIEVE_BIN" devices
echo

# ---- 1. diffusion: no cache vs elastic ----------------------------------------------------------
kvs_log "masked diffusion: $(basename "$DLM_MODEL"), $gen tokens in blocks of $block, threshold 0.9: no cache, then elastic"
dlm=(generate -m "$DLM_MODEL" -p "$prompt" -n "$gen" --block "$block" --threshold 0.9 --json "${threads[@]}")
# each decode runs three times, alternating, and the fastest run of each counts: the wall time of a
# sub-second decode on a shared machine is mostly the other processes' (same tokens every run)
for rep in 1 2 3; do
  for c in none elastic; do
    "$KVSIEVE_BIN" "${dlm[@]}" --cache "$c" "$@" >"$out_dir/dlm-$c.$rep.json"
  done
done
for c in none elastic; do
  python3 - "$out_dir/dlm-$c".[123].json >"$out_dir/dlm-$c.json" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
assert all(r["tokens"] == runs[0]["tokens"] for r in runs), "a repeated decode gave other tokens"
print(json.dumps(min(runs, key=lambda r: r["stats"]["seconds"])))
PY
done
python3 - "$prompt" "$out_dir/dlm-none.json" "$out_dir/dlm-elastic.json" "$(cat "$out_dir/answer.txt")" <<'PY'
import json, sys, textwrap
prompt, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
w = 44
left = textwrap.wrap(a["text"], w) or [""]
right = textwrap.wrap(b["text"], w) or [""]
print("prompt: %s" % prompt)
if len(sys.argv) > 4 and sys.argv[4]:
    print("expected answer: %s" % sys.argv[4].strip())
print("%-*s | %s" % (w, "no cache", "elastic cache"))
print("-" * w + "-+-" + "-" * w)
for i in range(max(len(left), len(right))):
    print("%-*s | %s" % (w, left[i] if i < len(left) else "", right[i] if i < len(right) else ""))
sa, sb = a["stats"], b["stats"]
same = sum(x == y for x, y in zip(a["tokens"], b["tokens"]))
n = max(len(a["tokens"]), len(b["tokens"]))
print("-" * w + "-+-" + "-" * w)
print("wall time (fastest of 3) %.3f s vs %.3f s: speedup %.2fx; compute fraction %.3f vs %.3f (rows %d vs %d)"
      % (sa["seconds"], sb["seconds"], sa["seconds"] / sb["seconds"], sa["compute_fraction"],
         sb["compute_fraction"], sa["rows_computed"], sb["rows_computed"]))
print("answers identical: %s (%d of %d tokens equal)" % ("yes" if a["tokens"] == b["tokens"] else "no", same, n))
PY
echo

# ---- 2. autoregressive: H2O at a 25% budget vs the full cache -------------------------------------
ar_model=stories260K-f32.v3.gguf
kvs_log "autoregressive: $ar_model, greedy, 128 tokens: full cache, then H2O keeping 25% of the tokens"
"$KVSIEVE_BIN" generate -m "$ar_model" -n 128 --json "${threads[@]}" "$@" >"$out_dir/ar-full.json"
"$KVSIEVE_BIN" generate -m "$ar_model" -n 128 --policy h2o --budget 0.25 --json "${threads[@]}" "$@" >"$out_dir/ar-h2o.json"
python3 - "$out_dir/ar-full.json" "$out_dir/ar-h2o.json" <<'PY'
import json, sys, textwrap
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
w = 44
left, right = textwrap.wrap(a["text"], w), textwrap.wrap(b["text"], w)
print("%-*s | %s" % (w, "full cache", "h2o, 25% budget"))
print("-" * w + "-+-" + "-" * w)
for i in range(max(len(left), len(right))):
    print("%-*s | %s" % (w, left[i] if i < len(left) else "", right[i] if i < len(right) else ""))
print("-" * w + "-+-" + "-" * w)
first = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y), None)
same = sum(x == y for x, y in zip(a["tokens"], b["tokens"]))
sa, sb = a["stats"], b["stats"]
print("cache peak %.1f KiB vs %.1f KiB; %d of %d tokens equal%s" % (
    sa["cache_bytes_peak"] / 1024, sb["cache_bytes_peak"] / 1024, same, len(a["tokens"]),
    "" if first is None else ", first difference at token %d" % first))
PY
text="$(kvs_model_path ref_greedy_256.txt)" || kvs_die "ref_greedy_256.txt not found"
# the published file opens with three lines of its generator's debug output (the hparams, the first
# ids, the first logits): the model's own text is what follows
grep -v -e "^{'dim'" -e '^first 10 ids' -e '^logits\[pos0\]' "$text" >"$out_dir/ar-text.txt"
"$KVSIEVE_BIN" eval -m "$ar_model" --text "$out_dir/ar-text.txt" --policies h2o --budgets 0.25 --windows 1 --json "${threads[@]}" "$@" >"$out_dir/ar-eval.json"
python3 - "$out_dir/ar-eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = [c for c in r["cells"] if c.get("policy") == "h2o"][0]
print("teacher-forced on the model's own 256-token text: KL(full || h2o 25%%) = %.5f nats/token, "
      "top-1 agreement %.1f%%" % (c["kl"], 100 * c["top1_agreement"]))
PY
echo

# ---- 3. the bundled trained model: a 4-bit KV cache next to f16 -----------------------------------
# kjv-ar-hd64 (models/, trained on the KJV, head_dim 64) takes the block types; q8_0 keys with q4_0
# values is the best pair with a 4-bit half in README's fidelity table (KL 0.0035, top-1 96.8%)
kjv="kjv-ar-hd64.gguf"
kjv_prompt="And God said unto Moses"
kvs_model_path "$kjv" >/dev/null || kvs_die "$kjv not found in: $(kvs_model_dirs | paste -sd " " -)"
kvs_log "trained model: $kjv, greedy, 128 tokens: f16 KV cache, then K q8_0 / V q4_0"
kjv_gen=(generate -m "$kjv" -p "$kjv_prompt" -n 128 --stats --json "${threads[@]}")
"$KVSIEVE_BIN" "${kjv_gen[@]}" --cache-type-k f16 --cache-type-v f16 "$@" >"$out_dir/kjv-f16.json"
"$KVSIEVE_BIN" "${kjv_gen[@]}" --cache-type-k q8_0 --cache-type-v q4_0 "$@" >"$out_dir/kjv-q4.json"
python3 - "$kjv_prompt" "$out_dir/kjv-f16.json" "$out_dir/kjv-q4.json" <<'PY'
import json, sys, textwrap
prompt, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
w = 44
left, right = textwrap.wrap(a["text"], w), textwrap.wrap(b["text"], w)
print("prompt: %s" % prompt)
print("%-*s | %s" % (w, "f16 cache", "K q8_0 / V q4_0 cache"))
print("-" * w + "-+-" + "-" * w)
for i in range(max(len(left), len(right))):
    print("%-*s | %s" % (w, left[i] if i < len(left) else "", right[i] if i < len(right) else ""))
print("-" * w + "-+-" + "-" * w)
sa, sb = a["stats"], b["stats"]
first = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y), None)
same = sum(x == y for x, y in zip(a["tokens"], b["tokens"]))
print("cache peak %.1f KiB (f16) vs %.1f KiB (K q8_0, V q4_0): %.2fx smaller; %d of %d tokens equal%s" % (
    sa["cache_bytes_peak"] / 1024, sb["cache_bytes_peak"] / 1024, sa["cache_bytes_peak"] / sb["cache_bytes_peak"],
    same, len(a["tokens"]), "" if first is None else ", first difference at token %d" % first))
PY
echo

# ---- 4. QuantSpec: self-speculative decoding on the hierarchical 4/8-bit cache ---------------------
kvs_log "QuantSpec on $kjv: draft 3 tokens from the cache's 4-bit view, verify with its 8-bit reading (qh8), 128 tokens"
"$KVSIEVE_BIN" generate -m "$kjv" -p "$kjv_prompt" -n 128 --speculative --json "${threads[@]}" "$@" >"$out_dir/kjv-spec.json"
python3 - "$out_dir/kjv-spec.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["stats"]["speculative"]
print("%d verify steps: acceptance %.3f (%d of %d drafted), %.2f tokens per verify step" % (
    s["verify_steps"], s["acceptance_rate"], s["accepted"], s["drafted"], s["tokens_per_verify_step"]))
print("output equals plain greedy decoding (same qh8 cache): %s (%d tokens)" % (
    "yes" if j["tokens"] == s["plain_tokens"] else "no", len(j["tokens"])))
print("fastest of %d interleaved runs: plain %.4f s, speculative %.4f s (%.2fx wall; this model is too small "
      "for drafting to pay: README, QuantSpec)" % (s["repeats"], s["plain_seconds"], s["seconds"], s["speedup"]))
PY
echo

# ---- 5. every diffusion schedule: table and SVG ---------------------------------------------------
svg="$out_dir/dlm-schedules.svg"
if [[ "$DLM_PROMPTS" == *.jsonl ]] && "$KVSIEVE_BIN" eval --dlm --help | grep -q -- '--tasks'; then
  # a task file: accuracy against the answers per schedule (kvsieve eval --dlm --tasks)
  kvs_log "diffusion cache schedules on the first $(wc -l <"$out_dir/tasks.jsonl") tasks of $(basename "$DLM_PROMPTS"): accuracy and speedup"
  "$KVSIEVE_BIN" eval --dlm -m "$DLM_MODEL" --tasks "$out_dir/tasks.jsonl" --plot "$svg" "${threads[@]}" "$@"
else
  kvs_log "diffusion cache schedules vs no cache on $(wc -l <"$out_dir/prompts.txt") prompts, 64 tokens"
  "$KVSIEVE_BIN" eval --dlm -m "$DLM_MODEL" --prompts "$out_dir/prompts.txt" --gen 64 --long-prompts 0 \
    --plot "$svg" "${threads[@]}" "$@"
fi
echo
kvs_log "SVG (speedup, compute fraction and agreement per schedule) written to $svg"
