#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "attn.glsl"
// Scaled dot-product attention, one tiled online-softmax pass (FlashAttention, Dao et al. 2022,
// alg. 1) with grouped-query heads (Ainslie et al. 2023) never expanding K/V:
// a workgroup owns R consecutive query rows r = i*G + gg of one kv head h (the G query heads of a
// group share each K/V tile staged in shared memory), walks the keys in tiles of TK, and keeps per
// row the running max m (from -FLT_MAX), denominator l, argmax (lowest j on ties) and the
// unnormalised output in shared memory. Writes out (= O/l, or O if unnormalised; 0 when no key is
// visible), row_max = m, row_sum = l, argmax (-1 when none). Deterministic (fixed order sums).
// Split-K (flash-decoding) for few query rows: with nsplit > 1, workgroup split s handles keys
// [s*split_len, (s+1)*split_len) and writes its partial (unnormalised O, m, l, argmax) at
// out/row_* + s * (n_q*n_heads*DV or n_q*n_heads); attn_combine.comp merges the splits in order.
// q and k have head_dim D (d_k), v and out DV (d_v); the two may differ.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KDT = 0;  // K dtype (vk_params.h codes)
layout(constant_id = 5) const uint VDT = 0;  // V dtype
layout(constant_id = 2) const uint D = 64;   // d_k: q, k
layout(constant_id = 8) const uint DV = 64;  // d_v: v, out
layout(constant_id = 3) const uint R = 8;
layout(constant_id = 4) const uint TK = 16;
layout(constant_id = 6) const uint KLO = 0;  // 1: K is qh8 (k its q4_1 upper plane, kl its lower plane)
layout(constant_id = 7) const uint VLO = 0;  // 1: V is qh8 (v, vl)
layout(std430, binding = 0) readonly buffer Q { uint d[]; } q;
layout(std430, binding = 1) readonly buffer K { uint d[]; } k;
layout(std430, binding = 2) readonly buffer V { uint d[]; } v;
layout(std430, binding = 3) writeonly buffer O { uint d[]; } o;
layout(std430, binding = 4) readonly buffer QP { uint d[]; } qpos;
layout(std430, binding = 5) readonly buffer KP { uint d[]; } kpos;
layout(std430, binding = 6) readonly buffer KL { uint d[]; } kvlen;
layout(std430, binding = 7) readonly buffer RL { uint d[]; } rowlen;
layout(std430, binding = 8) readonly buffer M { uint d[]; } mask;
layout(std430, binding = 9) writeonly buffer AM { uint d[]; } amax;
layout(std430, binding = 10) writeonly buffer RM { uint d[]; } rmax;
layout(std430, binding = 11) writeonly buffer RS { uint d[]; } rsum;
layout(std430, binding = 12) readonly buffer KLP { uint d[]; } kl;
layout(std430, binding = 13) readonly buffer VLP { uint d[]; } vl;
KVS_VK_PUSH(KVS_VK_PC_ATTN)
#define QB k
#define QFN(x) k_##x
#include "quant.glsl"
#undef QB
#undef QFN
#define QB v
#define QFN(x) v_##x
#include "quant.glsl"
#undef QB
#undef QFN

shared float sQ[R * D];
shared float sO[R * DV];
shared float sK[TK * D];
shared float sV[TK * DV];
shared float sS[R * TK];
shared float sM[R], sL[R], sA[R], sBest[R];
shared int sArg[R], sQpos[R], sRowlen[R];
shared uint sJlim;

