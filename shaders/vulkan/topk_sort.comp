#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "topk.glsl"
// Bitonic sort of each row's selection [rows][P] (keys, indices) into output order.
// MODE 0: each workgroup sorts blocks of B = min(P, 2 WG) entries in shared memory (stages s <= B).
// MODE 1: for stage s > B, finishes strides j < B of each block in shared memory.
// MODE 2: one global compare-exchange step (stage s, stride j >= B), one invocation per pair.
// Direction of a pair at position i (stride j cleared): ascending in `before` iff (i & s) == 0.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(std430, binding = 0) buffer SK { uint d[]; } sk;
layout(std430, binding = 1) buffer SI { uint d[]; } si;
KVS_VK_PUSH(KVS_VK_PC_TOPK_SORT)
shared uint lk[2u * gl_WorkGroupSize.x], li[2u * gl_WorkGroupSize.x];

void cex(uint a, uint b, uint gi, uint s) {
    uint ka = lk[a], ia = li[a], kb = lk[b], ib = li[b];
    bool asc = (gi & s) == 0u;
    bool swap = asc ? before(kb, ib, ka, ia, p.by_index) : before(ka, ia, kb, ib, p.by_index);
    if (swap) {
        lk[a] = kb; li[a] = ib;
        lk[b] = ka; li[b] = ia;
    }
}

void main() {
    if (MODE == KVS_VK_SORT_GLOBAL) {
        uint t = LIN_GROUP * WGX + TID;
        uint half_ = p.P_ / 2u;
        if (t >= p.rows * half_) return;
        uint row = t / half_, u = t % half_;
        uint i = 2u * u - (u & (p.j - 1u)), l = i + p.j;
        uint a = p.osk + row * p.P_, b = p.osi + row * p.P_;
        uint ka = sk.d[a + i], ia = si.d[b + i], kb = sk.d[a + l], ib = si.d[b + l];
        bool asc = (i & p.s) == 0u;
        bool swap = asc ? before(kb, ib, ka, ia, p.by_index) : before(ka, ia, kb, ib, p.by_index);
        if (swap) {
            sk.d[a + i] = kb; si.d[b + i] = ib;
            sk.d[a + l] = ka; si.d[b + l] = ia;
        }
        return;
    }
    uint nb = p.P_ / p.B;
    uint g = LIN_GROUP;
    if (g >= p.rows * nb) return;
    uint row = g / nb, blk = g % nb;
    uint base = blk * p.B;
    uint a = p.osk + row * p.P_ + base, b = p.osi + row * p.P_ + base;
    for (uint e = TID; e < p.B; e += WGX) {
        lk[e] = sk.d[a + e];
        li[e] = si.d[b + e];
    }
    barrier();
    uint s_lo = MODE == KVS_VK_SORT_BLOCKS ? 2u : p.s, s_hi = MODE == KVS_VK_SORT_BLOCKS ? p.B : p.s;
    for (uint s = s_lo; s <= s_hi; s <<= 1u) {
        for (uint j = (MODE == KVS_VK_SORT_BLOCKS ? s : p.B) / 2u; j > 0u; j >>= 1u) {
            for (uint u = TID; u < p.B / 2u; u += WGX) {
                uint i = 2u * u - (u & (j - 1u));
                cex(i, i + j, base + i, s);
            }
            barrier();
        }
    }
    for (uint e = TID; e < p.B; e += WGX) {
        sk.d[a + e] = lk[e];
        si.d[b + e] = li[e];
    }
}
