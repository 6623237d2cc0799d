/* CPU backend, x86 AVX512-VNNI (+BW, VL) kernels of the 8-bit activation GEMV (../matmul.h, "8-bit
 * activations"): the 32-value types (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) on 512-bit registers
 * (below, "qz_"), the K types through quant_q8.h with vpdpbusd / vpdpwssd on 256-bit registers.
 * Variant "avx512-vnni", or automatic on a CPU with them (kvs_cpu_avx512_vnni; AMD Zen 4, Intel Ice
 * Lake and later). */
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
/* the 32-value types run the 512-bit kernels below for every n (1..4) and block count (a group of
 * 16 blocks, a shorter last group, an odd last block): quant_q8.h's 256-bit ones for them would be
 * unreachable here, so they are left out */
#define Q8_K_TYPES_ONLY 1
#include "quant_q8.h"

/* ---- the 32-value types (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) on 512-bit registers ----------
 * Two W blocks a zmm, 64 u8 codes against the 64 i8 x codes of the same two blocks (contiguous in
 * x->q), one vpdpbusd per x row: lanes 0-7 of the i32 sums belong to the first block, 8-15 to the
 * second. The codes are kept unsigned: q4_0 / q4_1 nibbles as they are (the high nibbles left in
 * place, i.e. 16 times the code: those lanes take the scale over 16, an exact power of two), q5_x
 * nibbles with bit 4 from qh, q8_0 as code + 128, iq4_nl's table values + 128; the offsets (8, 16,
 * 128) come back through x's integer sums bs: - off d_w d_x sum_b q per block (exact in integers).
 * The scales of 16 blocks at a time are a vector: the 16 f16 d_w gathered by vpermt2w from the
 * row's bytes and converted together, times 16 d_x (one load); a block pair's lanes take theirs by
 * one vpermps (vpermt2ps with the over-16 copy for the nibble types). q4_1 / q5_1's min: 16 m_w
 * times x's 16 s (q8_1's s, as the 256-bit kernels) in one FMA. Each x row's accumulators see the
 * same operations in the same order for every n (n only repeats the row work), so a row's result
 * does not depend on the rows beside it. Remainder blocks (k / 32 % 16) run the same code with
 * masked loads and a scalar gather of their scales. */

#define QZ_G 16 /* blocks a scale vector */

/* Bytes per block, offset of the 4-bit codes (qs), offset of q5_x's qh, the code offset taken
 * through bs, whether there is a min (m f16 @2), whether the high nibbles stay in place (x 16). */
#define QZ_BB(T) Q8_BLOCK_BYTES(T) /* quant_q8.h */
#define QZ_QS(T) Q8_QS_OFFSET(T)
#define QZ_QH(T) ((T) == KVS_Q5_1 ? 4 : 2)
#define QZ_OFF(T) ((T) == KVS_Q4_0 ? 8 : (T) == KVS_Q5_0 ? 16 : (T) == KVS_Q8_0 || (T) == KVS_IQ4_NL ? 128 : 0)
#define QZ_MIN(T) ((T) == KVS_Q4_1 || (T) == KVS_Q5_1)
#define QZ_HI16(T) ((T) == KVS_Q4_0 || (T) == KVS_Q4_1)

/* The f16 at byte so of each of the 16 blocks (bb bytes each) from g, as 16 floats; reads only the
 * 16 bb bytes from g. Windows of 128 bytes (two zmm loads) hold 126 / bb + 1 of the f16 values each
 * (vpermt2w picks them, word j bb / 2 + c), the last window moved back to end at the group's end. */
static inline __attribute__((always_inline)) __m512 qz_f16x16(const uint8_t *g, const int bb, const int so) {
    const int win = 126 / bb + 1;
    const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                                          12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i jw = _mm512_mullo_epi16(lane, _mm512_set1_epi16((short)(bb / 2)));
    __m512i r = _mm512_setzero_si512();
    for (int j0 = 0; j0 < QZ_G; j0 += win) {
        const int j1 = j0 + win < QZ_G ? j0 + win : QZ_G;
        const int base = j0 * bb + so < QZ_G * bb - 128 ? j0 * bb + so : QZ_G * bb - 128;
        const __m512i idx = _mm512_add_epi16(jw, _mm512_set1_epi16((short)((so - base) / 2)));
        const __mmask32 m = (__mmask32)(((1u << j1) - 1) & ~((1u << j0) - 1));
        r = _mm512_or_si512(r, _mm512_maskz_permutex2var_epi16(m, _mm512_loadu_si512(g + base), idx,
                                                                _mm512_loadu_si512(g + base + 64)));
    }
    return _mm512_cvtph_ps(_mm512_castsi512_si256(r));
}

/* The same for the first nb < 16 blocks (the rest 0), reading only their bytes. */
static inline __m512 qz_f16x16_part(const uint8_t *g, const int bb, const int so, const int nb) {
    uint16_t h[QZ_G] = {0};
    for (int j = 0; j < nb; j++) memcpy(&h[j], g + j * bb + so, 2);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
}

