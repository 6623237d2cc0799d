#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "topk.glsl"
// Final top-k output: idx[row][r] = selected index (or -1 for an empty slot when the row has fewer
// than k valid entries), val[row][r] = x[row][idx] (or -inf), r < k.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { uint d[]; } x;
layout(std430, binding = 1) readonly buffer SI { uint d[]; } si;
layout(std430, binding = 2) writeonly buffer I { uint d[]; } idx;
layout(std430, binding = 3) writeonly buffer V { uint d[]; } val;
KVS_VK_PUSH(KVS_VK_PC_TOPK_WRITE)
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.rows * p.k) return;
    uint row = t / p.k, r = t % p.k;
    uint j = si.d[p.osi + row * p.P_ + r];
    bool empty = j == KVS_VK_TOPK_EMPTY;
    idx.d[p.oi + t] = empty ? 0xffffffffu : j;
    if (p.has_val != 0u) val.d[p.ov + t] = empty ? 0xff800000u : x.d[p.ox + row * p.n + j];
}
