#!/bin/sh
# Prints MAJOR.MINOR.PATCH from include/kvsieve/version.h (meson reads the project version here).
h="$(dirname "$0")/../../include/kvsieve/version.h"
v() { sed -n "s/^#define KVS_VERSION_$1 \([0-9]*\).*/\1/p" "$h"; }
echo "$(v MAJOR).$(v MINOR).$(v PATCH)"
