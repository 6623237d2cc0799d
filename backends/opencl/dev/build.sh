#!/bin/sh
# Builds the developer tools here (scratch op checker, timing program) against the static library
# of a build dir (default ../../../build). Not part of the meson build.
B=${1:-$(dirname "$0")/../../../build}
S=$(dirname "$0")/../../..
for t in ocl_check ocl_bench; do
  cc -O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -I"$S/include" -o "$B/$t" "$(dirname "$0")/$t.c" "$B/libkvsieve.a" \
    $(pkg-config --libs clblast OpenCL) $(pkg-config --libs vulkan json-c 2>/dev/null) -lopenblas -lgomp -lm -lpthread || exit 1
done
