#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// One synthesis level of the periodized inverse DWT, the exact adjoint of dwt.comp: with
// half = len(a) = len(d), L' = 2 half,
//   c[m] = sum_{t = m mod 2, step 2} lo[t] a[((m-t) mod L')/2] + hi[t] d[((m-t) mod L')/2],
// for m < L (truncating the extension of odd lengths). Every wrapped tap is summed when L' < T,
// which keeps reconstruction perfect for short signals (ops.h formula when T <= L').
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint d[]; } ai;
layout(std430, binding = 1) readonly buffer Dt { uint d[]; } di;
layout(std430, binding = 2) buffer C { uint d[]; } co;
layout(push_constant) uniform P {
    uint rows, L, half_, oa, sa, od, sd, oc, sc, T;
    float lo[8];
    float hi[8];
} p;
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.rows * p.L) return;
    uint row = t / p.L, m = t % p.L;
    uint Lp = 2u * p.half_;
    float c = 0.0;
    for (uint k = m & 1u; k < p.T; k += 2u) {
        uint i = ((m + Lp * 8u - k) % Lp) / 2u;
        c += p.lo[k] * F32(ai, p.oa + row * p.sa + i) + p.hi[k] * F32(di, p.od + row * p.sd + i);
    }
    co.d[p.oc + row * p.sc + m] = floatBitsToUint(c);
}
