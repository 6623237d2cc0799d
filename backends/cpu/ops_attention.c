/* CPU backend: attention with GQA and statistics (contract: kvs_attention in include/kvsieve/ops.h).
 *
 * Design (FlashAttention, Dao et al. 2022, alg. 1, on a CPU): one task per (kv head h, tile of BQ
 * query rows); the task packs the G = n_heads/n_kv_heads query heads of its group that read kv head h
 * into one matrix Qp [BQ*G][d] (row r = query (r / G), head h*G + r % G), so K/V are read once per
 * group and never expanded. For each tile of BK keys:
 *   S  = scale * Qp . K_tile^T           ([M][BK])
 *   visibility (kv_len, row_len, causal positions) and the additive mask turn S into logits,
 *   online softmax per row: m' = max(m, max_j S), O *= e^(m-m'), l = l e^(m-m') + sum_j e^(S-m'),
 *   O += P . V_tile                       ([M][d]).
 * Running maxima start at -FLT_MAX; invisible keys get logit -inf, so their weight is exactly 0.
 * The argmax is the first key reaching the row's maximum logit (tiles are visited in key order).
 * Statistics needing normalised probabilities (key_mass, probs) take a second pass over the key
 * tiles of the rows that need them, with the final (m, l) of each row: p = e^(S-m) / l; key_mass
 * is accumulated per thread and reduced at the end (rows listed twice in stat_rows count twice).
 *
 * The two tile products run either
 *  - on register-blocked AVX-512 kernels (8 rows x 32 keys / 8 rows x 32 dims, FMA) when the CPU
 *    has AVX-512F, d % 16 == 0 and there are enough query rows (n_q >= 4, n_q*G >= 8) to amortise
 *    one f32 copy of K per call, laid out in panels of 32 keys [n_kv_heads][n_kv/32][d][32];
 *  - on AVX-512 decoding kernels over the row-major K/V tiles when there are fewer query rows
 *    (each key row loaded once for up to 4 packed rows, lane-reduced dot products; P.V with 4 rows
 *    x 64 columns in registers), f16 tiles converted to f32 first;
 *  - or through cblas_sgemm on each tile (single-threaded OpenBLAS inside the OpenMP tasks),
 *    f16 K/V tiles converted to f32 first (head sizes not a multiple of 16, CPUs without AVX-512).
 * Tasks are spread over OpenMP threads (dynamic schedule: causal tiles differ in cost). With fewer
 * tasks than threads (decoding with few kv heads) the keys are split as in flash-decoding (Dao et al.
 * 2023, "Flash-Decoding for long-context inference"): each split leaves its (m, l, O, argmax), a
 * merge rescales them to the common maximum, and the statistics pass runs per split with the
 * merged (m, l). */
#include <stdlib.h>

#include <cblas.h>

#include "cpu_kernels.h"

#if KVS_CPU_HAVE_AVX512
#include <immintrin.h>
#endif

#define ATT_BK 256       /* keys per tile */
#define ATT_M_TARGET 64  /* packed query rows (queries x group heads) per task */


/* ---- AVX-512 register-blocked tile products (used when the CPU has AVX-512F, d % 16 == 0) ---- */

#if KVS_CPU_HAVE_AVX512
/* S[r][j] = scale * sum_t Qp[r][t] K[j][t] for r < Mp (multiple of 8), j < np (multiple of 32).
 * Qp: [Mp][d]; KP: K transposed in panels of 32 keys, [np/32][d][32] (contiguous streams; a
 * power-of-two row stride would alias in L1); S: row stride ATT_BK.
 * 8 rows x 32 keys per block: 16 accumulators, 2 loads + 8 broadcasts per 16 FMAs. */
