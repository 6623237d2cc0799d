/* Float64 references: see reference.h. Straightforward loops; clarity over speed. */
#include "reference.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/schedule/dwt_host.h"

/* ---- number formats ---- */

/* Generic nearest-even rounding of |v| to a binary format with `mbits` stored mantissa bits,
 * minimum normal exponent emin and maximum exponent emax. Returns the magnitude bits. */
static uint32_t round_binary(double a, int mbits, int emin, int emax, int ebias) {
    /* overflow threshold: halfway between the largest finite value and 2^(emax+1) */
    double maxfin = ldexp(2.0 - ldexp(1.0, -mbits), emax);
    double half_ulp_top = ldexp(1.0, emax - mbits - 1);
    uint32_t inf = (uint32_t)((2 * ebias + 1) << mbits);
    if (a >= maxfin + half_ulp_top) return inf;
    if (a < ldexp(1.0, emin)) {
        /* subnormal: spacing 2^(emin - mbits); rint rounds half to even */
        double q = rint(ldexp(a, mbits - emin));
        return (uint32_t)q; /* q == 2^mbits becomes the smallest normal automatically */
    }
    int ex;
    frexp(a, &ex); /* a = f * 2^ex, f in [0.5, 1) */
    int e = ex - 1;
    double mant = rint(ldexp(a, mbits - e)); /* in [2^mbits, 2^(mbits+1)] */
    if (mant >= ldexp(1.0, mbits + 1)) {
        mant = ldexp(1.0, mbits);
        e++;
    }
    if (e > emax) return inf;
    return (uint32_t)((uint32_t)(e + ebias) << mbits) | ((uint32_t)mant - (1u << mbits));
}

uint16_t ref_f16_bits(double v) {
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    if (isnan(v)) return (uint16_t)(sign | 0x7e00);
    if (isinf(v)) return (uint16_t)(sign | 0x7c00);
    return (uint16_t)(sign | round_binary(fabs(v), 10, -14, 15, 15));
}

uint16_t ref_bf16_bits(double v) {
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    if (isnan(v)) return (uint16_t)(sign | 0x7fc0);
    if (isinf(v)) return (uint16_t)(sign | 0x7f80);
    return (uint16_t)(sign | round_binary(fabs(v), 7, -126, 127, 127));
}

static double decode_binary16ish(uint16_t h, int mbits, int ebits, int ebias) {
    int sign = (h >> 15) & 1;
    int e = (h >> mbits) & ((1 << ebits) - 1);
    int m = h & ((1 << mbits) - 1);
    double v;
    if (e == (1 << ebits) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, 1 - ebias - mbits);
    else v = ldexp((double)(m + (1 << mbits)), e - ebias - mbits);
    return sign ? -v : v;
}

double ref_f16_to_f64(uint16_t h) { return decode_binary16ish(h, 10, 5, 15); }
double ref_bf16_to_f64(uint16_t h) { return decode_binary16ish(h, 7, 8, 127); }

double ref_round_to(kvs_dtype dt, double x) {
    switch (dt) {
    case KVS_F16: return ref_f16_to_f64(ref_f16_bits(x));
    case KVS_BF16: return ref_bf16_to_f64(ref_bf16_bits(x));
    default: return (double)(float)x;
    }
}

void ref_q8_0_quantize(const float *x, int64_t n, uint8_t *blocks) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        uint8_t *out = blocks + b * 34;
        double amax = 0;
        for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(xb[i]));
        uint16_t dh = ref_f16_bits(amax / 127.0);
        double d = ref_f16_to_f64(dh);
        out[0] = (uint8_t)(dh & 0xff);
        out[1] = (uint8_t)(dh >> 8);
        for (int i = 0; i < 32; i++) {
            double q = d > 0 ? round(xb[i] / d) : 0;
            if (q > 127) q = 127;
            if (q < -127) q = -127;
            out[2 + i] = (uint8_t)(int8_t)q;
        }
    }
}

void ref_q8_0_dequant(const uint8_t *blocks, int64_t n, double *out) {
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *in = blocks + b * 34;
        double d = ref_f16_to_f64((uint16_t)(in[0] | (in[1] << 8)));
        for (int i = 0; i < 32; i++) out[b * 32 + i] = d * (double)(int8_t)in[2 + i];
    }
}

/* ---- dense ops ---- */

void ref_matmul(const double *W, const double *x, double *y, int64_t m, int64_t k, int64_t n, int accumulate) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < m; r++) {
            double s = accumulate ? y[i * m + r] : 0.0;
            for (int64_t c = 0; c < k; c++) s += W[r * k + c] * x[i * k + c];
            y[i * m + r] = s;
        }
}

