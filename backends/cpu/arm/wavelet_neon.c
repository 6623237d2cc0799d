/* CPU backend, aarch64 NEON kernels of the DWT / IDWT levels (contracts: ../wavelet.h, the same as
 * the AVX2 ones): the bodies of one analysis and one synthesis level, 4 outputs (analysis) or 4
 * output pairs (synthesis) a step; ops_wavelet.c runs the wrapped ends and the remainders with its
 * portable code. The even/odd samples come deinterleaved from LD2 and the synthesis outputs go back
 * interleaved by ST2, so no shuffles are needed. Plain NEON (Armv8.0); ops_wavelet.c calls it for
 * the variant "neon" or automatically on aarch64. */
#include "../cpu_kernels.h"
#include "../wavelet.h"

#if KVS_CPU_HAVE_NEON
#include <arm_neon.h>

int64_t kvs_cpu_dwt_body_neon(const float *c, int64_t body, float *a, float *d, const float *lo, const float *hi,
                              int T) {
    const int U = T / 2;
    int64_t i = 0;
    for (; i + 4 <= body; i += 4) {
        float32x4_t sa = vdupq_n_f32(0.0f), sd = sa;
        for (int u = 0; u < U; u++) { /* taps 2u (even samples) and 2u + 1 (odd), from c[2i + 2u] */
            const float32x4x2_t eo = vld2q_f32(c + 2 * i + 2 * u);
            sa = vfmaq_n_f32(sa, eo.val[0], lo[2 * u]);
            sd = vfmaq_n_f32(sd, eo.val[0], hi[2 * u]);
            sa = vfmaq_n_f32(sa, eo.val[1], lo[2 * u + 1]);
            sd = vfmaq_n_f32(sd, eo.val[1], hi[2 * u + 1]);
        }
        vst1q_f32(a + i, sa);
        vst1q_f32(d + i, sd);
    }
    return i;
}

int64_t kvs_cpu_idwt_body_neon(const float *a, const float *d, int64_t p0, int64_t p1, float *c, const float *lo,
                               const float *hi, int T) {
    const int U = T / 2;
    int64_t p = p0;
    for (; p + 4 <= p1; p += 4) {
        float32x4x2_t s;
        s.val[0] = vdupq_n_f32(0.0f);
        s.val[1] = s.val[0];
        for (int u = 0; u < U; u++) {
            const float32x4_t va = vld1q_f32(a + p - u), vd = vld1q_f32(d + p - u);
            s.val[0] = vfmaq_n_f32(s.val[0], va, lo[2 * u]);
            s.val[0] = vfmaq_n_f32(s.val[0], vd, hi[2 * u]);
            s.val[1] = vfmaq_n_f32(s.val[1], va, lo[2 * u + 1]);
            s.val[1] = vfmaq_n_f32(s.val[1], vd, hi[2 * u + 1]);
        }
        vst2q_f32(c + 2 * p, s); /* c[2p + 2t] = even[t], c[2p + 2t + 1] = odd[t] */
    }
    return p;
}
#endif
