#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// GEMV path of matmul for few rows (n <= 8): one workgroup per weight row r computes y[i][r] for
// all i < n, reading W once; per-invocation partial sums reduced in a fixed tree (deterministic).
// Shapes and dtypes as matmul.comp. Block types (quant.glsl): each invocation takes groups of 4
// consecutive weights (one dq4 each: one block header and one word of codes), never a dequantized
// copy of W.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DT = 0;
layout(constant_id = 2) const uint NV = 8;   // rows of x handled (1..8; = n of the dispatch)
layout(std430, binding = 0) readonly buffer Wb { uint d[]; } w;
layout(std430, binding = 1) readonly buffer Xb { uint d[]; } x;
layout(std430, binding = 2) buffer Yb { uint d[]; } y;
KVS_VK_PUSH(KVS_VK_PC_MATMUL)
#define QB w
#define QFN(x) w_##x
#include "quant.glsl"
#undef QB
#undef QFN
shared float red[NV * gl_WorkGroupSize.x];
void main() {
    uint r = LIN_GROUP;
    if (r >= p.m) return;
    float acc[8]; // fixed size (portable); only NV entries used
    for (uint j = 0u; j < NV; j++) acc[j] = 0.0;
    uint base = r * p.k;
    if (KVS_VK_IS_QUANT(DT)) {
        // k is a whole number of blocks (a multiple of 32)
        for (uint c = 4u * TID; c < p.k; c += 4u * WGX) {
            vec4 wv = w_dq4(DT, p.ow, base + c);
            for (uint j = 0u; j < NV; j++) {
                uint xo = p.ox + j * p.k + c;
                acc[j] += dot(wv, vec4(F32(x, xo), F32(x, xo + 1u), F32(x, xo + 2u), F32(x, xo + 3u)));
            }
        }
    } else {
        for (uint c = TID; c < p.k; c += WGX) {
            float wv = LDF(w, p.ow + base + c, DT);
            for (uint j = 0u; j < NV; j++) acc[j] += wv * F32(x, p.ox + j * p.k + c);
        }
    }
    for (uint j = 0u; j < NV; j++) red[j * WGX + TID] = acc[j];
    barrier();
    for (uint s = WGX / 2u; s > 0u; s >>= 1u) {
        if (TID < s)
            for (uint j = 0u; j < NV; j++) red[j * WGX + TID] += red[j * WGX + TID + s];
        barrier();
    }
    if (TID < NV) {
        uint o = p.oy + TID * p.m + r;
        float v = red[TID * WGX];
        if (p.accumulate != 0u) v += F32(y, o);
        y.d[o] = floatBitsToUint(v);
    }
}
