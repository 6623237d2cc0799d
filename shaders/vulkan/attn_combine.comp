#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "attn.glsl"
// Merges the split-K partials of attn.comp in split order (deterministic): for each (query row,
// head) ig: M = max_s m_s, l = sum_s l_s exp(m_s - M), O = sum_s O_s exp(m_s - M); argmax = the
// partial argmax of the first split whose m_s equals M (lowest key index on ties, -1 if none).
// Writes out (O/l, or O if KVS_VK_ATTN_UNNORM; 0 when l = 0), row_max, row_sum, argmax (if KVS_VK_ATTN_ARGMAX).
// One invocation per (ig, c < D); D here is d_v (the host passes v's head_dim).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer OP { uint d[]; } op;
layout(std430, binding = 1) readonly buffer MP { uint d[]; } mp;
layout(std430, binding = 2) readonly buffer LP { uint d[]; } lp;
layout(std430, binding = 3) readonly buffer AP { uint d[]; } ap;
layout(std430, binding = 4) writeonly buffer O { uint d[]; } o;
layout(std430, binding = 5) writeonly buffer AM { uint d[]; } amax;
layout(std430, binding = 6) writeonly buffer RM { uint d[]; } rmax;
layout(std430, binding = 7) writeonly buffer RS { uint d[]; } rsum;
KVS_VK_PUSH(KVS_VK_PC_ATTN_COMBINE)
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.rows * p.D) return;
    uint ig = t / p.D, c = t % p.D;
    float M = -FLT_MAX_;
    for (uint s = 0u; s < p.nsplit; s++) M = max(M, F32(mp, p.omp + s * p.rows + ig));
    float l = 0.0, acc = 0.0;
    int arg = -1;
    for (uint s = 0u; s < p.nsplit; s++) {
        float ms = F32(mp, p.omp + s * p.rows + ig);
        float f = exp(ms - M);
        l += F32(lp, p.olp + s * p.rows + ig) * f;
        acc += F32(op, p.oop + (s * p.rows + ig) * p.D + c) * f;
        int as_ = int(ap.d[p.oap + s * p.rows + ig]);
        if (arg < 0 && as_ >= 0 && ms == M) arg = as_;
    }
    float val = (p.flags & KVS_VK_ATTN_UNNORM) != 0u ? acc : (l != 0.0 ? acc / l : 0.0);
    o.d[p.oo + ig * p.D + c] = floatBitsToUint(val);
    if (c == 0u) {
        rmax.d[p.orm + ig] = floatBitsToUint(M);
        rsum.d[p.ors + ig] = floatBitsToUint(l);
        if ((p.flags & KVS_VK_ATTN_ARGMAX) != 0u) amax.d[p.oam + ig] = uint(arg);
    }
}
