/* Suite "attention": kvs_attention with GQA ratios 1, 2, 3, 4; causal by default positions and by
 * q_pos/k_pos; bidirectional; ragged kv_len per head; row_len; additive masks with -INFINITY; every
 * statistic (key_mass over stat_rows with the GQA-group mean and accumulate, probs of probe_rows,
 * argmax, row_max/row_sum, unnormalised output); rows with no visible key; f16 k/v.
 *
 * Reading of ops.h used here (see the report): a key whose mask entry is -INFINITY is invisible, so
 * a row whose visible keys are all masked is a "row with no visible key" (out 0, row_sum 0,
 * row_max -FLT_MAX, argmax -1). probs rows are written over the whole capacity, 0 where a key is
 * invisible or invalid. key_mass entries j >= the head's valid length stay untouched.
 * Cache rows that are not valid keys (j >= n_kv, j >= kv_len[h]) hold NaN in the "nanpad" cases: a
 * backend must not let them reach any output (after eviction such rows hold garbage).
 *
 * Tolerances (nmse, per output): f32 k/v 1e-6 (an all-f32 pass reaches ~1e-12; the budget admits
 * approximate exp/rsqrt; the "extreme" case with logits of magnitude 100-1000 gets 1e-5 because the
 * f32 logit error eps*|logit| enters the exponent); f16 k/v 5e-4 (test-backend-ops' flash-attention
 * budget: admits f16 arithmetic), for the whole output and for each (row, head) alone. row_max: |m - m_ref| <= 1e-5 * B (f16: 1e-3 * B), B the largest
 * visible scale*sum|q k| + |mask| of the row, i.e. the f32 dot-product error bound scale. row_sum
 * and the unnormalised output are compared after rescaling by exp(m - m_ref) (the quantities
 * merging uses: l*e^m and o*e^m), so a row_max within tolerance does not count twice. argmax: the
 * returned key must be visible and within the row_max tolerance of the best logit (exactly the
 * lowest index in the constructed-ties case). Exact values: rows with no visible key give out 0,
 * row_sum 0, row_max -FLT_MAX, argmax -1; invisible probs are exactly 0.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "suites.h"

enum {
    A_QPOS = 1 << 0,     /* explicit q_pos */
    A_KPOS = 1 << 1,     /* explicit k_pos (non-contiguous, per head) */
    A_KVLEN = 1 << 2,    /* ragged kv_len per head (incl. 0 and n_kv) */
    A_ROWLEN = 1 << 3,   /* row_len per query row (incl. 0) */
    A_MASK = 1 << 4,     /* finite additive mask */
    A_MASKINF = 1 << 5,  /* mask with -INFINITY entries and one fully masked row */
    A_STATS = 1 << 6,    /* key_mass, probs of probe rows, argmax, row_max, row_sum */
    A_STATROWS = 1 << 7, /* key_mass over a subset of rows */
    A_ACCUM = 1 << 8,    /* key_mass_accumulate onto preloaded values */
    A_UNNORM = 1 << 9,   /* unnormalised output */
    A_EXTREME = 1 << 10, /* logits of magnitude 100..1000 */
    A_NANPAD = 1 << 11,  /* NaN in k/v rows that are not valid keys */
    A_TIES = 1 << 12,    /* exact argmax ties (duplicate keys) */
    A_QCH = 1 << 13,     /* q_channels: q has d_q = d + d/2 + 3 channels, kv head h's keys a random
                          * d of them (ThinK's pruned layout) */
    A_LSE = 1 << 14,     /* lse_extra: an external log-normaliser per (row, head) near the row's own
                          * log-sum-exp (-INFINITY for some rows, far above / below for others) */
};

typedef struct attn_case {
    const char *name;
    int n_q, H, Hkv, d, cap, n_kv; /* n_kv 0 = capacity (the default) */
    int causal, f16;
    unsigned flags;
    float scale; /* 0 = default 1/sqrt(d) */
    int dv;      /* head_dim of v and out (d_v); 0 = d (q and k have d = d_k) */
} attn_case;