__attribute__((target("avx512f")))
static void att_qk_avx512(const float *Qp, const float *KP, int64_t d, int64_t Mp, int64_t np, float scale,
                          float *S) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t r0 = 0; r0 < Mp; r0 += 8) {
        const float *q = Qp + r0 * d;
        for (int64_t j = 0; j < np; j += 32) {
            __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
                   a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00, a60 = a00, a61 = a00, a70 = a00, a71 = a00;
            const float *kt = KP + (j / 32) * d * 32;
            for (int64_t t = 0; t < d; t++) {
                __m512 k0 = _mm512_loadu_ps(kt + t * 32), k1 = _mm512_loadu_ps(kt + t * 32 + 16);
                __m512 b;
#define ATT_QK_ROW(R)                                                                                  \
    b = _mm512_set1_ps(q[(R) * d + t]);                                                                \
    a##R##0 = _mm512_fmadd_ps(b, k0, a##R##0);                                                         \
    a##R##1 = _mm512_fmadd_ps(b, k1, a##R##1);
                ATT_QK_ROW(0) ATT_QK_ROW(1) ATT_QK_ROW(2) ATT_QK_ROW(3)
                ATT_QK_ROW(4) ATT_QK_ROW(5) ATT_QK_ROW(6) ATT_QK_ROW(7)
#undef ATT_QK_ROW
            }
            float *s = S + r0 * ATT_BK + j;
#define ATT_QK_STORE(R)                                                                                \
    _mm512_storeu_ps(s + (R) * ATT_BK, _mm512_mul_ps(a##R##0, vs));                                     \
    _mm512_storeu_ps(s + (R) * ATT_BK + 16, _mm512_mul_ps(a##R##1, vs));
            ATT_QK_STORE(0) ATT_QK_STORE(1) ATT_QK_STORE(2) ATT_QK_STORE(3)
            ATT_QK_STORE(4) ATT_QK_STORE(5) ATT_QK_STORE(6) ATT_QK_STORE(7)
#undef ATT_QK_STORE
        }
    }
}

/* O[r][:] += sum_{j<n} P[r][j] V[j][:] for r < Mp (multiple of 8); P row stride ATT_BK, V [n][d],
 * O [Mp][d], d % 16 == 0. 8 rows x 32 columns per block (16 accumulators). */
__attribute__((target("avx512f")))
static void att_pv_avx512(const float *P, int64_t Mp, int64_t n, const float *V, int64_t d, float *O) {
    for (int64_t r0 = 0; r0 < Mp; r0 += 8) {
        const float *p = P + r0 * ATT_BK;
        float *o = O + r0 * d;
        int64_t c = 0;
        for (; c + 32 <= d; c += 32) {
#define ATT_PV_LOAD(R)                                                                                 \
    __m512 a##R##0 = _mm512_loadu_ps(o + (R) * d + c), a##R##1 = _mm512_loadu_ps(o + (R) * d + c + 16);
            ATT_PV_LOAD(0) ATT_PV_LOAD(1) ATT_PV_LOAD(2) ATT_PV_LOAD(3)
            ATT_PV_LOAD(4) ATT_PV_LOAD(5) ATT_PV_LOAD(6) ATT_PV_LOAD(7)
#undef ATT_PV_LOAD
            for (int64_t j = 0; j < n; j++) {
                __m512 v0 = _mm512_loadu_ps(V + j * d + c), v1 = _mm512_loadu_ps(V + j * d + c + 16);
                __m512 b;
#define ATT_PV_ROW(R)                                                                                  \
    b = _mm512_set1_ps(p[(R) * ATT_BK + j]);                                                           \
    a##R##0 = _mm512_fmadd_ps(b, v0, a##R##0);                                                         \
    a##R##1 = _mm512_fmadd_ps(b, v1, a##R##1);
                ATT_PV_ROW(0) ATT_PV_ROW(1) ATT_PV_ROW(2) ATT_PV_ROW(3)
                ATT_PV_ROW(4) ATT_PV_ROW(5) ATT_PV_ROW(6) ATT_PV_ROW(7)
#undef ATT_PV_ROW
            }
#define ATT_PV_STORE(R)                                                                                \
    _mm512_storeu_ps(o + (R) * d + c, a##R##0);                                                        \
    _mm512_storeu_ps(o + (R) * d + c + 16, a##R##1);
            ATT_PV_STORE(0) ATT_PV_STORE(1) ATT_PV_STORE(2) ATT_PV_STORE(3)
            ATT_PV_STORE(4) ATT_PV_STORE(5) ATT_PV_STORE(6) ATT_PV_STORE(7)
#undef ATT_PV_STORE
        }
        for (; c < d; c += 16) {
            __m512 a0 = _mm512_loadu_ps(o + c), a1 = _mm512_loadu_ps(o + d + c), a2 = _mm512_loadu_ps(o + 2 * d + c),
                   a3 = _mm512_loadu_ps(o + 3 * d + c), a4 = _mm512_loadu_ps(o + 4 * d + c),
                   a5 = _mm512_loadu_ps(o + 5 * d + c), a6 = _mm512_loadu_ps(o + 6 * d + c),
                   a7 = _mm512_loadu_ps(o + 7 * d + c);
            for (int64_t j = 0; j < n; j++) {
                __m512 v0 = _mm512_loadu_ps(V + j * d + c);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), v0, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(p[ATT_BK + j]), v0, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(p[2 * ATT_BK + j]), v0, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(p[3 * ATT_BK + j]), v0, a3);
                a4 = _mm512_fmadd_ps(_mm512_set1_ps(p[4 * ATT_BK + j]), v0, a4);
                a5 = _mm512_fmadd_ps(_mm512_set1_ps(p[5 * ATT_BK + j]), v0, a5);
                a6 = _mm512_fmadd_ps(_mm512_set1_ps(p[6 * ATT_BK + j]), v0, a6);
                a7 = _mm512_fmadd_ps(_mm512_set1_ps(p[7 * ATT_BK + j]), v0, a7);
            }
            _mm512_storeu_ps(o + c, a0);
            _mm512_storeu_ps(o + d + c, a1);
            _mm512_storeu_ps(o + 2 * d + c, a2);
            _mm512_storeu_ps(o + 3 * d + c, a3);
            _mm512_storeu_ps(o + 4 * d + c, a4);
            _mm512_storeu_ps(o + 5 * d + c, a5);
            _mm512_storeu_ps(o + 6 * d + c, a6);
            _mm512_storeu_ps(o + 7 * d + c, a7);
        }
    }
}

/* Decoding (few query rows, K/V row-major as stored): S[r][j] = scale * Qp[r] . K[j] for r < M,
 * j < n; K [n][d], S row stride ATT_BK, d % 16 == 0. Each key row is loaded once for up to four
 * query rows; the dot products reduce across lanes. */
__attribute__((target("avx512f")))
static void att_qk_dec_avx512(const float *Qp, const float *K, int64_t d, int64_t M, int64_t n, float scale,
                              float *S) {
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int64_t R = M - r0 < 4 ? M - r0 : 4;
        const float *q = Qp + r0 * d;
        float *s = S + r0 * ATT_BK;
        for (int64_t j = 0; j < n; j++) {
            const float *k = K + j * d;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t t = 0; t < d; t += 16) {
                __m512 kv = _mm512_loadu_ps(k + t);
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + t), kv, a0);
                if (R > 1) a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d + t), kv, a1);
                if (R > 2) a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q + 2 * d + t), kv, a2);
                if (R > 3) a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q + 3 * d + t), kv, a3);
            }
            s[j] = scale * _mm512_reduce_add_ps(a0);
            if (R > 1) s[ATT_BK + j] = scale * _mm512_reduce_add_ps(a1);
            if (R > 2) s[2 * ATT_BK + j] = scale * _mm512_reduce_add_ps(a2);
            if (R > 3) s[3 * ATT_BK + j] = scale * _mm512_reduce_add_ps(a3);
        }
    }
}

/* Decoding: O[r][:] += sum_{j<n} P[r][j] V[j][:] for r < M; P row stride ATT_BK, V [n][d], O [M][d],
 * d % 16 == 0. Blocks of up to 4 rows x 64 columns stay in registers over all n keys. */
