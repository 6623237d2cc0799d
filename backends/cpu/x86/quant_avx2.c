/* CPU backend, x86 AVX2 + FMA + F16C kernels of the block-quantized weights (contracts: ../matmul.h):
 * GEMV of Q4_0, Q8_0, Q4_K, Q6_K fused (8 weights decoded into a register, then FMA per x row); the
 * other types, and the GEMM tiles: core/quant/quant_blocks.h's decoders compiled for AVX2 (the
 * compiler vectorises them) into an L1 buffer, then 8-wide FMA. Chosen per call by ops_quant.c (variant
 * "avx2", or automatically on a CPU with AVX2 but no AVX-512). */
#include "../cpu_kernels.h"

#if KVS_CPU_HAVE_AVX512
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "../matmul.h"
#include "quant/quant_blocks.h"

void kvs_cpu_qdecode_avx2(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

/* ---- fused kernels of the common types: 8 weights decoded into a register (the same f32
 * operations as the reference decoder: the reference values bit for bit), then one FMA per x row.
 * a[i][p]: two accumulators per row. */

#define FMA_ROWS(W, COL, P)                                                                          \
    do {                                                                                             \
        const __m256 w_ = (W);                                                                       \
        for (int64_t i_ = 0; i_ < n; i_++)                                                           \
            a[i_][P] = _mm256_fmadd_ps(w_, _mm256_loadu_ps(x + i_ * k + (COL)), a[i_][P]);            \
    } while (0)

/* the 8 unsigned bytes at p as 8 int32 lanes */
#define U8X8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))

static inline __attribute__((always_inline)) void dot_q4_0(const uint8_t *w, const float *x, int64_t k, const int64_t n,
                                                        __m256 a[][2]) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i eight = _mm256_set1_epi32(8);
    for (int64_t b = 0; b < k / 32; b++, w += 18) {
        const __m256 d = _mm256_set1_ps(kvs_qf16(w));
        const __m128i q = _mm_loadu_si128((const __m128i *)(w + 2));
        const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int t = 0; t < 4; t++) {
            const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(part[t]), eight);
            FMA_ROWS(_mm256_mul_ps(d, _mm256_cvtepi32_ps(v)), 32 * b + 8 * t, t & 1);
        }
    }
}

static inline __attribute__((always_inline)) void dot_q8_0(const uint8_t *w, const float *x, int64_t k, const int64_t n,
                                                        __m256 a[][2]) {
    for (int64_t b = 0; b < k / 32; b++, w += 34) {
        const __m256 d = _mm256_set1_ps(kvs_qf16(w));
        for (int t = 0; t < 4; t++) {
            const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + 2 + 8 * t)));
            FMA_ROWS(_mm256_mul_ps(d, _mm256_cvtepi32_ps(v)), 32 * b + 8 * t, t & 1);
        }
    }
}

static inline __attribute__((always_inline)) void dot_q4_k(const uint8_t *w, const float *x, int64_t k, const int64_t n,
                                                        __m256 a[][2]) {
    const __m256i m4 = _mm256_set1_epi32(0x0f);
    for (int64_t b = 0; b < k / 256; b++, w += 144) {
        const float d = kvs_qf16(w), dmin = kvs_qf16(w + 2);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            kvs_q_scale_min_k4(w + 4, j, &sc, &m);
            const __m256 dl = _mm256_set1_ps(d * (float)sc), ml = _mm256_set1_ps(dmin * (float)m);
            const uint8_t *q = w + 16 + 32 * (j / 2);
            for (int t = 0; t < 4; t++) {
                const __m256i v = _mm256_and_si256(_mm256_srli_epi32(U8X8(q + 8 * t), 4 * (j % 2)), m4);
                FMA_ROWS(_mm256_sub_ps(_mm256_mul_ps(dl, _mm256_cvtepi32_ps(v)), ml), 256 * b + 32 * j + 8 * t, t & 1);
            }
        }
    }
}

