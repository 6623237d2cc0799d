#!/bin/sh
# Builds the scratch checker against the static library of a build dir (default ../../../build).
B=${1:-$(dirname "$0")/../../../build}
S=$(dirname "$0")/../../..
cc -O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -I"$S/include" -o "$B/ocl_check" "$(dirname "$0")/ocl_check.c" "$B/libkvsieve.a" \
  $(pkg-config --libs clblast OpenCL) -lopenblas -lgomp -lm -lpthread