__attribute__((target("avx512f")))
static void att_pv_dec_avx512(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O) {
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int64_t R = M - r0 < 4 ? M - r0 : 4;
        const float *p = P + r0 * ATT_BK;
        for (int64_t c = 0; c < d; c += 64) {
            const int64_t C = d - c < 64 ? (d - c) / 16 : 4; /* vectors in this column block */
            __m512 acc[4][4];
            for (int64_t r = 0; r < R; r++)
                for (int64_t u = 0; u < C; u++) acc[r][u] = _mm512_loadu_ps(O + (r0 + r) * d + c + 16 * u);
            for (int64_t j = 0; j < n; j++) {
                const float *v = V + j * d + c;
                __m512 v0 = _mm512_loadu_ps(v);
                __m512 v1 = C > 1 ? _mm512_loadu_ps(v + 16) : v0;
                __m512 v2 = C > 2 ? _mm512_loadu_ps(v + 32) : v0;
                __m512 v3 = C > 3 ? _mm512_loadu_ps(v + 48) : v0;
                for (int64_t r = 0; r < R; r++) {
                    __m512 b = _mm512_set1_ps(p[r * ATT_BK + j]);
                    acc[r][0] = _mm512_fmadd_ps(b, v0, acc[r][0]);
                    if (C > 1) acc[r][1] = _mm512_fmadd_ps(b, v1, acc[r][1]);
                    if (C > 2) acc[r][2] = _mm512_fmadd_ps(b, v2, acc[r][2]);
                    if (C > 3) acc[r][3] = _mm512_fmadd_ps(b, v3, acc[r][3]);
                }
            }
            for (int64_t r = 0; r < R; r++)
                for (int64_t u = 0; u < C; u++) _mm512_storeu_ps(O + (r0 + r) * d + c + 16 * u, acc[r][u]);
        }
    }
}

/* max_t s[t] (-inf for n == 0). */
__attribute__((target("avx512f")))
static float att_row_max_avx512(const float *s, int64_t n) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int64_t t = 0;
    for (; t + 32 <= n; t += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(s + t));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(s + t + 16));
    }
    m0 = _mm512_max_ps(m0, m1);
    if (t < n) {
        __mmask16 k = (__mmask16)(n - t >= 16 ? 0xffff : (1u << (n - t)) - 1);
        m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + t));
        t += 16;
    }
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1);
        m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + t));
    }
    return _mm512_reduce_max_ps(m0);
}

/* 16 lanes of kvs_expf (same range reduction and polynomial, FMA-evaluated). */
__attribute__((target("avx512f")))
static inline __m512 att_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.98412698412698413e-04f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888888888888889e-03f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333333333333e-03f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666666666666667e-02f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666666666666667e-01f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    return _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
}

/* p[t] = exp(s[t] - m) in place; returns the sum. */
__attribute__((target("avx512f")))
static float att_exp_row_avx512(float *s, int64_t n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    int64_t t = 0;
    for (; t + 32 <= n; t += 32) {
        __m512 e0 = att_exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t), vm));
        __m512 e1 = att_exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t + 16), vm));
        _mm512_storeu_ps(s + t, e0);
        _mm512_storeu_ps(s + t + 16, e1);
        acc0 = _mm512_add_ps(acc0, e0);
        acc1 = _mm512_add_ps(acc1, e1);
    }
    for (; t < n; t += 16) {
        __mmask16 k = (__mmask16)(n - t >= 16 ? 0xffff : (1u << (n - t)) - 1);
        __m512 e = att_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), vm));
        e = _mm512_maskz_mov_ps(k, e);
        _mm512_mask_storeu_ps(s + t, k, e);
        acc0 = _mm512_add_ps(acc0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}
#endif

typedef struct att_ctx {
    const kvs_attention_args *a;
    int64_t G, BQ, d;
    const float *q;
    const void *k, *v;
    int kv_f16;
    float *out;
    const int32_t *q_pos, *k_pos, *kv_len, *row_len;
    const float *mask;
    float *row_max, *row_sum;
    int32_t *argmax;
    /* statistics */
    const int32_t *stat_w;       /* [n_q] multiplicity of each row in stat_rows (NULL: no key_mass) */
    const int32_t *probe_start;  /* [n_q + 1] CSR into probe_list */
    const int32_t *probe_list;   /* probe output indices r, grouped by query row */
    float *probs;
    /* AVX-512 path: K as f32 panels [n_kv_heads][ldk/32][d][32] (zero-padded to ldk), V as f32 */
    int fast;
    int dec; /* AVX-512 decoding kernels on row-major K/V tiles (few query rows) */
    /* split-key decoding: keys cut into `splits` ranges of split_keys (a multiple of ATT_BK) when
     * there are fewer (query tile, kv head) tasks than threads; part: partial states */
    int64_t splits, split_keys, part_words;
    float *part;
    const float *KT, *V32;
    int64_t ldk;
} att_ctx;

typedef struct att_work {
    float *Qp, *O, *S, *Kc, *Vc;  /* [M][d], [M][d], [M][BK], [BK][d], [BK][d] */
    float *m, *l, *bestv;         /* [M] */
    int32_t *best, *qpos, *lim;   /* [M] */
    float *km;                    /* [n_kv_heads][capacity] partial key_mass of this thread, or NULL */
} att_work;

static int64_t att_qpos(const att_ctx *c, int64_t i) {
    return c->q_pos ? c->q_pos[i] : c->a->n_kv - c->a->n_q + i;
}

/* K or V tile rows [j0, j0+n) of kv head h as f32 (a pointer into the tensor, or converted). */
static const float *att_tile(const att_ctx *c, const void *base, float *conv, int64_t h, int64_t j0, int64_t n) {
    const int64_t d = c->d;
    size_t off = (size_t)(h * c->a->capacity + j0) * (size_t)d;
    if (!c->kv_f16) return (const float *)base + off;
    const uint16_t *s = (const uint16_t *)base + off;
    for (int64_t t = 0; t < n * d; t++) conv[t] = kvs_h2f(s[t]);
    return conv;
}

