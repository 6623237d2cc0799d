/* CPU backend, x86 AVX2 kernels of the DWT / IDWT levels (contracts: ../wavelet.h): the bodies of
 * one analysis and one synthesis level, 8 outputs (analysis) or 8 output pairs (synthesis) a step;
 * ops_wavelet.c runs the wrapped ends and the remainders with its portable code. This file alone
 * is compiled with -mavx2 -mfma -mf16c (backends/cpu/meson.build); ops_wavelet.c calls it only
 * when kvs_cpu_avx2() says the CPU has those extensions. */
#include "../cpu_kernels.h"
#include "../wavelet.h"

#if KVS_CPU_HAVE_AVX2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* c[0..16) -> even samples c[0], c[2], .. c[14] and odd ones c[1], .. c[15]. */
static inline void deinterleave16(const float *c, __m256 *even, __m256 *odd) {
    const __m256 x0 = _mm256_loadu_ps(c), x1 = _mm256_loadu_ps(c + 8);
    /* [x0_0 x0_2 x1_0 x1_2 | x0_4 x0_6 x1_4 x1_6] -> lanes reordered 0 1 4 5 2 3 6 7 (64-bit) */
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x0, x1, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x0, x1, 0xDD)), 0xD8));
}

int64_t kvs_cpu_dwt_body_avx2(const float *c, int64_t body, float *a, float *d, const float *lo, const float *hi,
                              int T) {
    const int U = T / 2;
    __m256 vlo[KVS_DWT_MAX_TAPS], vhi[KVS_DWT_MAX_TAPS];
    for (int t = 0; t < T; t++) {
        vlo[t] = _mm256_set1_ps(lo[t]);
        vhi[t] = _mm256_set1_ps(hi[t]);
    }
    int64_t i = 0;
    for (; i + 8 <= body; i += 8) {
        __m256 sa = _mm256_setzero_ps(), sd = sa;
        for (int u = 0; u < U; u++) { /* taps 2u (even samples) and 2u + 1 (odd), from c[2i + 2u] */
            __m256 e, o;
            deinterleave16(c + 2 * i + 2 * u, &e, &o);
            sa = _mm256_fmadd_ps(vlo[2 * u], e, sa);
            sd = _mm256_fmadd_ps(vhi[2 * u], e, sd);
            sa = _mm256_fmadd_ps(vlo[2 * u + 1], o, sa);
            sd = _mm256_fmadd_ps(vhi[2 * u + 1], o, sd);
        }
        _mm256_storeu_ps(a + i, sa);
        _mm256_storeu_ps(d + i, sd);
    }
    return i;
}

int64_t kvs_cpu_idwt_body_avx2(const float *a, const float *d, int64_t p0, int64_t p1, float *c, const float *lo,
                               const float *hi, int T) {
    const int U = T / 2;
    __m256 vlo[KVS_DWT_MAX_TAPS], vhi[KVS_DWT_MAX_TAPS];
    for (int t = 0; t < T; t++) {
        vlo[t] = _mm256_set1_ps(lo[t]);
        vhi[t] = _mm256_set1_ps(hi[t]);
    }
    int64_t p = p0;
    for (; p + 8 <= p1; p += 8) {
        __m256 se = _mm256_setzero_ps(), so = se;
        for (int u = 0; u < U; u++) {
            const __m256 va = _mm256_loadu_ps(a + p - u), vd = _mm256_loadu_ps(d + p - u);
            se = _mm256_fmadd_ps(vlo[2 * u], va, se);
            se = _mm256_fmadd_ps(vhi[2 * u], vd, se);
            so = _mm256_fmadd_ps(vlo[2 * u + 1], va, so);
            so = _mm256_fmadd_ps(vhi[2 * u + 1], vd, so);
        }
        /* interleave: c[2p + 2t] = se[t], c[2p + 2t + 1] = so[t] */
        const __m256 l = _mm256_unpacklo_ps(se, so), h = _mm256_unpackhi_ps(se, so);
        _mm256_storeu_ps(c + 2 * p, _mm256_permute2f128_ps(l, h, 0x20));
        _mm256_storeu_ps(c + 2 * p + 8, _mm256_permute2f128_ps(l, h, 0x31));
    }
    return p;
}
#endif
