#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// One synthesis level of the periodized inverse DWT, the exact adjoint of dwt.comp: with
// half = len(a) = len(d), L' = 2 half,
//   c[m] = sum_{t = m mod 2, step 2} lo[t] a[((m-t) mod L')/2] + hi[t] d[((m-t) mod L')/2],
// for m < L (truncating the extension of odd lengths). Every wrapped tap is summed when L' < T,
// which keeps reconstruction perfect for short signals (ops.h formula when T <= L').
// a: o0 + row*s0, d: o1 + row*s1, c: o2 + row*s2 (bindings 0, 1, 2).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint d[]; } ai;
layout(std430, binding = 1) readonly buffer Dt { uint d[]; } di;
layout(std430, binding = 2) buffer C { uint d[]; } co;
KVS_VK_PUSH(KVS_VK_PC_DWT)
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.rows * p.L) return;
    uint row = t / p.L, m = t % p.L;
    uint Lp = 2u * p.half_;
    float c = 0.0;
    for (uint k = m & 1u; k < p.T; k += 2u) {
        uint i = ((m + Lp * 8u - k) % Lp) / 2u;
        c += p.lo[k] * F32(ai, p.o0 + row * p.s0 + i) + p.hi[k] * F32(di, p.o1 + row * p.s1 + i);
    }
    co.d[p.o2 + row * p.s2 + m] = floatBitsToUint(c);
}
