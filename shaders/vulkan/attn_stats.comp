#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "attn.glsl"
// Attention statistics that need the final softmax normaliser, recomputed from q, k and the
// (m, l) pair written by attn.comp: p[i][g][j] = exp(logit - m[i][g]) / l[i][g] (0 when invisible
// or l = 0).
// MODE 0 (key_mass): one invocation per (kv head h, key j < valid(h)):
//   key_mass[h][j] (+)= (1/G) sum_{s < n_rows} sum_{gg < G} p[rows[s]][h*G+gg][j]
//   (rows = stat_rows, or every query row when KVS_VK_ATTN_ROWS is clear; out-of-range rows skipped).
// MODE 1 (probs): one invocation per (r < n_rows, head g, key j < cap):
//   probs[r][g][j] = p[probe_rows[r]][g][j].
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KDT = 0;  // K dtype (vk_params.h codes; block types: quant.glsl)
layout(constant_id = 2) const uint D = 64;
layout(constant_id = 3) const uint MODE = 0;
layout(constant_id = 4) const uint KLO = 0;  // 1: K is qh8 (k its q4_1 upper plane, kl its lower plane)
layout(std430, binding = 0) readonly buffer Q { uint d[]; } q;
layout(std430, binding = 1) readonly buffer K { uint d[]; } k;
layout(std430, binding = 2) readonly buffer QP { uint d[]; } qpos;
layout(std430, binding = 3) readonly buffer KP { uint d[]; } kpos;
layout(std430, binding = 4) readonly buffer KL { uint d[]; } kvlen;
layout(std430, binding = 5) readonly buffer RL { uint d[]; } rowlen;
layout(std430, binding = 6) readonly buffer M { uint d[]; } mask;
layout(std430, binding = 7) readonly buffer RW { uint d[]; } rows;
layout(std430, binding = 8) buffer OUT { uint d[]; } outb;
layout(std430, binding = 9) readonly buffer RM { uint d[]; } rmax;
layout(std430, binding = 10) readonly buffer RS { uint d[]; } rsum;
layout(std430, binding = 11) readonly buffer KLP { uint d[]; } kl;
KVS_VK_PUSH(KVS_VK_PC_ATTN_STATS)
#define QB k
#define QFN(x) k_##x
#include "quant.glsl"
#undef QB
#undef QFN

uint valid_len(uint h) {
    if ((p.flags & KVS_VK_ATTN_KVLEN) != 0u) return uint(clamp(int(kvlen.d[p.okl + h]), 0, int(p.n_kv)));
    return p.n_kv;
}

// probability of key j (of kv head h) for query row i, head g
float prob(uint i, uint g, uint h, uint j, int kp) {
    if ((p.flags & KVS_VK_ATTN_ROWLEN) != 0u && int(j) >= int(rowlen.d[p.orl + i])) return 0.0;
    if ((p.flags & KVS_VK_ATTN_CAUSAL) != 0u) {
        int qp = (p.flags & KVS_VK_ATTN_QPOS) != 0u ? int(qpos.d[p.oqp + i]) : int(p.n_kv) - int(p.n_q) + int(i);
        if (kp > qp) return 0.0;
    }
    float dot = 0.0;
    uint qb = p.oq + (i * p.n_heads + g) * D;
    uint kb = (h * p.cap + j) * D;
    if (KVS_VK_IS_QUANT(KDT)) {
        for (uint c = 0u; c < D; c += 4u) {
            uint e = kb + c;
            vec4 kv = k_dq4(KDT, p.ok, e);
            if (KLO != 0u) {
                uint b = p.oklo + (e >> 5u) * 16u + (e & 15u), s8 = (b & 3u) * 8u, w0 = kl.d[b >> 2u];
                uint lw = s8 == 0u ? w0 : (w0 >> s8) | (kl.d[(b >> 2u) + 1u] << (32u - s8));
                kv = qh8_add_lo(kv, h2f(k_u16(p.ok + (e >> 5u) * 20u)), lw, e);
            }
            for (uint t = 0u; t < 4u; t++) dot += F32(q, qb + c + t) * kv[t];
        }
    } else {
        for (uint c = 0u; c < D; c++) dot += F32(q, qb + c) * LDF(k, p.ok + kb + c, KDT);
    }
    float s = p.scale * dot;
    if ((p.flags & KVS_VK_ATTN_MASK) != 0u) s += F32(mask, p.om + i * p.n_kv + j);
    if (!(s >= -FLT_MAX_)) return 0.0;
    uint ig = i * p.n_heads + g;
    float l = F32(rsum, p.ors + ig);
    if (!(l > 0.0)) return 0.0;
    return exp(s - F32(rmax, p.orm + ig)) / l;
}

void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (MODE == KVS_VK_STATS_KEY_MASS) {
        if (t >= p.n_kvh * p.n_kv) return;
        uint h = t / p.n_kv, j = t % p.n_kv;
        if (j >= valid_len(h)) return;
        int kp = (p.flags & KVS_VK_ATTN_KPOS) != 0u ? int(kpos.d[p.okp + h * p.cap + j]) : int(j);
        float acc = 0.0;
        for (uint s = 0u; s < p.n_rows; s++) {
            int i = (p.flags & KVS_VK_ATTN_ROWS) != 0u ? int(rows.d[p.orows + s]) : int(s);
            if (i < 0 || i >= int(p.n_q)) continue;
            for (uint gg = 0u; gg < p.G; gg++) acc += prob(uint(i), h * p.G + gg, h, j, kp);
        }
        acc /= float(p.G);
        uint oi = p.oout + h * p.cap + j;
        if ((p.flags & KVS_VK_ATTN_ACCUM) != 0u) acc += F32(outb, oi);
        outb.d[oi] = floatBitsToUint(acc);
    } else {
        if (t >= p.n_rows * p.n_heads * p.cap) return;
        uint j = t % p.cap, rg = t / p.cap;
        uint g = rg % p.n_heads, r = rg / p.n_heads;
        uint h = g / p.G;
        int i = int(rows.d[p.orows + r]);
        float pr = 0.0;
        if (i >= 0 && i < int(p.n_q) && j < valid_len(h)) {
            int kp = (p.flags & KVS_VK_ATTN_KPOS) != 0u ? int(kpos.d[p.okp + h * p.cap + j]) : int(j);
            pr = prob(uint(i), g, h, j, kp);
        }
        outb.d[p.oout + t] = floatBitsToUint(pr);
    }
}