float ldkv_k(uint e) { return LDF(k, p.ok + e, KDT); }
float ldkv_v(uint e) { return LDF(v, p.ov + e, VDT); }
// elements e..e+3 (e % 4 == 0, D (K) or DV (V) % 4 == 0): block types decoded from the stored blocks (quant.glsl)
// the word of a lower plane at byte b (any alignment)
uint kl_w(uint b) {
    uint s = (b & 3u) * 8u, w0 = kl.d[b >> 2u];
    return s == 0u ? w0 : (w0 >> s) | (kl.d[(b >> 2u) + 1u] << (32u - s));
}
uint vl_w(uint b) {
    uint s = (b & 3u) * 8u, w0 = vl.d[b >> 2u];
    return s == 0u ? w0 : (w0 >> s) | (vl.d[(b >> 2u) + 1u] << (32u - s));
}
vec4 ldkv_k4(uint e) {
    if (KLO != 0u)
        return qh8_add_lo(k_dq4(KVS_VK_DT_Q4_1, p.ok, e), h2f(k_u16(p.ok + (e >> 5u) * 20u)),
                          kl_w(p.oklo + (e >> 5u) * 16u + (e & 15u)), e);
    if (KVS_VK_IS_QUANT(KDT)) return k_dq4(KDT, p.ok, e);
    return vec4(ldkv_k(e), ldkv_k(e + 1u), ldkv_k(e + 2u), ldkv_k(e + 3u));
}
vec4 ldkv_v4(uint e) {
    if (VLO != 0u)
        return qh8_add_lo(v_dq4(KVS_VK_DT_Q4_1, p.ov, e), h2f(v_u16(p.ov + (e >> 5u) * 20u)),
                          vl_w(p.ovlo + (e >> 5u) * 16u + (e & 15u)), e);
    if (KVS_VK_IS_QUANT(VDT)) return v_dq4(VDT, p.ov, e);
    return vec4(ldkv_v(e), ldkv_v(e + 1u), ldkv_v(e + 2u), ldkv_v(e + 3u));
}

