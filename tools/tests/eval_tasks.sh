#!/usr/bin/env bash
# CLI test of `kvsieve eval --dlm --tasks FILE` on stories260K-llada: task files built from the
# reference decodes of stories260K-llada-ref.json, so `none` (and the LLaDA baseline) must answer
# them exactly (accuracy 1) and a wrong answer must count 0; the table's shape and counts; the same
# decoded answers for `none` on every other backend present; one-line errors (exit 2) naming
# FILE:LINE for bad task files.
set -euo pipefail
kvsieve="$1"
# the fixtures: $KVSIEVE_MODELS, else the repository's models/ (a bare clone has them), else
# ../shared/models (models.sh)
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/models.sh"
models=$(kvs_test_models stories260K-llada-ref.json)
export KVSIEVE_MODELS="$models"
fail() { echo "FAIL: $*" >&2; exit 1; }
ref="$models/stories260K-llada-ref.json"
if [ ! -f "$ref" ] || [ ! -f "$models/stories260K-llada-f32.gguf" ]; then
  echo "SKIP: model fixtures not found (set KVSIEVE_MODELS)"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# one token per step: reference cases 1 ("Once upon a time", gen 64 block 32) and 4 ("", gen 32);
# threshold 0.9: case 3 ("Lily wanted to bake a cake", gen 96)
python3 - "$ref" "$tmp" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
def row(task, c, answer=None):
    return json.dumps(dict(task=task, prompt=c["prompt"], answer=answer if answer is not None else c["text"],
                           gen=c["gen"], block=c["block"])) + "\n"
with open(sys.argv[2] + "/steps.jsonl", "w") as f:
    f.write("# reference decodes, one token per step\n\n")
    f.write(row("ref", cases[0]) + row("ref", cases[3]))
    f.write(row("wrong", cases[3], "Amy was a big dog."))
with open(sys.argv[2] + "/thr.jsonl", "w") as f:
    f.write(row("ref", cases[2], "  " + cases[2]["text"] + " \n"))  # answers compare stripped
PY

out=$("$kvsieve" eval --dlm --tasks "$tmp/steps.jsonl" --threshold 0 --caches none,elastic --budgets 0.5 --threads 1 --json --answers)
python3 - "$out" "$ref" <<'PY' || fail "one-token-per-step json"
import json, sys
j = json.loads(sys.argv[1])
ref = json.load(open(sys.argv[2]))["cases"]
assert j["cases"] == 3 and j["threshold"] == 0, j
rows = {(r["task"], r["schedule"]): r for r in j["rows"]}
names = ["llada-baseline", "none", "none+wavefilter@0.50", "elastic", "elastic+wavefilter@0.50"]
assert sorted(rows) == sorted((t, n) for t in ("ref", "wrong") for n in names), sorted(rows)
for n in ("llada-baseline", "none"):
    r = rows[("ref", n)]
    assert r["cases"] == 2 and r["correct"] == 2 and r["accuracy"] == 1.0, r
    assert r["answers"] == [ref[0]["text"].strip(), ref[3]["text"].strip()], r["answers"]
    assert r["steps_mean"] == 48.0 and r["tokens_per_step"] == 1.0, r
    assert r["compute_fraction"] == 1.0 and r["compute_fraction_llada"] == 1.0, r
    w = rows[("wrong", n)]
    assert w["cases"] == 1 and w["correct"] == 0 and w["accuracy"] == 0.0, w
    assert w["answers"] == [ref[3]["text"].strip()], w
for n in names:
    r = rows[("ref", n)]
    assert r["speedup_llada"] > 0 and r["speedup_none"] > 0 and r["seconds"] > 0, r
    assert 0 < r["compute_fraction"] <= 1.0, r
    assert r["steps_mean"] == 48.0, r  # one token per step: steps = gen whatever the cache
assert rows[("ref", "elastic")]["compute_fraction"] < 1.0
PY

# threshold 0.9 (the default): `none` reproduces reference case 3 (its decode never reaches 0.9: 96 steps)
out=$("$kvsieve" eval --dlm --tasks "$tmp/thr.jsonl" --caches none --budgets 0 --threads 1 --json)
python3 - "$out" <<'PY' || fail "threshold json"
import json, sys
j = json.loads(sys.argv[1])
rows = {r["schedule"]: r for r in j["rows"]}
assert sorted(rows) == ["llada-baseline", "none"], sorted(rows)
for r in rows.values():
    assert r["accuracy"] == 1.0 and r["steps_mean"] == 96.0, r
PY

# the text table and the plot
out=$("$kvsieve" eval --dlm --tasks "$tmp/steps.jsonl" --task wrong --caches dual --budgets 0 --threads 1 --plot "$tmp/p.svg")
printf '%s\n' "$out" | grep -Eq '^wrong +llada-baseline +1 +0\.000 +32\.0 +1\.00 +1\.000 +1\.000 +1\.00x' || fail "table: $out"
printf '%s\n' "$out" | grep -Eq '^wrong +dual +1 ' || fail "table (dual row): $out"
[ "$(printf '%s\n' "$out" | grep -c '^wrong ')" -eq 3 ] || fail "table rows: $out"
grep -q '<svg' "$tmp/p.svg" || fail "plot: no svg"
grep -q 'llada-baseline' "$tmp/p.svg" || fail "plot: no baseline bar label"

