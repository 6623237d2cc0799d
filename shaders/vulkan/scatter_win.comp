#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// Scatter winners: win[g][t] = max i with idx[g][i] = t (duplicates: the highest i wins), from a
// table pre-filled with -1. Integer atomics only: the result is deterministic.
// One invocation per (g, i). idx: [G][n] or [n] (shared); out-of-range targets are ignored.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer I { uint d[]; } idx;
layout(std430, binding = 1) buffer W { int d[]; } win;
KVS_VK_PUSH(KVS_VK_PC_SCATTER_WIN)
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.G * p.n) return;
    uint g = t / p.n, i = t % p.n;
    int tt = int(idx.d[p.oi + (p.shared_ != 0u ? i : t)]);
    if (tt < 0 || tt >= int(p.Nd)) return;
    atomicMax(win.d[p.ow + g * p.Nd + uint(tt)], int(i));
}
