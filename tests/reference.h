/* Float64 reference implementations of every op in include/kvsieve/ops.h, in plain C, written
 * from the header's stated semantics (not from any backend's code). The suites compare every
 * backend against these. Conversions to f16/bf16 are implemented independently of the library's
 * host conversions (with frexp/rint in double) so the two can check each other. */
#ifndef KVS_TESTS_REFERENCE_H
#define KVS_TESTS_REFERENCE_H

#include <stdint.h>

#include "kvsieve/kvsieve.h"

/* ---- number formats ---- */
/* Round a double to the nearest binary16 / bfloat16 (ties to even); NaN -> quiet NaN with sign. */
uint16_t ref_f16_bits(double v);
uint16_t ref_bf16_bits(double v);
double ref_f16_to_f64(uint16_t h);
double ref_bf16_to_f64(uint16_t h);
/* Value of x rounded to dtype (F32, F16, BF16), as a double. */
double ref_round_to(kvs_dtype dt, double x);

/* GGUF Q8_0: blocks of 32 = { f16 d; int8 qs[32] } (34 bytes), value = d * qs[i].
 * ref_q8_0_quantize makes a valid block stream from x (amax/127 scale, round-half-away);
 * ref_q8_0_dequant decodes any block stream exactly. n % 32 == 0. */
void ref_q8_0_quantize(const float *x, int64_t n, uint8_t *blocks);
void ref_q8_0_dequant(const uint8_t *blocks, int64_t n, double *out);

/* ---- dense ops ---- */
/* y[i][r] = sum_c W[r][c] x[i][c] (+ y[i][r] if accumulate). W [m][k], x [n][k], y [n][m]. */
void ref_matmul(const double *W, const double *x, double *y, int64_t m, int64_t k, int64_t n, int accumulate);
void ref_rmsnorm(const double *x, const double *w, double *y, int64_t rows, int64_t dim, double eps);
void ref_swiglu(const double *gate, const double *up, double *out, int64_t n);
void ref_softmax(const double *x, double *y, int64_t rows, int64_t n, double scale);

/* Rotates one head vector v[0..head_dim) in place by position pos (RoFormer eq. 34 with the
 * pairing of p->mode; n_rot 0 = head_dim). */
void ref_rope_vec(double *v, int64_t head_dim, double pos, const kvs_rope_params *p);

/* ---- attention ---- */
typedef struct ref_attn {
    int64_t n_q, n_heads, n_kv_heads, head_dim, capacity, n_kv; /* n_kv resolved (never 0) */
    int64_t head_dim_v;                                        /* d_v of v and out; 0 = head_dim */
    double scale;                                              /* resolved (never 0) */
    int causal, unnormalised;
    const double *q;               /* [n_q][n_heads][head_dim] */
    const double *k, *v;           /* [n_kv_heads][capacity][head_dim] / [..][head_dim_v] (decoded if f16) */
    const int32_t *q_pos, *k_pos, *kv_len, *row_len; /* NULL = default, as ops.h */
    const double *mask;            /* [n_q][n_kv], -INFINITY hides; NULL = none */
    const int32_t *stat_rows;      /* NULL = all rows */
    int64_t n_stat;
    const int32_t *probe_rows;
    int64_t n_probe;
    const double *lse_extra;       /* [n_q][n_heads] external log-normaliser (kvs_attention_params.lse_extra):
                                    * out and the probabilities divide by l + exp(lse_extra - m); NULL = none */
    /* outputs, each optional (NULL = not computed) */
    double *out;      /* [n_q][n_heads][head_dim_v] */
    double *key_mass; /* [n_kv_heads][capacity]: ADDED into (caller zeroes or preloads); only
                       * j < valid length of head h is touched */
    double *probs;    /* [n_probe][n_heads][capacity] */
    int32_t *argmax;  /* [n_q][n_heads] */
    double *row_max, *row_sum; /* [n_q][n_heads] */
    double *logits;   /* [n_q][n_heads][n_kv]: scaled logit + mask, -INFINITY when invisible */
    double *bound;    /* [n_q][n_heads]: max_j (scale sum_t |q_t k_jt| + |mask_ij|) over visible j */
} ref_attn;

/* Visibility of key j for query row i and kv head h (the rules of kvs_attention_params). */
int ref_attn_visible(const ref_attn *a, int64_t i, int64_t h, int64_t j);
/* Valid key count of kv head h (kv_len[h] or n_kv). */
int64_t ref_attn_valid(const ref_attn *a, int64_t h);
void ref_attention(ref_attn *a);

/* ---- wavelets ---- */
/* Orthonormal low-pass taps written independently of the library's kvs_wavelet_filter tables (db2
 * in closed form). The DWT below is the library's float64 host DWT (core/schedule/dwt_host.c, used
 * by the WaveFilter schedule), not any backend's kvs_dwt. */
int ref_wavelet_lo(kvs_wavelet w, double *lo);
int64_t ref_dwt_level_len(int64_t n, int level);
int64_t ref_dwt_len(int64_t n, int levels);
/* One row: x[n] -> y[ref_dwt_len(n, levels)], layout [a_J | d_J | ... | d_1], periodization with
 * odd lengths extended by repeating the last sample. */
void ref_dwt_row(const double *x, int64_t n, kvs_wavelet w, int levels, double *y);
/* Exact inverse (the transpose of the analysis at every level, then truncation to the level
 * length): y -> x[n]. */
void ref_idwt_row(const double *y, int64_t n, kvs_wavelet w, int levels, double *x);

/* ---- top-k ---- */
/* Top-k of x[0..n) considering only j < row_len: larger first, equal scores lower index first, NaN
 * below everything. order_by_index re-sorts the selection by index. Missing entries (row_len < k):
 * idx -1, val -INFINITY at the tail. */
void ref_topk(const float *x, int64_t n, int64_t row_len, int64_t k, int order_by_index, int32_t *idx,
              float *val);

#endif
