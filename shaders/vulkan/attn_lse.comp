#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// External normaliser of attention (kvs_attention_params.lse_extra), after attn (and attn_combine):
// for each (query row, head) ig with a visible key (l = row_sum != 0), lt = l + exp(lse[ig] - m)
// (m = row_max); out[ig] *= l / lt (out was O / l, so it becomes O / lt) and lt is written to
// `lt`, the normaliser the attn_stats passes then read (row_sum keeps the call's own l). A row with
// no visible key keeps out = 0 and lt = 0. One invocation per ig; D here is d_v.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer LSE { uint d[]; } lse;
layout(std430, binding = 1) buffer O { uint d[]; } o;
layout(std430, binding = 2) readonly buffer RM { uint d[]; } rmax;
layout(std430, binding = 3) readonly buffer RS { uint d[]; } rsum;
layout(std430, binding = 4) writeonly buffer LT { uint d[]; } lt;
KVS_VK_PUSH(KVS_VK_PC_ATTN_LSE)
void main() {
    uint ig = LIN_GROUP * WGX + TID;
    if (ig >= p.rows) return;
    float m = F32(rmax, p.orm + ig), l = F32(rsum, p.ors + ig);
    float t = l;
    if (l != 0.0) {
        t = l + exp(F32(lse, p.olse + ig) - m);
        float f = l / t;
        for (uint c = 0u; c < p.D; c++) {
            uint e = p.oo + ig * p.D + c;
            o.d[e] = floatBitsToUint(uintBitsToFloat(o.d[e]) * f);
        }
    }
    lt.d[p.olt + ig] = floatBitsToUint(t);
}