void main() {
    uint nrows = p.n_q * p.G;
    uint blocks = (nrows + R - 1u) / R;
    uint wg = LIN_GROUP;
    if (wg >= blocks * p.n_kvh * p.nsplit) return;
    uint split = wg % p.nsplit;
    wg /= p.nsplit;
    uint h = wg / blocks, r0 = (wg % blocks) * R;
    uint valid = p.n_kv;
    if ((p.flags & KVS_VK_ATTN_KVLEN) != 0u) valid = uint(clamp(int(kvlen.d[p.okl + h]), 0, int(p.n_kv)));
    uint jbeg = split * p.split_len, jend = min(valid, jbeg + p.split_len);
    uint ooff = split * p.n_q * p.n_heads * DV, soff = split * p.n_q * p.n_heads;

    for (uint e = TID; e < R * D; e += WGX) {
        uint rr = e / D, c = e % D;
        uint r = r0 + rr;
        float val = 0.0;
        if (r < nrows) {
            uint i = r / p.G, g = h * p.G + r % p.G;
            val = F32(q, p.oq + (i * p.n_heads + g) * D + c);
        }
        sQ[e] = val;
    }
    for (uint e = TID; e < R * DV; e += WGX) sO[e] = 0.0;
    for (uint rr = TID; rr < R; rr += WGX) {
        uint r = r0 + rr;
        uint i = min(r / p.G, p.n_q - 1u);
        sM[rr] = -FLT_MAX_;
        sL[rr] = 0.0;
        sBest[rr] = -FLT_MAX_;
        sArg[rr] = -1;
        sQpos[rr] = (p.flags & KVS_VK_ATTN_QPOS) != 0u ? int(qpos.d[p.oqp + i]) : int(p.n_kv) - int(p.n_q) + int(i);
        sRowlen[rr] = (p.flags & KVS_VK_ATTN_ROWLEN) != 0u ? int(rowlen.d[p.orl + i]) : int(valid);
    }
    barrier();
    // keys no row of this block can see: beyond every row_len, and (causal with kpos(j) = j)
    // beyond every qpos
    if (TID == 0u) {
        int lim = 0;
        for (uint rr = 0u; rr < R; rr++) {
            if (r0 + rr >= nrows) break;
            int l = sRowlen[rr];
            if ((p.flags & KVS_VK_ATTN_CAUSAL) != 0u && (p.flags & KVS_VK_ATTN_KPOS) == 0u) l = min(l, sQpos[rr] + 1);
            lim = max(lim, l);
        }
        sJlim = uint(clamp(lim, 0, int(valid)));
    }
    barrier();
    jend = min(jend, sJlim);

    for (uint j0 = jbeg; j0 < jend; j0 += TK) {
        // K and V tiles (widths D and DV): groups of 4 where the width allows (always so for the
        // block types: width % 32 == 0)
        if (D % 4u == 0u) {
            for (uint e = 4u * TID; e < TK * D; e += 4u * WGX) {
                uint jj = e / D, c = e % D;
                uint j = j0 + jj;
                vec4 kv = vec4(0.0);
                if (j < jend) kv = ldkv_k4((h * p.cap + j) * D + c);
                for (uint t = 0u; t < 4u; t++) sK[e + t] = kv[t];
            }
        } else {
            for (uint e = TID; e < TK * D; e += WGX) {
                uint jj = e / D, c = e % D;
                uint j = j0 + jj;
                sK[e] = j < jend ? ldkv_k((h * p.cap + j) * D + c) : 0.0;
            }
        }
        if (DV % 4u == 0u) {
            for (uint e = 4u * TID; e < TK * DV; e += 4u * WGX) {
                uint jj = e / DV, c = e % DV;
                uint j = j0 + jj;
                vec4 vv = vec4(0.0);
                if (j < jend) vv = ldkv_v4((h * p.cap + j) * DV + c);
                for (uint t = 0u; t < 4u; t++) sV[e + t] = vv[t];
            }
        } else {
            for (uint e = TID; e < TK * DV; e += WGX) {
                uint jj = e / DV, c = e % DV;
                uint j = j0 + jj;
                sV[e] = j < jend ? ldkv_v((h * p.cap + j) * DV + c) : 0.0;
            }
        }
        barrier();
        for (uint e = TID; e < R * TK; e += WGX) {
            uint rr = e / TK, jj = e % TK;
            uint r = r0 + rr, j = j0 + jj;
            float s = -1.0 / 0.0;
            if (r < nrows && j < jend && int(j) < sRowlen[rr]) {
                int kp = (p.flags & KVS_VK_ATTN_KPOS) != 0u ? int(kpos.d[p.okp + h * p.cap + j]) : int(j);
                if ((p.flags & KVS_VK_ATTN_CAUSAL) == 0u || kp <= sQpos[rr]) {
                    float dot = 0.0;
                    for (uint c = 0u; c < D; c++) dot += sQ[rr * D + c] * sK[jj * D + c];
                    s = p.scale * dot;
                    if ((p.flags & KVS_VK_ATTN_MASK) != 0u) s += F32(mask, p.om + (r / p.G) * p.n_kv + j);
                }
            }
            sS[e] = s;
        }
        barrier();
        for (uint rr = TID; rr < R; rr += WGX) {
            float m = sM[rr], mn = m;
            float best = sBest[rr];
            int arg = sArg[rr];
            for (uint jj = 0u; jj < TK; jj++) {
                float s = sS[rr * TK + jj];
                if (s >= -FLT_MAX_) {  // visible (not -inf)
                    mn = max(mn, s);
                    if (s > best || arg < 0) { best = s; arg = int(j0 + jj); }
                }
            }
            float alpha = exp(m - mn);
            float l = sL[rr] * alpha;
            for (uint jj = 0u; jj < TK; jj++) {
                float s = sS[rr * TK + jj];
                float pj = s >= -FLT_MAX_ ? exp(s - mn) : (isnan(s) ? s : 0.0); // NaN: a NaN row, as on the CPU
                sS[rr * TK + jj] = pj;
                l += pj;
            }
            sM[rr] = mn;
            sL[rr] = l;
            sA[rr] = alpha;
            sBest[rr] = best;
            sArg[rr] = arg;
        }
        barrier();
        for (uint e = TID; e < R * DV; e += WGX) {
            uint rr = e / DV, c = e % DV;
            float acc = sO[e] * sA[rr];
            for (uint jj = 0u; jj < TK; jj++) acc += sS[rr * TK + jj] * sV[jj * DV + c];
            sO[e] = acc;
        }
        barrier();
    }

    for (uint e = TID; e < R * DV; e += WGX) {
        uint rr = e / DV, c = e % DV;
        uint r = r0 + rr;
        if (r >= nrows) continue;
        uint i = r / p.G, g = h * p.G + r % p.G;
        float l = sL[rr];
        float val = (p.flags & KVS_VK_ATTN_UNNORM) != 0u ? sO[e] : (l != 0.0 ? sO[e] / l : 0.0);
        o.d[p.oo + ooff + (i * p.n_heads + g) * DV + c] = floatBitsToUint(val);
    }
    for (uint rr = TID; rr < R; rr += WGX) {
        uint r = r0 + rr;
        if (r >= nrows) continue;
        uint ig = (r / p.G) * p.n_heads + h * p.G + r % p.G;
        rmax.d[p.orm + soff + ig] = floatBitsToUint(sM[rr]);
        rsum.d[p.ors + soff + ig] = floatBitsToUint(sL[rr]);
        if ((p.flags & KVS_VK_ATTN_ARGMAX) != 0u) amax.d[p.oam + soff + ig] = uint(sArg[rr]);
    }
}
