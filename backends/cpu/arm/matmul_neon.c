/* CPU backend, aarch64 NEON kernels of matmul's GEMV (decoding-sized products, n <= 4 x rows;
 * contracts: neon.h, driver: ops_dense.c). Larger products go to the BLAS (OpenBLAS has NEON GEMM
 * kernels for aarch64). The block types (q8_0 without SDOT included) have their NEON kernels in
 * arm/quant_neon.c, chosen through kvs_cpu_quant_kernels as on x86.
 *  - kvs_cpu_dot_rows_neon: float weights, baseline NEON, W converted to f32 in registers (f16 by
 *    FCVTL, bf16 by a 16-bit shift), f32 FMA; the same arithmetic as the portable kernel up to
 *    summation order.
 *  - q8_0 with SDOT (+dotprod): x split per 32-block into two int8 planes (hi + lo / 254), so the
 *    products are exact integer dot products and x keeps about 15 bits (nmse ~1e-10, far inside the
 *    op's 5e-6 budget; quantising x to one int8 plane, as llama.cpp's q8_0 x q8_0 does, would not be).
 *  - f16 with FMLAL (+fp16fml): x rounded to f16 once per call, f16 x f16 products exact in f32
 *    accumulators (relative error 2^-11 per term, nmse ~1e-7: what the op's budget admits). */
#include <math.h>
#include <string.h>

#include "../cpu_kernels.h"
#include "../matmul.h"
#include "neon.h"

#if KVS_CPU_HAVE_NEON
#include <arm_neon.h>

static inline float32x4_t h_lo(uint16x8_t u) { return vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(u))); }
static inline float32x4_t h_hi(uint16x8_t u) { return vcvt_high_f32_f16(vreinterpretq_f16_u16(u)); }
static inline float32x4_t bf_lo(uint16x8_t u) { return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(u), 16)); }
static inline float32x4_t bf_hi(uint16x8_t u) { return vreinterpretq_f32_u32(vshll_high_n_u16(u, 16)); }

void kvs_cpu_dot_rows_neon(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    float32x4_t a[KVS_GEMV_MAX_N][2];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i][0] = a[i][1] = vdupq_n_f32(0.0f);
    for (int64_t c = 0; c < k; c += 16) {
        float32x4_t w0, w1, w2, w3;
        if (dt == KVS_F32) {
            const float *w = (const float *)wrow + c;
            w0 = vld1q_f32(w);
            w1 = vld1q_f32(w + 4);
            w2 = vld1q_f32(w + 8);
            w3 = vld1q_f32(w + 12);
        } else {
            const uint16_t *w = (const uint16_t *)wrow + c;
            uint16x8_t u0 = vld1q_u16(w), u1 = vld1q_u16(w + 8);
            if (dt == KVS_F16) {
                w0 = h_lo(u0), w1 = h_hi(u0), w2 = h_lo(u1), w3 = h_hi(u1);
            } else {
                w0 = bf_lo(u0), w1 = bf_hi(u0), w2 = bf_lo(u1), w3 = bf_hi(u1);
            }
        }
        for (int64_t i = 0; i < n; i++) {
            const float *xc = x + i * k + c;
            a[i][0] = vfmaq_f32(a[i][0], w0, vld1q_f32(xc));
            a[i][1] = vfmaq_f32(a[i][1], w1, vld1q_f32(xc + 4));
            a[i][0] = vfmaq_f32(a[i][0], w2, vld1q_f32(xc + 8));
            a[i][1] = vfmaq_f32(a[i][1], w3, vld1q_f32(xc + 12));
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = vaddvq_f32(vaddq_f32(a[i][0], a[i][1]));
}

/* ---- q8_0 with SDOT ---- */

int kvs_cpu_q8_split_x_neon(const float *x, int64_t k, int64_t n, int8_t *qh, int8_t *ql, float *sc) {
    const int64_t nb = k / KVS_Q8_BLOCK;
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + i * k + b * KVS_Q8_BLOCK;
            float32x4_t v[8], m = vdupq_n_f32(0.0f);
            for (int t = 0; t < 8; t++) {
                v[t] = vld1q_f32(xb + 4 * t);
                m = vmaxq_f32(m, vabsq_f32(v[t])); /* NaN propagates: caught below */
            }
            const float amax = vmaxvq_f32(m);
            /* not finite, or so small that 127 / amax overflows: the f32 kernel instead */
            if (!isfinite(amax) || (amax > 0.0f && amax < 0x1p-100f)) return 0;
            const float s = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f, inv_lo = inv * 254.0f;
            sc[i * nb + b] = s;
            int8_t *h = qh + i * k + b * KVS_Q8_BLOCK, *l = ql + i * k + b * KVS_Q8_BLOCK;
            for (int t = 0; t < 8; t += 2) {
                /* round to nearest (even), saturating narrows: |hi| <= 127, |lo| <= 127 (+1 from rounding) */
                int32x4_t h0 = vcvtnq_s32_f32(vmulq_n_f32(v[t], inv)), h1 = vcvtnq_s32_f32(vmulq_n_f32(v[t + 1], inv));
                float32x4_t r0 = vsubq_f32(v[t], vmulq_n_f32(vcvtq_f32_s32(h0), s));
                float32x4_t r1 = vsubq_f32(v[t + 1], vmulq_n_f32(vcvtq_f32_s32(h1), s));
                int32x4_t l0 = vcvtnq_s32_f32(vmulq_n_f32(r0, inv_lo)), l1 = vcvtnq_s32_f32(vmulq_n_f32(r1, inv_lo));
                int16x8_t hh = vcombine_s16(vqmovn_s32(h0), vqmovn_s32(h1));
                int16x8_t ll = vcombine_s16(vqmovn_s32(l0), vqmovn_s32(l1));
                vst1_s8(h + 4 * t, vqmovn_s16(hh));
                vst1_s8(l + 4 * t, vqmovn_s16(ll));
            }
        }
    return 1;
}