/* Logits of one row of a tile: s[t] is key j0+t; keys at or beyond lim, or (causal) with
 * kpos > qpos, become -inf; the mask row (from key j0) is added. */
KVS_CLONES
static void att_prep_row(float *KVS_RESTRICT s, int64_t n, int64_t j0, int64_t lim, const int32_t *kpos, int32_t qp,
                         const float *mrow) {
    for (int64_t t = 0; t < n; t++) {
        int vis = j0 + t < lim;
        if (kpos) vis = vis && kpos[t] <= qp;
        float add = mrow ? mrow[t] : 0.0f;
        s[t] = vis ? s[t] + add : -INFINITY;
    }
}

/* Reductions are written with 16 explicit lanes: without -ffast-math the compiler may not
 * reassociate a single accumulator, and these loops are the softmax's whole cost. */
KVS_CLONES
static float att_row_max(const float *s, int64_t n) {
    float mx[16];
    for (int l = 0; l < 16; l++) mx[l] = -INFINITY;
    int64_t t = 0;
    for (; t + 16 <= n; t += 16)
        for (int l = 0; l < 16; l++) mx[l] = s[t + l] > mx[l] ? s[t + l] : mx[l];
    float m = -INFINITY;
    for (; t < n; t++) m = s[t] > m ? s[t] : m;
    for (int l = 0; l < 16; l++) m = mx[l] > m ? mx[l] : m;
    return m;
}

/* p[t] = exp(s[t] - m) in place; returns the sum. */
KVS_CLONES
static float att_exp_row(float *s, int64_t n, float m) {
    float acc[16] = {0};
    int64_t t = 0;
    for (; t + 16 <= n; t += 16)
        for (int l = 0; l < 16; l++) {
            float e = kvs_expf(s[t + l] - m);
            s[t + l] = e;
            acc[l] += e;
        }
    float sum = 0.0f;
    for (; t < n; t++) {
        float e = kvs_expf(s[t] - m);
        s[t] = e;
        sum += e;
    }
    for (int l = 0; l < 16; l++) sum += acc[l];
    return sum;
}

KVS_CLONES
static void att_scale_row(float *o, int64_t d, float f) {
    for (int64_t t = 0; t < d; t++) o[t] *= f;
}

/* Per-row limit on keys (kv_len of the head, row_len of the row), clamped to [0, n_kv]. */
static int64_t att_row_lim(const att_ctx *c, int64_t h, int64_t i) {
    int64_t lim = c->kv_len ? c->kv_len[h] : c->a->n_kv;
    if (c->row_len) {
        int64_t rl = c->row_len[i];
        if (rl < lim) lim = rl;
    }
    if (lim < 0) lim = 0;
    return lim;
}

/* Computes S for rows [0, M) against keys [j0, j0+n) of kv head h and turns it into logits.
 * Returns 0 when the whole tile is invisible to every row (S then unspecified). */
static int att_logits(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t j0, int64_t n,
                      int64_t max_qpos) {
    const kvs_attention_args *a = c->a;
    const int64_t d = c->d, G = c->G;
    const int32_t *kp = c->k_pos ? c->k_pos + h * a->capacity + j0 : NULL;
    if (a->p.causal) {
        int64_t kmin = INT64_MAX;
        if (kp) {
            for (int64_t t = 0; t < n; t++) kmin = kp[t] < kmin ? kp[t] : kmin;
        } else {
            kmin = j0;
        }
        if (kmin > max_qpos) return 0;
    }
#if KVS_CPU_HAVE_AVX512
    if (c->fast) {
        att_qk_avx512(w->Qp, c->KT + h * d * c->ldk + j0 * d, d, (M + 7) & ~(int64_t)7, (n + 31) & ~(int64_t)31,
                      a->p.scale, w->S);
    } else
#endif
    {
        const float *Kt = att_tile(c, c->k, w->Kc, h, j0, n);
#if KVS_CPU_HAVE_AVX512
        if (c->dec)
            att_qk_dec_avx512(w->Qp, Kt, d, M, n, a->p.scale, w->S);
        else
#endif
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)n, (int)d, a->p.scale, w->Qp, (int)d,
                        Kt, (int)d, 0.0f, w->S, ATT_BK);
    }
    for (int64_t r = 0; r < M; r++) {
        int64_t i = i0 + r / G;
        float *s = w->S + r * ATT_BK;
        int64_t lim = w->lim[r];
        const float *mrow = c->mask ? c->mask + i * a->n_kv + j0 : NULL;
        int need_causal = a->p.causal;
        if (need_causal && !kp && j0 + n - 1 <= (int64_t)w->qpos[r]) need_causal = 0;
        if (!mrow && !need_causal && j0 + n <= lim) continue; /* fully visible, no bias */
        int32_t kdef[ATT_BK];
        const int32_t *kpr = NULL;
        if (need_causal) {
            if (kp) {
                kpr = kp;
            } else {
                for (int64_t t = 0; t < n; t++) kdef[t] = (int32_t)(j0 + t);
                kpr = kdef;
            }
        }
        att_prep_row(s, n, j0, lim, kpr, w->qpos[r], mrow);
    }
    return 1;
}

/* Packs the query rows of tile qt for kv head h into w (Qp, positions, limits, fresh softmax state)
 * and returns their count M; *jend: keys any row can see, *max_qpos: the largest query position. */