void ref_rmsnorm(const double *x, const double *w, double *y, int64_t rows, int64_t dim, double eps) {
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0;
        for (int64_t c = 0; c < dim; c++) ss += x[i * dim + c] * x[i * dim + c];
        double r = 1.0 / sqrt(ss / (double)dim + eps);
        for (int64_t c = 0; c < dim; c++) y[i * dim + c] = x[i * dim + c] * r * w[c];
    }
}

void ref_swiglu(const double *gate, const double *up, double *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

void ref_softmax(const double *x, double *y, int64_t rows, int64_t n, double scale) {
    for (int64_t i = 0; i < rows; i++) {
        const double *xr = x + i * n;
        double *yr = y + i * n;
        double m = -INFINITY;
        for (int64_t j = 0; j < n; j++) m = fmax(m, scale * xr[j]);
        if (m == -INFINITY) {
            for (int64_t j = 0; j < n; j++) yr[j] = 0.0;
            continue;
        }
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += (yr[j] = exp(scale * xr[j] - m));
        for (int64_t j = 0; j < n; j++) yr[j] /= s;
    }
}

void ref_rope_vec(double *v, int64_t head_dim, double pos, const kvs_rope_params *p) {
    int64_t n_rot = p->n_rot ? p->n_rot : head_dim;
    int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        double theta = pos * (double)p->freq_scale * pow((double)p->theta_base, -2.0 * (double)i / (double)n_rot);
        double c = cos(theta), s = sin(theta);
        int64_t i0 = p->mode == KVS_ROPE_NEOX ? i : 2 * i;
        int64_t i1 = p->mode == KVS_ROPE_NEOX ? i + half : 2 * i + 1;
        double a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
    }
}

/* ---- attention ---- */

int64_t ref_attn_valid(const ref_attn *a, int64_t h) { return a->kv_len ? a->kv_len[h] : a->n_kv; }

int ref_attn_visible(const ref_attn *a, int64_t i, int64_t h, int64_t j) {
    if (j >= a->n_kv || j >= ref_attn_valid(a, h)) return 0;
    if (a->row_len && j >= a->row_len[i]) return 0;
    if (a->causal) {
        int64_t qp = a->q_pos ? a->q_pos[i] : a->n_kv - a->n_q + i;
        int64_t kp = a->k_pos ? a->k_pos[h * a->capacity + j] : j;
        if (kp > qp) return 0;
    }
    if (a->mask && a->mask[i * a->n_kv + j] == -INFINITY) return 0;
    return 1;
}

void ref_attention(ref_attn *a) {
    const int64_t d = a->head_dim, dv = a->head_dim_v ? a->head_dim_v : a->head_dim, cap = a->capacity,
                  G = a->n_heads / a->n_kv_heads;
    double *lg = malloc(sizeof(double) * (size_t)(a->n_kv ? a->n_kv : 1));
    double *p = malloc(sizeof(double) * (size_t)cap);
    if (!lg || !p) abort();
    for (int64_t i = 0; i < a->n_q; i++) {
        int in_stat = 0;
        if (a->key_mass) {
            if (!a->stat_rows) in_stat = 1;
            else
                for (int64_t s = 0; s < a->n_stat; s++) in_stat += a->stat_rows[s] == i;
        }
        for (int64_t g = 0; g < a->n_heads; g++) {
            int64_t h = g / G;
            const double *qv = a->q + (i * a->n_heads + g) * d;
            double m = -INFINITY, bound = 0;
            int64_t am = -1;
            for (int64_t j = 0; j < a->n_kv; j++) {
                if (!ref_attn_visible(a, i, h, j)) {
                    lg[j] = -INFINITY;
                    continue;
                }
                const double *kv = a->k + (h * cap + j) * d;
                double s = 0, sa = 0;
                for (int64_t t = 0; t < d; t++) {
                    s += qv[t] * kv[t];
                    sa += fabs(qv[t] * kv[t]);
                }
                double mk = a->mask ? a->mask[i * a->n_kv + j] : 0.0;
                lg[j] = a->scale * s + mk;
                bound = fmax(bound, a->scale * sa + fabs(mk));
                if (lg[j] > m) {
                    m = lg[j];
                    am = j;
                }
            }
            if (a->logits) memcpy(a->logits + (i * a->n_heads + g) * a->n_kv, lg, sizeof(double) * (size_t)a->n_kv);
            if (a->bound) a->bound[i * a->n_heads + g] = bound;
            double l = 0;
            for (int64_t j = 0; j < cap; j++) p[j] = 0;
            if (am >= 0)
                for (int64_t j = 0; j < a->n_kv; j++)
                    if (lg[j] != -INFINITY) l += (p[j] = exp(lg[j] - m));
            if (a->row_max) a->row_max[i * a->n_heads + g] = am >= 0 ? m : -FLT_MAX;
            if (a->row_sum) a->row_sum[i * a->n_heads + g] = l;
            if (a->argmax) a->argmax[i * a->n_heads + g] = (int32_t)am;
            /* the normaliser with the external mass: l + exp(lse_extra - m) */
            const double lt = a->lse_extra && am >= 0 ? l + exp(a->lse_extra[i * a->n_heads + g] - m) : l;
            if (a->out) {
                double *o = a->out + (i * a->n_heads + g) * dv;
                for (int64_t t = 0; t < dv; t++) o[t] = 0;
                if (am >= 0) {
                    double norm = a->unnormalised ? 1.0 : 1.0 / lt;
                    for (int64_t j = 0; j < a->n_kv; j++) {
                        if (p[j] == 0) continue;
                        const double *vv = a->v + (h * cap + j) * dv;
                        for (int64_t t = 0; t < dv; t++) o[t] += p[j] * norm * vv[t];
                    }
                }
            }
            /* normalised probabilities for the statistics */
            if (am >= 0)
                for (int64_t j = 0; j < a->n_kv; j++) p[j] /= lt;
            if (a->probs)
                for (int64_t r = 0; r < a->n_probe; r++)
                    if (a->probe_rows[r] == i)
                        memcpy(a->probs + (r * a->n_heads + g) * cap, p, sizeof(double) * (size_t)cap);
            if (in_stat) {
                int64_t valid = ref_attn_valid(a, h);
                for (int64_t j = 0; j < valid; j++) a->key_mass[h * cap + j] += in_stat * p[j] / (double)G;
            }
        }
    }
    free(lg);
    free(p);
}