static const attn_case cases[] = {
    {"decode", 1, 4, 4, 64, 100, 0, 1, 0, 0, 0, 0},
    {"prefill_gqa2", 13, 8, 4, 32, 40, 33, 1, 0, A_NANPAD, 0, 0},
    {"prefill_gqa4", 100, 4, 1, 64, 128, 100, 1, 0, A_NANPAD, 0, 0},
    {"bidir_gqa2", 33, 4, 2, 128, 129, 0, 0, 0, 0, 0, 0},
    {"odd_headdim_gqa3", 7, 3, 1, 13, 20, 19, 0, 0, A_NANPAD, 0, 0},
    {"more_queries_than_keys", 20, 2, 2, 16, 13, 0, 1, 0, A_STATS, 0, 0},
    {"positions", 13, 8, 2, 64, 50, 45, 1, 0, A_QPOS | A_KPOS | A_STATS | A_NANPAD, 0, 0},
    {"ragged", 13, 4, 4, 32, 40, 37, 0, 0, A_KVLEN | A_ROWLEN | A_STATS | A_NANPAD, 0, 0},
    {"mask", 13, 4, 2, 32, 33, 0, 0, 0, A_MASK | A_MASKINF | A_STATS, 0, 0},
    {"stats", 13, 8, 2, 64, 40, 37, 1, 0, A_STATS | A_NANPAD, 0, 0},
    {"stats_subset_accumulate", 33, 4, 1, 32, 50, 48, 0, 0, A_STATS | A_STATROWS | A_ACCUM | A_KVLEN | A_MASK, 0, 0},
    {"unnormalised", 13, 4, 2, 64, 33, 0, 1, 0, A_STATS | A_UNNORM, 0, 0},
    {"extreme_logits", 13, 4, 2, 64, 100, 0, 0, 0, A_EXTREME | A_STATS | A_UNNORM, 0, 0},
    {"argmax_ties", 5, 4, 2, 32, 20, 0, 0, 0, A_TIES | A_STATS, 0, 0},
    {"argmax_ties_long", 1, 4, 2, 32, 800, 0, 0, 0, A_TIES | A_STATS, 0, 0},
    {"everything", 33, 8, 2, 64, 70, 65, 1, 0,
     A_QPOS | A_KPOS | A_KVLEN | A_ROWLEN | A_MASK | A_MASKINF | A_STATS | A_STATROWS | A_ACCUM | A_NANPAD, 0.3f, 0},
    {"long_kv", 4, 8, 2, 128, 1100, 1027, 1, 0, A_STATS | A_NANPAD, 0, 0},
    {"long_decode", 1, 8, 2, 64, 4100, 4099, 1, 0, A_STATS | A_NANPAD | A_KVLEN, 0, 0},
    {"head_dim_256", 5, 2, 1, 256, 300, 0, 1, 0, A_STATS, 0, 0},
    {"prefill_long", 129, 4, 2, 64, 300, 257, 1, 0, A_STATS | A_STATROWS | A_NANPAD, 0, 0},
    {"f16_prefill_gqa2", 13, 8, 4, 32, 40, 33, 1, 1, A_NANPAD, 0, 0},
    {"f16_bidir", 33, 4, 2, 128, 129, 0, 0, 1, 0, 0, 0},
    {"f16_stats", 13, 8, 2, 64, 40, 37, 1, 1, A_STATS | A_NANPAD, 0, 0},
    {"f16_everything", 33, 8, 2, 64, 70, 65, 1, 1,
     A_QPOS | A_KPOS | A_KVLEN | A_ROWLEN | A_MASK | A_MASKINF | A_STATS | A_STATROWS | A_ACCUM | A_NANPAD, 0.3f, 0},
    {"f16_unnormalised_extreme", 13, 4, 2, 64, 100, 0, 0, 1, A_EXTREME | A_STATS | A_UNNORM, 0, 0},
    {"f16_long_decode", 1, 8, 2, 128, 2100, 2049, 1, 1, A_STATS | A_NANPAD, 0, 0},
    /* decoding shapes of GPU backends' split-key paths: odd key counts, head_dim 128, GQA 8/2 */
    {"decode_d128_gqa4", 1, 8, 2, 128, 4100, 4099, 1, 0, A_STATS | A_NANPAD, 0, 0},
    {"decode3_d128_gqa4", 3, 8, 2, 128, 4100, 4099, 1, 0, A_STATS | A_NANPAD | A_KVLEN, 0, 0},
    {"decode3_d128_everything", 3, 8, 2, 128, 4100, 4099, 1, 0,
     A_QPOS | A_KPOS | A_KVLEN | A_ROWLEN | A_MASK | A_MASKINF | A_STATS | A_STATROWS | A_ACCUM | A_NANPAD, 0, 0},
    /* enough query rows for one pass without split-K over 513 key tiles of 8 (Vulkan, head_dim 128):
     * lavapipe ends such long shader loops early, so its passes are split (ops_attention.c) */
    {"prefill_d128_long_kv", 128, 8, 8, 128, 4100, 4099, 1, 0, A_STATS | A_NANPAD, 0, 0},
    /* the CPU's decoding kernels: packed rows (queries x group heads) not a multiple of 4 (3, 6, 7),
     * head_dim not a multiple of 64 (16, 48, 80) */
    {"decode2_gqa3_d48", 2, 6, 2, 48, 301, 300, 1, 0, A_STATS | A_NANPAD, 0, 0},
    {"decode_gqa7_d80", 1, 7, 1, 80, 517, 0, 1, 0, A_STATS, 0, 0},
    {"decode3_mha_d16", 3, 2, 2, 16, 260, 257, 0, 1, A_STATS | A_MASK | A_NANPAD, 0, 0},
    /* d_k != d_v (q, k of head_dim d; v, out of dv): odd pairs, GQA, every statistic, the decoding
     * and prefill paths, split keys (long caches), f16 */
    {"dk24_dv40", 13, 4, 2, 24, 40, 37, 1, 0, A_STATS | A_NANPAD, 0, 40},
    {"dk72_dv64_gqa4", 33, 8, 2, 72, 70, 65, 1, 0,
     A_QPOS | A_KPOS | A_KVLEN | A_ROWLEN | A_MASK | A_MASKINF | A_STATS | A_STATROWS | A_ACCUM | A_NANPAD, 0.3f, 64},
    {"dk64_dv72_unnorm", 13, 4, 2, 64, 100, 0, 0, 0, A_STATS | A_UNNORM, 0, 72},
    {"dk40_dv24_decode_gqa3", 1, 6, 2, 40, 1100, 1027, 1, 0, A_STATS | A_NANPAD | A_KVLEN, 0, 24},
    {"dk128_dv64_decode3", 3, 8, 2, 128, 4100, 4099, 1, 0, A_STATS | A_NANPAD, 0, 64},
    {"dk64_dv128_prefill", 129, 4, 2, 64, 300, 257, 1, 0, A_STATS | A_STATROWS | A_NANPAD, 0, 128},
    {"dk16_dv48_prefill_gqa4", 100, 4, 1, 16, 128, 100, 1, 0, A_NANPAD, 0, 48},
    {"f16_dk24_dv40", 13, 8, 2, 24, 40, 37, 1, 1, A_STATS | A_NANPAD, 0, 40},
    {"f16_dk48_dv32_decode", 1, 8, 2, 48, 2100, 2049, 1, 1, A_STATS | A_NANPAD, 0, 32},
    /* head sizes not multiples of 16 under every SIMD variant (the ISA's row kernels for any size; the
     * panel path with n_q >= 4 and n_q*G >= 8, P.V's masked / 8-wide tails: d_v % 16 of 8, 4, 12, 5, 9;
     * with fewer rows the decoding kernels' masked tails (d_k, d_v >= 16: 56, 20 / 36, odd row counts)
     * or, narrower, cblas products with the ISA's row kernels): stories260K's 8 heads of 8 over 4 kv
     * heads, odd d_k != d_v, every statistic, split keys, f16 */
    {"d8_gqa2_bidir_lse", 20, 8, 4, 8, 40, 37, 0, 0, A_LSE | A_STATS | A_NANPAD, 0, 0},
    {"d8_gqa2_causal_long", 13, 8, 4, 8, 300, 257, 1, 0, A_STATS | A_STATROWS | A_NANPAD, 0, 0},
    {"d8_argmax_ties", 8, 4, 2, 8, 20, 0, 0, 0, A_TIES | A_STATS, 0, 0},
    {"dk12_dv8_gqa2", 9, 4, 2, 12, 50, 45, 1, 0, A_STATS | A_MASK | A_KVLEN, 0, 8},
    {"dk7_dv5_gqa3", 8, 6, 2, 7, 70, 65, 1, 0, A_QPOS | A_KPOS | A_LSE | A_STATS | A_NANPAD, 0, 5},
    {"dk40_dv24_everything", 33, 8, 2, 40, 70, 65, 1, 0,
     A_QPOS | A_KPOS | A_KVLEN | A_ROWLEN | A_MASK | A_MASKINF | A_STATS | A_STATROWS | A_ACCUM | A_NANPAD, 0.3f, 24},
    {"dk20_dv60_prefill", 40, 4, 2, 20, 60, 57, 1, 0, A_STATS | A_UNNORM, 0, 60},
    {"dk9_dv57_mha", 5, 2, 2, 9, 40, 0, 0, 0, A_STATS | A_EXTREME, 0, 57},
    {"f16_d8_gqa2_long", 20, 8, 4, 8, 300, 257, 0, 1, A_STATS | A_NANPAD, 0, 0},
    {"f16_dk12_dv20_lse", 13, 4, 2, 12, 40, 37, 1, 1, A_STATS | A_LSE, 0, 20},
    {"decode_d8_gqa2_split", 1, 8, 4, 8, 1100, 1027, 1, 0, A_STATS | A_NANPAD | A_KVLEN, 0, 0},
    {"decode3_dk12_dv20_lse", 3, 4, 2, 12, 300, 257, 1, 0, A_STATS | A_LSE | A_MASK, 0, 20},
    {"decode3_dk56_dv56_gqa2", 3, 6, 3, 56, 200, 0, 1, 0, A_STATS, 0, 56},
    {"decode_dk40_dv9_gqa3", 1, 6, 2, 40, 301, 300, 1, 1, A_STATS | A_NANPAD, 0, 9},
    {"decode3_dk20_dv36_gqa3", 3, 3, 1, 20, 260, 257, 1, 0, A_STATS | A_LSE | A_NANPAD, 0, 36},
    /* q_channels (pruned keys): d_k channels of a wider q, per kv head; with d_v the full width */
    {"qch_dk21_dv40_gqa2", 13, 4, 2, 21, 40, 37, 1, 0, A_QCH | A_STATS | A_NANPAD, 0, 40},
    {"qch_dk64_dv96_decode_gqa4", 1, 8, 2, 64, 1100, 1027, 1, 0, A_QCH | A_STATS | A_NANPAD | A_KVLEN, 0, 96},
    {"qch_dk32_everything", 33, 8, 2, 32, 70, 65, 1, 0,
     A_QCH | A_QPOS | A_KPOS | A_KVLEN | A_ROWLEN | A_MASK | A_MASKINF | A_STATS | A_STATROWS | A_ACCUM | A_NANPAD, 0.3f, 48},
    {"f16_qch_dk48_dv64_prefill", 129, 4, 2, 48, 300, 257, 1, 1, A_QCH | A_STATS | A_STATROWS | A_NANPAD, 0, 64},
    /* lse_extra (an external normaliser: the second half of a two-call attention, ThinK's segments):
     * decode and prefill paths, split keys, GQA, odd sizes, q_channels, f16, every statistic */
    {"lse_decode_gqa4", 1, 8, 2, 64, 1100, 1027, 1, 0, A_LSE | A_STATS | A_NANPAD | A_KVLEN, 0, 0},
    {"lse_odd_dk13_dv21_gqa3", 7, 3, 1, 13, 20, 19, 0, 0, A_LSE | A_STATS | A_NANPAD, 0, 21},
    {"lse_everything", 33, 8, 2, 64, 70, 65, 1, 0,
     A_LSE | A_QPOS | A_KPOS | A_KVLEN | A_ROWLEN | A_MASK | A_MASKINF | A_STATS | A_STATROWS | A_ACCUM | A_NANPAD, 0.3f, 0},
    {"lse_qch_dk21_dv40_decode3", 3, 4, 2, 21, 300, 257, 1, 0, A_LSE | A_QCH | A_STATS | A_NANPAD | A_KVLEN, 0, 40},
    {"lse_prefill_long", 129, 4, 2, 64, 300, 257, 1, 0, A_LSE | A_STATS | A_STATROWS | A_NANPAD, 0, 0},
    {"f16_lse_decode_d128", 1, 8, 2, 128, 4100, 4099, 1, 1, A_LSE | A_STATS | A_NANPAD, 0, 0},
    {"f16_lse_qch_dk48_dv64_prefill", 40, 4, 2, 48, 60, 57, 1, 1, A_LSE | A_QCH | A_STATS | A_ACCUM, 0, 64},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void flags_str(unsigned f, char *buf, size_t n) {
    static const char *names[] = {"qpos", "kpos", "kvlen", "rowlen", "mask", "maskinf", "stats",
                                  "statrows", "accum", "unnorm", "extreme", "nanpad", "ties", "qch", "lse"};
    buf[0] = '\0';
    for (int i = 0; i < 15; i++)
        if (f & (1u << i)) {
            strncat(buf, buf[0] ? "," : "", n - strlen(buf) - 1);
            strncat(buf, names[i], n - strlen(buf) - 1);
        }
    if (!buf[0]) snprintf(buf, n, "none");
}

static void attention_run(int _i) {
    (void)_i;
    const attn_case *c = &cases[_i];
    char fl[160];
    flags_str(c->flags, fl, sizeof fl);
    t_case("attention %s n_q=%d n_heads=%d n_kv_heads=%d head_dim=%d head_dim_v=%d capacity=%d n_kv=%d causal=%d "
           "kv=%s scale=%g flags=%s",
           c->name, c->n_q, c->H, c->Hkv, c->d, c->dv ? c->dv : c->d, c->cap, c->n_kv, c->causal, c->f16 ? "f16" : "f32",
           (double)c->scale, fl);
    const int64_t nq = c->n_q, H = c->H, Hkv = c->Hkv, d = c->d, dv = c->dv ? c->dv : c->d, cap = c->cap, G = H / Hkv;
    const int64_t nkv = c->n_kv ? c->n_kv : c->cap;
    const unsigned f = c->flags;
    const kvs_dtype kdt = c->f16 ? KVS_F16 : KVS_F32;
    const int64_t dq = (f & A_QCH) ? d + d / 2 + 3 : d; /* q's head_dim */

    /* ---- inputs ---- */
    float *q = t_alloc(4 * (size_t)(nq * H * dq));
    int32_t *qch = NULL;
    if (f & A_QCH) { /* kv head h: the first d of a random permutation of q's channels */
        qch = t_alloc(4 * (size_t)(Hkv * d));
        int32_t *perm = t_alloc(4 * (size_t)dq);
        for (int64_t h = 0; h < Hkv; h++) {
            for (int64_t t = 0; t < dq; t++) perm[t] = (int32_t)t;
            t_shuffle_i32(perm, dq);
            memcpy(qch + h * d, perm, 4 * (size_t)d);
        }
    }
    float *k = t_alloc(4 * (size_t)(Hkv * cap * d)), *v = t_alloc(4 * (size_t)(Hkv * cap * dv));
    double sq = (f & A_EXTREME) ? 15.0 : 1.0;
    t_fill_normal(q, nq * H * dq, sq);
    t_fill_normal(k, Hkv * cap * d, sq);
    t_fill_normal(v, Hkv * cap * dv, 1.0);
    int32_t *qpos = NULL, *kpos = NULL, *kvlen = NULL, *rowlen = NULL;
    float *mask = NULL;
    if (f & A_KPOS) {
        /* per head: increasing positions with gaps (as after eviction), then a local shuffle */
        kpos = t_alloc(4 * (size_t)(Hkv * cap));
        for (int64_t h = 0; h < Hkv; h++) {
            int32_t p = (int32_t)t_rand_int(0, 5);
            for (int64_t j = 0; j < cap; j++) {
                kpos[h * cap + j] = p;
                p += (int32_t)t_rand_int(1, 4);
            }
            for (int64_t j = 0; j + 1 < cap; j += 5) {
                int32_t tmp = kpos[h * cap + j];
                kpos[h * cap + j] = kpos[h * cap + j + 1];
                kpos[h * cap + j + 1] = tmp;
            }
        }
    }
    if (f & A_QPOS) {
        int32_t hi = kpos ? kpos[cap - 1] + 3 : (int32_t)nkv + 2;
        qpos = t_alloc(4 * (size_t)nq);
        for (int64_t i = 0; i < nq; i++) qpos[i] = (int32_t)t_rand_int(-2, hi);
        qpos[0] = -1; /* sees no key */
        if (nq > 1) qpos[nq - 1] = hi; /* sees every valid key */
    }
    if (f & A_KVLEN) {
        kvlen = t_alloc(4 * (size_t)Hkv);
        for (int64_t h = 0; h < Hkv; h++) kvlen[h] = (int32_t)t_rand_int(1, nkv);
        kvlen[0] = (int32_t)nkv;
        if (Hkv > 1) kvlen[Hkv - 1] = 0; /* an empty head */
    }
    if (f & A_ROWLEN) {
        rowlen = t_alloc(4 * (size_t)nq);
        for (int64_t i = 0; i < nq; i++) rowlen[i] = (int32_t)t_rand_int(0, nkv);
        rowlen[0] = 0;
        if (nq > 1) rowlen[1] = (int32_t)nkv;
    }
    if (f & (A_MASK | A_MASKINF)) {
        mask = t_alloc(4 * (size_t)(nq * nkv));
        for (int64_t i = 0; i < nq * nkv; i++) {
            mask[i] = (f & A_MASK) ? (float)(2.0 * t_rand_normal()) : 0.0f;
            if ((f & A_MASKINF) && t_rand_int(0, 4) == 0) mask[i] = -INFINITY;
        }
        if ((f & A_MASKINF) && nq > 2)
            for (int64_t j = 0; j < nkv; j++) mask[2 * nkv + j] = -INFINITY; /* fully masked row */
    }
    if (f & A_TIES) {
        /* every query of kv head h equals u_h; keys 3 and 11 (and, in long caches, the last valid
         * key: another key tile or split) are all 2*u_h: exact tie, argmax 3 */
        for (int64_t h = 0; h < Hkv; h++) {
            float *u = q + h * G * d; /* query row 0, head h*G */
            for (int64_t i = 0; i < nq; i++)
                for (int64_t g = h * G; g < (h + 1) * G; g++) memmove(q + (i * H + g) * d, u, 4 * (size_t)d);
            for (int64_t t = 0; t < d; t++) k[(h * cap + 3) * d + t] = k[(h * cap + 11) * d + t] = 2.0f * u[t];
            if (nkv > 300)
                for (int64_t t = 0; t < d; t++) k[(h * cap + nkv - 1) * d + t] = 2.0f * u[t];
        }
    }
    if (f & A_NANPAD) {
        for (int64_t h = 0; h < Hkv; h++) {
            int64_t valid = kvlen ? kvlen[h] : nkv;
            for (int64_t j = valid; j < cap; j++) {
                for (int64_t t = 0; t < d; t++) k[(h * cap + j) * d + t] = NAN;
                for (int64_t t = 0; t < dv; t++) v[(h * cap + j) * dv + t] = NAN;
            }
        }
    }
    int32_t *stat_rows = NULL, *probe_rows = NULL;
    int64_t n_stat = 0, n_probe = 0;
    if ((f & A_STATS) && (f & A_STATROWS)) {
        int32_t *perm = t_alloc(4 * (size_t)nq);
        for (int64_t i = 0; i < nq; i++) perm[i] = (int32_t)i;
        t_shuffle_i32(perm, nq);
        n_stat = nq / 2 > 0 ? nq / 2 : 1;
        stat_rows = perm;
    }
    if (f & A_STATS) {
        n_probe = nq >= 3 ? 3 : nq;
        probe_rows = t_alloc(4 * (size_t)n_probe);
        probe_rows[0] = (int32_t)(nq - 1);
        if (n_probe > 1) probe_rows[1] = 0;
        if (n_probe > 2) probe_rows[2] = (int32_t)(nq / 2);
    }
    float *lse = NULL;
    if (f & A_LSE) { /* around the row's own log-sum-exp (~ log n_kv on these logits), some rows far off */
        lse = t_alloc(4 * (size_t)(nq * H));
        for (int64_t i = 0; i < nq * H; i++) {
            int64_t kind = t_rand_int(0, 5);
            lse[i] = kind == 0 ? -INFINITY : kind == 1 ? 40.0f : kind == 2 ? -30.0f
                                                           : (float)(log((double)nkv) + 2.0 * t_rand_normal());
        }
    }
    float *km0 = NULL;
    if (f & A_STATS) {
        km0 = t_alloc(4 * (size_t)(Hkv * cap));
        t_fill_uniform(km0, Hkv * cap, 0.0, 1.0);
    }

    /* ---- device tensors ---- */
    tt *qt = t_new3(KVS_F32, dq, H, nq), *kt = t_new3(kdt, d, cap, Hkv), *vt = t_new3(kdt, dv, cap, Hkv);
    tt *ot = t_new3(KVS_F32, dv, H, nq);
    t_upload_f32(qt, q);
    t_upload_as(kt, k);
    t_upload_as(vt, v);
    kvs_attention_params p = kvs_attention_params_default();
    p.scale = c->scale;
    p.causal = c->causal;
    p.n_kv = c->n_kv;
    p.unnormalised = (f & A_UNNORM) != 0;
    p.q_channels = qch;
    tt *qpt = NULL, *kpt = NULL, *klt = NULL, *rlt = NULL, *mt = NULL, *srt = NULL, *prt = NULL;
    tt *kmt = NULL, *pbt = NULL, *amt = NULL, *rmt = NULL, *rst = NULL, *lst = NULL;
    if (lse) { lst = t_new2(KVS_F32, H, nq); t_upload_f32(lst, lse); p.lse_extra = lst->t; }
    if (qpos) { qpt = t_new1(KVS_I32, nq); t_upload_i32(qpt, qpos); p.q_pos = qpt->t; }
    if (kpos) { kpt = t_new2(KVS_I32, cap, Hkv); t_upload_i32(kpt, kpos); p.k_pos = kpt->t; }
    if (kvlen) { klt = t_new1(KVS_I32, Hkv); t_upload_i32(klt, kvlen); p.kv_len = klt->t; }
    if (rowlen) { rlt = t_new1(KVS_I32, nq); t_upload_i32(rlt, rowlen); p.row_len = rlt->t; }
    if (mask) { mt = t_new2(KVS_F32, nkv, nq); t_upload_f32(mt, mask); p.mask = mt->t; }
    if (f & A_STATS) {
        if (stat_rows) { srt = t_new1(KVS_I32, n_stat); t_upload_i32(srt, stat_rows); p.stat_rows = srt->t; }
        prt = t_new1(KVS_I32, n_probe);
        t_upload_i32(prt, probe_rows);
        p.probe_rows = prt->t;
        kmt = t_new2(KVS_F32, cap, Hkv);
        if (f & A_ACCUM) t_upload_f32(kmt, km0);
        p.key_mass = kmt->t;
        p.key_mass_accumulate = (f & A_ACCUM) != 0;
        pbt = t_new3(KVS_F32, cap, H, n_probe);
        p.probs = pbt->t;
        amt = t_new2(KVS_I32, H, nq);
        p.argmax = amt->t;
        rmt = t_new2(KVS_F32, H, nq);
        p.row_max = rmt->t;
        rst = t_new2(KVS_F32, H, nq);
        p.row_sum = rst->t;
    }
    unsigned char *km_before = NULL;
    if (kmt) {
        km_before = t_alloc(kmt->nbytes);
        memcpy(km_before, kmt->shadow + kmt->guard, kmt->nbytes);
    }

    /* ---- reference ---- */
    ref_attn r;
    memset(&r, 0, sizeof r);
    r.n_q = nq; r.n_heads = H; r.n_kv_heads = Hkv; r.head_dim = d; r.head_dim_v = dv; r.capacity = cap; r.n_kv = nkv;
    r.scale = c->scale > 0 ? (double)c->scale : (double)(float)(1.0 / sqrt((double)dq));
    r.causal = c->causal;
    r.unnormalised = p.unnormalised;
    double *qd = t_alloc(sizeof(double) * (size_t)(nq * H * d));
    double *kd = t_alloc(sizeof(double) * (size_t)(Hkv * cap * d)), *vd = t_alloc(sizeof(double) * (size_t)(Hkv * cap * dv));
    for (int64_t i = 0; i < nq * H * d; i++) /* the reference reads the gathered query */
        qd[i] = qch ? q[(i / d) * dq + qch[((i / d) % H / G) * d + i % d]] : q[i];
    for (int64_t i = 0; i < Hkv * cap * d; i++) kd[i] = ref_round_to(kdt, k[i]);
    for (int64_t i = 0; i < Hkv * cap * dv; i++) vd[i] = ref_round_to(kdt, v[i]);
    r.q = qd; r.k = kd; r.v = vd;
    r.q_pos = qpos; r.k_pos = kpos; r.kv_len = kvlen; r.row_len = rowlen;
    double *maskd = NULL;
    if (mask) {
        maskd = t_alloc(sizeof(double) * (size_t)(nq * nkv));
        for (int64_t i = 0; i < nq * nkv; i++) maskd[i] = mask[i];
    }
    r.mask = maskd;
    r.stat_rows = stat_rows; r.n_stat = n_stat;
    r.probe_rows = probe_rows; r.n_probe = n_probe;
    double *lsed = NULL;
    if (lse) {
        lsed = t_alloc(sizeof(double) * (size_t)(nq * H));
        for (int64_t i = 0; i < nq * H; i++) lsed[i] = lse[i];
    }
    r.lse_extra = lsed;
    r.out = t_alloc(sizeof(double) * (size_t)(nq * H * dv));
    r.logits = t_alloc(sizeof(double) * (size_t)(nq * H * nkv));
    r.bound = t_alloc(sizeof(double) * (size_t)(nq * H));
    r.row_max = t_alloc(sizeof(double) * (size_t)(nq * H));
    r.row_sum = t_alloc(sizeof(double) * (size_t)(nq * H));
    r.argmax = t_alloc(4 * (size_t)(nq * H));
    if (f & A_STATS) {
        r.key_mass = t_alloc(sizeof(double) * (size_t)(Hkv * cap));
        for (int64_t i = 0; i < Hkv * cap; i++) r.key_mass[i] = (f & A_ACCUM) ? km0[i] : 0.0;
        r.probs = t_alloc(sizeof(double) * (size_t)(n_probe * H * cap));
    }
    ref_attention(&r);

    /* ---- run ---- */
    if (t_op(kvs_attention(t_dev(), qt->t, kt->t, vt->t, ot->t, &p))) return;

    const double tol = c->f16 ? 5e-4 : (f & A_EXTREME) ? 1e-5 : 1e-6;
    const double mtol = c->f16 ? 1e-3 : 1e-5;
    float *out = t_alloc(4 * (size_t)(nq * H * dv));
    t_download(ot, out);
    float *rm = NULL;
    if (rmt) {
        rm = t_alloc(4 * (size_t)(nq * H));
        t_download(rmt, rm);
        for (int64_t i = 0; i < nq * H; i++) {
            if (r.argmax[i] < 0) {
                T_ASSERT(rm[i] == -FLT_MAX, "row_max[row %lld head %lld] = %g, want -FLT_MAX (no visible key)",
                         (long long)(i / H), (long long)(i % H), (double)rm[i]);
            } else {
                double err = fabs((double)rm[i] - r.row_max[i]);
                T_ASSERT(err <= mtol * r.bound[i] + 1e-30, "row_max[row %lld head %lld] = %.9g, want %.9g (err %.3e > %.1e*%g)",
                         (long long)(i / H), (long long)(i % H), (double)rm[i], r.row_max[i], err, mtol, r.bound[i]);
            }
        }
    }
    /* out: rows with no visible key exactly 0; unnormalised rescaled by exp(m - m_ref) */
    for (int64_t i = 0; i < nq * H; i++) {
        if (r.argmax[i] < 0) {
            for (int64_t t = 0; t < dv; t++)
                T_ASSERT(out[i * dv + t] == 0.0f, "out[row %lld head %lld][%lld] = %g, want 0 (no visible key)",
                         (long long)(i / H), (long long)(i % H), (long long)t, (double)out[i * dv + t]);
        } else if (p.unnormalised) {
            ck_assert(rm != NULL);
            double sc = exp((double)rm[i] - r.row_max[i]);
            for (int64_t t = 0; t < dv; t++) out[i * dv + t] = (float)(out[i * dv + t] * sc);
        }
    }
    t_check_nmse(p.unnormalised ? "out (unnormalised, rescaled)" : "out", out, r.out, nq * H * dv, tol);
    /* per (row, head) as well: an error confined to one row must not be diluted by the others */
    for (int64_t i = 0; i < nq * H; i++) {
        if (r.argmax[i] < 0) continue;
        char what[64];
        snprintf(what, sizeof what, "out[row %lld head %lld]", (long long)(i / H), (long long)(i % H));
        t_check_nmse(what, out + i * dv, r.out + i * dv, dv, tol);
    }

    if (f & A_STATS) {
        /* row_sum (rescaled like the unnormalised output) */
        float *rs = t_alloc(4 * (size_t)(nq * H));
        t_download(rst, rs);
        for (int64_t i = 0; i < nq * H; i++) {
            if (r.argmax[i] < 0) T_ASSERT(rs[i] == 0.0f, "row_sum[%lld] = %g, want 0 (no visible key)", (long long)i, (double)rs[i]);
            else rs[i] = (float)(rs[i] * exp((double)rm[i] - r.row_max[i]));
        }
        t_check_nmse("row_sum (rescaled)", rs, r.row_sum, nq * H, tol);

        /* argmax */
        int32_t *am = t_alloc(4 * (size_t)(nq * H));
        t_download(amt, am);
        for (int64_t i = 0; i < nq * H; i++) {
            int64_t row = i / H, g = i % H;
            if (r.argmax[i] < 0) {
                T_ASSERT(am[i] == -1, "argmax[row %lld head %lld] = %d, want -1 (no visible key)", (long long)row,
                         (long long)g, am[i]);
                continue;
            }
            if (f & A_TIES) {
                T_ASSERT(am[i] == r.argmax[i], "argmax[row %lld head %lld] = %d, want %d (exact tie: lowest index)",
                         (long long)row, (long long)g, am[i], r.argmax[i]);
                continue;
            }
            T_ASSERT(am[i] >= 0 && am[i] < nkv, "argmax[row %lld head %lld] = %d out of [0, %lld)", (long long)row,
                     (long long)g, am[i], (long long)nkv);
            double lg = r.logits[i * nkv + am[i]];
            T_ASSERT(lg != -INFINITY, "argmax[row %lld head %lld] = %d is not a visible key", (long long)row, (long long)g, am[i]);
            T_ASSERT(lg >= r.row_max[i] - mtol * r.bound[i],
                     "argmax[row %lld head %lld] = %d (logit %.9g), best is %d (logit %.9g)", (long long)row,
                     (long long)g, am[i], lg, r.argmax[i], r.row_max[i]);
        }

        /* probs: invisible exactly 0, rest nmse */
        float *pb = t_alloc(4 * (size_t)(n_probe * H * cap));
        t_download(pbt, pb);
        for (int64_t i = 0; i < n_probe * H * cap; i++)
            if (r.probs[i] == 0.0)
                T_ASSERT(pb[i] == 0.0f, "probs[probe %lld head %lld key %lld] = %g, want 0 (invisible/invalid key)",
                         (long long)(i / (H * cap)), (long long)((i / cap) % H), (long long)(i % cap), (double)pb[i]);
        t_check_nmse("probs", pb, r.probs, n_probe * H * cap, tol);

        /* key_mass: valid entries vs reference, the rest untouched */
        unsigned char *kmb = t_alloc(kmt->nbytes);
        t_download(kmt, kmb);
        float *km = (float *)kmb;
        float *kmv = t_alloc(4 * (size_t)(Hkv * cap));
        double *kmr = t_alloc(sizeof(double) * (size_t)(Hkv * cap));
        int64_t nv = 0;
        for (int64_t h = 0; h < Hkv; h++) {
            int64_t valid = ref_attn_valid(&r, h);
            for (int64_t j = 0; j < cap; j++) {
                if (j < valid) {
                    kmv[nv] = km[h * cap + j];
                    kmr[nv++] = r.key_mass[h * cap + j];
                } else {
                    T_ASSERT(memcmp(kmb + 4 * (h * cap + j), km_before + 4 * (h * cap + j), 4) == 0,
                             "key_mass[head %lld][%lld] beyond the valid length %lld was written (%g)", (long long)h,
                             (long long)j, (long long)valid, (double)km[h * cap + j]);
                }
            }
        }
        t_check_nmse("key_mass", kmv, kmr, nv, tol);
        if (srt) t_assert_unchanged(srt, "stat_rows");
        t_assert_unchanged(prt, "probe_rows");
    }
    t_assert_unchanged(qt, "q");
    t_assert_unchanged(kt, "k");
    t_assert_unchanged(vt, "v");
    if (mt) t_assert_unchanged(mt, "mask");
    if (lst) t_assert_unchanged(lst, "lse_extra");
}

START_TEST(test_attention) {
    /* the 8-bit query variants (avx512-vnni, avx2-q8) differ from avx512 / avx2 only for q8_0 / q4_0
     * caches: suite attention-kvq checks them */
    if (strstr(t_variant, "attention:avx512-vnni") || strstr(t_variant, "attention:avx2-q8")) return;
    char tname[80];
    snprintf(tname, sizeof tname, "attention_%s", cases[_i].name);
    t_begin(tname);
    attention_run(_i);
    t_end();
}
END_TEST

/* Two consecutive calls with key_mass_accumulate = 1 over disjoint row sets equal one call over all
 * rows (the H2O running sum), and the outputs of a call do not depend on earlier calls. */
static void attention_accumulate_split_run(int _i) {
    (void)_i;
    const int64_t nq = 12, H = 4, Hkv = 2, d = 32, cap = 24;
    t_case("attention accumulate_split n_q=%lld n_heads=%lld n_kv_heads=%lld head_dim=%lld capacity=%lld causal=1",
           (long long)nq, (long long)H, (long long)Hkv, (long long)d, (long long)cap);
    float *q = t_alloc(4 * (size_t)(nq * H * d)), *k = t_alloc(4 * (size_t)(Hkv * cap * d)),
          *v = t_alloc(4 * (size_t)(Hkv * cap * d));
    t_fill_normal(q, nq * H * d, 1);
    t_fill_normal(k, Hkv * cap * d, 1);
    t_fill_normal(v, Hkv * cap * d, 1);
    tt *qt = t_new3(KVS_F32, d, H, nq), *kt = t_new3(KVS_F32, d, cap, Hkv), *vt = t_new3(KVS_F32, d, cap, Hkv);
    tt *ot = t_new3(KVS_F32, d, H, nq), *km = t_new2(KVS_F32, cap, Hkv), *km_all = t_new2(KVS_F32, cap, Hkv);
    tt *s1 = t_new1(KVS_I32, nq / 2), *s2 = t_new1(KVS_I32, nq - nq / 2);
    t_upload_f32(qt, q);
    t_upload_f32(kt, k);
    t_upload_f32(vt, v);
    int32_t rows[12];
    for (int i = 0; i < 12; i++) rows[i] = i;
    t_shuffle_i32(rows, 12);
    t_upload_i32(s1, rows);
    t_upload_i32(s2, rows + nq / 2);
    float *zero = t_alloc(4 * (size_t)(Hkv * cap));
    t_upload_f32(km, zero);
    kvs_attention_params p = kvs_attention_params_default();
    p.causal = 1;
    p.key_mass = km_all->t;
    if (t_op(kvs_attention(t_dev(), qt->t, kt->t, vt->t, ot->t, &p))) return;
    p.key_mass = km->t;
    p.key_mass_accumulate = 1;
    p.stat_rows = s1->t;
    if (t_op(kvs_attention(t_dev(), qt->t, kt->t, vt->t, ot->t, &p))) return;
    p.stat_rows = s2->t;
    if (t_op(kvs_attention(t_dev(), qt->t, kt->t, vt->t, ot->t, &p))) return;
    float *a = t_alloc(4 * (size_t)(Hkv * cap)), *b = t_alloc(4 * (size_t)(Hkv * cap));
    double *bd = t_alloc(sizeof(double) * (size_t)(Hkv * cap));
    t_download(km, a);
    t_download(km_all, b);
    for (int64_t i = 0; i < Hkv * cap; i++) bd[i] = b[i];
    t_check_nmse("key_mass (two accumulated halves vs one call)", a, bd, Hkv * cap, 1e-10);
}

START_TEST(test_attention_accumulate_split) {
    t_begin("attention_accumulate_split");
    attention_accumulate_split_run(_i);
    t_end();
}
END_TEST

/* One device through every case. The GPU backends run it with the automatic choice only (which
 * takes each of their kernels: attn_dec, attn_main, key splits), their cases per forced variant once
 * each in the loop above; the CPU, whose attention keeps scratch between calls per variant, under
 * every variant. */
static int attention_seq_applies(void) {
    return t_backend() == KVS_BACKEND_CPU || !t_variant[0] || strcmp(t_variant, "auto") == 0;
}
static void attention_seq_run(int ci) {
    if (attention_seq_applies()) attention_run(ci);
}
static void attention_seq_accumulate_run(int ci) {
    if (attention_seq_applies()) attention_accumulate_split_run(ci);
}
static const t_seq test_attention_sequence_seq[] = {{attention_seq_run, N_CASES}, {attention_seq_accumulate_run, 1}};
T_SEQUENCE_TEST(test_attention_sequence, test_attention_sequence_seq)

/* The support query agrees with the op: for a head_dim past what GPU kernels take in shared/local
 * memory (OpenCL: > 512; Vulkan: its shared-memory tiles), the query and the real call give the
 * same answer, an unsupported answer carries the device's reason, and a supported call runs. Not a
 * reference comparison (the cases above are): this exercises the refusal path of supports(). */
START_TEST(test_attention_support_query) {
    kvs_device *dev = t_begin("attention_support_query");
    const int64_t hd = 2048, nkv = 4;
    t_case("support query vs call, head_dim %lld", (long long)hd);
    tt *qt = t_new3(KVS_F32, hd, 1, 1), *kt = t_new3(KVS_F32, hd, nkv, 1), *vt = t_new3(KVS_F32, hd, nkv, 1);
    tt *ot = t_new3(KVS_F32, hd, 1, 1);
    float *h = t_alloc((size_t)(hd * nkv) * sizeof(float));
    t_fill_uniform(h, hd * nkv, -1.0, 1.0);
    t_upload_f32(qt, h);
    t_upload_f32(kt, h);
    t_upload_f32(vt, h);
    kvs_attention_params p = kvs_attention_params_default();
    ck_assert_int_eq(kvs_device_set_query(dev, 1), KVS_OK);
    kvs_status q = kvs_attention(dev, qt->t, kt->t, vt->t, ot->t, &p);
    ck_assert_int_eq(kvs_device_set_query(dev, 0), KVS_OK);
    T_ASSERT(q == KVS_OK || q == KVS_ERR_UNSUPPORTED, "query: %s: %s", kvs_status_name(q), kvs_last_error());
    if (q == KVS_ERR_UNSUPPORTED) T_ASSERT(strstr(kvs_last_error(), "head_dim") != NULL, "reason: %s", kvs_last_error());
    kvs_status s = kvs_attention(dev, qt->t, kt->t, vt->t, ot->t, &p);
    T_ASSERT(s == q, "real call %s (%s) but query %s", kvs_status_name(s), kvs_last_error(), kvs_status_name(q));
    if (s == KVS_OK) t_download(ot, NULL);
    t_end();
}
END_TEST

/* The anchor of ThinK's pruned storage: attention over keys that store only the kept channels (k of
 * d_k channels, q_channels naming them per kv head) equals attention over full-width keys whose
 * pruned channels hold 0 (the zeroed channels add exactly 0 to q.k), for out and every statistic,
 * on every backend and variant (to rounding: nmse 1e-10; argmax equal). */
START_TEST(test_attention_pruned_anchor) {
    t_begin("attention_pruned_anchor");
    const int64_t nq = 7, H = 6, Hkv = 2, dq = 40, dk = 24, cap = 50, nkv = 47, G = H / Hkv;
    t_case("pruned keys (d_k %lld of %lld, q_channels) vs zero-in-place, n_q %lld, GQA %lld, every statistic",
           (long long)dk, (long long)dq, (long long)nq, (long long)G);
    float *q = t_alloc(4 * (size_t)(nq * H * dq)), *kf = t_alloc(4 * (size_t)(Hkv * cap * dq));
    float *kp = t_alloc(4 * (size_t)(Hkv * cap * dk)), *v = t_alloc(4 * (size_t)(Hkv * cap * dq));
    t_fill_normal(q, nq * H * dq, 1.0);
    t_fill_normal(kf, Hkv * cap * dq, 1.0);
    t_fill_normal(v, Hkv * cap * dq, 1.0);
    int32_t qch[2 * 24], perm[40];
    for (int64_t h = 0; h < Hkv; h++) { /* the kept channels, ascending (as ThinK keeps them) */
        for (int t = 0; t < dq; t++) perm[t] = t;
        t_shuffle_i32(perm, dq);
        uint8_t kept[40] = {0};
        for (int64_t c = 0; c < dk; c++) kept[perm[c]] = 1;
        int64_t n = 0;
        for (int t = 0; t < dq; t++)
            if (kept[t]) qch[h * dk + n++] = t;
        for (int64_t j = 0; j < cap; j++)
            for (int t = 0; t < dq; t++)
                if (!kept[t]) kf[(h * cap + j) * dq + t] = 0.0f;
        for (int64_t j = 0; j < cap; j++)
            for (int64_t c = 0; c < dk; c++) kp[(h * cap + j) * dk + c] = kf[(h * cap + j) * dq + qch[h * dk + c]];
    }
    tt *qt = t_new3(KVS_F32, dq, H, nq), *kft = t_new3(KVS_F32, dq, cap, Hkv), *kpt = t_new3(KVS_F32, dk, cap, Hkv);
    tt *vt = t_new3(KVS_F32, dq, cap, Hkv);
    t_upload_f32(qt, q);
    t_upload_f32(kft, kf);
    t_upload_f32(kpt, kp);
    t_upload_f32(vt, v);
    int32_t probe[2] = {(int32_t)(nq - 1), 2};
    tt *prt = t_new1(KVS_I32, 2);
    t_upload_i32(prt, probe);
    float *res[2][5];
    int32_t *am[2];
    for (int w = 0; w < 2; w++) {
        tt *ot = t_new3(KVS_F32, dq, H, nq), *kmt = t_new2(KVS_F32, cap, Hkv), *pbt = t_new3(KVS_F32, cap, H, 2);
        tt *amt = t_new2(KVS_I32, H, nq), *rmt = t_new2(KVS_F32, H, nq), *rst = t_new2(KVS_F32, H, nq);
        kvs_attention_params p = kvs_attention_params_default();
        p.causal = 1;
        p.n_kv = nkv;
        p.key_mass = kmt->t;
        p.probe_rows = prt->t;
        p.probs = pbt->t;
        p.argmax = amt->t;
        p.row_max = rmt->t;
        p.row_sum = rst->t;
        p.q_channels = w ? qch : NULL;
        if (t_op(kvs_attention(t_dev(), qt->t, (w ? kpt : kft)->t, vt->t, ot->t, &p))) return;
        const int64_t n[5] = {nq * H * dq, Hkv * cap, 2 * H * cap, nq * H, nq * H};
        tt *src[5] = {ot, kmt, pbt, rmt, rst};
        for (int i = 0; i < 5; i++) {
            res[w][i] = t_alloc(4 * (size_t)n[i]);
            t_download(src[i], res[w][i]);
        }
        am[w] = t_alloc(4 * (size_t)(nq * H));
        t_download(amt, am[w]);
    }
    static const char *what[5] = {"out", "key_mass", "probs", "row_max", "row_sum"};
    const int64_t n[5] = {nq * H * dq, Hkv * nkv, 2 * H * cap, nq * H, nq * H};
    for (int i = 0; i < 5; i++) {
        double *ref = t_alloc(sizeof(double) * (size_t)n[i]);
        float *got = res[1][i];
        if (i == 1) { /* key_mass: the valid rows of each head */
            float *g2 = t_alloc(4 * (size_t)n[i]);
            for (int64_t h = 0; h < Hkv; h++)
                for (int64_t j = 0; j < nkv; j++) {
                    ref[h * nkv + j] = res[0][1][h * cap + j];
                    g2[h * nkv + j] = res[1][1][h * cap + j];
                }
            got = g2;
        } else {
            for (int64_t x = 0; x < n[i]; x++) ref[x] = res[0][i][x];
        }
        char nm[64];
        snprintf(nm, sizeof nm, "%s (pruned vs zero-in-place)", what[i]);
        t_check_nmse(nm, got, ref, n[i], 1e-10);
    }
    for (int64_t x = 0; x < nq * H; x++)
        T_ASSERT(am[0][x] == am[1][x], "argmax[%lld]: pruned %d, zero-in-place %d", (long long)x, am[1][x], am[0][x]);
    t_assert_unchanged(qt, "q");
    t_end();
}
END_TEST

/* q_channels refusals: an entry outside [0, d_q) (KVS_ERR_OUT_OF_RANGE), d_k above d_q (KVS_ERR_SHAPE). */
START_TEST(test_attention_q_channels_refusals) {
    t_begin("attention_q_channels_refusals");
    t_case("q_channels out of range, k wider than q");
    tt *q = t_new3(KVS_F32, 16, 2, 3), *k = t_new3(KVS_F32, 8, 8, 1), *v = t_new3(KVS_F32, 16, 8, 1);
    tt *out = t_new3(KVS_F32, 16, 2, 3), *kw = t_new3(KVS_F32, 20, 8, 1);
    int32_t ch[20] = {0, 2, 4, 6, 8, 10, 12, 16};
    kvs_attention_params p = kvs_attention_params_default();
    p.q_channels = ch;
    kvs_status st = kvs_attention(t_dev(), q->t, k->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_ERR_OUT_OF_RANGE && strstr(kvs_last_error(), "q_channels"), "channel 16 of 16: %s: %s",
             kvs_status_name(st), kvs_last_error());
    st = kvs_attention(t_dev(), q->t, kw->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_ERR_SHAPE && strstr(kvs_last_error(), "d_k"), "k 20 > q 16: %s: %s", kvs_status_name(st),
             kvs_last_error());
    ch[7] = 15;
    st = kvs_attention(t_dev(), q->t, k->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_OK, "valid q_channels: %s: %s", kvs_status_name(st), kvs_last_error());
    t_end();
}
END_TEST

/* lse_extra refusals: with unnormalised = 1 (KVS_ERR_INVALID_ARGUMENT), of another size
 * (KVS_ERR_SHAPE) or type (KVS_ERR_DTYPE); all -INFINITY changes nothing (bit for bit). */
START_TEST(test_attention_lse_refusals) {
    t_begin("attention_lse_refusals");
    t_case("lse_extra with unnormalised, wrong size, wrong dtype; -inf is no external mass");
    tt *q = t_new3(KVS_F32, 16, 2, 3), *k = t_new3(KVS_F32, 16, 8, 1), *v = t_new3(KVS_F32, 16, 8, 1);
    tt *out = t_new3(KVS_F32, 16, 2, 3), *out0 = t_new3(KVS_F32, 16, 2, 3);
    tt *lse = t_new2(KVS_F32, 2, 3), *lse_small = t_new2(KVS_F32, 2, 2), *lse_i = t_new2(KVS_I32, 2, 3);
    float x[16 * 8], ninf[6];
    for (int i = 0; i < 16 * 8; i++) x[i] = (float)((i * 37) % 11) / 7.0f - 0.6f;
    for (int i = 0; i < 6; i++) ninf[i] = -INFINITY;
    t_upload_f32(q, x);
    t_upload_f32(k, x);
    t_upload_f32(v, x);
    t_upload_f32(lse, ninf);
    kvs_attention_params p = kvs_attention_params_default();
    p.lse_extra = lse->t;
    p.unnormalised = 1;
    kvs_status st = kvs_attention(t_dev(), q->t, k->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_ERR_INVALID_ARGUMENT && strstr(kvs_last_error(), "lse_extra"), "unnormalised: %s: %s",
             kvs_status_name(st), kvs_last_error());
    p.unnormalised = 0;
    p.lse_extra = lse_small->t;
    st = kvs_attention(t_dev(), q->t, k->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_ERR_SHAPE && strstr(kvs_last_error(), "lse_extra"), "4 of 6 entries: %s: %s", kvs_status_name(st),
             kvs_last_error());
    p.lse_extra = lse_i->t;
    st = kvs_attention(t_dev(), q->t, k->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_ERR_DTYPE && strstr(kvs_last_error(), "lse_extra"), "i32: %s: %s", kvs_status_name(st), kvs_last_error());
    p.lse_extra = lse->t;
    st = kvs_attention(t_dev(), q->t, k->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_OK, "-inf: %s: %s", kvs_status_name(st), kvs_last_error());
    p.lse_extra = NULL;
    st = kvs_attention(t_dev(), q->t, k->t, v->t, out0->t, &p);
    T_ASSERT(st == KVS_OK, "none: %s: %s", kvs_status_name(st), kvs_last_error());
    float a[16 * 6], b[16 * 6];
    t_download(out, a);
    t_download(out0, b);
    T_ASSERT(memcmp(a, b, sizeof a) == 0, "lse_extra all -inf changed out");
    t_end();
}
END_TEST

/* d_k != d_v is a shape, but q vs k and v vs out must still agree: KVS_ERR_SHAPE naming the pair. */
START_TEST(test_attention_dk_dv_shapes) {
    t_begin("attention_dk_dv_shapes");
    t_case("q/k and v/out head_dim mismatches are shape errors");
    tt *q = t_new3(KVS_F32, 24, 2, 3), *k = t_new3(KVS_F32, 24, 8, 1), *v = t_new3(KVS_F32, 40, 8, 1);
    tt *out = t_new3(KVS_F32, 40, 2, 3), *k_bad = t_new3(KVS_F32, 40, 8, 1), *out_bad = t_new3(KVS_F32, 24, 2, 3);
    kvs_attention_params p = kvs_attention_params_default();
    kvs_status st = kvs_attention(t_dev(), q->t, k_bad->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_ERR_SHAPE && strstr(kvs_last_error(), "d_k"), "q 24 / k 40: %s: %s", kvs_status_name(st),
             kvs_last_error());
    st = kvs_attention(t_dev(), q->t, k->t, v->t, out_bad->t, &p);
    T_ASSERT(st == KVS_ERR_SHAPE && strstr(kvs_last_error(), "d_v"), "v 40 / out 24: %s: %s", kvs_status_name(st),
             kvs_last_error());
    st = kvs_attention(t_dev(), q->t, k->t, v->t, out->t, &p);
    T_ASSERT(st == KVS_OK, "d_k 24 / d_v 40: %s: %s", kvs_status_name(st), kvs_last_error());
    t_end();
}
END_TEST

Suite *suite_attention(void) {
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("attention");
    tcase_add_loop_test(tc, test_attention, 0, N_CASES);
    tcase_add_test(tc, test_attention_accumulate_split);
    tcase_add_test(tc, test_attention_support_query);
    tcase_add_test(tc, test_attention_dk_dv_shapes);
    tcase_add_test(tc, test_attention_pruned_anchor);
    tcase_add_test(tc, test_attention_q_channels_refusals);
    tcase_add_test(tc, test_attention_lse_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_attention_sequence);
    suite_add_tcase(s, tc);
    return s;
}