static int64_t att_rows(const att_ctx *c, att_work *w, int64_t h, int64_t qt, int64_t *jend_out,
                        int64_t *max_qpos_out) {
    const kvs_attention_args *a = c->a;
    const int64_t d = c->d, G = c->G;
    const int64_t i0 = qt * c->BQ, i1 = i0 + c->BQ < a->n_q ? i0 + c->BQ : a->n_q;
    const int64_t M = (i1 - i0) * G;
    int64_t jend = 0, max_qpos = INT64_MIN;
    for (int64_t r = 0; r < M; r++) {
        int64_t i = i0 + r / G, g = h * G + r % G;
        memcpy(w->Qp + r * d, c->q + (i * a->n_heads + g) * d, (size_t)d * sizeof(float));
        w->qpos[r] = (int32_t)att_qpos(c, i);
        w->lim[r] = (int32_t)att_row_lim(c, h, i);
        if (w->lim[r] > jend) jend = w->lim[r];
        if (w->qpos[r] > max_qpos) max_qpos = w->qpos[r];
        w->m[r] = -FLT_MAX;
        w->l[r] = 0.0f;
        w->bestv[r] = -FLT_MAX;
        w->best[r] = -1;
    }
    const int64_t Mp = (M + 7) & ~(int64_t)7; /* rows padded for the 8-row kernels */
    memset(w->Qp + M * d, 0, (size_t)((Mp - M) * d) * sizeof(float));
    memset(w->O, 0, (size_t)(Mp * d) * sizeof(float));
    *jend_out = jend;
    *max_qpos_out = max_qpos;
    return M;
}

/* The online-softmax pass of M rows over keys [ja, jb) (one key split, or all keys). */
static void att_pass(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t ja, int64_t jb,
                     int64_t max_qpos) {
    const int64_t d = c->d;
    for (int64_t j0 = ja; j0 < jb; j0 += ATT_BK) {
        int64_t n = jb - j0 < ATT_BK ? jb - j0 : ATT_BK;
        if (!att_logits(c, w, h, i0, M, j0, n, max_qpos)) continue;
        for (int64_t r = 0; r < M; r++) {
            float *s = w->S + r * ATT_BK;
#if KVS_CPU_HAVE_AVX512
            float tmax = c->fast || c->dec ? att_row_max_avx512(s, n) : att_row_max(s, n);
#else
            float tmax = att_row_max(s, n);
#endif
            if (c->argmax && (tmax > w->bestv[r] || (w->best[r] < 0 && tmax > -INFINITY))) {
                int64_t t = 0;
                while (s[t] != tmax) t++;
                w->bestv[r] = tmax;
                w->best[r] = (int32_t)(j0 + t);
            }
            float mold = w->m[r];
            float mnew = tmax > mold ? tmax : mold;
            if (mnew > mold) {
                float alpha = kvs_expf(mold - mnew);
                w->l[r] *= alpha;
                att_scale_row(w->O + r * d, d, alpha);
                w->m[r] = mnew;
            }
#if KVS_CPU_HAVE_AVX512
            w->l[r] += c->fast || c->dec ? att_exp_row_avx512(s, n, mnew) : att_exp_row(s, n, mnew);
#else
            w->l[r] += att_exp_row(s, n, mnew);
#endif
        }
#if KVS_CPU_HAVE_AVX512
        if (c->fast) {
            att_pv_avx512(w->S, (M + 7) & ~(int64_t)7, n, c->V32 + (h * c->a->capacity + j0) * d, d, w->O);
        } else
#endif
        {
            const float *Vt = att_tile(c, c->v, w->Vc, h, j0, n);
#if KVS_CPU_HAVE_AVX512
            if (c->dec)
                att_pv_dec_avx512(w->S, M, n, Vt, d, w->O);
            else
#endif
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)d, (int)n, 1.0f, w->S, ATT_BK, Vt,
                            (int)d, 1.0f, w->O, (int)d);
        }
    }
}

/* Writes out, row_max, row_sum and argmax of the M rows from w's final softmax state. */
static void att_write(const att_ctx *c, const att_work *w, int64_t h, int64_t i0, int64_t M) {
    const kvs_attention_args *a = c->a;
    const int64_t d = c->d, G = c->G;
    for (int64_t r = 0; r < M; r++) {
        int64_t i = i0 + r / G, g = h * G + r % G;
        float *o = c->out + (i * a->n_heads + g) * d;
        const float *src = w->O + r * d;
        float l = w->l[r];
        if (l > 0.0f) {
            float f = a->p.unnormalised ? 1.0f : 1.0f / l;
            for (int64_t t = 0; t < d; t++) o[t] = src[t] * f;
        } else {
            memset(o, 0, (size_t)d * sizeof(float));
        }
        int64_t qi = i * a->n_heads + g;
        if (c->row_max) c->row_max[qi] = w->m[r];
        if (c->row_sum) c->row_sum[qi] = l;
        if (c->argmax) c->argmax[qi] = w->best[r];
    }
}

/* Zeroes the probs rows of the probe rows among the M rows (invisible and invalid keys read 0). */
static void att_zero_probes(const att_ctx *c, int64_t h, int64_t i0, int64_t M) {
    const kvs_attention_args *a = c->a;
    for (int64_t r = 0; r < M; r++) {
        int64_t i = i0 + r / c->G, g = h * c->G + r % c->G;
        for (int32_t e = c->probe_start[i]; e < c->probe_start[i + 1]; e++)
            memset(c->probs + ((int64_t)c->probe_list[e] * a->n_heads + g) * a->capacity, 0,
                   (size_t)a->capacity * sizeof(float));
    }
}

/* Second pass over keys [ja, jb) with each row's final (m, l) in w: normalised probabilities for
 * key_mass and the probe rows (whose rows the caller zeroed). */
static void att_stats(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t ja, int64_t jb,
                      int64_t max_qpos) {
    const kvs_attention_args *a = c->a;
    const int64_t G = c->G, cap = a->capacity;
    for (int64_t j0 = ja; j0 < jb; j0 += ATT_BK) {
        int64_t n = jb - j0 < ATT_BK ? jb - j0 : ATT_BK;
        if (!att_logits(c, w, h, i0, M, j0, n, max_qpos)) continue;
        for (int64_t r = 0; r < M; r++) {
            int64_t i = i0 + r / G, g = h * G + r % G;
            int32_t wt = c->stat_w ? c->stat_w[i] : 0;
            int has_probe = c->probs && c->probe_start[i + 1] > c->probe_start[i];
            if (!wt && !has_probe) continue;
            float l = w->l[r];
            if (!(l > 0.0f)) continue; /* nothing visible: p = 0 everywhere */
            float *s = w->S + r * ATT_BK;
            att_exp_row(s, n, w->m[r]);
            att_scale_row(s, n, 1.0f / l);
            if (wt) {
                float *km = w->km + h * cap + j0;
                float fw = (float)wt;
                for (int64_t t = 0; t < n; t++) km[t] += fw * s[t];
            }
            if (has_probe)
                for (int32_t e = c->probe_start[i]; e < c->probe_start[i + 1]; e++)
                    memcpy(c->probs + ((int64_t)c->probe_list[e] * a->n_heads + g) * cap + j0, s,
                           (size_t)n * sizeof(float));
        }
    }
}

