#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "topk.glsl"
// One workgroup (256 invocations) per row.
// MODE 0: sums the chunk histograms of the current digit and picks the digit b with
//   count(digit > b) < krem <= count(digit >= b); updates prefix, krem, cgt.
// MODE 1: turns the per-chunk (gt, eq) counts into exclusive prefix offsets in chunk order.
// MODE 2: initialises the row state {prefix 0, krem = min(k, row_len), cgt 0}.
layout(local_size_x_id = 0) in; // 256
layout(constant_id = 1) const uint MODE = 0;
layout(std430, binding = 0) buffer ST { uint d[]; } st;
layout(std430, binding = 1) buffer H { uint d[]; } hist;
layout(std430, binding = 2) readonly buffer RL { uint d[]; } rl;
KVS_VK_PUSH(KVS_VK_PC_TOPK_SELECT)
shared uint s0[256], s1[256];
void main() {
    uint row = LIN_GROUP;
    if (row >= p.rows) return;
    if (MODE == KVS_VK_SELECT_INIT) {
        uint len = p.n;
        if (p.has_rl != 0u) len = uint(clamp(int(rl.d[p.orl + row]), 0, int(p.n)));
        if (TID == 0u) {
            st.d[p.ost + row * 4u] = 0u;
            st.d[p.ost + row * 4u + 1u] = min(p.k, len);
            st.d[p.ost + row * 4u + 2u] = 0u;
            st.d[p.ost + row * 4u + 3u] = 0u;
        }
        return;
    }
    if (MODE == KVS_VK_SELECT_DIGIT) {
        uint krem = st.d[p.ost + row * 4u + 1u];
        uint c = 0u;
        for (uint ch = 0u; ch < p.nchunks; ch++) c += hist.d[p.oh + (row * p.nchunks + ch) * 256u + TID];
        s0[TID] = c;
        barrier();
        for (uint off = 1u; off < 256u; off <<= 1u) {   // suffix sums
            uint v = TID + off < 256u ? s0[TID + off] : 0u;
            barrier();
            s0[TID] += v;
            barrier();
        }
        uint above = TID < 255u ? s0[TID + 1u] : 0u;
        if (krem > 0u && s0[TID] >= krem && above < krem) {
            st.d[p.ost + row * 4u] |= TID << p.shift;
            st.d[p.ost + row * 4u + 1u] = krem - above;
            st.d[p.ost + row * 4u + 2u] += above;
        }
        return;
    }
    uint base0 = 0u, base1 = 0u;
    for (uint c0 = 0u; c0 < p.nchunks; c0 += 256u) {
        uint ch = c0 + TID;
        uint a = 0u, b = 0u;
        if (ch < p.nchunks) {
            a = hist.d[p.oh + (row * p.nchunks + ch) * 2u];
            b = hist.d[p.oh + (row * p.nchunks + ch) * 2u + 1u];
        }
        s0[TID] = a;
        s1[TID] = b;
        barrier();
        for (uint off = 1u; off < 256u; off <<= 1u) {   // inclusive prefix sums
            uint va = TID >= off ? s0[TID - off] : 0u;
            uint vb = TID >= off ? s1[TID - off] : 0u;
            barrier();
            s0[TID] += va;
            s1[TID] += vb;
            barrier();
        }
        if (ch < p.nchunks) {
            hist.d[p.oh + (row * p.nchunks + ch) * 2u] = base0 + s0[TID] - a;
            hist.d[p.oh + (row * p.nchunks + ch) * 2u + 1u] = base1 + s1[TID] - b;
        }
        base0 += s0[255];
        base1 += s1[255];
        barrier();
    }
}
