/* CPU backend, aarch64 NEON kernels of attention's tile pass (contracts: neon.h; the tile pass and
 * its portable kernels: attention_tiles.c; design: attention.h), reached through the table
 * kvs_cpu_att_neon (attention.h's att_kernels). One set for prefill and decoding:
 * row-major K/V tiles (f16 tiles converted by FCVTL first), so no transposed copy of K is needed.
 *  - Q.K^T: register tiles of 4 query rows x 4 keys (16 f32x4 accumulators), lane-reduced;
 *  - P.V: 4 rows x 16 columns in registers, one pass over the V rows;
 *  - row maximum with the portable kernel's NaN rule, and exp(s - m) with kvs_expf's arithmetic
 *    lane for lane (no FMA contraction, as the portable C is compiled), so the online-softmax
 *    statistics (row_max, row_sum, argmax, key_mass, probs) follow the reference's definitions. */
#include "../attention.h"
#include "neon.h"

#if KVS_CPU_HAVE_NEON
#include <arm_neon.h>

/* S[r][j] = scale * Qp[r] . K[j] for r < M, j < n; Qp [M][d], K [n][d] row-major; S row stride ATT_BK. */
static void att_qk_neon(const float *Qp, const float *K, int64_t d, int64_t M, int64_t n, float scale, float *S) {
    const int64_t lds = ATT_BK;
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        /* rows past M read row r0 again and are not stored (no branches in the inner loop) */
        const float *q[4];
        for (int rr = 0; rr < 4; rr++) q[rr] = Qp + (r0 + rr < M ? r0 + rr : r0) * d;
        for (int64_t j0 = 0; j0 < n; j0 += 4) {
            const float *kr[4];
            for (int jj = 0; jj < 4; jj++) kr[jj] = K + (j0 + jj < n ? j0 + jj : j0) * d;
            float32x4_t a[4][4];
            for (int rr = 0; rr < 4; rr++)
                for (int jj = 0; jj < 4; jj++) a[rr][jj] = vdupq_n_f32(0.0f);
            for (int64_t t = 0; t < d; t += 4) {
                float32x4_t kv[4], qv[4];
                for (int jj = 0; jj < 4; jj++) kv[jj] = vld1q_f32(kr[jj] + t);
                for (int rr = 0; rr < 4; rr++) qv[rr] = vld1q_f32(q[rr] + t);
                for (int rr = 0; rr < 4; rr++)
                    for (int jj = 0; jj < 4; jj++) a[rr][jj] = vfmaq_f32(a[rr][jj], qv[rr], kv[jj]);
            }
            for (int rr = 0; rr < 4 && r0 + rr < M; rr++) {
                /* pairwise adds: lane jj of the result is the dot product with key j0 + jj */
                float32x4_t s = vpaddq_f32(vpaddq_f32(a[rr][0], a[rr][1]), vpaddq_f32(a[rr][2], a[rr][3]));
                s = vmulq_n_f32(s, scale);
                float *dst = S + (r0 + rr) * lds + j0;
                if (j0 + 4 <= n) {
                    vst1q_f32(dst, s);
                } else {
                    float tmp[4];
                    vst1q_f32(tmp, s);
                    for (int64_t jj = 0; jj < n - j0; jj++) dst[jj] = tmp[jj];
                }
            }
        }
    }
}

/* O[r] += sum_j P[r][j] V[j] for r < M, j < n; P row stride ATT_BK, V [n][d] row-major, O [M][d]. */
static void att_pv_neon(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O) {
    const int64_t ldp = ATT_BK;
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int64_t R = M - r0 < 4 ? M - r0 : 4;
        const float *p[4];
        for (int rr = 0; rr < 4; rr++) p[rr] = P + (rr < R ? r0 + rr : r0) * ldp;
        int64_t c = 0;
        for (; c + 16 <= d; c += 16) {
            float32x4_t a[4][4];
            for (int rr = 0; rr < 4; rr++)
                for (int v = 0; v < 4; v++) a[rr][v] = vdupq_n_f32(0.0f);
            for (int64_t j = 0; j < n; j++) {
                const float *vr = V + j * d + c;
                float32x4_t v0 = vld1q_f32(vr), v1 = vld1q_f32(vr + 4), v2 = vld1q_f32(vr + 8), v3 = vld1q_f32(vr + 12);
                for (int rr = 0; rr < 4; rr++) {
                    float pj = p[rr][j];
                    a[rr][0] = vfmaq_n_f32(a[rr][0], v0, pj);
                    a[rr][1] = vfmaq_n_f32(a[rr][1], v1, pj);
                    a[rr][2] = vfmaq_n_f32(a[rr][2], v2, pj);
                    a[rr][3] = vfmaq_n_f32(a[rr][3], v3, pj);
                }
            }
            for (int64_t rr = 0; rr < R; rr++) {
                float *o = O + (r0 + rr) * d + c;
                for (int v = 0; v < 4; v++) vst1q_f32(o + 4 * v, vaddq_f32(vld1q_f32(o + 4 * v), a[rr][v]));
            }
        }
        for (; c < d; c += 4) {
            float32x4_t a[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
            for (int64_t j = 0; j < n; j++) {
                float32x4_t v0 = vld1q_f32(V + j * d + c);
                for (int rr = 0; rr < 4; rr++) a[rr] = vfmaq_n_f32(a[rr], v0, p[rr][j]);
            }
            for (int64_t rr = 0; rr < R; rr++) {
                float *o = O + (r0 + rr) * d + c;
                vst1q_f32(o, vaddq_f32(vld1q_f32(o), a[rr]));
            }
        }
    }
}

