#!/usr/bin/env bash
# Checks that an example shown in README.md is byte-identical to its file (tools/examples/attention.c,
# python/examples/quickstart.py: the test suite runs both), so the manual's code stays correct.
# Usage: readme_example.sh README.md FILE [NAME]   (NAME in the README's marker line
# "<!-- example: NAME -->"; default tools/examples/attention.c)
set -euo pipefail
readme="$1"
src="$2"
marker="<!-- example: ${3:-tools/examples/attention.c} -->"
# The fenced block right after the marker line, without its fences.
shown="$(awk -v m="$marker" '
  $0 == m { found = 1; next }
  found == 1 && /^```/ { found = 2; next }
  found == 2 && /^```/ { exit }
  found == 2 { print }
' "$readme")"
if [[ -z "$shown" ]]; then
  echo "README.md has no code block after '$marker'"
  exit 1
fi
if ! diff -u <(printf '%s\n' "$shown") "$src"; then
  echo "README.md's example differs from $src: copy the file into the README"
  exit 1
fi
echo "README example matches $src"