/* Whether query tile qt needs the statistics pass. */
static int att_wants_stats(const att_ctx *c, int64_t qt) {
    if (!c->stat_w && !c->probs) return 0;
    const int64_t i0 = qt * c->BQ, i1 = i0 + c->BQ < c->a->n_q ? i0 + c->BQ : c->a->n_q;
    for (int64_t i = i0; i < i1; i++)
        if ((c->stat_w && c->stat_w[i] > 0) || (c->probs && c->probe_start[i + 1] > c->probe_start[i])) return 1;
    return 0;
}

/* Split-key decoding state of one (query tile, kv head, split) in the part buffer, for its M rows:
 * running max, denominator, best logit and its key, unnormalised O [M][d]. */
typedef struct att_part {
    float *m, *l, *bestv, *O;
    int32_t *best;
} att_part;

static att_part att_part_at(const att_ctx *c, int64_t h, int64_t qt, int64_t sp, int64_t M) {
    float *p = c->part + (size_t)(((qt * c->a->n_kv_heads + h) * c->splits + sp) * c->part_words);
    att_part v = {.m = p, .l = p + M, .bestv = p + 2 * M, .best = (int32_t *)(p + 3 * M), .O = p + 4 * M};
    return v;
}

/* Keys [*ja, *jb) of split sp, clipped to the jend keys any row sees. */
static void att_split_keys(const att_ctx *c, int64_t sp, int64_t jend, int64_t *ja, int64_t *jb) {
    *ja = sp * c->split_keys;
    *jb = *ja + c->split_keys < jend ? *ja + c->split_keys : jend;
}

/* One task: query tile qt against kv head h, keys of split sp (all keys when there is one split).
 * Unsplit it writes the outputs and runs the statistics pass; split it leaves its partial state. */
static void att_task(const att_ctx *c, att_work *w, int64_t h, int64_t qt, int64_t sp) {
    int64_t jend, max_qpos;
    const int64_t M = att_rows(c, w, h, qt, &jend, &max_qpos), i0 = qt * c->BQ, d = c->d;
    if (c->splits == 1) {
        att_pass(c, w, h, i0, M, 0, jend, max_qpos);
        att_write(c, w, h, i0, M);
        if (att_wants_stats(c, qt)) {
            if (c->probs) att_zero_probes(c, h, i0, M);
            att_stats(c, w, h, i0, M, 0, jend, max_qpos);
        }
        return;
    }
    int64_t ja, jb;
    att_split_keys(c, sp, jend, &ja, &jb);
    att_pass(c, w, h, i0, M, ja, jb, max_qpos);
    const att_part pt = att_part_at(c, h, qt, sp, M);
    memcpy(pt.m, w->m, (size_t)M * sizeof(float));
    memcpy(pt.l, w->l, (size_t)M * sizeof(float));
    memcpy(pt.bestv, w->bestv, (size_t)M * sizeof(float));
    memcpy(pt.best, w->best, (size_t)M * sizeof(int32_t));
    memcpy(pt.O, w->O, (size_t)(M * d) * sizeof(float));
}

/* Split-key decoding: merges the splits' partial softmax states of (qt, h) (flash-decoding: m = max
 * m_s, l = sum l_s e^(m_s - m), O = sum O_s e^(m_s - m); argmax from the first split holding the
 * best logit, as one pass in key order would find it), writes the outputs and leaves the final
 * (m, l) in split 0's slot for the statistics pass. */
static void att_merge(const att_ctx *c, att_work *w, int64_t h, int64_t qt) {
    int64_t jend, max_qpos;
    const int64_t M = att_rows(c, w, h, qt, &jend, &max_qpos), i0 = qt * c->BQ, d = c->d;
    for (int64_t r = 0; r < M; r++) {
        float m = -FLT_MAX;
        for (int64_t sp = 0; sp < c->splits; sp++) {
            const float ms = att_part_at(c, h, qt, sp, M).m[r];
            m = ms > m ? ms : m;
        }
        float l = 0.0f, *o = w->O + r * d;
        for (int64_t sp = 0; sp < c->splits; sp++) {
            const att_part pt = att_part_at(c, h, qt, sp, M);
            if (!(pt.l[r] > 0.0f)) continue; /* a split with no visible key adds nothing */
            const float f = kvs_expf(pt.m[r] - m);
            l += pt.l[r] * f;
            const float *os = pt.O + r * d;
            for (int64_t t = 0; t < d; t++) o[t] += os[t] * f;
            if (pt.best[r] >= 0 && (w->best[r] < 0 || pt.bestv[r] > w->bestv[r])) {
                w->bestv[r] = pt.bestv[r];
                w->best[r] = pt.best[r];
            }
        }
        w->m[r] = m;
        w->l[r] = l;
    }
    att_write(c, w, h, i0, M);
    const att_part p0 = att_part_at(c, h, qt, 0, M);
    memcpy(p0.m, w->m, (size_t)M * sizeof(float));
    memcpy(p0.l, w->l, (size_t)M * sizeof(float));
    if (c->probs && att_wants_stats(c, qt)) att_zero_probes(c, h, i0, M);
}