/* max_t s[t] (-inf for n == 0; NaN entries are ignored, as the portable kernel does). */
static float att_row_max_neon(const float *s, int64_t n) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float32x4_t m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    int64_t t = 0;
    /* s > m ? s : m, as the portable kernel: a NaN never replaces the running maximum */
    for (; t + 16 <= n; t += 16) {
        float32x4_t v0 = vld1q_f32(s + t), v1 = vld1q_f32(s + t + 4), v2 = vld1q_f32(s + t + 8), v3 = vld1q_f32(s + t + 12);
        m0 = vbslq_f32(vcgtq_f32(v0, m0), v0, m0);
        m1 = vbslq_f32(vcgtq_f32(v1, m1), v1, m1);
        m2 = vbslq_f32(vcgtq_f32(v2, m2), v2, m2);
        m3 = vbslq_f32(vcgtq_f32(v3, m3), v3, m3);
    }
    /* lanes hold no NaN: the plain maximum is the same rule */
    float m = vmaxvq_f32(vmaxq_f32(vmaxq_f32(m0, m1), vmaxq_f32(m2, m3)));
    for (; t < n; t++) m = s[t] > m ? s[t] : m;
    return m;
}

/* kvs_expf (cpu_kernels.h) on 4 lanes: the same operations in the same order, unfused. */
static inline float32x4_t exp4(float32x4_t x) {
    float32x4_t xc = vbslq_f32(vcltq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(-87.0f), x);
    xc = vbslq_f32(vcgtq_f32(xc, vdupq_n_f32(88.0f)), vdupq_n_f32(88.0f), xc);
    const float32x4_t magic = vdupq_n_f32(12582912.0f);
    float32x4_t nn = vsubq_f32(vaddq_f32(vmulq_n_f32(xc, 1.44269504088896341f), magic), magic);
    float32x4_t r = vsubq_f32(xc, vmulq_n_f32(nn, 0.693145751953125f));
    r = vsubq_f32(r, vmulq_n_f32(nn, 1.428606765330187045e-06f));
    float32x4_t p = vdupq_n_f32(1.98412698412698413e-04f);
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(1.38888888888888889e-03f));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(8.33333333333333333e-03f));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(4.16666666666666667e-02f));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(1.66666666666666667e-01f));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(0.5f));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(1.0f));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(1.0f));
    int32x4_t ni = vcvtq_s32_f32(nn);
    float32x4_t sc = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(ni, vdupq_n_s32(127)), 23));
    float32x4_t y = vmulq_f32(p, sc);
    y = vbslq_f32(vcgtq_f32(x, vdupq_n_f32(88.72283f)), vdupq_n_f32(INFINITY), y);
    return vbslq_f32(vcltq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(0.0f), y);
}

/* p[t] = exp(s[t] - m) in place (kvs_expf's arithmetic, lane for lane); returns the sum. */
static float att_exp_row_neon(float *s, int64_t n, float m) {
    const float32x4_t mv = vdupq_n_f32(m);
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
        float32x4_t e0 = exp4(vsubq_f32(vld1q_f32(s + t), mv)), e1 = exp4(vsubq_f32(vld1q_f32(s + t + 4), mv));
        vst1q_f32(s + t, e0);
        vst1q_f32(s + t + 4, e1);
        a0 = vaddq_f32(a0, e0);
        a1 = vaddq_f32(a1, e1);
    }
    float sum = vaddvq_f32(vaddq_f32(a0, a1));
    for (; t < n; t++) {
        float e = kvs_expf(s[t] - m);
        s[t] = e;
        sum += e;
    }
    return sum;
}

/* dst[t] = f16 src[t] as f32 for t < count (exact; hardware conversion). */
void kvs_cpu_f16_to_f32_neon(const uint16_t *src, float *dst, int64_t count) {
    int64_t t = 0;
    for (; t + 8 <= count; t += 8) {
        uint16x8_t u = vld1q_u16(src + t);
        vst1q_f32(dst + t, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(u))));
        vst1q_f32(dst + t + 4, vcvt_high_f32_f16(vreinterpretq_f16_u16(u)));
    }
    for (; t < count; t++) dst[t] = kvs_h2f(src[t]);
}

const att_kernels kvs_cpu_att_neon = {
    .qk = NULL, /* no panel path: every row count runs on the row-major tile kernels */
    .pv = NULL,
    .qk_dec = att_qk_neon,
    .pv_dec = att_pv_neon,
    .row_max = att_row_max_neon,
    .exp_row = att_exp_row_neon,
    .h2f = kvs_cpu_f16_to_f32_neon,
    .dec_align = 4, /* qk_dec / pv_dec: d_k, d_v % 4 == 0 */
    .dec_min = 1, /* every d_k, d_v % 4 == 0 (as before this field) */
};
#endif