/* ---- wavelets ---- */

/* The float64 DWT is the library's host DWT (core/schedule/dwt_host.c), which the schedules use
 * too; the backends' kvs_dwt / kvs_idwt are separate code, compared against it. */
int ref_wavelet_lo(kvs_wavelet w, double *lo) { return kvs_host_wavelet_lo(w, lo); }

int64_t ref_dwt_level_len(int64_t n, int level) {
    for (int l = 0; l < level; l++) n = n / 2 + (n % 2);
    return n;
}

int64_t ref_dwt_len(int64_t n, int levels) {
    int64_t t = ref_dwt_level_len(n, levels);
    for (int l = 1; l <= levels; l++) t += ref_dwt_level_len(n, l);
    return t;
}

void ref_dwt_row(const double *x, int64_t n, kvs_wavelet w, int levels, double *y) {
    double *scratch = malloc(sizeof(double) * (size_t)(2 * (n + 2)));
    if (!scratch) abort();
    kvs_host_dwt_row(x, n, w, levels, y, scratch);
    free(scratch);
}

void ref_idwt_row(const double *y, int64_t n, kvs_wavelet w, int levels, double *x) {
    double *scratch = malloc(sizeof(double) * (size_t)(2 * (n + 2)));
    if (!scratch) abort();
    kvs_host_idwt_row(y, n, w, levels, x, scratch);
    free(scratch);
}

/* ---- top-k ---- */

typedef struct kv_pair {
    float v;
    int32_t i;
} kv_pair;

/* "a ranks before b" order: larger first, NaN last, ties by lower index. */
static int rank_cmp(const void *pa, const void *pb) {
    const kv_pair *a = pa, *b = pb;
    int na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? 1 : -1;
    if (!na && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int idx_cmp(const void *pa, const void *pb) {
    const kv_pair *a = pa, *b = pb;
    return a->i < b->i ? -1 : a->i > b->i;
}

void ref_topk(const float *x, int64_t n, int64_t row_len, int64_t k, int order_by_index, int32_t *idx, float *val) {
    if (row_len > n) row_len = n;
    if (row_len < 0) row_len = 0;
    kv_pair *p = malloc(sizeof(kv_pair) * (size_t)(row_len ? row_len : 1));
    if (!p) abort();
    for (int64_t j = 0; j < row_len; j++) {
        p[j].v = x[j];
        p[j].i = (int32_t)j;
    }
    qsort(p, (size_t)row_len, sizeof *p, rank_cmp);
    int64_t got = row_len < k ? row_len : k;
    if (order_by_index) qsort(p, (size_t)got, sizeof *p, idx_cmp);
    for (int64_t r = 0; r < k; r++) {
        idx[r] = r < got ? p[r].i : -1;
        if (val) val[r] = r < got ? p[r].v : -INFINITY;
    }
    free(p);
}
