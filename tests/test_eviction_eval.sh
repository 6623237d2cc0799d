#!/usr/bin/env bash
# kvsieve eval end to end on stories260K and the TinyStories sample (skips with 77 when the fixtures
# are missing): budget 1.0 reproduces the full cache exactly (KL 0, top-1 agreement 1, the same
# perplexity), a smaller budget evicts and its peak cache bytes shrink, the JSON is well formed, the
# table prints, and the SVG plot has one line per policy in each of its two panels.
set -euo pipefail
kvsieve=$1
text=$2
# outside the usual layout, find the text next to the models
if [ ! -f "$text" ] && [ -n "${KVSIEVE_MODELS:-}" ] && [ -f "$KVSIEVE_MODELS/../text/$(basename "$text")" ]; then
  text="$KVSIEVE_MODELS/../text/$(basename "$text")"
fi
if [[ ! -f $text ]]; then
  echo "SKIP: $text not found"
  exit 77
fi
if ! "$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --windows 1 --ctx 8 --policies streaming \
     --budgets 1.0 --threads 1 --json >/dev/null 2>&1; then
  echo "SKIP: stories260K-f32.v3.gguf not found (set KVSIEVE_MODELS)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --windows 2 --ctx 96 --threads 1 \
  --policies streaming,h2o,snapkv,tova,knorm,pyramidkv,adakv --budgets 0.25,1.0 --json --plot "$tmp/plot.svg" >"$tmp/out.json"
python3 - "$tmp/out.json" "$tmp/plot.svg" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cells = r["cells"]
full = cells[0]
assert full["policy"] == "full" and full["kl"] == 0.0 and full["top1_agreement"] == 1.0, full
assert r["ctx"] == 96 and r["windows"] == 2 and r["predictions"] == 2 * 95, r
assert len(cells) == 1 + 7 * 2, len(cells)
for c in cells[1:]:
    if c["budget"] == 1.0:
        assert c["kl"] == 0.0 and c["top1_agreement"] == 1.0, c
        assert c["perplexity"] == full["perplexity"] and c["evictions"] == 0, c
        assert c["cache_bytes_peak"] == full["cache_bytes_peak"], c
    else:
        assert c["budget_tokens"] > 0 and c["evictions"] > 0, c
        assert c["cache_bytes_peak"] < full["cache_bytes_peak"] / 2, c
        assert c["kl"] > 0.0 and 0.0 < c["top1_agreement"] < 1.0 + 1e-12, c
svg = open(sys.argv[2]).read()
assert svg.startswith("<?xml") and "<svg" in svg and svg.rstrip().endswith("</svg>")
assert svg.count("<polyline") == 2 * 7, svg.count("<polyline")
for name in ["streaming", "h2o", "snapkv", "tova", "knorm", "pyramidkv", "adakv"]:
    assert ">%s</text>" % name in svg, name
print("eval json and plot ok")
PY
# the table
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --windows 1 --ctx 64 --threads 1 --policies h2o \
  --budgets 0.5 --plot "$tmp/p2.svg" >"$tmp/table.txt" 2>/dev/null
grep -q "KL(full||ev)" "$tmp/table.txt"
grep -q "^full " "$tmp/table.txt"
grep -q "^h2o  *0\.5 " "$tmp/table.txt"   # budgets printed with the digits they have (0.5, 0.001)
grep -q "plot written" "$tmp/table.txt"
# --needle: three depths per cell; budget 1.0 gives the full cache's log-probabilities exactly, a small
# streaming budget forgets the early passkey (its 10% figure moves), the main table is unchanged
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --windows 1 --ctx 96 --threads 1 --policies streaming \
  --budgets 0.1,1.0 --needle --json --plot "$tmp/needle.svg" >"$tmp/needle.json"
[[ $(grep -c "<polyline" "$tmp/needle.svg") == 3 ]] || { echo "--needle plot: want 3 panels of one line"; exit 1; }
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --windows 1 --ctx 96 --threads 1 --policies streaming \
  --budgets 0.1,1.0 --json >"$tmp/plain.json"
python3 - "$tmp/needle.json" "$tmp/plain.json" <<'PY'
import json, math, sys
n, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
full, small, one = n["cells"]
assert len(full["needle_logprob"]) == 3 and all(math.isfinite(x) and x < 0 for x in full["needle_logprob"]), full
assert one["needle_logprob"] == full["needle_logprob"], (one, full)
assert small["needle_logprob"][0] != full["needle_logprob"][0], small
for a, b in zip(n["cells"], p["cells"]):
    for k in ("kl", "top1_agreement", "perplexity", "evictions", "cache_bytes_peak"):
        assert a[k] == b[k], (k, a, b)
    assert "needle_logprob" not in b
print("eval needle ok")
PY
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --windows 1 --ctx 96 --threads 1 --policies h2o \
  --budgets 0.5 --needle >"$tmp/needle.txt" 2>/dev/null
grep -q "^policy  *budget  *lp@10%  *lp@50%  *lp@90%" "$tmp/needle.txt"
# bad arguments are usage errors (exit 2)
set +e
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --ctx 24 --needle >/dev/null 2>&1; [[ $? == 2 ]] || { echo "--needle in a too short window not rejected"; exit 1; }
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --policies lru >/dev/null 2>&1; [[ $? == 2 ]] || { echo "unknown policy not rejected"; exit 1; }
"$kvsieve" eval -m stories260K-f32.v3.gguf --text "$text" --budgets 2.5 >/dev/null 2>&1; [[ $? == 2 ]] || { echo "fractional count not rejected"; exit 1; }
"$kvsieve" generate -m stories260K-f32.v3.gguf --budget 0.5 >/dev/null 2>&1; [[ $? == 2 ]] || { echo "--budget without --policy not rejected"; exit 1; }
set -e
# generate with a policy: the cache shrinks, the run evicts
"$kvsieve" generate -m stories260K-f32.v3.gguf -n 200 --threads 1 --policy h2o --budget 0.25 --scope layer --json >"$tmp/gen.json"
python3 - "$tmp/gen.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
assert s["policy"] == "h2o" and s["scope"] == "layer" and s["evictions"] > 0, s
assert s["cache_bytes_allocated"] < 200 * 5 * 4 * 8 * 2 * 4, s
print("generate --policy ok")
PY
echo "1 passed, 0 failed"
