#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out[i] = f32(table[ids[i]]). table: [vocab][dim] F32/F16/BF16 or a block type (spec constant DT;
// offsets in elements, bytes for the block types, decoded by quant.glsl); ids: [n] I32 (uploaded to scratch); out: [n][dim] F32.
// An id outside [0, vocab) writes a zero row.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DT = 0;
layout(std430, binding = 0) readonly buffer T { uint d[]; } tab;
layout(std430, binding = 1) readonly buffer I { uint d[]; } ids;
layout(std430, binding = 2) buffer O { uint d[]; } o;
KVS_VK_PUSH(KVS_VK_PC_EMBEDDING)
#define QB tab
#define QFN(x) tab_##x
#include "quant.glsl"
#undef QB
#undef QFN
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.n * p.dim) return;
    uint i = t / p.dim, c = t - i * p.dim;
    int id = int(ids.d[p.oi + i]);
    float v = 0.0;
    if (id >= 0 && uint(id) < p.vocab) {
        uint e = uint(id) * p.dim + c;
        v = KVS_VK_IS_QUANT(DT) ? tab_dq1(DT, p.ot, e) : LDF(tab, p.ot + e, DT);
    }
    o.d[p.oo + t] = floatBitsToUint(v);
}
