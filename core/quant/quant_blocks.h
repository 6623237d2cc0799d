/* Block formats of llama.cpp's quantized tensor types (GGUF / ggml numbering), and one decoder per
 * type: the readable reference every other kernel (the CPU products, the ISA variants, later the
 * quantized KV cache of issue 17) is tested against. Not installed, not part of the API.
 *
 * Written from the format (ggml's block structs and gguf-py's numpy dequantizers were read, this code
 * is our own). Every block is little-endian, packed (no padding); "f16" is an IEEE binary16 scale.
 * A row of a tensor is a whole number of blocks (the loaders refuse ne[0] % block != 0).
 *
 *   type    values  bytes  layout (byte offsets)                                  value i
 *   q4_0      32     18    d f16 @0, qs[16] @2                                   d * (nib(i) - 8)
 *   q4_1      32     20    d @0, m @2, qs[16] @4                                 d * nib(i) + m
 *   q5_0      32     22    d @0, qh u32 @2, qs[16] @6                            d * (nib(i) | h(i)<<4) - 16)
 *   q5_1      32     24    d @0, m @2, qh u32 @4, qs[16] @8                      d * (nib(i) | h(i)<<4) + m
 *   q8_0      32     34    d @0, qs[32] int8 @2                                  d * qs[i]
 *   q2_K     256     84    scales[16] @0, qs[64] @16, d @80, dmin @82             (d*sc_j) * q2 - (dmin*m_j)
 *   q3_K     256    110    hmask[32] @0, qs[64] @32, scales[12] @96, d @108       (d*s_j) * (q2 - 4*!hbit)
 *   q4_K     256    144    d @0, dmin @2, scales[12] @4, qs[128] @16             (d*sc_j) * q4 - (dmin*m_j)
 *   q5_K     256    176    d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48  (d*sc_j) * q5 - (dmin*m_j)
 *   q6_K     256    210    ql[128] @0, qh[64] @128, scales[16] int8 @192, d @208  (d*sc_j) * (q6 - 32)
 *   iq4_nl    32     18    d @0, qs[16] @2                                       d * KV[nib(i)]
 *   iq4_xs   256    136    d @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8      (d*(s_j-32)) * KV[nib]
 *
 * 32-value nibble order (q4_0, q4_1, q5_*, iq4_nl, and each 32-value group of iq4_xs): value i < 16
 * is the low nibble of qs[i], value i >= 16 the high nibble of qs[i - 16]. q5_*: h(i) = bit i of qh.
 * The K types split 256 values into sub-blocks j (16 values for q2_K, q3_K, q6_K; 32 for q4_K,
 * q5_K, iq4_xs); the decoders below spell out which bits each value takes.
 *
 * qh8: QuantSpec's hierarchical 4/8-bit KV-cache type (Tiwari et al. 2025, "QuantSpec: Self-
 * Speculative Decoding with Hierarchical Quantized KV Cache", sec. 4: an 8-bit code whose upper 4
 * bits are a 4-bit code of their own; this block format is ours). 32 values, two separately stored
 * planes, so that a draft pass reads only the upper one, half the bytes, contiguously:
 *   upper block, 20 bytes = a q4_1 block: d f16 @0, m f16 @2, hi nibbles qs[16] @4 (q4_1's order)
 *   lower block, 16 bytes (dtype qh8_lo): lo nibbles qs[16] @0, the same nibble order
 *   8-bit code u(i) = 16 hi(i) + lo(i) in [0, 255]; s = d / 16 (the 8-bit step)
 *   4-bit view  x4(i) = d * hi(i) + m                         (exactly the q4_1 decode)
 *   8-bit value x8(i) = m + s * (u(i) - 7.5) = x4(i) + s * (lo(i) - 7.5)
 * x4 is the centre of the 16 8-bit levels that share the upper nibble, so the 4-bit view is the
 * 8-bit value rounded to a 16x coarser grid: |x4 - x8| <= 7.5 s. Encoder (quant_encode.c): block min
 * mn and max mx, s0 = (mx - mn) / 255, stored d = f16(16 s0), m = f16(mn + 7.5 s0), then
 * u = clamp(round((x - m) / s + 7.5), 0, 255) with the stored d, m: |x - x8| <= s/2 and
 * |x - x4| <= 8 s (plus the f16 rounding of d and m at the block's ends). In a KV cache each plane
 * is its own tensor with the same row indexing (the upper one a Q4_1 tensor, a valid 4-bit cache).
 *
 * Float operations are those of gguf-py's numpy dequantizers, in the same order, each rounded to
 * binary32 (no fused multiply-add: the project is compiled as ISO C11, where GCC does not contract),
 * so the decoders are bit-exact against them (tests/test_quant.c checks it on tests/data vectors). */