/* Split-key decoding: the statistics pass of split sp with the merged (m, l). */
static void att_task_stats(const att_ctx *c, att_work *w, int64_t h, int64_t qt, int64_t sp) {
    if (!att_wants_stats(c, qt)) return;
    int64_t jend, max_qpos;
    const int64_t M = att_rows(c, w, h, qt, &jend, &max_qpos), i0 = qt * c->BQ;
    const att_part p0 = att_part_at(c, h, qt, 0, M);
    memcpy(w->m, p0.m, (size_t)M * sizeof(float));
    memcpy(w->l, p0.l, (size_t)M * sizeof(float));
    int64_t ja, jb;
    att_split_keys(c, sp, jend, &ja, &jb);
    att_stats(c, w, h, i0, M, ja, jb, max_qpos);
}

kvs_status kvs_cpu_attention(kvs_device *dev, const kvs_attention_args *a) {
    const char *op = "kvs_attention (cpu)";
    att_ctx c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.G = a->n_heads / a->n_kv_heads;
    c.d = a->head_dim;
    c.BQ = ATT_M_TARGET / c.G > 0 ? ATT_M_TARGET / c.G : 1;
    c.q = kvs_tensor_host_ptr(a->q);
    c.k = kvs_tensor_host_ptr(a->k);
    c.v = kvs_tensor_host_ptr(a->v);
    c.kv_f16 = a->k->dtype == KVS_F16;
    c.out = kvs_tensor_host_ptr(a->out);
    c.q_pos = kvs_i32(a->p.q_pos);
    c.k_pos = kvs_i32(a->p.k_pos);
    c.kv_len = kvs_i32(a->p.kv_len);
    c.row_len = kvs_i32(a->p.row_len);
    c.mask = a->p.mask ? kvs_tensor_host_ptr(a->p.mask) : NULL;
    c.row_max = a->p.row_max ? kvs_tensor_host_ptr(a->p.row_max) : NULL;
    c.row_sum = a->p.row_sum ? kvs_tensor_host_ptr(a->p.row_sum) : NULL;
    c.argmax = a->p.argmax ? kvs_tensor_host_ptr(a->p.argmax) : NULL;
    c.probs = a->p.probs ? kvs_tensor_host_ptr(a->p.probs) : NULL;

    /* ---- device-side values the front-end could not check ---- */
    if (c.kv_len)
        for (int64_t h = 0; h < a->n_kv_heads; h++)
            if (c.kv_len[h] < 0 || c.kv_len[h] > a->n_kv)
                return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: kv_len[%lld] = %d outside [0, n_kv=%lld]", op,
                                 (long long)h, c.kv_len[h], (long long)a->n_kv);
    const int32_t *stat_rows = kvs_i32(a->p.stat_rows), *probe_rows = kvs_i32(a->p.probe_rows);
    for (int64_t e = 0; stat_rows && e < a->n_stat_rows; e++)
        if (stat_rows[e] < 0 || stat_rows[e] >= a->n_q)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: stat_rows[%lld] = %d outside [0, n_q=%lld)", op,
                             (long long)e, stat_rows[e], (long long)a->n_q);
    for (int64_t e = 0; probe_rows && e < a->n_probe; e++)
        if (probe_rows[e] < 0 || probe_rows[e] >= a->n_q)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: probe_rows[%lld] = %d outside [0, n_q=%lld)", op,
                             (long long)e, probe_rows[e], (long long)a->n_q);

    const int64_t n_qt = (a->n_q + c.BQ - 1) / c.BQ;
    const int64_t n_tasks = n_qt * a->n_kv_heads;
    const int64_t M = ((c.BQ * c.G + 7) & ~(int64_t)7), d = c.d; /* rows per task, padded to 8 */
    double flops = 4.0 * (double)a->n_q * (double)a->n_kv * (double)d * (double)a->n_heads;
    int nt = kvs_cpu_nt(dev, flops / 8.0);
    (void)nt; /* unused without OpenMP */
    /* split-key decoding (flash-decoding) when the (query tile, kv head) tasks cannot keep the
     * threads busy: about two tasks a thread; KVS_CPU_ATTN_SPLITS=n forces n splits (tests) */
    const int64_t key_tiles = (a->n_kv + ATT_BK - 1) / ATT_BK;
    int64_t splits = n_tasks < nt ? (2 * nt + n_tasks - 1) / n_tasks : 1;
    const char *fs = getenv("KVS_CPU_ATTN_SPLITS");
    if (fs && atoi(fs) > 0) splits = atoi(fs);
    if (splits > key_tiles) splits = key_tiles;
    if (splits < 1) splits = 1;
    c.splits = splits;
    c.split_keys = (key_tiles + splits - 1) / splits * ATT_BK;
    if (nt > n_tasks * splits) nt = (int)(n_tasks * splits);
    const int want_km = a->p.key_mass != NULL;
    const int64_t cap = a->capacity;

    /* ---- scratch: host metadata + per-thread work areas ---- */
    const size_t off_km = (size_t)(2 * M * d + M * ATT_BK + 2 * ATT_BK * d + 6 * M + 16);
    size_t per = off_km;
    if (want_km) per += (size_t)(a->n_kv_heads * cap);
    size_t meta = (size_t)(want_km ? a->n_q : 0) + (size_t)(a->n_probe ? 2 * a->n_q + 2 + a->n_probe : 0);
    c.part_words = M * (d + 4);
    const size_t part = splits > 1 ? (size_t)(n_tasks * splits * c.part_words) : 0;
    float *scr = malloc(((size_t)nt * per + part + meta) * sizeof(float) + 64);
    if (!scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: cannot allocate scratch", op);
    c.part = splits > 1 ? scr + (size_t)nt * per : NULL;
    int32_t *metap = (int32_t *)(scr + (size_t)nt * per + part);
    if (want_km) {
        int32_t *sw = metap;
        metap += a->n_q;
        if (stat_rows) {
            memset(sw, 0, (size_t)a->n_q * sizeof *sw);
            for (int64_t e = 0; e < a->n_stat_rows; e++) sw[stat_rows[e]]++;
        } else {
            for (int64_t i = 0; i < a->n_q; i++) sw[i] = 1;
        }
        c.stat_w = sw;
    }
    if (a->n_probe) {
        int32_t *start = metap, *list = metap + a->n_q + 1, *fill = list + a->n_probe;
        memset(start, 0, (size_t)(a->n_q + 1) * sizeof *start);
        for (int64_t e = 0; e < a->n_probe; e++) start[probe_rows[e] + 1]++;
        for (int64_t i = 0; i < a->n_q; i++) start[i + 1] += start[i];
        memcpy(fill, start, (size_t)a->n_q * sizeof *fill);
        for (int64_t e = 0; e < a->n_probe; e++) list[fill[probe_rows[e]]++] = (int32_t)e;
        c.probe_start = start;
        c.probe_list = list;
    }

    /* AVX-512 path: enough query rows per kv head to amortise a transposed f32 copy of K */
    float *kt_buf = NULL, *v_buf = NULL;
    c.fast = kvs_cpu_avx512() && d % 16 == 0 && a->n_q * c.G >= 8 && a->n_q >= 4;
    if (c.fast) {
        c.ldk = (a->n_kv + 31) & ~(int64_t)31;
        kt_buf = malloc((size_t)(a->n_kv_heads * d * c.ldk) * sizeof(float));
        if (c.kv_f16) v_buf = malloc((size_t)(a->n_kv_heads * a->capacity * d) * sizeof(float));
        if (!kt_buf || (c.kv_f16 && !v_buf)) {
            free(kt_buf);
            free(v_buf);
            free(scr);
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the transposed K", op);
        }
        const int64_t nkv = a->n_kv, ldk = c.ldk, cap_ = a->capacity, nb = (nkv + 63) / 64;
        KVS_OMP(parallel for num_threads(nt) schedule(static))
        for (int64_t hb = 0; hb < a->n_kv_heads * nb; hb++) {
            int64_t h = hb / nb, j0 = (hb % nb) * 64, j1 = j0 + 64 < nkv ? j0 + 64 : nkv;
            /* panel p = j / 32 holds keys [32p, 32p+32): dst[p][t][j % 32] */
            float *dst = kt_buf + h * d * ldk;
            for (int64_t j = j0; j < j1; j++) {
                float *pj = dst + (j / 32) * d * 32 + (j % 32);
                if (c.kv_f16) {
                    const uint16_t *src = (const uint16_t *)c.k + (h * cap_ + j) * d;
                    for (int64_t t = 0; t < d; t++) pj[t * 32] = kvs_h2f(src[t]);
                } else {
                    const float *src = (const float *)c.k + (h * cap_ + j) * d;
                    for (int64_t t = 0; t < d; t++) pj[t * 32] = src[t];
                }
            }
            if (j1 == nkv)
                for (int64_t j = nkv; j < ldk; j++)
                    for (int64_t t = 0; t < d; t++) dst[(j / 32) * d * 32 + t * 32 + (j % 32)] = 0.0f;
            if (c.kv_f16) {
                const uint16_t *src = (const uint16_t *)c.v + (h * cap_ + j0) * d;
                float *vd = v_buf + (h * cap_ + j0) * d;
                for (int64_t t = 0; t < (j1 - j0) * d; t++) vd[t] = kvs_h2f(src[t]);
            }
        }
        c.KT = kt_buf;
        c.V32 = c.kv_f16 ? v_buf : (const float *)c.v;
    }
    c.dec = kvs_cpu_avx512() && d % 16 == 0 && !c.fast;

    kvs_cpu_blas_threads(1);
    int team = 1; /* threads the region got (key_mass partials to reduce) */
    KVS_OMP(parallel num_threads(nt))
    {
        if (kvs_omp_tid() == 0) team = kvs_omp_team();
        float *base = scr + (size_t)kvs_omp_tid() * per;
        att_work w;
        w.Qp = base;
        w.O = w.Qp + M * d;
        w.S = w.O + M * d;
        w.Kc = w.S + M * ATT_BK;
        w.Vc = w.Kc + ATT_BK * d;
        w.m = w.Vc + ATT_BK * d;
        w.l = w.m + M;
        w.bestv = w.l + M;
        w.best = (int32_t *)(w.bestv + M);
        w.qpos = w.best + M;
        w.lim = w.qpos + M;
        w.km = want_km ? base + off_km : NULL;
        if (w.km) memset(w.km, 0, (size_t)(a->n_kv_heads * cap) * sizeof(float));
        const int64_t n_run = n_tasks * c.splits;
        KVS_OMP(for schedule(dynamic, 1))
        for (int64_t t = 0; t < n_run; t++) att_task(&c, &w, t / (n_qt * c.splits), (t / c.splits) % n_qt, t % c.splits);
        if (c.splits > 1) { /* (each omp for ends with a barrier: partials, then merges, then statistics) */
            KVS_OMP(for schedule(static))
            for (int64_t t = 0; t < n_tasks; t++) att_merge(&c, &w, t / n_qt, t % n_qt);
            if (c.stat_w || c.probs) {
                KVS_OMP(for schedule(dynamic, 1))
                for (int64_t t = 0; t < n_run; t++)
                    att_task_stats(&c, &w, t / (n_qt * c.splits), (t / c.splits) % n_qt, t % c.splits);
            }
        }
    }

    if (want_km) {
        float *km = kvs_tensor_host_ptr(a->p.key_mass);
        const float invG = 1.0f / (float)c.G;
        for (int64_t h = 0; h < a->n_kv_heads; h++) {
            int64_t len = c.kv_len ? c.kv_len[h] : a->n_kv;
            for (int64_t j = 0; j < len; j++) {
                float s = 0.0f;
                for (int th = 0; th < team; th++) s += scr[(size_t)th * per + off_km + (size_t)(h * cap + j)];
                s *= invG;
                km[h * cap + j] = a->p.key_mass_accumulate ? km[h * cap + j] + s : s;
            }
        }
    }
    free(scr);
    free(kt_buf);
    free(v_buf);
    return KVS_OK;
}
