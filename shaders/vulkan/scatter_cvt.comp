#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// Converting scatter (the quantized KV cache's append, kvs_cache_write_rows): f32 source rows
// converted to the destination dtype DD (spec constant 1): F16 / BF16 (round to nearest even, as
// kvs_f32_to_f16 / kvs_f32_to_bf16) or a block of 32 values of Q8_0, Q4_0, Q4_1, IQ4_NL, coded by the
// scale rules of core/quant/quant_encode.c (llama.cpp's reference quantizers; this is a transcription
// of that file: same scale, same rounding; iq4_nl's least-squares sums in f32 instead of f64, so on a
// near tie it may pick another of its 15 candidate scales than the CPU does); or, DD = KVS_VK_DT_QH8
// (QuantSpec's hierarchical cache, kvs_scatter_qh8), both planes of qh8: a q4_1-layout upper block
// (binding 2, rows of RB bytes) and a 16-byte lower block (binding 4, rows of D / 2 bytes at byte
// offset odl) per 32 values, by kvs_qh8_encode_row's operations (`precise`: no fused multiply-add,
// so the planes equal the CPU's bit for bit where division is correctly rounded).
// dst[g][t] = convert(src row win[g][t]) (win: scatter_win.comp, the highest i with idx[g][i] = t);
// src is [G][n][D] or, with TOKMAJ (spec constant 2), [n][G][D], F32; dst rows of RB bytes.
// One invocation per (g, i, unit) of the source rows, unit = one value (F16/BF16) or one block of 32;
// it writes only if row i is its target's winner. Units are not word-aligned (18-, 20-, 34-byte
// blocks, 2-byte values): words a unit covers whole are stored, the partial words at its ends are
// written with atomicAnd / atomicOr on its own bytes only, so neighbouring units never race and
// bytes of rows not written keep their contents.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DD = 4;
layout(constant_id = 2) const uint TOKMAJ = 0;
layout(std430, binding = 0) readonly buffer S { uint d[]; } src;
layout(std430, binding = 1) readonly buffer I { uint d[]; } idx;
layout(std430, binding = 2) buffer Dd { uint d[]; } dst;
layout(std430, binding = 3) readonly buffer W { uint d[]; } win;
layout(std430, binding = 4) buffer DL { uint d[]; } dlo; // qh8 only: the lower plane
KVS_VK_PUSH(KVS_VK_PC_SCATTER_CVT)

const int IQ4[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

uint bw[9];  // the unit's bytes, packed little-endian (at most 34)
uint lw[4];  // qh8: the lower block's 16 bytes
float x[32]; // the unit's source values

void put8(uint k, uint val) { bw[k >> 2u] |= (val & 0xffu) << (8u * (k & 3u)); }
void put16(uint k, uint val) {
    put8(k, val);
    put8(k + 1u, val >> 8u);
}

// roundf: half away from zero (t and v are close, so v - t is exact)
float round_away(float v) {
    float t = trunc(v);
    if (abs(v - t) >= 0.5) t += sign(v);
    return t;
}
// trunc(a) clamped to [0, 15]; NaN gives 0
uint code15(float a) { return !(a >= 0.0) ? 0u : a >= 15.0 ? 15u : uint(a); }
// index of the code value nearest to v (lower index on ties)
uint iq4_nearest(float v) {
    uint best = 0u;
    float bd = abs(v - float(IQ4[0]));
    for (uint k = 1u; k < 16u; k++) {
        float e = abs(v - float(IQ4[k]));
        if (e < bd) {
            bd = e;
            best = k;
        }
    }
    return best;
}

void enc_q8_0() {
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(x[i]));
    float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
    put16(0u, f2h(d));
    for (uint i = 0u; i < 32u; i++) {
        float q = round_away(x[i] * id);
        q = q > 127.0 ? 127.0 : q < -127.0 ? -127.0 : q == q ? q : 0.0;
        put8(2u + i, uint(int(q)));
    }
}

// the value of largest magnitude, sign kept (the first on ties)
float signed_amax() {
    float amax = 0.0, m = 0.0;
    for (uint i = 0u; i < 32u; i++)
        if (abs(x[i]) > amax) {
            amax = abs(x[i]);
            m = x[i];
        }
    return m;
}