#ifndef KVS_CORE_QUANT_BLOCKS_H
#define KVS_CORE_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "kvsieve/tensor.h"

#define KVS_QK 32   /* values per block of the 32-value types */
#define KVS_QK_K 256 /* values per super-block of the K types and iq4_xs */

/* The 16 values of iq4_nl / iq4_xs's non-linear 4-bit code. */
static const int8_t kvs_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

/* binary16 -> binary32, exact for every input (NaN payloads kept in the top bits). */
static inline float kvs_qf16(const uint8_t *p) {
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, bits;
    float f;
    if (em >= 0x7c00u) {
        bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
    } else if (em >= 0x0400u) {
        bits = sign | ((em + (112u << 10)) << 13);
    } else {
        f = (float)em * 0x1p-24f; /* subnormal or zero: exact */
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    memcpy(&f, &bits, 4);
    return f;
}

static inline void kvs_qb_q4_0(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b);
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)((b[2 + i] & 0x0f) - 8);
        y[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
    }
}

static inline void kvs_qb_q4_1(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b), m = kvs_qf16(b + 2);
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)(b[4 + i] & 0x0f) + m;
        y[i + 16] = d * (float)(b[4 + i] >> 4) + m;
    }
}

static inline uint32_t kvs_qu32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void kvs_qb_q5_0(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b);
    const uint32_t qh = kvs_qu32(b + 2);
    for (int i = 0; i < 16; i++) {
        int lo = (b[6 + i] & 0x0f) | (int)((qh >> i) & 1u) << 4;
        int hi = (b[6 + i] >> 4) | (int)((qh >> (i + 16)) & 1u) << 4;
        y[i] = d * (float)(lo - 16);
        y[i + 16] = d * (float)(hi - 16);
    }
}

static inline void kvs_qb_q5_1(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b), m = kvs_qf16(b + 2);
    const uint32_t qh = kvs_qu32(b + 4);
    for (int i = 0; i < 16; i++) {
        int lo = (b[8 + i] & 0x0f) | (int)((qh >> i) & 1u) << 4;
        int hi = (b[8 + i] >> 4) | (int)((qh >> (i + 16)) & 1u) << 4;
        y[i] = d * (float)lo + m;
        y[i + 16] = d * (float)hi + m;
    }
}

static inline void kvs_qb_q8_0(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b);
    for (int i = 0; i < 32; i++) y[i] = d * (float)(int8_t)b[2 + i];
}

/* q2_K: value i = 128*g + 32*s + l (g < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[32g + l]; its
 * sub-block j = i / 16 has scale nibble scales[j] & 15 and min nibble scales[j] >> 4. */
static inline void kvs_qb_q2_k(const uint8_t *b, float *y) {
    const uint8_t *sc = b, *qs = b + 16;
    const float d = kvs_qf16(b + 80), dmin = kvs_qf16(b + 82);
    for (int j = 0; j < 16; j++) {
        const float dl = d * (float)(sc[j] & 0x0f), ml = dmin * (float)(sc[j] >> 4);
        const int g = j / 8, s = (j / 2) % 4, l0 = (j % 2) * 16;
        for (int l = 0; l < 16; l++) y[16 * j + l] = dl * (float)((qs[32 * g + l0 + l] >> (2 * s)) & 3) - ml;
    }
}

/* q3_K: value i = 128*g + 32*s + l: low 2 bits = bits 2s.. of qs[32g + l], high bit = bit (i / 32) of
 * hmask[l]; q = low - (high ? 0 : 4). Sub-block j = i / 16 has the 6-bit scale (low 4 bits: nibble
 * j / 8 of scales[j % 8]; high 2 bits: bits 2*(j / 4) of scales[8 + j % 4]) minus 32. */
