#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// One analysis level of the periodized DWT (Mallat 1989), all rows at once: for each row, the
// signal c (length L, odd L extended by repeating its last sample to L' = L + 1) gives
//   a[i] = sum_t lo[t] c[(2i+t) mod L'],  d[i] = sum_t hi[t] c[(2i+t) mod L'],  i < half = L'/2.
// c: rows of length L at o0 + row*s0; a -> o1 + row*s1; d -> o2 + row*s2 (bindings 0, 1, 2).
// One invocation per (row, i); f32 sums in tap order (as the CPU backend).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer In { uint d[]; } src;
layout(std430, binding = 1) buffer A { uint d[]; } ao;
layout(std430, binding = 2) buffer Dt { uint d[]; } dout;
KVS_VK_PUSH(KVS_VK_PC_DWT)
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.rows * p.half_) return;
    uint row = t / p.half_, i = t % p.half_;
    uint Lp = 2u * p.half_;
    uint base = p.o0 + row * p.s0;
    float a = 0.0, d = 0.0;
    for (uint k = 0u; k < p.T; k++) {
        uint m = (2u * i + k) % Lp;
        if (m >= p.L) m = p.L - 1u;
        float c = F32(src, base + m);
        a += p.lo[k] * c;
        d += p.hi[k] * c;
    }
    ao.d[p.o1 + row * p.s1 + i] = floatBitsToUint(a);
    dout.d[p.o2 + row * p.s2 + i] = floatBitsToUint(d);
}
