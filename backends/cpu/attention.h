/* CPU backend attention: what the driver (ops_attention.c), the tile pass with its portable
 * kernels (attention_tiles.c) and the AVX-512 kernels (x86/attention_avx512.c) share.
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
 * Without split keys the first pass keeps those rows' exponentials (att_work.E, when they fit a
 * bounded scratch), so the second pass costs no QK product and no exp where a tile's running
 * maximum was the row's final one; otherwise it recomputes the tiles.
 *
 * The two tile products run either (AVX2 kernels: the same paths in blocks of 4 rows x 16 columns,
 * where the CPU has AVX2, FMA and F16C but no AVX-512)
 *  - on register-blocked AVX-512 kernels (8 rows x 32 keys / 8 rows x 32 dims, FMA; any d_k, d_v:
 *    the Q.K^T panels loop over d_k, P.V masks the last d_v % 16 columns) when the CPU has AVX-512F
 *    and there are enough query rows (n_q >= 4, n_q*G >= 8) to amortise one f32 copy of K per
 *    call, laid out in panels of 32 keys [n_kv_heads][n_kv/32][d][32];
 *  - on AVX-512 decoding kernels over the row-major K/V tiles when there are fewer query rows
 *    (each key row loaded once for up to 4 packed rows, lane-reduced dot products; P.V with 4 rows
 *    x 64 columns in registers; the last d % 16 lanes masked), f16 tiles converted to f32 first;
 *  - on aarch64, NEON kernels over the row-major K/V tiles for every row count (4 rows x 4 keys
 *    for Q.K^T, 4 rows x 16 columns for P.V; d % 4 == 0; no transposed copy of K), f16 tiles
 *    converted by FCVTL;
 *  - or through cblas_sgemm on each tile (single-threaded OpenBLAS inside the OpenMP tasks),
 *    f16 K/V tiles converted to f32 first (NEON with d_k or d_v not a multiple of 4, CPUs without
 *    SIMD kernels, the portable variants, bf16 tiles).
 * The row kernels of the online softmax (row max, exp-sum, f16 conversion) are the ISA's for every
 * head size; the portable variants keep the portable ones (the reference).
 * Quantized K/V (the block types of a quantized KV cache; issue 17): never expanded to an f32 copy
 * of the cache. The portable path decodes each tile (core/quant's reference decoders) into the
 * Kc/Vc tile buffers for cblas. With AVX-512/AVX2 the blocks are decoded in registers
 * (x86/att_quant_fused.h): S = Q.K^T four keys at a time against 4 (AVX2: 2) packed query rows with
 * the horizontal sums batched, O += P.V with each V vector decoded once and multiplied into 4 rows
 * of O held in registers; only the blocks are read from memory (the variants avx512-vnni /
 * avx2-q8, and the automatic choice on x86, take 8-bit query codes for a q8_0 / q4_0 / q4_1 / qh8 K and 8-bit softmax weights for
 * such a V: attention_q8.h). The f32 panel path
 * (many query rows) is used for F32/F16 caches only; BF16 tiles are converted as F16 ones.
 * Tasks are spread over OpenMP threads (dynamic schedule: causal tiles differ in cost). With fewer
 * tasks than threads (decoding with few kv heads) the keys are split as in flash-decoding (Dao et al.
 * 2023, "Flash-Decoding for long-context inference"): each split leaves its (m, l, O, argmax), a
 * merge rescales them to the common maximum, and the statistics pass runs per split with the
 * merged (m, l). */
#ifndef KVS_BACKENDS_CPU_ATTENTION_H
#define KVS_BACKENDS_CPU_ATTENTION_H

#include "cpu_kernels.h"
#include "attention_q8.h"
#include "matmul.h"

#define ATT_BK 256       /* keys per tile */
#define ATT_M_TARGET 64  /* packed query rows (queries x group heads) per task */
#define ATT_KEEP_WORDS (1 << 20) /* largest exponentials store for the statistics pass, floats a thread */
#define ATT_QSUB 32      /* keys of a block-quantized K/V sub-tile decoded at a time (SIMD paths) */

/* One ISA's kernels of the tile pass (contracts: the AVX-512 prototypes below). qk and pv (the
 * panel path, c->fast) may be NULL: the ISA then runs every call on its decoding kernels over
 * row-major K/V tiles (NEON), or on cblas products where d_k or d_v is not a multiple of
 * dec_align. The row kernels (row_max, exp_row, h2f) serve every head size. */
typedef struct att_kernels {
    void (*qk)(const float *Qp, const float *KP, int64_t d, int64_t Mp, int64_t np, float scale, float *S);
    void (*pv)(const float *P, int64_t Mp, int64_t n, const float *V, int64_t d, float *O);
    void (*qk_dec)(const float *Qp, const float *K, int64_t d, int64_t M, int64_t n, float scale, float *S);
    void (*pv_dec)(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O);
    float (*row_max)(const float *s, int64_t n);
    float (*exp_row)(float *s, int64_t n, float m);
    /* d[i] = f16 s[i] as f32 for i < n (K/V tiles of f16 caches) */
    void (*h2f)(const uint16_t *s, float *d, int64_t n);
    /* qk_dec / pv_dec take d_k, d_v that are multiples of dec_align (1: any) and run where both are
     * at least dec_min (narrower heads: cblas products, which beat a lane-reduced dot product per
     * key at d_k = 8); row_max, exp_row, h2f, qk and pv take any size */
    int64_t dec_align, dec_min;
} att_kernels;