static inline void kvs_qb_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    const float d = kvs_qf16(b + 108);
    for (int j = 0; j < 16; j++) {
        int lo = (sc[j % 8] >> (4 * (j / 8))) & 0x0f, hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        const float dl = d * (float)((lo | hi << 4) - 32);
        const int g = j / 8, s = (j / 2) % 4, l0 = (j % 2) * 16;
        for (int l = 0; l < 16; l++) {
            const int i = 16 * j + l;
            int q = (qs[32 * g + l0 + l] >> (2 * s)) & 3;
            q -= (hm[l0 + l] >> (i / 32)) & 1 ? 0 : 4;
            y[i] = dl * (float)q;
        }
    }
}

/* The 6-bit scale and min of sub-block j < 8 of q4_K / q5_K (12 packed bytes): j < 4: low 6 bits of
 * bytes j and j + 4; j >= 4: the nibbles of byte j + 4 with the top 2 bits of bytes j - 4 and j. */
static inline void kvs_q_scale_min_k4(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* q4_K: sub-block j (32 values) takes the low (j even) or high (j odd) nibbles of qs[32*(j/2) ..]. */
static inline void kvs_qb_q4_k(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b), dmin = kvs_qf16(b + 2);
    const uint8_t *qs = b + 16;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        kvs_q_scale_min_k4(b + 4, j, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *q = qs + 32 * (j / 2);
        const int sh = 4 * (j % 2);
        for (int l = 0; l < 32; l++) y[32 * j + l] = dl * (float)((q[l] >> sh) & 0x0f) - ml;
    }
}

/* q5_K: as q4_K, plus bit j of qh[l] as the fifth bit of value 32*j + l. */
static inline void kvs_qb_q5_k(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b), dmin = kvs_qf16(b + 2);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        kvs_q_scale_min_k4(b + 4, j, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *q = qs + 32 * (j / 2);
        const int sh = 4 * (j % 2);
        for (int l = 0; l < 32; l++)
            y[32 * j + l] = dl * (float)(((q[l] >> sh) & 0x0f) | ((qh[l] >> j) & 1) << 4) - ml;
    }
}

/* q6_K: value i = 128*g + 32*s + l (l < 32): low 4 bits from ql[64g + l + 32*(s&1)] (nibble s >> 1),
 * high 2 bits = bits 2s.. of qh[32g + l]; q - 32 times d * scales[i / 16]. */
static inline void kvs_qb_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = kvs_qf16(b + 208);
    for (int j = 0; j < 16; j++) {
        const float dl = d * (float)sc[j];
        const int g = j / 8, s = (j / 2) % 4, l0 = (j % 2) * 16;
        for (int l = l0; l < l0 + 16; l++) {
            int lo = (ql[64 * g + l + 32 * (s & 1)] >> (4 * (s >> 1))) & 0x0f;
            int hi = (qh[32 * g + l] >> (2 * s)) & 3;
            y[128 * g + 32 * s + l] = dl * (float)((lo | hi << 4) - 32);
        }
    }
}

static inline void kvs_qb_iq4_nl(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b);
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)kvs_iq4_values[b[2 + i] & 0x0f];
        y[i + 16] = d * (float)kvs_iq4_values[b[2 + i] >> 4];
    }
}

/* iq4_xs: sub-block j (32 values, nibble order as iq4_nl over qs[16j ..]) has the 6-bit scale
 * (nibble j % 2 of scales_l[j / 2]) | (bits 2j.. of scales_h) << 4, minus 32. */
static inline void kvs_qb_iq4_xs(const uint8_t *b, float *y) {
    const float d = kvs_qf16(b);
    const unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
    const uint8_t *sl = b + 4, *qs = b + 8;
    for (int j = 0; j < 8; j++) {
        int s = ((sl[j / 2] >> (4 * (j % 2))) & 0x0f) | (int)((sh >> (2 * j)) & 3) << 4;
        const float dl = d * (float)(s - 32);
        for (int i = 0; i < 16; i++) {
            y[32 * j + i] = dl * (float)kvs_iq4_values[qs[16 * j + i] & 0x0f];
            y[32 * j + i + 16] = dl * (float)kvs_iq4_values[qs[16 * j + i] >> 4];
        }
    }
}

/* qh8, 8-bit values: hi = the upper (q4_1) block, lo = the lower block (16 bytes). In binary32,
 * in this order: (d * hi + m) + (d * 0.0625f) * (lo - 7.5f). The 4-bit view is kvs_qb_q4_1(hi). */