static inline __attribute__((always_inline)) void dot_q6_k(const uint8_t *w, const float *x, int64_t k, const int64_t n,
                                                        __m256 a[][2]) {
    const __m256i m4 = _mm256_set1_epi32(0x0f), m2 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    for (int64_t b = 0; b < k / 256; b++, w += 210) {
        const float d = kvs_qf16(w + 208);
        const int8_t *sc = (const int8_t *)(w + 192);
        for (int g = 0; g < 2; g++)
            for (int s = 0; s < 4; s++)
                for (int t = 0; t < 4; t++) {
                    const int l0 = 8 * t, j = 8 * g + 2 * s + t / 2;
                    __m256i lo = U8X8(w + 64 * g + 32 * (s & 1) + l0), hi = U8X8(w + 128 + 32 * g + l0);
                    lo = _mm256_and_si256(_mm256_srli_epi32(lo, 4 * (s >> 1)), m4);
                    hi = _mm256_and_si256(_mm256_srli_epi32(hi, 2 * s), m2);
                    const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), k32);
                    const __m256 dl = _mm256_set1_ps(d * (float)sc[j]);
                    FMA_ROWS(_mm256_mul_ps(dl, _mm256_cvtepi32_ps(q)), 256 * b + 128 * g + 32 * s + l0, t & 1);
                }
    }
}

static float hsum256(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The fused kernels with the row count a constant (the accumulators then live in registers). */
#define DEFINE_FUSED(N)                                                                              \
    static void fused_n##N(const void *wrow, kvs_dtype dt, const float *x, int64_t k, float *acc) {   \
        __m256 a[N][2];                                                                              \
        for (int i = 0; i < N; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();                                 \
        switch (dt) {                                                                                \
        case KVS_Q4_0: dot_q4_0(wrow, x, k, N, a); break;                                            \
        case KVS_Q8_0: dot_q8_0(wrow, x, k, N, a); break;                                            \
        case KVS_Q4_K: dot_q4_k(wrow, x, k, N, a); break;                                            \
        default: dot_q6_k(wrow, x, k, N, a); break;                                                  \
        }                                                                                            \
        for (int i = 0; i < N; i++) acc[i] = hsum256(_mm256_add_ps(a[i][0], a[i][1]));               \
    }
DEFINE_FUSED(1)
DEFINE_FUSED(2)
DEFINE_FUSED(3)
DEFINE_FUSED(4)

void kvs_cpu_qdot_rows_avx2(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    if (dt == KVS_Q4_0 || dt == KVS_Q8_0 || dt == KVS_Q4_K || dt == KVS_Q6_K) {
        switch (n) {
        case 1: fused_n1(wrow, dt, x, k, acc); break;
        case 2: fused_n2(wrow, dt, x, k, acc); break;
        case 3: fused_n3(wrow, dt, x, k, acc); break;
        default: fused_n4(wrow, dt, x, k, acc); break;
        }
        return;
    }
    /* the other types: decode a chunk into L1, then FMA */
    const int blk = kvs_dtype_block(dt);
    const size_t bbytes = kvs_dtype_bytes(dt, blk);
    float tmp[KVS_QCHUNK] __attribute__((aligned(32)));
    __m256 a[KVS_GEMV_MAX_N][2];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int64_t c = 0; c < k; c += KVS_QCHUNK) {
        const int64_t len = k - c < KVS_QCHUNK ? k - c : KVS_QCHUNK; /* a multiple of 32 */
        kvs_qb_decode_n(dt, (const uint8_t *)wrow + (size_t)(c / blk) * bbytes, len / blk, tmp);
        for (int64_t i = 0; i < n; i++) {
            const float *xi = x + i * k + c;
            __m256 a0 = a[i][0], a1 = a[i][1];
            for (int64_t t = 0; t < len; t += 32) {
                a0 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t), _mm256_loadu_ps(xi + t), a0);
                a1 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t + 8), _mm256_loadu_ps(xi + t + 8), a1);
                a0 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t + 16), _mm256_loadu_ps(xi + t + 16), a0);
                a1 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t + 24), _mm256_loadu_ps(xi + t + 24), a1);
            }
            a[i][0] = a0;
            a[i][1] = a1;
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = hsum256(_mm256_add_ps(a[i][0], a[i][1]));
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
