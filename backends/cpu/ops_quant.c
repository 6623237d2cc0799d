/* CPU backend: the portable kernels of the block-quantized weights (contracts: matmul.h) and the
 * choice of the ISA variant per call. The block decoders are core/quant/quant_blocks.h's (written once
 * for every backend and the quantized KV cache); x86/quant_avx2.c, x86/quant_avx512.c and
 * arm/quant_neon.c compile the same decoders for their ISA (quant_fused.h) with intrinsic f32 FMA dot
 * products. */
#include "cpu_kernels.h"
#include "matmul.h"
#include "quant/quant_blocks.h"

KVS_CLONES
void kvs_cpu_qdecode_portable(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

KVS_CLONES
void kvs_cpu_qdot_rows_portable(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    const int blk = kvs_dtype_block(dt);
    const size_t bbytes = kvs_dtype_bytes(dt, blk);
    float tmp[KVS_QCHUNK];
    float s[KVS_GEMV_MAX_N][16] = {{0}};
    for (int64_t c = 0; c < k; c += KVS_QCHUNK) {
        const int64_t len = k - c < KVS_QCHUNK ? k - c : KVS_QCHUNK; /* a multiple of 32 */
        kvs_qb_decode_n(dt, (const uint8_t *)wrow + (size_t)(c / blk) * bbytes, len / blk, tmp);
        for (int64_t i = 0; i < n; i++) {
            const float *xi = x + i * k + c;
            for (int64_t t = 0; t < len; t += 16)
                for (int l = 0; l < 16; l++) s[i][l] += tmp[t + l] * xi[t + l];
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float tot = 0.0f;
        for (int l = 0; l < 16; l++) tot += s[i][l];
        acc[i] = tot;
    }
}

void kvs_cpu_quant_kernels(const kvs_device *dev, kvs_op_id op, kvs_cpu_qdot_fn *dot, kvs_cpu_qdecode_fn *decode) {
    const int isa = kvs_cpu_isa(dev, op); /* the forced variant's, else the best this CPU runs */
    kvs_cpu_qdot_fn d = kvs_cpu_qdot_rows_portable;
    kvs_cpu_qdecode_fn c = kvs_cpu_qdecode_portable;
#if KVS_CPU_HAVE_AVX512
    if (isa == KVS_ISA_AVX512) {
        d = kvs_cpu_qdot_rows_avx512;
        c = kvs_cpu_qdecode_avx512;
    }
#endif
#if KVS_CPU_HAVE_AVX2
    if (isa == KVS_ISA_AVX2) {
        d = kvs_cpu_qdot_rows_avx2;
        c = kvs_cpu_qdecode_avx2;
    }
#endif
#if KVS_CPU_HAVE_NEON
    if (isa == KVS_ISA_NEON) {
        d = kvs_cpu_qdot_rows_neon;
        c = kvs_cpu_qdecode_neon;
    }
#endif
    (void)isa; /* builds without SIMD kernels */
    if (dot) *dot = d;
    if (decode) *decode = c;
}

KVS_CLONES
void kvs_cpu_qh8_decode_portable(const void *hi, const void *lo, int64_t nblocks, float *dst) {
    kvs_qb_qh8_n(hi, lo, nblocks, dst);
}

kvs_cpu_qh8_decode_fn kvs_cpu_qh8_decoder(const kvs_device *dev, kvs_op_id op) {
    const int isa = kvs_cpu_isa(dev, op);
#if KVS_CPU_HAVE_AVX512
    if (isa == KVS_ISA_AVX512) return kvs_cpu_qh8_decode_avx512;
#endif
#if KVS_CPU_HAVE_AVX2
    if (isa == KVS_ISA_AVX2) return kvs_cpu_qh8_decode_avx2;
#endif
#if KVS_CPU_HAVE_NEON
    if (isa == KVS_ISA_NEON) return kvs_cpu_qh8_decode_neon;
#endif
    (void)isa;
    return kvs_cpu_qh8_decode_portable;
}

/* ---- 8-bit activations (contracts and error bound: matmul.h) ------------------------------- */

static size_t q8_align(size_t b) { return (b + 63) & ~(size_t)63; }

size_t kvs_cpu_q8_bytes(int64_t k, int64_t n) {
    const size_t nk = (size_t)(n * k);
    return q8_align(nk) + 2 * q8_align(nk / 32 * sizeof(float)) + q8_align(nk / 16 * sizeof(int16_t)) + 64;
}

static float f16_round(float f) { return kvs_f16_to_f32(kvs_f32_to_f16(f)); }

void kvs_cpu_q8_quantize(kvs_dtype dt, const float *x, int64_t k, int64_t n, void *scratch, kvs_q8_rows *out) {
    const size_t nk = (size_t)(n * k);
    uint8_t *p = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int8_t *q = (int8_t *)p;
    float *d = (float *)(p + q8_align(nk));
    float *s = (float *)((uint8_t *)d + q8_align(nk / 32 * sizeof(float)));
    int16_t *bs = (int16_t *)((uint8_t *)s + q8_align(nk / 32 * sizeof(float)));
    const int ba = kvs_dtype_block(dt) == 256 ? 256 : 32;
    for (int64_t b = 0; b < (int64_t)nk / ba; b++) {
        const float *xb = x + b * ba;
        int8_t *qb = q + b * ba;
        if (ba == 32) {
            /* block_q8_0 / q8_1: d = amax / 127, q = round(x / d), d and s stored as f16 */
            float amax = 0.0f;
            int finite = 1;
            for (int i = 0; i < 32; i++) {
                amax = fmaxf(amax, fabsf(xb[i]));
                finite &= fabsf(xb[i]) <= FLT_MAX;
            }
            if (!finite) { /* NaN / inf: codes 0 and a NaN scale, so the products come out NaN as in f32 */
                memset(qb, 0, 32);
                d[b] = s[b] = NAN;
            } else {
                const float db = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
                int sum = 0;
                for (int i = 0; i < 32; i++) sum += qb[i] = (int8_t)lrintf(xb[i] * id);
                d[b] = f16_round(db);
                s[b] = f16_round((float)sum * db);
            }
        } else {
            /* block_q8_K: the signed value of largest magnitude maps to -127 */
            float amax = 0.0f, vmax = 0.0f;
            int finite = 1;
            for (int i = 0; i < 256; i++) {
                if (fabsf(xb[i]) > amax) amax = fabsf(xb[i]), vmax = xb[i];
                finite &= fabsf(xb[i]) <= FLT_MAX;
            }
            if (!finite) { /* NaN / inf: as above */
                memset(qb, 0, 256);
                d[b] = NAN;
            } else if (amax == 0.0f) {
                memset(qb, 0, 256);
                d[b] = 0.0f;
            } else {
                const float is = -127.0f / vmax;
                for (int i = 0; i < 256; i++) {
                    const long v = lrintf(is * xb[i]);
                    qb[i] = (int8_t)(v > 127 ? 127 : v);
                }
                d[b] = 1.0f / is;
            }
        }
        for (int g = 0; g < ba / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += qb[16 * g + i];
            bs[b * (ba / 16) + g] = (int16_t)sum;
        }
    }
    out->q = q;
    out->d = d;
    out->s = ba == 32 ? s : NULL;
    out->bs = bs;
    out->k = k;
}

/* One W block as integers: q[v] and per-16-value group scales so that w[v] = sc[v/16] * q[v] -
 * mn[v/16], sc and mn the reference decoder's f32 products (quant_blocks.h). Returns 1 when the
 * type has a min (mn used). */
static int qi_block(kvs_dtype dt, const uint8_t *b, int8_t *q, float *sc, float *mn) {
    switch (dt) {
    case KVS_Q4_0: case KVS_Q4_1: case KVS_IQ4_NL: {
        const float dd = kvs_qf16(b);
        const uint8_t *qs = b + (dt == KVS_Q4_1 ? 4 : 2);
        for (int i = 0; i < 16; i++) {
            int lo = qs[i] & 15, hi = qs[i] >> 4;
            if (dt == KVS_IQ4_NL) lo = kvs_iq4_values[lo], hi = kvs_iq4_values[hi];
            else if (dt == KVS_Q4_0) lo -= 8, hi -= 8;
            q[i] = (int8_t)lo, q[i + 16] = (int8_t)hi;
        }
        sc[0] = sc[1] = dd;
        mn[0] = mn[1] = dt == KVS_Q4_1 ? -kvs_qf16(b + 2) : 0.0f;
        return dt == KVS_Q4_1;
    }
    case KVS_Q5_0: case KVS_Q5_1: {
        const int one = dt == KVS_Q5_1;
        const uint32_t qh = kvs_qu32(b + (one ? 4 : 2));
        const uint8_t *qs = b + (one ? 8 : 6);
        for (int i = 0; i < 16; i++) {
            q[i] = (int8_t)(((qs[i] & 15) | ((qh >> i) & 1) << 4) - (one ? 0 : 16));
            q[i + 16] = (int8_t)(((qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4) - (one ? 0 : 16));
        }
        sc[0] = sc[1] = kvs_qf16(b);
        mn[0] = mn[1] = one ? -kvs_qf16(b + 2) : 0.0f;
        return one;
    }
    case KVS_Q8_0:
        memcpy(q, b + 2, 32);
        sc[0] = sc[1] = kvs_qf16(b);
        mn[0] = mn[1] = 0.0f;
        return 0;
    case KVS_Q2_K: {
        const float dd = kvs_qf16(b + 80), dmin = kvs_qf16(b + 82);
        for (int v = 0; v < 256; v++) q[v] = (int8_t)((b[16 + 32 * (v / 128) + v % 32] >> (2 * ((v / 32) % 4))) & 3);
        for (int j = 0; j < 16; j++) sc[j] = dd * (float)(b[j] & 15), mn[j] = dmin * (float)(b[j] >> 4);
        return 1;
    }
    case KVS_Q3_K: {
        const float dd = kvs_qf16(b + 108);
        for (int v = 0; v < 256; v++) {
            const int lo = (b[32 + 32 * (v / 128) + v % 32] >> (2 * ((v / 32) % 4))) & 3;
            const int hb = (b[v % 32] >> (v / 32)) & 1;
            q[v] = (int8_t)((lo | hb << 2) - 4);
        }
        for (int j = 0; j < 16; j++) {
            const int s = (((b[96 + j % 8] >> (4 * (j / 8))) & 15) | ((b[104 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
            sc[j] = dd * (float)s, mn[j] = 0.0f;
        }
        return 0;
    }
    case KVS_Q4_K: case KVS_Q5_K: {
        const int five = dt == KVS_Q5_K;
        const float dd = kvs_qf16(b), dmin = kvs_qf16(b + 2);
        const uint8_t *qs = b + (five ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int s, m;
            kvs_q_scale_min_k4(b + 4, j, &s, &m);
            sc[2 * j] = sc[2 * j + 1] = dd * (float)s;
            mn[2 * j] = mn[2 * j + 1] = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int v = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
                if (five) v |= ((b[16 + l] >> j) & 1) << 4;
                q[32 * j + l] = (int8_t)v;
            }
        }
        return 1;
    }
    case KVS_Q6_K: {
        const float dd = kvs_qf16(b + 208);
        for (int v = 0; v < 256; v++) {
            const int g = v / 128, s = (v % 128) / 32, l = v % 32;
            const int lo = (b[64 * g + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 15;
            const int hi = (b[128 + 32 * g + l] >> (2 * s)) & 3;
            q[v] = (int8_t)((lo | hi << 4) - 32);
        }
        for (int j = 0; j < 16; j++) sc[j] = dd * (float)(int8_t)b[192 + j], mn[j] = 0.0f;
        return 0;
    }
    default: { /* KVS_IQ4_XS */
        const float dd = kvs_qf16(b);
        for (int j = 0; j < 8; j++) {
            const int s = (((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((b[2] | b[3] << 8) >> (2 * j)) & 3) << 4) - 32;
            sc[2 * j] = sc[2 * j + 1] = dd * (float)s;
            mn[2 * j] = mn[2 * j + 1] = 0.0f;
            const uint8_t *qs = b + 8 + 16 * j;
            for (int i = 0; i < 16; i++) {
                q[32 * j + i] = kvs_iq4_values[qs[i] & 15];
                q[32 * j + i + 16] = kvs_iq4_values[qs[i] >> 4];
            }
        }
        return 0;
    }
    }
}

KVS_CLONES
void kvs_cpu_q8dot_portable(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc) {
    const int blk = kvs_dtype_block(dt);
    const size_t bb = kvs_dtype_bytes(dt, blk);
    const int64_t k = x->k, nb = k / blk;
    int8_t q[256];
    float sc[16], mn[16], a[KVS_GEMV_MAX_N] = {0};
    const uint8_t *w = wrow;
    for (int64_t b = 0; b < nb; b++, w += bb) {
        const int has_min = qi_block(dt, w, q, sc, mn);
        for (int64_t i = 0; i < n; i++) {
            const int8_t *y = x->q + i * k + b * blk;
            if (blk == 32) {
                int isum = 0;
                for (int v = 0; v < 32; v++) isum += q[v] * y[v];
                a[i] += sc[0] * x->d[i * (k / 32) + b] * (float)isum;
                if (has_min) a[i] -= mn[0] * x->s[i * (k / 32) + b];
            } else {
                const int16_t *bs = x->bs + i * (k / 16) + b * 16;
                float t = 0.0f;
                for (int g = 0; g < 16; g++) {
                    int isum = 0;
                    for (int v = 0; v < 16; v++) isum += q[16 * g + v] * y[16 * g + v];
                    t += sc[g] * (float)isum;
                    if (has_min) t -= mn[g] * (float)bs[g];
                }
                a[i] += x->d[i * (k / 256) + b] * t;
            }
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = a[i];
}

kvs_cpu_q8dot_fn kvs_cpu_q8_kernel(const kvs_device *dev, kvs_op_id op, kvs_dtype dt) {
    const int v = kvs_device_variant(dev, op);
    if (v && !(v & KVS_CPU_V_Q8)) return NULL;
    /* automatic: the types with SIMD integer kernels (x86/quant_q8.h); q2_K, q3_K and iq4_xs keep
     * their f32-activation SIMD kernels, faster than the portable integer one */
    if (!v && (!KVS_CPU_Q8_DEFAULT || dt == KVS_Q2_K || dt == KVS_Q3_K || dt == KVS_IQ4_XS)) return NULL;
#if KVS_CPU_HAVE_AVX512
    if (kvs_cpu_avx512_vnni() && (!v || (v & KVS_CPU_V_AVX512))) return kvs_cpu_q8dot_vnni;
#endif
#if KVS_CPU_HAVE_AVX2
    if (kvs_cpu_avx2() && (!v || (v & (KVS_CPU_V_AVX2 | KVS_CPU_V_AVX512)))) return kvs_cpu_q8dot_avx2;
#endif
    if (!v) return NULL; /* automatic without SIMD integer kernels (aarch64: the NEON ones) */
    return kvs_cpu_q8dot_portable;
}