static inline void kvs_qb_qh8(const uint8_t *hi, const uint8_t *lo, float *y) {
    const float d = kvs_qf16(hi), m = kvs_qf16(hi + 2), s = d * 0.0625f;
    for (int i = 0; i < 16; i++) {
        y[i] = (d * (float)(hi[4 + i] & 0x0f) + m) + s * ((float)(lo[i] & 0x0f) - 7.5f);
        y[i + 16] = (d * (float)(hi[4 + i] >> 4) + m) + s * ((float)(lo[i] >> 4) - 7.5f);
    }
}

/* float64 reference decoders of qh8 (the formulas above in exact arithmetic on the stored fields):
 * the 4-bit view of one upper block, and the 8-bit values of an upper + lower block pair. */
static inline void kvs_qh8_ref_view4(const uint8_t *hi, double *y) {
    const double d = kvs_qf16(hi), m = kvs_qf16(hi + 2);
    for (int i = 0; i < 16; i++) {
        y[i] = d * (double)(hi[4 + i] & 0x0f) + m;
        y[i + 16] = d * (double)(hi[4 + i] >> 4) + m;
    }
}

static inline void kvs_qh8_ref_value8(const uint8_t *hi, const uint8_t *lo, double *y) {
    const double d = kvs_qf16(hi), m = kvs_qf16(hi + 2);
    for (int i = 0; i < 16; i++) {
        const int u0 = 16 * (hi[4 + i] & 0x0f) + (lo[i] & 0x0f), u1 = 16 * (hi[4 + i] >> 4) + (lo[i] >> 4);
        y[i] = m + d / 16.0 * ((double)u0 - 7.5);
        y[i + 16] = m + d / 16.0 * ((double)u1 - 7.5);
    }
}

/* n / 32 blocks of qh8 (upper blocks at hi, 20 bytes each; lower at lo, 16 each) -> y[0 .. n). */
static inline void kvs_qb_qh8_n(const uint8_t *hi, const uint8_t *lo, int64_t nblocks, float *y) {
    for (int64_t i = 0; i < nblocks; i++) kvs_qb_qh8(hi + 20 * i, lo + 16 * i, y + 32 * i);
}

/* Decodes nblocks consecutive blocks of dtype dt (a block type) into y[0 .. nblocks * block): one
 * switch, then a loop of the type's decoder (what the ISA-specific files compile for their ISA). */
static inline void kvs_qb_decode_n(kvs_dtype dt, const uint8_t *b, int64_t nblocks, float *y) {
#define KVS_QB_LOOP_(fn, BLK, BYTES)                                                                 \
    for (int64_t i_ = 0; i_ < nblocks; i_++) fn(b + i_ * (BYTES), y + i_ * (BLK));                  \
    break
    switch (dt) {
    case KVS_Q4_0: KVS_QB_LOOP_(kvs_qb_q4_0, 32, 18);
    case KVS_Q4_1: KVS_QB_LOOP_(kvs_qb_q4_1, 32, 20);
    case KVS_Q5_0: KVS_QB_LOOP_(kvs_qb_q5_0, 32, 22);
    case KVS_Q5_1: KVS_QB_LOOP_(kvs_qb_q5_1, 32, 24);
    case KVS_Q8_0: KVS_QB_LOOP_(kvs_qb_q8_0, 32, 34);
    case KVS_IQ4_NL: KVS_QB_LOOP_(kvs_qb_iq4_nl, 32, 18);
    case KVS_Q2_K: KVS_QB_LOOP_(kvs_qb_q2_k, 256, 84);
    case KVS_Q3_K: KVS_QB_LOOP_(kvs_qb_q3_k, 256, 110);
    case KVS_Q4_K: KVS_QB_LOOP_(kvs_qb_q4_k, 256, 144);
    case KVS_Q5_K: KVS_QB_LOOP_(kvs_qb_q5_k, 256, 176);
    case KVS_Q6_K: KVS_QB_LOOP_(kvs_qb_q6_k, 256, 210);
    case KVS_IQ4_XS: KVS_QB_LOOP_(kvs_qb_iq4_xs, 256, 136);
    default: break;
    }
#undef KVS_QB_LOOP_
}

#endif