typedef struct att_ctx {
    const kvs_attention_args *a;
    int64_t G, BQ, d, dv;        /* d: d_k (q, k); dv: d_v (v, out) */
    const float *q;
    const void *k, *v;
    kvs_dtype k_dt, v_dt;        /* each F32, F16, BF16 or a block type (Q8_0, Q4_0, Q4_1, IQ4_NL) */
    const void *k_lo, *v_lo;     /* qh8 lower planes (k_dt / v_dt then Q4_1, the upper planes): tiles
                                  * decoded to the 8-bit values by qh8dec (the fused block kernels are
                                  * skipped), or NULL */
    kvs_cpu_qh8_decode_fn qh8dec; /* the qh8 decoder of the op's ISA (kvs_qb_qh8's values bit for bit) */
    int64_t k_rb, v_rb;          /* bytes of one K / V row (d_k / d_v values) */
    kvs_cpu_qdecode_fn qdec;     /* the block decoder of the op's ISA (core/quant's, compiled per ISA) */
    kvs_cpu_qdot_fn qdot;        /* the fused block GEMV of the op's ISA (block K . packed query rows) */
    int (*qqk)(kvs_dtype dt, const void *K, int64_t rb, const float *Q, int64_t d, int64_t M, int64_t n, float scale,
               float *S, int64_t lds); /* the fused Q . block K^T of the op's ISA (NULL: portable) */
    int (*qpv)(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n, int64_t d,
               float *O);        /* the fused P . block V of the op's ISA (NULL: portable) */
    /* variants -vnni / -q8 (attention_q8.h): Q . block K^T on 8-bit query codes for the types it
     * has (q8_0, q4_0; q8off >= 0), else NULL (the f32 qqk above) */
    int (*qqk8)(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n, float scale,
                float *S, int64_t lds);
    int32_t q8off;
    int (*qpv8)(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n, int64_t d,
                float *O); /* -vnni: P . block V with the scales folded into P (attention_q8.h), or NULL */
    /* -vnni / -q8 over a qh8 (k_lo / v_lo given) or q4_1 K / V: 8-bit query codes / weights on the
     * codes read in place or repacked into q8_0 / q4_0 blocks in the work's Kc / Vc buffer (the
     * scratch argument), plus per-key constants (attention_q8.h, "qh8 and q4_1"), or NULL */
    int (*qqk8h)(kvs_dtype dt, const void *K, const void *K_lo, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                 float scale, float *S, int64_t lds, void *scratch);
    int (*qpv8h)(kvs_dtype dt, const void *V, const void *V_lo, int64_t rb, const float *P, int64_t ldp, int64_t M,
                 int64_t n, int64_t d, float *O, void *scratch);
    float *out;
    const int32_t *q_pos, *k_pos, *kv_len, *row_len;
    const float *mask;
    float *row_max, *row_sum;
    const float *lse_extra; /* [n_q][n_heads] external log-normaliser (kvs_attention_params.lse_extra) or NULL */
    int32_t *argmax;
    /* statistics */
    const int32_t *stat_w;       /* [n_q] multiplicity of each row in stat_rows (NULL: no key_mass) */
    const int32_t *probe_start;  /* [n_q + 1] CSR into probe_list */
    const int32_t *probe_list;   /* probe output indices r, grouped by query row */
    float *probs;
    /* SIMD paths. kern: the ISA's table (AVX-512, AVX2 or NEON; NULL under the portable variants),
     * whose row kernels (row_max, exp_row, h2f) run for every head size; which tile products run is
     * apart: fast: the panel kernels, K as f32 panels [n_kv_heads][ldk/32][d][32] (zero-padded to
     * ldk), V as f32 [..][dv] (any d_k, d_v); dec: the decoding kernels on row-major K/V tiles (few
     * query rows; d_k, d_v multiples of kern->dec_align, at least kern->dec_min); neither: cblas per tile */
    const att_kernels *kern;
    int fast;
    int dec;
    /* split-key decoding: keys cut into `splits` ranges of split_keys (a multiple of ATT_BK) when
     * there are fewer (query tile, kv head) tasks than threads; part: partial states */
    int64_t splits, split_keys, part_words;
    float *part;
    const float *KT, *V32;
    int64_t ldk;
} att_ctx;

