#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "topk.glsl"
// Per (row, chunk) workgroup, with the threshold key T = prefix known:
// MODE 0: counts entries with key > T (gt) and key == T (eq) of the chunk -> cnt[row][chunk].
// MODE 1: writes every gt entry and the eq entries whose rank in index order (over the row) is
//   < krem into the selection [row][P] (key, index); positions come from the scanned counts plus
//   an ordered workgroup scan per tile of WG entries (so the eq ranks follow the index order).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(std430, binding = 0) readonly buffer X { uint d[]; } x;
layout(std430, binding = 1) readonly buffer RL { uint d[]; } rl;
layout(std430, binding = 2) readonly buffer ST { uint d[]; } st;
layout(std430, binding = 3) buffer C { uint d[]; } cnt;
layout(std430, binding = 4) writeonly buffer SK { uint d[]; } sk;
layout(std430, binding = 5) writeonly buffer SI { uint d[]; } si;
KVS_VK_PUSH(KVS_VK_PC_TOPK_COLLECT)
shared uint sc[gl_WorkGroupSize.x];
shared uint tot[2];
void main() {
    uint g = LIN_GROUP;
    if (g >= p.rows * p.nchunks) return;
    uint row = g / p.nchunks, ch = g % p.nchunks;
    uint len = p.n;
    if (p.has_rl != 0u) len = uint(clamp(int(rl.d[p.orl + row]), 0, int(p.n)));
    uint T = st.d[p.ost + row * 4u], krem = st.d[p.ost + row * 4u + 1u], cgt = st.d[p.ost + row * 4u + 2u];
    uint start = ch * p.chunk, end = min(len, start + p.chunk);
    if (MODE == KVS_VK_COLLECT_COUNT) {
        if (TID < 2u) tot[TID] = 0u;
        barrier();
        uint a = 0u, b = 0u;
        for (uint j = start + TID; j < end; j += WGX) {
            uint key = fkey(F32(x, p.ox + row * p.n + j));
            a += key > T ? 1u : 0u;
            b += key == T ? 1u : 0u;
        }
        atomicAdd(tot[0], a);
        atomicAdd(tot[1], b);
        barrier();
        if (TID == 0u) {
            cnt.d[p.oc + g * 2u] = (cgt + krem == 0u) ? 0u : tot[0];
            cnt.d[p.oc + g * 2u + 1u] = (cgt + krem == 0u) ? 0u : tot[1];
        }
        return;
    }
    if (cgt + krem == 0u) return;
    uint run_gt = cnt.d[p.oc + g * 2u], run_eq = cnt.d[p.oc + g * 2u + 1u];
    for (uint base = start; base < end; base += WGX) {
        uint j = base + TID;
        uint key = 0u, gt = 0u, eq = 0u;
        if (j < end) {
            key = fkey(F32(x, p.ox + row * p.n + j));
            gt = key > T ? 1u : 0u;
            eq = key == T ? 1u : 0u;
        }
        uint mine = gt | (eq << 16u);
        sc[TID] = mine;
        barrier();
        for (uint off = 1u; off < WGX; off <<= 1u) {
            uint v = TID >= off ? sc[TID - off] : 0u;
            barrier();
            sc[TID] += v;
            barrier();
        }
        uint ex = sc[TID] - mine;
        uint total = sc[WGX - 1u];
        if (gt != 0u) {
            uint pos = row * p.P_ + run_gt + (ex & 0xffffu);
            sk.d[p.osk + pos] = key;
            si.d[p.osi + pos] = j;
        } else if (eq != 0u) {
            uint rank = run_eq + (ex >> 16u);
            if (rank < krem) {
                uint pos = row * p.P_ + cgt + rank;
                sk.d[p.osk + pos] = key;
                si.d[p.osi + pos] = j;
            }
        }
        run_gt += total & 0xffffu;
        run_eq += total >> 16u;
        barrier();
    }
}
