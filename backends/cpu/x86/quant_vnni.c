/* CPU backend, x86 AVX512-VNNI (+BW, VL) kernels of the 8-bit activation GEMV (../matmul.h, "8-bit
 * activations"): quant_q8.h with vpdpbusd / vpdpwssd on 256-bit registers. Variant "avx512-vnni", or
 * automatic on a CPU with them (kvs_cpu_avx512_vnni; AMD Zen 4, Intel Ice Lake and later). */
#include "../cpu_kernels.h"

#if KVS_CPU_HAVE_AVX512
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "../attention_q8.h"
#include "../matmul.h"
#include "quant/quant_blocks.h"

#define Q8_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define Q8_DPWSSD(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#include "quant_q8.h"

void kvs_cpu_q8dot_vnni(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc) {
    q8_dot(wrow, dt, x, n, acc);
}

/* Decode attention's Q.K^T on 8-bit query codes (../attention_q8.h): att_q8.h with vpdpbusd. */
#define AQ8_VNNI 1
#define AQ8_ROWS 4
#include "att_q8.h"


/* Decode attention's O += P.V over a q8_0 / q4_0 V on AVX-512 (the -vnni variant; contract: ../attention_q8.h):
 * the block scales are folded into the weights first, W[r][b][j] = P[r][j] d_v(j, b) (16 keys a
 * vector), so that each V vector is only the codes converted (q8_0: sign-extend, convert; q4_0: the
 * nibble as the index of a 16-entry table of -8..7 in vpermps) and every FMA takes its weight as an
 * embedded broadcast: 4 rows x 64 columns of O in registers over the tile's keys. */
static inline __attribute__((always_inline)) void aq8_pv_block(const int q4, const int R, const int C,
                                                               const uint8_t *V, int64_t rb, const float *W, int64_t n,
                                                               int64_t d, int64_t c0, float *O) {
    const __m512 lut = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t bb = q4 ? 18 : 34;
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < C; u++) acc[r][u] = _mm512_loadu_ps(O + r * d + c0 + 16 * u);
    const float *wb = W + (c0 / 32) * 4 * AQ8_PV_MAXN; /* W [b][r][AQ8_PV_MAXN]: constant offsets */
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *row = V + j * rb;
        __m512 v[4];
        for (int u = 0; u < C; u++) {
            const int64_t e = c0 + 16 * u, b = e / 32, half = (e % 32) / 16;
            const uint8_t *blk = row + b * bb + 2;
            if (q4) {
                const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)blk));
                v[u] = _mm512_permutexvar_ps(half ? _mm512_srli_epi32(raw, 4) : raw, lut);
            } else {
                v[u] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 16 * half))));
            }
        }
        for (int r = 0; r < R; r++)
            for (int u = 0; u < C; u++)
                acc[r][u] = _mm512_fmadd_ps(v[u], _mm512_set1_ps(wb[((u / 2) * 4 + r) * AQ8_PV_MAXN + j]), acc[r][u]);
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < C; u++) _mm512_storeu_ps(O + r * d + c0 + 16 * u, acc[r][u]);
}


static int aq8_pv_f32(kvs_dtype dt, const void *V_, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                      int64_t d, float *O) {
    if ((dt != KVS_Q4_0 && dt != KVS_Q8_0) || d > AQ8_PV_MAXD || n > AQ8_PV_MAXN || d % 32) return 0;
    const uint8_t *V = V_;
    const int q4 = dt == KVS_Q4_0;
    const int64_t nb = d / 32, bb = q4 ? 18 : 34, ldw = (n + 15) & ~(int64_t)15;
    uint16_t dv16[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    float dv[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    float W[(AQ8_PV_MAXD / 32) * 4 * AQ8_PV_MAXN];
    for (int64_t j = 0; j < n; j++)
        for (int64_t b = 0; b < nb; b++) memcpy(&dv16[b][j], V + j * rb + b * bb, 2);
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t j = n; j < ldw; j++) dv16[b][j] = 0;
        for (int64_t j = 0; j < ldw; j += 16)
            _mm512_storeu_ps(&dv[b][j], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&dv16[b][j])));
    }
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int R = M - r0 < 4 ? (int)(M - r0) : 4;
        for (int r = 0; r < R; r++) {
            const float *p = P + (r0 + r) * ldp;
            for (int64_t b = 0; b < nb; b++)
                for (int64_t j = 0; j < ldw; j += 16) {
                    const __mmask16 m = j + 16 <= n ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
                    _mm512_storeu_ps(W + (b * 4 + r) * AQ8_PV_MAXN + j,
                                     _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + j), _mm512_loadu_ps(&dv[b][j])));
                }
        }
        float *o = O + r0 * d;
        for (int64_t c0 = 0; c0 < d; c0 += 64) {
            const int C = d - c0 < 64 ? (int)((d - c0) / 16) : 4;
#define AQ8_PV(Q4, RR, CC) aq8_pv_block((Q4), (RR), (CC), V, rb, W, n, d, c0, o)
#define AQ8_PV_R(Q4, CC)                                                                                \
    switch (R) {                                                                                       \
    case 1: AQ8_PV(Q4, 1, CC); break;                                                                  \
    case 2: AQ8_PV(Q4, 2, CC); break;                                                                  \
    case 3: AQ8_PV(Q4, 3, CC); break;                                                                  \
    default: AQ8_PV(Q4, 4, CC); break;                                                                 \
    }
            if (C == 4) {
                if (q4) { AQ8_PV_R(1, 4) } else { AQ8_PV_R(0, 4) }
            } else { /* d % 64 == 32: the last 32 columns */
                if (q4) { AQ8_PV_R(1, 2) } else { AQ8_PV_R(0, 2) }
            }
#undef AQ8_PV_R
#undef AQ8_PV
        }
    }
    return 1;
}

int kvs_cpu_att_pv_q8_vnni(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                           int64_t d, float *O) {
    return aq8_pv(dt, V, rb, P, ldp, M, n, d, O) || aq8_pv_f32(dt, V, rb, P, ldp, M, n, d, O);
}

int kvs_cpu_att_qk_q8_vnni(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                           float scale, float *S, int64_t lds) {
    return aq8_qk(dt, K, rb, Q, M, n, scale, S, lds);
}

/* qh8 (K_lo / V_lo given) and q4_1 K / V, repacked per tile (att_q8.h, aq8h_*; ../attention_q8.h) */
int kvs_cpu_att_qk_qh8_vnni(kvs_dtype dt, const void *K, const void *K_lo, int64_t rb, const kvs_att_q8 *Q, int64_t M,
                           int64_t n, float scale, float *S, int64_t lds, void *scratch) {
    return aq8h_qk(dt, K, K_lo, rb, Q, M, n, scale, S, lds, scratch);
}

int kvs_cpu_att_pv_qh8_vnni(kvs_dtype dt, const void *V, const void *V_lo, int64_t rb, const float *P, int64_t ldp,
                           int64_t M, int64_t n, int64_t d, float *O, void *scratch) {
    return aq8h_pv(dt, V, V_lo, rb, P, ldp, M, n, d, O, scratch, kvs_cpu_att_pv_q8_vnni);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
