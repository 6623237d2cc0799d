#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// One analysis level of the periodized DWT (Mallat 1989), all rows at once: for each row, the
// signal c (length L, odd L extended by repeating its last sample to L' = L + 1) gives
//   a[i] = sum_t lo[t] c[(2i+t) mod L'],  d[i] = sum_t hi[t] c[(2i+t) mod L'],  i < half = L'/2.
// c: rows of length L at in + row*in_stride; a -> a_out + row*a_stride; d -> d_out + row*d_stride.
// One invocation per (row, i); f32 sums in tap order (as the CPU backend).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer In { uint d[]; } src;
layout(std430, binding = 1) buffer A { uint d[]; } ao;
layout(std430, binding = 2) buffer Dt { uint d[]; } dout;
layout(push_constant) uniform P {
    uint rows, L, half_, oin, sin_, oa, sa, od, sd, T;
    float lo[8];
    float hi[8];
} p;
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.rows * p.half_) return;
    uint row = t / p.half_, i = t % p.half_;
    uint Lp = 2u * p.half_;
    uint base = p.oin + row * p.sin_;
    float a = 0.0, d = 0.0;
    for (uint k = 0u; k < p.T; k++) {
        uint m = (2u * i + k) % Lp;
        if (m >= p.L) m = p.L - 1u;
        float c = F32(src, base + m);
        a += p.lo[k] * c;
        d += p.hi[k] * c;
    }
    ao.d[p.oa + row * p.sa + i] = floatBitsToUint(a);
    dout.d[p.od + row * p.sd + i] = floatBitsToUint(d);
}