# every other backend present decodes the same answers for none
cpu=$("$kvsieve" eval --dlm --tasks "$tmp/steps.jsonl" --threshold 0 --caches none --budgets 0 --threads 1 --json --answers)
for b in opencl vulkan; do
  if ! "$kvsieve" devices --json 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin)
sys.exit(0 if any(x['name'] == '$b' and x.get('built') and x.get('devices') for x in j['backends']) else 1)"; then
    echo "note: no $b device, cross-backend check skipped"; continue
  fi
  other=$("$kvsieve" eval --dlm --tasks "$tmp/steps.jsonl" --threshold 0 --caches none --budgets 0 --backend "$b" --json --answers)
  python3 - "$cpu" "$other" "$b" <<'PY' || fail "$b answers differ from cpu"
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
ans = lambda j: {(r["task"], r["schedule"]): (r["answers"], r["accuracy"]) for r in j["rows"]}
assert ans(a) == ans(b), (sys.argv[3], ans(a), ans(b))
PY
  echo "$b: same answers as cpu"
done

# errors: one line on stderr naming FILE:LINE, exit 2
expect_usage() {
  local want="$1" rc=0 err
  shift
  err=$("$kvsieve" eval --dlm "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -eq 2 ] || fail "eval --dlm $* exited $rc, want 2 ($err)"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "eval --dlm $*: want one error line, got: $err"
  printf '%s\n' "$err" | grep -qF -- "$want" || fail "eval --dlm $*: error '$err' lacks '$want'"
}
bad() { printf '%s\n' "$@" > "$tmp/bad.jsonl"; }
ok='{"task": "t", "prompt": "a", "answer": "b", "gen": 32, "block": 32}'
bad "$ok" '{"task": "t", "prompt": "a", "answer": "b", "gen": 32}'
expect_usage "bad.jsonl:2: missing key \"block\"" --tasks "$tmp/bad.jsonl"
bad '{"task": "t", "prompt": "a", "answer": "b", "gen": 48, "block": 32}'
expect_usage "bad.jsonl:1: \"gen\" 48 is not a multiple of \"block\" 32" --tasks "$tmp/bad.jsonl"
bad '' "$ok" '{"task": "t", "prompt": "a", "answer": "b", "gen": 32, "block": 32, "extra": 1}'
expect_usage "bad.jsonl:3: unknown key \"extra\"" --tasks "$tmp/bad.jsonl"
bad '{"task": "t", "prompt": 5, "answer": "b", "gen": 32, "block": 32}'
expect_usage "bad.jsonl:1: \"prompt\" must be a string" --tasks "$tmp/bad.jsonl"
bad '{"task": "t", "prompt": "a", "answer": "b", "gen": 0, "block": 32}'
expect_usage "bad.jsonl:1: \"gen\" = 0 outside" --tasks "$tmp/bad.jsonl"
bad '{"task": "t", "prompt": "a", "answer": "b", "gen": 32.5, "block": 32}'
expect_usage "bad.jsonl:1: \"gen\" must be an integer" --tasks "$tmp/bad.jsonl"
bad '{"task": "a b", "prompt": "a", "answer": "b", "gen": 32, "block": 32}'
expect_usage "bad.jsonl:1: \"task\" must be" --tasks "$tmp/bad.jsonl"
bad '{"task": "t", "prompt": "a",' '"answer": "b", "gen": 32, "block": 32}'
expect_usage "bad.jsonl:1: not a JSON object" --tasks "$tmp/bad.jsonl"
bad '[1, 2]'
expect_usage "bad.jsonl:1: a case must be a JSON object" --tasks "$tmp/bad.jsonl"
bad "$ok {}"
expect_usage "bad.jsonl:1: text after the JSON object" --tasks "$tmp/bad.jsonl"
bad '# only a comment'
expect_usage "bad.jsonl: no case" --tasks "$tmp/bad.jsonl"
bad '{"task": "t", "prompt": "a", "answer": "b", "gen": 512, "block": 32}'
expect_usage "bad.jsonl: every case (1) has prompt + gen beyond the model context 512" --tasks "$tmp/bad.jsonl"
# a file with one case too long for the model runs the others, with one note on stderr
bad "$ok" '{"task": "t", "prompt": "a", "answer": "b", "gen": 512, "block": 32}'
err=$("$kvsieve" eval --dlm --tasks "$tmp/bad.jsonl" --caches none --budgets 0 --threads 1 --json 2>&1 >"$tmp/skip.json") ||
  fail "one over-long case: exit $?"
printf '%s\n' "$err" | grep -qF "1 case(s) of $tmp/bad.jsonl skipped" || fail "skip note: $err"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert all(r['cases'] == 1 for r in j['rows']), j" "$tmp/skip.json" ||
  fail "one over-long case: rows"
expect_usage "cannot open --tasks" --tasks "$tmp/missing.jsonl"
expect_usage "--answers needs --json" --tasks "$tmp/steps.jsonl" --answers
expect_usage "no case of task 'nope'" --tasks "$tmp/steps.jsonl" --task nope
expect_usage "--gamma" --tasks "$tmp/steps.jsonl" --caches none --gamma 0.5
echo "eval --dlm --tasks CLI: all checks passed"
