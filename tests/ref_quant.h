/* float64 reference of the block-quantized dtypes, written from the format (ggml's block structs as
 * described in core/quant/quant_blocks.h's table, read one value at a time with independent index
 * arithmetic): value i of a block = mul + add, both exact in double. Used by test_quant.c (decoders)
 * and test_ops_quant.c (products). Header-only: test_quant links the library's internals, test_ops
 * the public library. */
#ifndef KVS_TESTS_REF_QUANT_H
#define KVS_TESTS_REF_QUANT_H

#include <math.h>
#include <stdint.h>

#include "kvsieve/tensor.h"


static inline double ref_f16d(const uint8_t *p) {
    unsigned h = p[0] | (unsigned)p[1] << 8;
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static inline int ref_bit(const uint8_t *p, int i) { return (p[i / 8] >> (i % 8)) & 1; }

/* 4-bit code of value i of a 32-value group stored as 16 bytes (low nibbles, then high nibbles). */
static inline int ref_nib32(const uint8_t *qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

static const int ref_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Value i of block b as scale*q (the "mul" part) and min (subtracted/added), exact in double. */
static inline void ref_quant_value(kvs_dtype dt, const uint8_t *b, int i, double *mul, double *add) {
    *add = 0.0;
    switch (dt) {
    case KVS_Q4_0: *mul = ref_f16d(b) * (ref_nib32(b + 2, i) - 8); break;
    case KVS_Q4_1: *mul = ref_f16d(b) * ref_nib32(b + 4, i); *add = ref_f16d(b + 2); break;
    case KVS_Q5_0: *mul = ref_f16d(b) * ((ref_nib32(b + 6, i) | ref_bit(b + 2, i) << 4) - 16); break;
    case KVS_Q5_1: *mul = ref_f16d(b) * (ref_nib32(b + 8, i) | ref_bit(b + 4, i) << 4); *add = ref_f16d(b + 2); break;
    case KVS_Q8_0: *mul = ref_f16d(b) * (int8_t)b[2 + i]; break;
    case KVS_IQ4_NL: *mul = ref_f16d(b) * ref_iq4[ref_nib32(b + 2, i)]; break;
    case KVS_Q2_K: {
        /* 2-bit value i: byte 32*(i/128) + i%32, bit pair (i/32)%4; sub-block i/16 */
        int q = (b[16 + 32 * (i / 128) + i % 32] >> (2 * ((i / 32) % 4))) & 3, s = b[i / 16];
        *mul = ref_f16d(b + 80) * (s & 15) * q;
        *add = -ref_f16d(b + 82) * (s >> 4);
        break;
    }
    case KVS_Q3_K: {
        int q = (b[32 + 32 * (i / 128) + i % 32] >> (2 * ((i / 32) % 4))) & 3;
        if (!((b[i % 32] >> (i / 32)) & 1)) q -= 4;
        int j = i / 16;
        int s = ((b[96 + j % 8] >> (4 * (j / 8))) & 15) | ((b[96 + 8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
        *mul = ref_f16d(b + 108) * (s - 32) * q;
        break;
    }
    case KVS_Q4_K:
    case KVS_Q5_K: {
        int j = i / 32, sc, mn;
        const uint8_t *s = b + 4;
        if (j < 4) {
            sc = s[j] & 63;
            mn = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
            mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        }
        const uint8_t *qs = b + (dt == KVS_Q4_K ? 16 : 48);
        int q = (qs[32 * (j / 2) + i % 32] >> (4 * (j % 2))) & 15;
        if (dt == KVS_Q5_K) q |= ((b[16 + i % 32] >> j) & 1) << 4;
        *mul = ref_f16d(b) * sc * q;
        *add = -ref_f16d(b + 2) * mn;
        break;
    }
    case KVS_Q6_K: {
        int g = i / 128, r = i % 128; /* r = 32*s + l */
        int lo = (b[64 * g + r % 64] >> (4 * (r / 64))) & 15;
        int hi = (b[128 + 32 * g + r % 32] >> (2 * (r / 32))) & 3;
        *mul = ref_f16d(b + 208) * (int8_t)b[192 + i / 16] * ((lo | hi << 4) - 32);
        break;
    }
    case KVS_IQ4_XS: {
        int j = i / 32;
        int s = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((b[2] | b[3] << 8) >> (2 * j)) & 3) << 4;
        *mul = ref_f16d(b) * (s - 32) * ref_iq4[ref_nib32(b + 8 + 16 * j, i % 32)];
        break;
    }
    default: *mul = NAN; break; /* not a block type */
    }
}

/* out[0 .. n) = the n values (n % block == 0) of a block-type row segment, exactly. */
static inline void ref_quant_dequant(kvs_dtype dt, const uint8_t *blocks, int64_t n, double *out) {
    const int blk = kvs_dtype_block(dt);
    const size_t bytes = kvs_dtype_bytes(dt, blk);
    for (int64_t i = 0; i < n; i++) {
        double mul, add;
        ref_quant_value(dt, blocks + (size_t)(i / blk) * bytes, (int)(i % blk), &mul, &add);
        out[i] = mul + add;
    }
}

#endif