typedef struct att_work {
    float *Qp, *O, *S, *Kc, *Vc;  /* [M][d], [M][dv], [M][BK], [BK][d], [BK][dv] */
    float *m, *l, *bestv;         /* [M] */
    int32_t *best, *qpos, *lim;   /* [M] */
    float *km;                    /* [n_kv_heads][capacity] partial key_mass of this thread, or NULL */
    /* statistics without a second QK product: when set, the pass computes each key tile's logits
     * and exponentials e^(S - m_t) in E's block of that tile instead of S (tile-major: row r of
     * tile (j0 - ja) / ATT_BK at E + tile * ldl + r * ATT_BK, key j0 + t at t; ldl = the work's
     * padded M times ATT_BK), so they stay there without a copy, records for the rows that need
     * statistics the running maximum m_t the tile used in mu[r * n_tiles + tile], and marks the key
     * tiles it computed in tile_ok (index (j0 - ja) / ATT_BK). Where m_t is the row's final maximum
     * the statistics pass normalises them (both passes call the same exp_row: kern's, or the
     * portable one, so the values are bit-identical to a recomputation); otherwise it recomputes
     * that tile's logits in S. NULL: recompute every tile. */
    float *E, *mu;
    int64_t ldl;
    /* c->qqk8: the task's query rows quantized by kvs_cpu_att_rows (attention_q8.h), [M][d] codes,
     * [M][d/32] scales, [M][d/4] offsets then [M][d/32] their block sums */
    int8_t *q8;
    float *q8d;
    int32_t *q8c;
    uint8_t *tile_ok;
    int64_t n_tiles;
} att_work;

/* ---- the tile pass (attention_tiles.c) ---- */

/* Packs the query rows of tile qt for kv head h into w (Qp, positions, limits, fresh softmax state)
 * and returns their count M; *jend: keys any row can see, *max_qpos: the largest query position. */
int64_t kvs_cpu_att_rows(const att_ctx *c, att_work *w, int64_t h, int64_t qt, int64_t *jend_out, int64_t *max_qpos_out);
/* The online-softmax pass of M rows over keys [ja, jb) (one key split, or all keys). */
void kvs_cpu_att_pass(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t ja, int64_t jb,
                      int64_t max_qpos);
/* Writes out, row_max, row_sum and argmax of the M rows from w's final softmax state; with
 * lse_extra, w->l then becomes the full normaliser l + exp(lse_extra - m) the statistics pass uses
 * (row_sum keeps the call's own l). */
void kvs_cpu_att_write(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M);
/* Zeroes the probs rows of the probe rows among the M rows (invisible and invalid keys read 0). */
void kvs_cpu_att_zero_probes(const att_ctx *c, int64_t h, int64_t i0, int64_t M);
/* Second pass over keys [ja, jb) with each row's final (m, l) in w: normalised probabilities for
 * key_mass and the probe rows (whose rows the caller zeroed). */
void kvs_cpu_att_stats(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t ja, int64_t jb,
                       int64_t max_qpos);

/* ---- AVX-512F kernels (x86/attention_avx512.c) ---- */

/* (d below: the width the kernel is called with: d_k for the Q.K^T kernels, d_v for P.V.)
 * S[r][j] = scale * sum_t Qp[r][t] K[j][t] for r < Mp (multiple of 8), j < np (multiple of 32).
 * Qp: [Mp][d]; KP: K transposed in panels of 32 keys, [np/32][d][32]; S: row stride ATT_BK. */
void kvs_cpu_att_qk_avx512(const float *Qp, const float *KP, int64_t d, int64_t Mp, int64_t np, float scale, float *S);
/* O[r] += sum_j P[r][j] V[j] for r < Mp (multiple of 8), j < n; P row stride ATT_BK, V [n][d]. */
void kvs_cpu_att_pv_avx512(const float *P, int64_t Mp, int64_t n, const float *V, int64_t d, float *O);
/* Decoding (few rows, row-major K [n][d]): S[r][j] = scale * Qp[r] . K[j] for r < M, j < n. */
void kvs_cpu_att_qk_dec_avx512(const float *Qp, const float *K, int64_t d, int64_t M, int64_t n, float scale,
                               float *S);
/* Decoding: O[r] += sum_j P[r][j] V[j] for r < M, j < n; V [n][d] row-major. */
void kvs_cpu_att_pv_dec_avx512(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O);
/* max_t s[t] (-inf for n == 0). */
float kvs_cpu_att_row_max_avx512(const float *s, int64_t n);
/* p[t] = exp(s[t] - m) in place; returns the sum. */
float kvs_cpu_att_exp_row_avx512(float *s, int64_t n, float m);

/* The kernel tables: AVX-512F (the functions above, any d; dec_align 1, dec_min 16), AVX2 + FMA + F16C
 * (x86/attention_avx2.c, the same contracts; qk_dec/pv_dec take any M; AVX2 masks the last d % 8
 * lanes) and aarch64 NEON (arm/attention_neon.c: qk_dec, pv_dec for any M, d % 4 == 0 (dec_align
 * 4); row_max, exp_row and h2f for any n; no panel kernels, qk = pv = NULL). */
extern const att_kernels kvs_cpu_att_avx512;
extern const att_kernels kvs_cpu_att_avx2;
extern const att_kernels kvs_cpu_att_neon;

#endif