void enc_q4_0() {
    float m = signed_amax();
    float d = m / -8.0, id = d != 0.0 ? 1.0 / d : 0.0;
    put16(0u, f2h(d));
    for (uint i = 0u; i < 16u; i++) put8(2u + i, code15(x[i] * id + 8.5) | (code15(x[i + 16u] * id + 8.5) << 4u));
}

void enc_q4_1() {
    float lo = FLT_MAX_, hi = -FLT_MAX_;
    for (uint i = 0u; i < 32u; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    float d = (hi - lo) / 15.0, id = d != 0.0 ? 1.0 / d : 0.0;
    put16(0u, f2h(d));
    put16(2u, f2h(lo));
    for (uint i = 0u; i < 16u; i++)
        put8(4u + i, code15((x[i] - lo) * id + 0.5) | (code15((x[i + 16u] - lo) * id + 0.5) << 4u));
}

void enc_iq4_nl() {
    float m = signed_amax();
    if (m == 0.0) {
        for (uint i = 0u; i < 16u; i++) put8(2u + i, 0x88u); // code 8 (= +1) times d = 0
        return;
    }
    // candidate inverse scales: the code's extreme (-127) mapped to m, then 7 steps either side;
    // weights x^2 (llama.cpp without an importance matrix)
    float best_d = m / -127.0, best = -1.0;
    for (int t = -7; t <= 7; t++) {
        float id = (float(t) - 127.0) / m;
        float sqx = 0.0, sq2 = 0.0;
        for (uint i = 0u; i < 32u; i++) {
            float q = float(IQ4[iq4_nearest(x[i] * id)]), w = x[i] * x[i];
            sqx += w * q * x[i];
            sq2 += w * q * q;
        }
        if (sq2 > 0.0 && (best < 0.0 || sqx * sqx > best * sq2)) {
            best_d = sqx / sq2;
            best = sqx * sqx / sq2;
        }
    }
    // code with the stored (binary16) scale
    uint hd = f2h(best_d);
    put16(0u, hd);
    float ds = h2f(hd), id = ds != 0.0 ? 1.0 / ds : 0.0;
    for (uint i = 0u; i < 16u; i++) put8(2u + i, iq4_nearest(x[i] * id) | (iq4_nearest(x[i + 16u] * id) << 4u));
}

// qh8 (quant_blocks.h; kvs_qh8_encode_row): d = f16(16 (max - min) / 255), m = f16(min + 7.5 (max -
// min) / 255), then u = clamp(floor((x - m) * 16 / d + 8), 0, 255) against the stored d and m (round
// half up of (x - m) / s + 7.5); upper nibbles into bw (a q4_1 block), lower nibbles into lw
void enc_qh8() {
    float mn = FLT_MAX_, mx = -FLT_MAX_;
    for (uint i = 0u; i < 32u; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    if (!(mn <= mx)) mn = mx = 0.0; // all NaN
    precise float s0 = (mx - mn) / 255.0;
    precise float dd = 16.0 * s0, mm = mn + 7.5 * s0;
    uint hd = f2h(dd), hm = f2h(mm);
    put16(0u, hd);
    put16(2u, hm);
    float d = h2f(hd), m = h2f(hm);
    precise float is = d > 0.0 ? 16.0 / d : 0.0;
    uint u[32];
    for (uint i = 0u; i < 32u; i++) {
        precise float a = (x[i] - m) * is + 8.0;
        u[i] = !(a >= 0.0) ? 0u : a >= 255.0 ? 255u : uint(a);
    }
    for (uint k = 0u; k < 4u; k++) lw[k] = 0u;
    for (uint i = 0u; i < 16u; i++) {
        put8(4u + i, (u[i] >> 4u) | ((u[i + 16u] >> 4u) << 4u));
        lw[i >> 2u] |= ((u[i] & 15u) | ((u[i + 16u] & 15u) << 4u)) << (8u * (i & 3u));
    }
}

// writes the qh8 lower block (lw, 16 bytes) at byte address B of dlo
void store_lo(uint B) {
    for (uint wd = B >> 2u; wd <= (B + 15u) >> 2u; wd++) {
        uint mask = 0u, val = 0u;
        for (uint t = 0u; t < 4u; t++) {
            int pos = int(4u * wd + t) - int(B);
            if (pos < 0 || pos >= 16) continue;
            mask |= 0xffu << (8u * t);
            val |= ((lw[uint(pos) >> 2u] >> (8u * (uint(pos) & 3u))) & 0xffu) << (8u * t);
        }
        if (mask == 0xffffffffu) {
            dlo.d[wd] = val;
        } else {
            atomicAnd(dlo.d[wd], ~mask);
            atomicOr(dlo.d[wd], val);
        }
    }
}

// writes the unit's nb bytes at byte address B of dst
void store_bytes(uint B, uint nb) {
    for (uint wd = B >> 2u; wd <= (B + nb - 1u) >> 2u; wd++) {
        uint mask = 0u, val = 0u;
        for (uint t = 0u; t < 4u; t++) {
            int pos = int(4u * wd + t) - int(B);
            if (pos < 0 || pos >= int(nb)) continue;
            mask |= 0xffu << (8u * t);
            val |= ((bw[uint(pos) >> 2u] >> (8u * (uint(pos) & 3u))) & 0xffu) << (8u * t);
        }
        if (mask == 0xffffffffu) {
            dst.d[wd] = val;
        } else {
            atomicAnd(dst.d[wd], ~mask);
            atomicOr(dst.d[wd], val);
        }
    }
}

void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.total) return;
    const bool blk = KVS_VK_IS_QUANT(DD);
    uint units = blk ? p.D / 32u : p.D;
    uint u = t % units, row = t / units;
    uint g = row / p.n, i = row % p.n;
    int tt = int(idx.d[p.oi + (p.shared_ != 0u ? i : g * p.n + i)]);
    if (tt < 0 || tt >= int(p.Nd)) return;
    if (int(win.d[p.ow + g * p.Nd + uint(tt)]) != int(i)) return;
    uint sr = TOKMAJ != 0u ? i * p.G + g : g * p.n + i;
    for (uint k = 0u; k < 9u; k++) bw[k] = 0u;
    uint B = p.od + (g * p.Nd + uint(tt)) * p.RB;
    if (!blk) {
        float f = F32(src, p.os + sr * p.D + u);
        put16(0u, DD == KVS_VK_DT_F16 ? f2h(f) : f2bf(f));
        store_bytes(B + 2u * u, 2u);
        return;
    }
    bool finite = true;
    for (uint k = 0u; k < 32u; k++) {
        x[k] = F32(src, p.os + sr * p.D + 32u * u + k);
        finite = finite && !isnan(x[k]) && !isinf(x[k]);
    }
    uint nb = DD == KVS_VK_DT_Q8_0 ? 34u : (DD == KVS_VK_DT_Q4_1 || DD == KVS_VK_DT_QH8) ? 20u : 18u;
    if (!finite) { // the NaN block (quant_encode.c): zero bytes, f16 NaN 0x7e00 as d (and m)
        put16(0u, 0x7e00u);
        if (DD == KVS_VK_DT_Q4_1 || DD == KVS_VK_DT_QH8) put16(2u, 0x7e00u);
        store_bytes(B + nb * u, nb);
        if (DD == KVS_VK_DT_QH8) {
            for (uint k = 0u; k < 4u; k++) lw[k] = 0u;
            store_lo(p.odl + (g * p.Nd + uint(tt)) * (p.D / 2u) + 16u * u);
        }
        return;
    }
    if (DD == KVS_VK_DT_QH8) {
        enc_qh8();
        store_bytes(B + 20u * u, 20u);
        store_lo(p.odl + (g * p.Nd + uint(tt)) * (p.D / 2u) + 16u * u);
        return;
    }
    if (DD == KVS_VK_DT_Q8_0) {
        enc_q8_0();
    } else if (DD == KVS_VK_DT_Q4_0) {
        enc_q4_0();
    } else if (DD == KVS_VK_DT_Q4_1) {
        enc_q4_1();
    } else {
        enc_iq4_nl();
    }
    store_bytes(B + nb * u, nb);
}