#if KVS_CPU_HAVE_NEON_EXT
KVS_TARGET_DOTPROD
void kvs_cpu_dot_rows_q8_dotprod(const uint8_t *wrow, const int8_t *qh, const int8_t *ql, const float *sc, int64_t k,
                                 int64_t n, float *acc) {
    const int64_t nb = k / KVS_Q8_BLOCK;
    float32x4_t a[KVS_GEMV_MAX_N];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = wrow + b * KVS_Q8_BYTES;
        uint16_t hs;
        memcpy(&hs, blk, 2);
        const float d = kvs_h2f(hs);
        const int8x16_t w0 = vld1q_s8((const int8_t *)(blk + 2)), w1 = vld1q_s8((const int8_t *)(blk + 18));
        for (int64_t i = 0; i < n; i++) {
            const int8_t *h = qh + i * k + b * KVS_Q8_BLOCK, *l = ql + i * k + b * KVS_Q8_BLOCK;
            /* |sum| <= 32 * 128 * 127 < 2^24: exact as int32 and as f32 */
            int32x4_t ih = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(h)), w1, vld1q_s8(h + 16));
            int32x4_t il = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(l)), w1, vld1q_s8(l + 16));
            const float s = d * sc[i * nb + b];
            a[i] = vfmaq_n_f32(a[i], vcvtq_f32_s32(ih), s);
            a[i] = vfmaq_n_f32(a[i], vcvtq_f32_s32(il), s * (1.0f / 254.0f));
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = vaddvq_f32(a[i]);
}
#endif

/* ---- f16 with FMLAL ---- */

int kvs_cpu_f16_x_neon(const float *x, int64_t count, uint16_t *xh) {
    float32x4_t m = vdupq_n_f32(0.0f);
    int64_t t = 0;
    for (; t + 4 <= count; t += 4) {
        float32x4_t v = vld1q_f32(x + t);
        m = vmaxq_f32(m, vabsq_f32(v));
        vst1_u16(xh + t, vreinterpret_u16_f16(vcvt_f16_f32(v)));
    }
    float mx = vmaxvq_f32(m);
    for (; t < count; t++) {
        mx = fabsf(x[t]) > mx || isnan(x[t]) ? fabsf(x[t]) : mx;
        xh[t] = kvs_f2h(x[t]);
    }
    return !isnan(mx) && mx <= 65504.0f; /* the largest f16 */
}

#if KVS_CPU_HAVE_NEON_EXT
KVS_TARGET_FP16FML
void kvs_cpu_dot_rows_f16_fml(const uint16_t *wrow, const uint16_t *xh, int64_t k, int64_t n, float *acc) {
    float32x4_t a[KVS_GEMV_MAX_N][2];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i][0] = a[i][1] = vdupq_n_f32(0.0f);
    for (int64_t c = 0; c < k; c += 16) {
        float16x8_t w0 = vreinterpretq_f16_u16(vld1q_u16(wrow + c)), w1 = vreinterpretq_f16_u16(vld1q_u16(wrow + c + 8));
        for (int64_t i = 0; i < n; i++) {
            const uint16_t *xc = xh + i * k + c;
            float16x8_t x0 = vreinterpretq_f16_u16(vld1q_u16(xc)), x1 = vreinterpretq_f16_u16(vld1q_u16(xc + 8));
            a[i][0] = vfmlalq_low_f16(a[i][0], w0, x0);
            a[i][1] = vfmlalq_high_f16(a[i][1], w0, x0);
            a[i][0] = vfmlalq_low_f16(a[i][0], w1, x1);
            a[i][1] = vfmlalq_high_f16(a[i][1], w1, x1);
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = vaddvq_f32(vaddq_f32(a[i][0], a[i][1]));
}
#endif
#endif