/* The u8 codes of the blocks at w and w + bb (one: only the first; the upper half 0), in x's value
 * order: value i < 16 of a block in byte i, i >= 16 in byte i (from qs[i - 16]'s high nibble). */
static inline __attribute__((always_inline)) __m512i qz_codes(const uint8_t *w, const int one, const kvs_dtype T) {
    const int bb = QZ_BB(T);
    if (T == KVS_Q8_0) {
        const __m256i c0 = _mm256_loadu_si256((const __m256i *)(w + 2));
        const __m512i c = one ? _mm512_zextsi256_si512(c0)
                              : _mm512_inserti64x4(_mm512_castsi256_si512(c0),
                                                   _mm256_loadu_si256((const __m256i *)(w + bb + 2)), 1);
        return _mm512_xor_si512(c, _mm512_set1_epi8((char)0x80));
    }
    /* qs twice per block: [qs0, qs0, qs1, qs1] in the four 128-bit lanes */
    const __m256i h0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(w + QZ_QS(T))));
    const __m512i c =
        one ? _mm512_zextsi256_si512(h0)
            : _mm512_inserti64x4(_mm512_castsi256_si512(h0),
                                 _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(w + bb + QZ_QS(T)))), 1);
    if (QZ_HI16(T)) /* low nibbles in lanes 0 and 2, high nibbles (x 16) in lanes 1 and 3 */
        return _mm512_and_si512(c, _mm512_set_epi64(0xf0f0f0f0f0f0f0f0ll, 0xf0f0f0f0f0f0f0f0ll, 0x0f0f0f0f0f0f0f0fll,
                                                    0x0f0f0f0f0f0f0f0fll, 0xf0f0f0f0f0f0f0f0ll, 0xf0f0f0f0f0f0f0f0ll,
                                                    0x0f0f0f0f0f0f0f0fll, 0x0f0f0f0f0f0f0f0fll));
    __m512i q = _mm512_and_si512(_mm512_srlv_epi64(c, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(15));
    if (T == KVS_IQ4_NL) {
        const __m128i t = _mm_xor_si128(_mm_loadu_si128((const __m128i *)kvs_iq4_values), _mm_set1_epi8((char)0x80));
        return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), q);
    }
    /* q5_0, q5_1: bit i of the block's qh -> bit 4 of byte i */
    uint32_t h0b, h1b = 0;
    memcpy(&h0b, w + QZ_QH(T), 4);
    if (!one) memcpy(&h1b, w + bb + QZ_QH(T), 4);
    return _mm512_mask_add_epi8(q, (__mmask64)((uint64_t)h0b | (uint64_t)h1b << 32), q, _mm512_set1_epi8(16));
}

/* The blocks b0 .. b0 + nblk - 1 (nblk <= 16; w at block b0) into the n rows' accumulators a0, a1. */
static inline __attribute__((always_inline)) void qz_group(const uint8_t *w, int64_t b0, const int nblk,
                                                           const kvs_q8_rows *x, const int n, __m512 *a0, __m512 *a1,
                                                           const kvs_dtype T) {
    const int bb = QZ_BB(T), off = QZ_OFF(T), full = nblk == QZ_G;
    const int64_t k = x->k, nb = k / 32;
    const __mmask16 m16 = full ? (__mmask16)0xffff : (__mmask16)((1u << nblk) - 1);
    const __mmask32 m32 = full ? (__mmask32)0xffffffffu : (__mmask32)((1u << 2 * nblk) - 1);
    const __m512 dw = full ? qz_f16x16(w, bb, 0) : qz_f16x16_part(w, bb, 0, nblk);
    __m512 mw = _mm512_setzero_ps();
    if (QZ_MIN(T)) mw = full ? qz_f16x16(w, bb, 2) : qz_f16x16_part(w, bb, 2, nblk);
    __m512 sx[KVS_GEMV_MAX_N], sx16[KVS_GEMV_MAX_N]; /* d_w d_x of the 16 blocks; over 16 */
    for (int i = 0; i < n; i++) {
        const float *dx = x->d + i * nb + b0;
        sx[i] = _mm512_mul_ps(dw, full ? _mm512_loadu_ps(dx) : _mm512_maskz_loadu_ps(m16, dx));
        if (QZ_HI16(T)) sx16[i] = _mm512_mul_ps(sx[i], _mm512_set1_ps(0.0625f));
        if (off) { /* - off sum q per block: bs's pairs of 16-value sums times -off */
            const int16_t *bs = x->bs + i * 2 * nb + 2 * b0;
            const __m512i s = full ? _mm512_loadu_si512(bs) : _mm512_maskz_loadu_epi16(m32, bs);
            const __m512i o = _mm512_madd_epi16(s, _mm512_set1_epi16((short)-off));
            a0[i] = _mm512_fmadd_ps(sx[i], _mm512_cvtepi32_ps(o), a0[i]);
        }
        if (QZ_MIN(T)) {
            const float *s = x->s + i * nb + b0;
            a1[i] = _mm512_fmadd_ps(mw, full ? _mm512_loadu_ps(s) : _mm512_maskz_loadu_ps(m16, s), a1[i]);
        }
    }
    const int np = (nblk + 1) / 2;
    /* pair 0's scale lanes: block 0 in lanes 0-7, block 1 in 8-15 (nibble types: lanes 4-7 and 12-15,
     * the high nibbles, from sx16); pair P adds 2P */
    const __m512i pidx = QZ_HI16(T) ? _mm512_set_epi32(17, 17, 17, 17, 1, 1, 1, 1, 16, 16, 16, 16, 0, 0, 0, 0)
                                    : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
#define QZ_PAIR(P, A)                                                                                          \
    do {                                                                                                       \
        const int one_ = 2 * (P) + 1 == nblk;                                                                  \
        const __m512i c = qz_codes(w + 2 * (P) * bb, one_, T);                                                 \
        const __m512i idx = _mm512_add_epi32(pidx, _mm512_set1_epi32(2 * (P)));                                \
        for (int i = 0; i < n; i++) {                                                                          \
            const int8_t *y = x->q + i * k + 32 * (b0 + 2 * (P));                                              \
            const __m512i yv = one_ ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)y))           \
                                    : _mm512_loadu_si512(y);                                                   \
            const __m512i pd = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, yv);                             \
            const __m512 sc = QZ_HI16(T) ? _mm512_permutex2var_ps(sx[i], idx, sx16[i])                         \
                                         : _mm512_permutexvar_ps(idx, sx[i]);                                  \
            A[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pd), sc, A[i]);                                          \
        }                                                                                                      \
    } while (0)
    if (full) {
        QZ_PAIR(0, a0);
        QZ_PAIR(1, a1);
        QZ_PAIR(2, a0);
        QZ_PAIR(3, a1);
        QZ_PAIR(4, a0);
        QZ_PAIR(5, a1);
        QZ_PAIR(6, a0);
        QZ_PAIR(7, a1);
    } else {
        for (int p = 0; p < np; p += 2) {
            QZ_PAIR(p, a0);
            if (p + 1 < np) QZ_PAIR(p + 1, a1);
        }
    }
