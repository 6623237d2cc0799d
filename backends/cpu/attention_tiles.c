/* CPU backend attention: the tile pass (logits with visibility and mask, online softmax, P.V, the
 * statistics pass) and its portable kernels, which are the reference the AVX-512, AVX2 and NEON
 * kernels (x86/attention_avx512.c, x86/attention_avx2.c, arm/attention_neon.c; through c->kern) are
 * tested against. Design:
 * attention.h; driver: ops_attention.c. */
#include <cblas.h>

#include "attention.h"
#include "quant/quant_blocks.h"

static int64_t att_qpos(const att_ctx *c, int64_t i) {
    return c->q_pos ? c->q_pos[i] : c->a->n_kv - c->a->n_q + i;
}

/* K or V tile rows [j0, j0+n) of kv head h as f32 (a pointer into the tensor, or converted /
 * decoded into conv [n][d]). dt: the tensor's dtype, rb: bytes of one row; lo: the lower plane of a
 * qh8 K/V (base then holds its q4_1 upper plane), decoded to the 8-bit values, or NULL. */
static const float *att_tile(const att_ctx *c, const void *base, const void *lo, kvs_dtype dt, int64_t rb, int64_t d,
                             float *conv, int64_t h, int64_t j0, int64_t n) {
    size_t row = (size_t)(h * c->a->capacity + j0);
    if (lo) {
        c->qh8dec((const uint8_t *)base + row * (size_t)rb, (const uint8_t *)lo + row * (size_t)(d / 2), n * d / 32, conv);
        return conv;
    }
    if (dt == KVS_F32) return (const float *)base + row * (size_t)d;
    if (dt == KVS_BF16) {
        const uint16_t *s = (const uint16_t *)base + row * (size_t)d;
        for (int64_t t = 0; t < n * d; t++) conv[t] = kvs_bf2f(s[t]);
        return conv;
    }
    if (dt != KVS_F16) { /* block rows: consecutive rows are consecutive blocks */
        const uint8_t *b = (const uint8_t *)base + row * (size_t)rb;
        if (c->kern)
            c->qdec(dt, b, n * d, conv);
        else
            kvs_qb_decode_n(dt, b, n * d / kvs_dtype_block(dt), conv);
        return conv;
    }
    const uint16_t *s = (const uint16_t *)base + row * (size_t)d;
    if (c->kern) { /* the ISA's conversion (F16C, FCVTL) */
        c->kern->h2f(s, conv, n * d);
        return conv;
    }
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

/* The statistics of one row of a tile: p[t] = s[t] * inv; km[t] += fw * p[t] (km non-NULL);
 * dst[t] = p[t] (dst non-NULL; else s is scaled in place). Same roundings as scaling s in place,
 * then accumulating and copying it. */
KVS_CLONES
static void att_stat_row(float *KVS_RESTRICT s, int64_t n, float inv, float *KVS_RESTRICT km, float fw,
                         float *KVS_RESTRICT dst) {
    if (km && dst) {
        for (int64_t t = 0; t < n; t++) {
            const float p = s[t] * inv;
            km[t] += fw * p;
            dst[t] = p;
        }
    } else if (km) {
        for (int64_t t = 0; t < n; t++) km[t] += fw * (s[t] * inv);
    } else if (dst) {
        for (int64_t t = 0; t < n; t++) dst[t] = s[t] * inv;
    }
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

/* Whether query row i needs the statistics pass (key_mass or a probe). */
static int att_row_wants_stats(const att_ctx *c, int64_t i) {
    return (c->stat_w && c->stat_w[i] > 0) || (c->probs && c->probe_start[i + 1] > c->probe_start[i]);
}

/* Computes S for rows [0, M) against keys [j0, j0+n) of kv head h and turns it into logits.
 * Returns 0 when the whole tile is invisible to every row (S then unspecified). blk: NULL, or
 * flags per block of 8 rows (r / 8): on the panel path only the flagged blocks are computed (a row's
 * logits do not depend on the other rows of the call), the other rows of S are left as they were. */
static int att_logits(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t j0, int64_t n,
                      int64_t max_qpos, const uint8_t *blk) {
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
    const size_t row0 = (size_t)(h * a->capacity + j0);
    const kvs_att_q8 Q8h = {w->q8, w->q8d, w->q8c, w->q8c ? w->q8c + M * d / 4 : NULL, d, NULL, 0};
    if (c->qqk8h && c->qqk8h(c->k_dt, (const uint8_t *)c->k + row0 * (size_t)c->k_rb,
                             c->k_lo ? (const uint8_t *)c->k_lo + row0 * (size_t)(d / 2) : NULL, c->k_rb, &Q8h, M, n,
                             a->p.scale, w->S, ATT_BK, w->Kc)) {
        /* variants -vnni / -q8 over a qh8 / q4_1 K: 8-bit query codes, Kc the repacking scratch
         * (attention_q8.h, "qh8 and q4_1") */
    } else if (c->qqk8 && !c->k_lo) { /* variants -vnni / -q8: 8-bit query codes (attention_q8.h) */
        /* V's rows of the tile are prefetched as the keys are read (P.V then finds them in cache) */
        const kvs_att_q8 Q = {w->q8, w->q8d, w->q8c, w->q8c + M * d / 4, d,
                              c->v_lo ? NULL : (const uint8_t *)c->v + (size_t)(h * a->capacity + j0) * (size_t)c->v_rb, c->v_rb};
        const uint8_t *K = (const uint8_t *)c->k + (size_t)(h * a->capacity + j0) * (size_t)c->k_rb;
        c->qqk8(c->k_dt, K, c->k_rb, &Q, M, n, a->p.scale, w->S, ATT_BK);
    } else if (c->fast) {
        if (blk) {
            for (int64_t b = 0; b < (M + 7) / 8; b++)
                if (blk[b])
                    c->kern->qk(w->Qp + b * 8 * d, c->KT + h * d * c->ldk + j0 * d, d, 8, (n + 31) & ~(int64_t)31,
                                a->p.scale, w->S + b * 8 * ATT_BK);
        } else {
            c->kern->qk(w->Qp, c->KT + h * d * c->ldk + j0 * d, d, (M + 7) & ~(int64_t)7, (n + 31) & ~(int64_t)31,
                        a->p.scale, w->S);
        }
    } else {
        blk = NULL; /* the other paths compute every row */
        if (c->dec && kvs_dtype_is_quant(c->k_dt) && !c->k_lo) {
            /* block K decoded in registers: the fused QK (four keys at a time) where the type has
             * one, else the block GEMV, each key row against up to 4 packed query rows */
            const uint8_t *K = (const uint8_t *)c->k + (size_t)(h * a->capacity + j0) * (size_t)c->k_rb;
            if (!(c->qqk && c->qqk(c->k_dt, K, c->k_rb, w->Qp, d, M, n, a->p.scale, w->S, ATT_BK))) {
                float acc[4];
                for (int64_t r0 = 0; r0 < M; r0 += 4) {
                    const int64_t R = M - r0 < 4 ? M - r0 : 4;
                    float *s = w->S + r0 * ATT_BK;
                    for (int64_t j = 0; j < n; j++) {
                        c->qdot(K + j * c->k_rb, c->k_dt, w->Qp + r0 * d, d, R, acc);
                        for (int64_t r = 0; r < R; r++) s[r * ATT_BK + j] = a->p.scale * acc[r];
                    }
                }
            }
        } else if (c->dec) {
            c->kern->qk_dec(w->Qp, att_tile(c, c->k, c->k_lo, c->k_dt, c->k_rb, c->d, w->Kc, h, j0, n), d, M, n, a->p.scale, w->S);
        } else {
            const float *Kt = att_tile(c, c->k, c->k_lo, c->k_dt, c->k_rb, c->d, w->Kc, h, j0, n);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)n, (int)d, a->p.scale, w->Qp, (int)d,
                        Kt, (int)d, 0.0f, w->S, ATT_BK);
        }
    }
    for (int64_t r = 0; r < M; r++) {
        if (blk && !blk[r / 8]) continue;
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

void kvs_cpu_att_q8_quantize(const float *Qp, int64_t M, int64_t d, int32_t off, int8_t *q, float *dq, int32_t *corr,
                             int32_t *corrb) {
    const int64_t nb = d / 32;
    for (int64_t r = 0; r < M; r++)
        for (int64_t b = 0; b < nb; b++) {
            const float *x = Qp + r * d + b * 32;
            int8_t *qq = q + r * d + b * 32;
            float amax = 0.0f;
            int finite = 1;
            for (int i = 0; i < 32; i++) {
                amax = fmaxf(amax, fabsf(x[i]));
                finite &= fabsf(x[i]) <= FLT_MAX;
            }
            /* NaN / inf in q: codes 0 and a NaN step, so the block's logits come out NaN as in f32
             * (rounding would turn the NaN into finite codes and lose it) */
            const float id = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
            for (int i = 0; i < 32; i++) {
                const long v = lrintf(x[i] * id);
                qq[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            }
            dq[r * nb + b] = finite ? amax / 127.0f : NAN;
            int32_t sum = 0;
            for (int g = 0; g < 8; g++) {
                corr[r * (d / 4) + b * 8 + g] = -off * (qq[4 * g] + qq[4 * g + 1] + qq[4 * g + 2] + qq[4 * g + 3]);
                sum += corr[r * (d / 4) + b * 8 + g];
            }
            corrb[r * nb + b] = sum;
        }
}

/* Packs the query rows of tile qt for kv head h into w (Qp, positions, limits, fresh softmax state)
 * and returns their count M; *jend: keys any row can see, *max_qpos: the largest query position. */
int64_t kvs_cpu_att_rows(const att_ctx *c, att_work *w, int64_t h, int64_t qt, int64_t *jend_out,
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
    if (c->qqk8 || c->qqk8h) kvs_cpu_att_q8_quantize(w->Qp, M, d, c->q8off, w->q8, w->q8d, w->q8c, w->q8c + M * d / 4);
    memset(w->O, 0, (size_t)(Mp * c->dv) * sizeof(float));
    *jend_out = jend;
    *max_qpos_out = max_qpos;
    return M;
}

/* The online-softmax pass of M rows over keys [ja, jb) (one key split, or all keys). */
void kvs_cpu_att_pass(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t ja, int64_t jb,
                     int64_t max_qpos) {
    const int64_t d = c->dv; /* P.V and O: d_v */
    float *const S0 = w->S;
    for (int64_t j0 = ja; j0 < jb; j0 += ATT_BK) {
        int64_t n = jb - j0 < ATT_BK ? jb - j0 : ATT_BK;
        if (w->E) w->S = w->E + (j0 - ja) / ATT_BK * w->ldl; /* this tile's block of E (kept for the statistics) */
        int ok = att_logits(c, w, h, i0, M, j0, n, max_qpos, NULL);
        if (w->tile_ok) w->tile_ok[(j0 - ja) / ATT_BK] = (uint8_t)ok;
        if (!ok) continue;
        for (int64_t r = 0; r < M; r++) {
            float *s = w->S + r * ATT_BK;
            float tmax = c->kern ? c->kern->row_max(s, n) : att_row_max(s, n);
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
            w->l[r] += c->kern ? c->kern->exp_row(s, n, mnew) : att_exp_row(s, n, mnew);
            if (w->E && att_row_wants_stats(c, i0 + r / c->G)) w->mu[r * w->n_tiles + (j0 - ja) / ATT_BK] = mnew;
        }
        if (c->fast) {
            c->kern->pv(w->S, (M + 7) & ~(int64_t)7, n, c->V32 + (h * c->a->capacity + j0) * d, d, w->O);
        } else {
            if (c->qpv8h) { /* -vnni / -q8 over a qh8 / q4_1 V: 8-bit weights, Vc the repacking scratch */
                const size_t row = (size_t)(h * c->a->capacity + j0);
                if (c->qpv8h(c->v_dt, (const uint8_t *)c->v + row * (size_t)c->v_rb,
                             c->v_lo ? (const uint8_t *)c->v_lo + row * (size_t)(d / 2) : NULL, c->v_rb, w->S, ATT_BK, M, n, d,
                             w->O, w->Vc))
                    continue;
            }
            if (c->qpv8 && !c->v_lo &&
                c->qpv8(c->v_dt, (const uint8_t *)c->v + (size_t)(h * c->a->capacity + j0) * (size_t)c->v_rb, c->v_rb, w->S,
                        ATT_BK, M, n, d, w->O))
                continue; /* -vnni: block V with the scales folded into P */
            if (c->dec && kvs_dtype_is_quant(c->v_dt) && c->qpv && !c->v_lo &&
                c->qpv(c->v_dt, (const uint8_t *)c->v + (size_t)(h * c->a->capacity + j0) * (size_t)c->v_rb, c->v_rb, w->S,
                       ATT_BK, M, n, d, w->O))
                continue; /* block V decoded in registers */
            if (c->dec && kvs_dtype_is_quant(c->v_dt)) { /* other block types: sub-tiles decoded into L1 */
                for (int64_t jj = 0; jj < n; jj += ATT_QSUB) {
                    const int64_t nn = n - jj < ATT_QSUB ? n - jj : ATT_QSUB;
                    c->kern->pv_dec(w->S + jj, M, nn, att_tile(c, c->v, c->v_lo, c->v_dt, c->v_rb, c->dv, w->Vc, h, j0 + jj, nn), d, w->O);
                }
                continue;
            }
            const float *Vt = att_tile(c, c->v, c->v_lo, c->v_dt, c->v_rb, c->dv, w->Vc, h, j0, n);
            if (c->dec)
                c->kern->pv_dec(w->S, M, n, Vt, d, w->O);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)d, (int)n, 1.0f, w->S, ATT_BK, Vt,
                            (int)d, 1.0f, w->O, (int)d);
        }
    }
    w->S = S0;
}

/* Writes out, row_max, row_sum and argmax of the M rows from w's final softmax state. */
void kvs_cpu_att_write(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M) {
    const kvs_attention_args *a = c->a;
    const int64_t d = c->dv, G = c->G;
    for (int64_t r = 0; r < M; r++) {
        int64_t i = i0 + r / G, g = h * G + r % G;
        int64_t qi = i * a->n_heads + g;
        float *o = c->out + qi * d;
        const float *src = w->O + r * d;
        float l = w->l[r], lt = l;
        /* the external mass of lse_extra joins the normaliser of a row that sees a key (exp(x - m) for x
         * = -inf is 0; a NaN lse_extra makes the row NaN, as a NaN logit would) */
        if (c->lse_extra && l != 0.0f) lt = l + kvs_expf(c->lse_extra[qi] - w->m[r]);
        if (l != 0.0f) { /* a NaN sum (NaN scores or values) gives NaN rows, never zeros */
            float f = a->p.unnormalised ? 1.0f : 1.0f / lt;
            for (int64_t t = 0; t < d; t++) o[t] = src[t] * f;
        } else {
            memset(o, 0, (size_t)d * sizeof(float));
        }
        if (c->row_max) c->row_max[qi] = w->m[r];
        if (c->row_sum) c->row_sum[qi] = l;
        if (c->argmax) c->argmax[qi] = w->best[r];
        w->l[r] = lt;
    }
}

/* Zeroes the probs rows of the probe rows among the M rows (invisible and invalid keys read 0). */
void kvs_cpu_att_zero_probes(const att_ctx *c, int64_t h, int64_t i0, int64_t M) {
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
void kvs_cpu_att_stats(const att_ctx *c, att_work *w, int64_t h, int64_t i0, int64_t M, int64_t ja, int64_t jb,
                      int64_t max_qpos) {
    const kvs_attention_args *a = c->a;
    const int64_t G = c->G, cap = a->capacity;
    for (int64_t j0 = ja; j0 < jb; j0 += ATT_BK) {
        int64_t n = jb - j0 < ATT_BK ? jb - j0 : ATT_BK;
        const int64_t tix = (j0 - ja) / ATT_BK;
        if (w->tile_ok ? !w->tile_ok[tix] : !att_logits(c, w, h, i0, M, j0, n, max_qpos, NULL)) continue;
        if (w->E) { /* a row whose maximum grew after this tile needs its logits again: its blocks of 8 rows */
            uint8_t blk[(ATT_M_TARGET + 7) / 8] = {0};
            const int by_blk = M <= 8 * (int64_t)sizeof blk; /* (M exceeds it only where G > ATT_M_TARGET) */
            int again = 0;
            for (int64_t r = 0; r < M; r++)
                if (att_row_wants_stats(c, i0 + r / G) && w->l[r] > 0.0f && w->mu[r * w->n_tiles + tix] != w->m[r]) {
                    again = 1;
                    if (by_blk) blk[r / 8] = 1;
                }
            if (again) att_logits(c, w, h, i0, M, j0, n, max_qpos, by_blk ? blk : NULL);
        }
        for (int64_t r = 0; r < M; r++) {
            int64_t i = i0 + r / G, g = h * G + r % G;
            int32_t wt = c->stat_w ? c->stat_w[i] : 0;
            int has_probe = c->probs && c->probe_start[i + 1] > c->probe_start[i];
            if (!wt && !has_probe) continue;
            float l = w->l[r];
            if (!(l > 0.0f)) continue; /* nothing visible: p = 0 everywhere */
            float *s;
            if (w->E && w->mu[r * w->n_tiles + tix] == w->m[r]) {
                s = w->E + tix * w->ldl + r * ATT_BK; /* = exp_row(logits, m) of the first pass */
            } else {
                s = w->S + r * ATT_BK; /* the logits (recomputed above when E is kept) */
                if (c->kern)
                    c->kern->exp_row(s, n, w->m[r]);
                else
                    att_exp_row(s, n, w->m[r]);
            }
            /* p = s / l (as s * (1/l)) into the first probe's row, key_mass += wt p: one pass */
            float *dst = has_probe ? c->probs + ((int64_t)c->probe_list[c->probe_start[i]] * a->n_heads + g) * cap + j0 : NULL;
            att_stat_row(s, n, 1.0f / l, wt ? w->km + h * cap + j0 : NULL, (float)wt, dst);
            if (has_probe)
                for (int32_t e = c->probe_start[i] + 1; e < c->probe_start[i + 1]; e++)
                    memcpy(c->probs + ((int64_t)c->probe_list[e] * a->n_heads + g) * cap + j0, dst,
                           (size_t)n * sizeof(float));
        }
    }
}