#undef QZ_PAIR
}

/* acc[i] = W row . x_i, i < n (1..4, a constant), W of the 32-value type T. */
static inline __attribute__((always_inline)) void qz_dot(const uint8_t *w, const kvs_q8_rows *x, const int n,
                                                         float *acc, const kvs_dtype T) {
    const int64_t nb = x->k / 32;
    __m512 a0[KVS_GEMV_MAX_N], a1[KVS_GEMV_MAX_N];
    for (int i = 0; i < n; i++) a0[i] = a1[i] = _mm512_setzero_ps();
    int64_t b0 = 0;
    for (; b0 + QZ_G <= nb; b0 += QZ_G, w += QZ_G * QZ_BB(T)) qz_group(w, b0, QZ_G, x, n, a0, a1, T);
    if (b0 < nb) qz_group(w, b0, (int)(nb - b0), x, n, a0, a1, T);
    for (int i = 0; i < n; i++) acc[i] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i], a1[i]));
}

#define QZ_C_Q8_0(N) qz_dot(w, x, N, acc, KVS_Q8_0)
#define QZ_C_Q4_0(N) qz_dot(w, x, N, acc, KVS_Q4_0)
#define QZ_C_Q4_1(N) qz_dot(w, x, N, acc, KVS_Q4_1)
#define QZ_C_Q5_0(N) qz_dot(w, x, N, acc, KVS_Q5_0)
#define QZ_C_Q5_1(N) qz_dot(w, x, N, acc, KVS_Q5_1)
#define QZ_C_IQ4_NL(N) qz_dot(w, x, N, acc, KVS_IQ4_NL)
Q8_DEFINE_N(qz_n_q8_0, QZ_C_Q8_0)
Q8_DEFINE_N(qz_n_q4_0, QZ_C_Q4_0)
Q8_DEFINE_N(qz_n_q4_1, QZ_C_Q4_1)
Q8_DEFINE_N(qz_n_q5_0, QZ_C_Q5_0)
Q8_DEFINE_N(qz_n_q5_1, QZ_C_Q5_1)
Q8_DEFINE_N(qz_n_iq4_nl, QZ_C_IQ4_NL)

/* The 32-value types on the 512-bit kernels above; the K types on quant_q8.h's 256-bit ones
 * (q2_K, q3_K, iq4_xs: the portable kernel). */
void kvs_cpu_q8dot_vnni(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc) {
    switch (dt) {
    case KVS_Q8_0: qz_n_q8_0(wrow, x, n, acc); break;
    case KVS_Q4_0: qz_n_q4_0(wrow, x, n, acc); break;
    case KVS_Q4_1: qz_n_q4_1(wrow, x, n, acc); break;
    case KVS_Q5_0: qz_n_q5_0(wrow, x, n, acc); break;
    case KVS_Q5_1: qz_n_q5_1(wrow, x, n, acc); break;
    case KVS_IQ4_NL: qz_n_iq4_nl(wrow, x, n, acc); break;
    default: q8_dot(wrow, dt, x, n, acc); break;
    }
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
