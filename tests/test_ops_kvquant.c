/* Suite "attention-kvq": the quantized KV cache's two ops (issue 17) against float64 references.
 *
 *  - kvs_scatter converting f32 rows to every cache type (F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL; the
 *    cache's quantize-on-append): rows written where idx says and nowhere else (rows never written
 *    keep their poison, guard bands untouched), and the decoded rows close to the f32 input (nmse
 *    budget per type: f16 1e-6, bf16 2e-5, q8_0 1e-4, q4_0 / q4_1 / iq4_nl 1.5e-2 for normal data,
 *    about 2x the measured values);
 *  - kvs_attention reading those tensors for every K/V type pair (7 x 7, K and V chosen
 *    separately), on odd sizes (13 query rows, capacities 301 / 1100 / 2100, GQA 1 / 3 / 4, head_dim
 *    32 / 64 / 96 / 128), with every statistic (key_mass over stat_rows, probs of probe rows, argmax,
 *    row_max, row_sum), ragged kv_len and causal positions, compared to ref_attention in float64 over
 *    the DEQUANTIZED cache (ref_quant.h's independent float64 decoder): the kernel's only error is
 *    then f32 arithmetic, so the tolerances are the f32 ones of the attention suite (nmse 1e-6;
 *    row_max within 1e-5 of the logit bound). Rows past the written ones hold the harness's poison
 *    bytes (NaN scales) and must not reach any output.
 *  - QuantSpec's qh8 (k_lo / v_lo) beside other types on every shape (test_attention_kvq_qh8), and on
 *    the CPU the output of a query row bit for bit the same in a 1-row and a 4-row call (qh8, q4_1,
 *    q8_0, q4_0);
 *  - refusals: a K of a block type the cache does not take (q4_k), a scatter from f16 into q8_0.
 * The suite's ops are attention and scatter, so test_ops sweeps every attention variant (CPU:
 * portable, avx2, avx512, with and without split keys, and avx512-vnni / avx2-q8, whose 8-bit query
 * codes for a q8_0 / q4_0 / q4_1 / qh8 K or V are checked against their derived bound instead: q8_check,
 * as is the automatic choice on x86, which takes their kernels for those types: q8_kernels); OpenCL: attn_main, attn_dec, attn_main with
 * 4 key splits; Vulkan: single pass, 4 key splits). OpenCL reads and writes every pair (attention.cl
 * / rows.cl through qblocks.cl) and so does Vulkan (scatter_cvt.comp, attn.comp / attn_stats.comp
 * through quant.glsl); GPU backends run the subset kvq_selected names. A backend without a type
 * refuses it (listed as unsupported).
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "probe.h"
#include "ref_quant.h"
#include "reference.h"
#include "suites.h"

static const kvs_dtype kv_types[] = {KVS_F32, KVS_F16, KVS_BF16, KVS_Q8_0, KVS_Q4_0, KVS_Q4_1, KVS_IQ4_NL};
#define N_TYPES ((int)(sizeof kv_types / sizeof kv_types[0]))

typedef struct kvq_case {
    const char *name;
    int n_q, H, Hkv, d, cap, n_kv, causal, kvlen;
    int dv; /* d_v (v, out); 0 = d (q, k have d = d_k) */
} kvq_case;

static const kvq_case shapes[] = {
    {"decode_gqa4_d64", 1, 8, 2, 64, 301, 300, 1, 0, 0},
    {"decode3_gqa3_d96_ragged", 3, 6, 2, 96, 1100, 1027, 1, 1, 0},
    {"prefill13_mha_d32", 13, 4, 4, 32, 70, 65, 1, 0, 0},
    {"decode_d128_long", 1, 4, 1, 128, 2100, 2049, 1, 1, 0},
    {"bidir17_gqa2_d64", 17, 4, 2, 64, 40, 0, 0, 0, 0},
    /* d_k != d_v: each side keeps its own head_dim % 32 rule (K 64 = 2 blocks, V 32 = 1 block) */
    {"prefill7_gqa2_dk64_dv32", 7, 4, 2, 64, 70, 67, 1, 1, 32},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))
#define N_KVQ (N_SHAPES * N_TYPES * N_TYPES)

static double type_budget(kvs_dtype t) {
    switch (t) {
    case KVS_F32: return 0.0;
    case KVS_F16: return 1e-6;
    case KVS_BF16: return 2e-5;
    case KVS_Q8_0: return 1e-4;
    default: return 1.5e-2;
    }
}

/* Decodes one stored row of dtype t (d values) into double, independently of the library. */
static void decode_row(kvs_dtype t, const uint8_t *row, int64_t d, double *out) {
    if (t == KVS_F32) {
        for (int64_t i = 0; i < d; i++) out[i] = ((const float *)row)[i];
    } else if (t == KVS_F16) {
        for (int64_t i = 0; i < d; i++) out[i] = ref_f16_to_f64(((const uint16_t *)row)[i]);
    } else if (t == KVS_BF16) {
        for (int64_t i = 0; i < d; i++) out[i] = ref_bf16_to_f64(((const uint16_t *)row)[i]);
    } else {
        const size_t bb = kvs_dtype_bytes(t, 32);
        for (int64_t i = 0; i < d; i++) {
            double mul, add;
            ref_quant_value(t, row + (size_t)(i / 32) * bb, (int)(i % 32), &mul, &add);
            out[i] = mul + add;
        }
    }
}

/* Writes rows [0, n) of every kv head of x ([Hkv][cap][d] f32, host) into a new guarded tensor of
 * dtype t through a token-major converting scatter (the cache's append); rows >= n keep the poison.
 * Returns NULL (skip recorded) when the backend refuses. *dec: the stored values decoded, [Hkv][cap][d]
 * (rows >= n: 0). Checks the encoding error budget. */
static tt *store(kvs_dtype t, const float *x, int64_t Hkv, int64_t cap, int64_t d, int64_t n, double **dec) {
    tt *dst = t_new3(t, d, cap, Hkv), *src = t_new3(KVS_F32, d, Hkv, n), *idx = t_new1(KVS_I32, n);
    float *tm = t_alloc(4 * (size_t)(n * Hkv * d));
    for (int64_t h = 0; h < Hkv; h++)
        for (int64_t j = 0; j < n; j++) memcpy(tm + (j * Hkv + h) * d, x + (h * cap + j) * d, 4 * (size_t)d);
    int32_t *ix = t_alloc(4 * (size_t)n);
    for (int64_t j = 0; j < n; j++) ix[j] = (int32_t)j;
    t_upload_f32(src, tm);
    t_upload_i32(idx, ix);
    unsigned char *before = t_alloc(dst->nbytes);
    memcpy(before, dst->shadow + dst->guard, dst->nbytes);
    if (t_op(kvs_scatter(t_dev(), src->t, idx->t, dst->t, 1))) return NULL;
    unsigned char *raw = t_alloc(dst->nbytes);
    t_download(dst, raw); /* guard bands checked */
    const size_t rb = kvs_dtype_bytes(t, d);
    T_ASSERT(memcmp(raw + (size_t)n * rb, before + (size_t)n * rb, (size_t)(cap - n) * rb) == 0 || Hkv < 1,
             "scatter wrote past row %lld of head 0", (long long)n);
    for (int64_t h = 0; h < Hkv; h++)
        T_ASSERT(memcmp(raw + (size_t)(h * cap + n) * rb, before + (size_t)(h * cap + n) * rb, (size_t)(cap - n) * rb) == 0,
                 "scatter wrote rows >= %lld of head %lld", (long long)n, (long long)h);
    t_upload(dst, raw); /* the shadow follows what the op wrote */
    double *dv = t_alloc(sizeof(double) * (size_t)(Hkv * cap * d));
    double se = 0.0, sr = 0.0;
    for (int64_t h = 0; h < Hkv; h++)
        for (int64_t j = 0; j < n; j++) {
            double *o = dv + (h * cap + j) * d;
            decode_row(t, raw + (size_t)(h * cap + j) * rb, d, o);
            for (int64_t i = 0; i < d; i++) {
                const double r = x[(h * cap + j) * d + i];
                se += (o[i] - r) * (o[i] - r);
                sr += r * r;
            }
        }
    T_ASSERT(se <= type_budget(t) * sr, "%s encoding: nmse %.3e above its budget %.1e", kvs_dtype_name(t), se / sr,
             type_budget(t));
    *dec = dv;
    return dst;
}

/* The cases a backend runs. The CPU: with the automatic variants every shape x every pair in the
 * loop; under a forced variant (the sweep) every shape with the pairs whose V type is the K type or
 * the next one in kv_types (each K type and each V type twice, block and element partners: the K
 * and the V path of a CPU kernel are chosen by their own type alone), under the 8-bit query
 * variants also every pair of two types they read on 8-bit codes; the sequence (one device through
 * many cases) runs those diagonal pairs on every shape.
 * OpenCL (PoCL: a device opened and kernels run per case, ~1 s of CPU each): each of the 49 pairs on
 * one shape, pair p on shape p % N_SHAPES (so every shape reads K and V of several types, block and
 * element), under every variant, in the loop and in the sequence: the full pair sweep at a sixth of
 * the cases. Vulkan (lavapipe, slower; every case compiles the pipelines of its K/V pair): with the
 * automatic variants every pair on prefill13_mha_d32 (odd sizes, causal, 13 query rows, split
 * keys), one pair (f16/bf16) on bidir17_gqa2_d64 (GQA, bidirectional) and one pair of block types on
 * each decode shape (ragged kv_len, head_dim 64/96/128, capacities 301-2100: q8_0/q4_0, q4_0/q4_1,
 * iq4_nl/f32) and the four block-type-K pairs q8_0/q4_0 .. iq4_nl/f32 on the d_k 64 / d_v 32 shape
 * (under every variant); under a forced variant 4 block-type pairs on prefill13 and the decode pairs; in the
 * one-device sequence (`seq`) the decode pairs. */
static int q8_variant(void);
static int q8_type(kvs_dtype t);
static int kvq_selected(int ci, int seq) {
    if (t_params.backend == KVS_BACKEND_CPU) {
        const int ki = (ci / N_TYPES) % N_TYPES, vi = ci % N_TYPES;
        const int diag2 = vi == ki || vi == (ki + 1) % N_TYPES;
        if (seq) return diag2;
        if (!t_variant[0] || strcmp(t_variant, "auto") == 0) return 1;
        return diag2 || (q8_variant() && q8_type(kv_types[ki]) && q8_type(kv_types[vi]));
    }
    if (t_params.backend == KVS_BACKEND_OPENCL) return (ci % (N_TYPES * N_TYPES)) % N_SHAPES == ci / (N_TYPES * N_TYPES);
    const int sh = ci / (N_TYPES * N_TYPES), ki = (ci / N_TYPES) % N_TYPES, vi = ci % N_TYPES;
    const int diag = vi == (ki + 1) % N_TYPES, autov = !t_variant[0] || strcmp(t_variant, "auto") == 0;
    const int decode = (sh == 0 || sh == 1 || sh == 3) && diag && ki == (sh == 0 ? 3 : sh == 1 ? 4 : 6);
    if (seq) return decode;
    if (sh == 2) return autov || (diag && ki >= 3);
    if (sh == 4) return autov && diag && ki == 1;
    if (sh == 5) return diag && ki >= 3; /* d_k != d_v: the block-type K pairs */
    return decode;
}

/* The CPU variants avx512-vnni / avx2-q8 (and -split) take 8-bit query codes for a q8_0 / q4_0 K and
 * 8-bit weights for a q8_0 / q4_0 V (backends/cpu/attention_q8.h). Their approximations, bounded:
 * q's quantization, per logit by E_rj = scale sum_b dq_b (1/2 + 2^-15) sum_{i in b} |k_ji| (dq_b =
 * amax_b / 127 of the query's 32-value block b; E = 0 for the other K types), and the weights'
 * W = P |d_v| quantized per (row, block b, chunk of Q8_PV_CHUNK keys aligned to the key index) to
 * wmax (255; 127 for a q8_0 V under avx2-q8) steps, which moves out_t by at most
 *     B_t = e^(2E) (1/2 + 2^-14) / wmax sum_chunks max_{j in chunk} p_j |d_jb| sum_{j in chunk} |v_jt| / |d_jb|
 * (p the exact softmax weights, d_jb the V block scale, v the dequantized V; the e^(2E): the weights
 * the kernel quantizes are within that factor of p). q8_check asserts every output inside what these
 * imply (with E = max_j E_rj of the row: weights within e^(+-2E), so out within
 * (e^(2E) - 1) sum_j p_j |v_j| + B_t, key_mass and probs within (e^(2E) - 1) p, row_max within E,
 * the argmax's logit within 2E of the maximum, the rescaled row_sum within e^(+-E)) plus the f32
 * tolerances, and that the error is really small: nmse of out below 1e-3 (measured 2e-5 .. 7e-5 on
 * these shapes with a q8_0 / q4_0 K), yet above 1e-9 (the 8-bit path ran: not silently the f32 one). */
#define Q8_PV_CHUNK 64 /* the chunk of backends/cpu/x86/att_q8.h (AQ8_PV_CH); a smaller one only tightens */

static int q8_variant(void) {
    return strstr(t_variant, "attention:avx512-vnni") != NULL || strstr(t_variant, "attention:avx2-q8") != NULL;
}

/* The 8-bit kernels the CPU's attention runs for the types below under the variants in force:
 * "avx512-vnni" / "avx2-q8" (forced, or the automatic choice on x86: tests/probe.h), NULL for the
 * f32 query. */
static const char *q8_kernels(void) { return kvs_test_att_q8(t_params.backend, t_variant); }

/* The types those variants read on 8-bit codes: q8_0, q4_0, q4_1 and qh8 (KVS_QH8 here: the q4_1
 * upper plane with k_lo / v_lo) */
static int q8_type(kvs_dtype t) {
    return t == KVS_Q8_0 || t == KVS_Q4_0 || t == KVS_Q4_1 || t == KVS_QH8;
}

static int q8_applies(kvs_dtype kt, kvs_dtype vt) {
    if (!q8_kernels()) return 0;
    return q8_type(kt) || q8_type(vt);
}

static void q8_check(const ref_attn *r, kvs_dtype kt, kvs_dtype vt, const float *q, const double *kd, const double *vd,
                     const tt *vraw, tt *ot, tt *rmt, tt *rst, tt *amt, tt *pbt, tt *kmt, const unsigned char *km_before) {
    const int64_t nq = r->n_q, H = r->n_heads, Hkv = r->n_kv_heads, d = r->head_dim, cap = r->capacity, nkv = r->n_kv;
    const int64_t G = H / Hkv, nb = d / 32, dv = r->head_dim_v ? r->head_dim_v : d, nbv = dv / 32;
    const int kq = q8_type(kt), vq = q8_type(vt);
    double *E = t_alloc(sizeof(double) * (size_t)(nq * H)), Emax = 0.0;
    for (int64_t i = 0; i < nq * H && kq; i++) {
        const int64_t h = (i % H) / G;
        double dq[8] = {0}; /* head_dim <= 256 here */
        for (int64_t b = 0; b < nb; b++) {
            double amax = 0.0;
            for (int64_t t = 0; t < 32; t++) amax = fmax(amax, fabs((double)q[i * d + b * 32 + t]));
            dq[b] = amax / 127.0 * (0.5 + 0x1p-15);
        }
        double e = 0.0;
        for (int64_t j = 0; j < nkv; j++) {
            double ej = 0.0;
            for (int64_t b = 0; b < nb; b++) {
                double sk = 0.0;
                for (int64_t t = 0; t < 32; t++) sk += fabs(kd[(h * cap + j) * d + b * 32 + t]);
                ej += dq[b] * sk;
            }
            e = fmax(e, ej);
        }
        E[i] = r->scale * e;
        Emax = fmax(Emax, E[i]);
    }
    T_ASSERT(Emax < 0.25, "logit bound %g: too loose to test anything", Emax);
    /* the V side, from the stored bytes: the repacked scale delta_jb (|d|; qh8 |d| / 16) and the
     * constant cst_jb the 8-bit weights leave out (q4_1 m + 8 d, qh8 m + 120.5 d / 16, else 0) of
     * every (kv head, key, block) */
    double *dvb = t_alloc(sizeof(double) * (size_t)(Hkv * cap * nbv)), *cvb = t_alloc(sizeof(double) * (size_t)(Hkv * cap * nbv));
    const double wmax = ((vt == KVS_Q8_0 || vt == KVS_QH8) && strcmp(q8_kernels(), "avx2-q8") == 0) ? 127.0 : 255.0;
    if (vq) {
        const kvs_dtype st = vt == KVS_QH8 ? KVS_Q4_1 : vt;
        const size_t bb = kvs_dtype_bytes(st, 32);
        const unsigned char *raw = vraw->shadow + vraw->guard;
        for (int64_t x = 0; x < Hkv * cap * nbv; x++) {
            const double dd = ref_f16_to_f64((uint16_t)(raw[(size_t)x * bb] | raw[(size_t)x * bb + 1] << 8));
            const double mm = st == KVS_Q4_1 ? ref_f16_to_f64((uint16_t)(raw[(size_t)x * bb + 2] | raw[(size_t)x * bb + 3] << 8)) : 0.0;
            dvb[x] = fabs(dd) / (vt == KVS_QH8 ? 16.0 : 1.0);
            cvb[x] = vt == KVS_QH8 ? mm + 120.5 * dd / 16.0 : vt == KVS_Q4_1 ? mm + 8.0 * dd : 0.0;
        }
    }
    double *B = t_alloc(sizeof(double) * (size_t)dv), *cs = t_alloc(sizeof(double) * (size_t)dv);
    const double mtol = 1e-5, ftol = 1e-5;
    float *out = t_alloc(4 * (size_t)(nq * H * dv)), *rm = t_alloc(4 * (size_t)(nq * H)), *rs = t_alloc(4 * (size_t)(nq * H));
    int32_t *am = t_alloc(4 * (size_t)(nq * H));
    t_download(ot, out);
    t_download(rmt, rm);
    t_download(rst, rs);
    t_download(amt, am);
    double *A = t_alloc(sizeof(double) * (size_t)dv);
    for (int64_t i = 0; i < nq * H; i++) {
        const int64_t h = (i % H) / G;
        if (r->argmax[i] < 0) {
            T_ASSERT(am[i] == -1 && rs[i] == 0.0f, "row %lld: no visible key but argmax %d row_sum %g", (long long)i,
                     am[i], (double)rs[i]);
            continue;
        }
        const double f = exp(2.0 * E[i]) - 1.0;
        T_ASSERT(fabs((double)rm[i] - r->row_max[i]) <= E[i] + mtol * r->bound[i],
                 "row_max[%lld] = %.9g, want %.9g within the q8 bound %.3g", (long long)i, (double)rm[i], r->row_max[i], E[i]);
        const double rsr = rs[i] * exp((double)rm[i] - r->row_max[i]);
        T_ASSERT(fabs(rsr - r->row_sum[i]) <= (exp(E[i]) - 1.0 + ftol) * r->row_sum[i],
                 "row_sum[%lld] (rescaled) = %.9g, want %.9g within e^(+-%.3g)", (long long)i, rsr, r->row_sum[i], E[i]);
        T_ASSERT(am[i] >= 0 && am[i] < nkv && r->logits[i * nkv + am[i]] >= r->row_max[i] - 2.0 * E[i] - mtol * r->bound[i],
                 "argmax[%lld] = %d: logit below the maximum %.9g by more than 2 x %.3g", (long long)i, am[i], r->row_max[i],
                 E[i]);
        /* A_t = sum_j p_j |v_jt| */
        memset(A, 0, sizeof(double) * (size_t)dv);
        double amax = 0.0;
        for (int64_t j = 0; j < nkv; j++) {
            const double lg = r->logits[i * nkv + j];
            if (lg == -INFINITY) continue;
            const double pj = exp(lg - r->row_max[i]) / r->row_sum[i];
            for (int64_t t = 0; t < dv; t++) A[t] += pj * fabs(vd[(h * cap + j) * dv + t]);
        }
        for (int64_t t = 0; t < dv; t++) amax = fmax(amax, A[t]);
        /* B_t: the 8-bit weights' share (V q8_0 / q4_0 / q4_1 / qh8) */
        memset(B, 0, sizeof(double) * (size_t)dv);
        for (int64_t c0 = 0; c0 < nkv && vq; c0 += Q8_PV_CHUNK) {
            const int64_t c1 = c0 + Q8_PV_CHUNK < nkv ? c0 + Q8_PV_CHUNK : nkv;
            for (int64_t b = 0; b < nbv; b++) {
                double mx = 0.0;
                memset(cs, 0, sizeof(double) * 32);
                for (int64_t j = c0; j < c1; j++) {
                    const double lg = r->logits[i * nkv + j], dj = dvb[(h * cap + j) * nbv + b];
                    if (lg == -INFINITY || dj == 0.0) continue;
                    mx = fmax(mx, exp(lg - r->row_max[i]) / r->row_sum[i] * dj);
                    const double cj = cvb[(h * cap + j) * nbv + b];
                    for (int64_t t = 0; t < 32; t++) cs[t] += fabs(vd[(h * cap + j) * dv + b * 32 + t] - cj) / dj;
                }
                for (int64_t t = 0; t < 32; t++) B[b * 32 + t] += exp(2.0 * E[i]) * (0.5 + 0x1p-14) / wmax * mx * cs[t];
            }
        }
        for (int64_t t = 0; t < dv; t++) {
            const double err = fabs((double)out[i * dv + t] - r->out[i * dv + t]), lim = f * A[t] + B[t] + ftol * amax;
            T_ASSERT(err <= lim, "out[%lld][%lld] = %.9g, want %.9g within %.3g (q8 bound)", (long long)i, (long long)t,
                     (double)out[i * dv + t], r->out[i * dv + t], lim);
        }
    }
    t_check_nmse("out (8-bit q)", out, r->out, nq * H * dv, 1e-3);
    double se = 0.0, sr = 0.0; /* the 8-bit path really ran: an f32 query gives nmse ~1e-13 here */
    for (int64_t x = 0; x < nq * H * dv; x++) se += (out[x] - r->out[x]) * (out[x] - r->out[x]), sr += r->out[x] * r->out[x];
    T_ASSERT(se > 1e-9 * sr, "out nmse %.3g: the 8-bit query codes were not used", sr > 0 ? se / sr : 0.0);
    const double fm = exp(2.0 * Emax) - 1.0;
    float *pb = t_alloc(4 * (size_t)(r->n_probe * H * cap));
    t_download(pbt, pb);
    for (int64_t x = 0; x < r->n_probe * H * cap; x++)
        T_ASSERT(fabs((double)pb[x] - r->probs[x]) <= fm * r->probs[x] + 1e-6, "probs[%lld] = %g, want %g within the q8 bound",
                 (long long)x, (double)pb[x], r->probs[x]);
    unsigned char *kmb = t_alloc(kmt->nbytes);
    t_download(kmt, kmb);
    const float *km = (const float *)kmb;
    for (int64_t h = 0; h < Hkv; h++) {
        const int64_t valid = ref_attn_valid(r, h);
        for (int64_t j = 0; j < cap; j++) {
            if (j < valid)
                T_ASSERT(fabs((double)km[h * cap + j] - r->key_mass[h * cap + j]) <= fm * r->key_mass[h * cap + j] + 1e-6,
                         "key_mass[%lld][%lld] = %g, want %g within the q8 bound", (long long)h, (long long)j,
                         (double)km[h * cap + j], r->key_mass[h * cap + j]);
            else
                T_ASSERT(memcmp(kmb + 4 * (h * cap + j), km_before + 4 * (h * cap + j), 4) == 0,
                         "key_mass[%lld][%lld] beyond the valid length was written", (long long)h, (long long)j);
        }
    }
}

/* A qh8 K / V (QuantSpec's hierarchical cache, KVS_QH8 in these tests) of rows [0, n): the upper
 * plane written by the converting scatter to q4_1 (store), the lower plane random nibbles (any
 * lower nibbles make a valid qh8 block: x8 = x4 + (d / 16)(lo - 7.5), core/quant/quant_blocks.h),
 * uploaded into a QH8_LO tensor (*lo; rows >= n keep the poison). *dec: the 8-bit values in float64. */
static tt *store_qh8(const float *x, int64_t Hkv, int64_t cap, int64_t d, int64_t n, double **dec, tt **lo) {
    double *d4 = NULL;
    tt *hi = store(KVS_Q4_1, x, Hkv, cap, d, n, &d4);
    if (!hi) return NULL;
    tt *lt = t_new3(KVS_QH8_LO, d, cap, Hkv);
    unsigned char *raw = t_alloc(lt->nbytes);
    memcpy(raw, lt->shadow + lt->guard, lt->nbytes);
    const size_t rbl = (size_t)d / 2, rbh = kvs_dtype_bytes(KVS_Q4_1, d);
    const unsigned char *hr = hi->shadow + hi->guard;
    double *d8 = t_alloc(sizeof(double) * (size_t)(Hkv * cap * d));
    for (int64_t h = 0; h < Hkv; h++)
        for (int64_t j = 0; j < n; j++) {
            unsigned char *l = raw + (size_t)(h * cap + j) * rbl;
            for (size_t e = 0; e < rbl; e++) l[e] = (unsigned char)t_rand_int(0, 255);
            for (int64_t i = 0; i < d; i++) {
                const unsigned char *blk = hr + (size_t)(h * cap + j) * rbh + (size_t)(i / 32) * 20;
                const double s = ref_f16_to_f64((uint16_t)(blk[0] | blk[1] << 8)) / 16.0;
                const int byte = l[(i / 32) * 16 + (i % 32) % 16], nib = i % 32 < 16 ? byte & 15 : byte >> 4;
                d8[(h * cap + j) * d + i] = d4[(h * cap + j) * d + i] + s * ((double)nib - 7.5);
            }
        }
    t_upload(lt, raw);
    *lo = lt;
    *dec = d8;
    return hi;
}

/* One case: shape c, K type kt_, V type vt_ (KVS_QH8: store_qh8, read with k_lo / v_lo). */
static void kvq_run_types(const kvq_case *c, kvs_dtype kt_, kvs_dtype vt_) {
    t_case("attention-kvq %s k=%s v=%s n_q=%d n_heads=%d n_kv_heads=%d head_dim=%d head_dim_v=%d capacity=%d n_kv=%d "
           "causal=%d kvlen=%d stats=all",
           c->name, kvs_dtype_name(kt_), kvs_dtype_name(vt_), c->n_q, c->H, c->Hkv, c->d, c->dv ? c->dv : c->d, c->cap,
           c->n_kv, c->causal, c->kvlen);
    const int64_t nq = c->n_q, H = c->H, Hkv = c->Hkv, d = c->d, dv = c->dv ? c->dv : c->d, cap = c->cap;
    const int64_t nkv = c->n_kv ? c->n_kv : cap;
    float *q = t_alloc(4 * (size_t)(nq * H * d));
    float *k = t_alloc(4 * (size_t)(Hkv * cap * d)), *v = t_alloc(4 * (size_t)(Hkv * cap * dv));
    t_fill_normal(q, nq * H * d, 1.0);
    t_fill_normal(k, Hkv * cap * d, 1.0);
    t_fill_normal(v, Hkv * cap * dv, 1.0);
    double *kd = NULL, *vd = NULL;
    tt *klo = NULL, *vlo = NULL;
    tt *kt = kt_ == KVS_QH8 ? store_qh8(k, Hkv, cap, d, nkv, &kd, &klo) : store(kt_, k, Hkv, cap, d, nkv, &kd);
    if (!kt) return;
    tt *vt = vt_ == KVS_QH8 ? store_qh8(v, Hkv, cap, dv, nkv, &vd, &vlo) : store(vt_, v, Hkv, cap, dv, nkv, &vd);
    if (!vt) return;
    int32_t *kvlen = NULL;
    if (c->kvlen) {
        kvlen = t_alloc(4 * (size_t)Hkv);
        for (int64_t h = 0; h < Hkv; h++) kvlen[h] = (int32_t)t_rand_int(1, nkv);
        kvlen[0] = (int32_t)nkv;
    }
    const int64_t n_stat = nq > 1 ? nq / 2 : 1, n_probe = nq >= 2 ? 2 : 1;
    int32_t *stat_rows = t_alloc(4 * (size_t)nq), probe_rows[2] = {(int32_t)(nq - 1), 0};
    for (int64_t i = 0; i < nq; i++) stat_rows[i] = (int32_t)i;
    t_shuffle_i32(stat_rows, nq);

    tt *qt = t_new3(KVS_F32, d, H, nq), *ot = t_new3(KVS_F32, dv, H, nq);
    t_upload_f32(qt, q);
    tt *klt = NULL, *srt = t_new1(KVS_I32, n_stat), *prt = t_new1(KVS_I32, n_probe);
    t_upload_i32(srt, stat_rows);
    t_upload_i32(prt, probe_rows);
    tt *kmt = t_new2(KVS_F32, cap, Hkv), *pbt = t_new3(KVS_F32, cap, H, n_probe), *amt = t_new2(KVS_I32, H, nq);
    tt *rmt = t_new2(KVS_F32, H, nq), *rst = t_new2(KVS_F32, H, nq);
    kvs_attention_params p = kvs_attention_params_default();
    p.causal = c->causal;
    p.n_kv = c->n_kv;
    if (kvlen) {
        klt = t_new1(KVS_I32, Hkv);
        t_upload_i32(klt, kvlen);
        p.kv_len = klt->t;
    }
    if (klo) p.k_lo = klo->t;
    if (vlo) p.v_lo = vlo->t;
    p.stat_rows = srt->t;
    p.key_mass = kmt->t;
    p.probe_rows = prt->t;
    p.probs = pbt->t;
    p.argmax = amt->t;
    p.row_max = rmt->t;
    p.row_sum = rst->t;
    unsigned char *km_before = t_alloc(kmt->nbytes);
    memcpy(km_before, kmt->shadow + kmt->guard, kmt->nbytes);

    ref_attn r;
    memset(&r, 0, sizeof r);
    r.n_q = nq; r.n_heads = H; r.n_kv_heads = Hkv; r.head_dim = d; r.head_dim_v = dv; r.capacity = cap; r.n_kv = nkv;
    r.scale = (double)(float)(1.0 / sqrt((double)d));
    r.causal = c->causal;
    double *qd = t_alloc(sizeof(double) * (size_t)(nq * H * d));
    for (int64_t i = 0; i < nq * H * d; i++) qd[i] = q[i];
    r.q = qd; r.k = kd; r.v = vd; r.kv_len = kvlen;
    r.stat_rows = stat_rows; r.n_stat = n_stat;
    r.probe_rows = probe_rows; r.n_probe = n_probe;
    r.out = t_alloc(sizeof(double) * (size_t)(nq * H * dv));
    r.logits = t_alloc(sizeof(double) * (size_t)(nq * H * nkv));
    r.bound = t_alloc(sizeof(double) * (size_t)(nq * H));
    r.row_max = t_alloc(sizeof(double) * (size_t)(nq * H));
    r.row_sum = t_alloc(sizeof(double) * (size_t)(nq * H));
    r.argmax = t_alloc(4 * (size_t)(nq * H));
    r.key_mass = t_alloc(sizeof(double) * (size_t)(Hkv * cap));
    r.probs = t_alloc(sizeof(double) * (size_t)(n_probe * H * cap));
    ref_attention(&r);

    if (t_op(kvs_attention(t_dev(), qt->t, kt->t, vt->t, ot->t, &p))) return;
    if (q8_applies(kt_, vt_)) {
        q8_check(&r, kt_, vt_, q, kd, vd, vt, ot, rmt, rst, amt, pbt, kmt, km_before);
        t_assert_unchanged(kt, "k");
        t_assert_unchanged(vt, "v");
        t_assert_unchanged(qt, "q");
        if (klo) t_assert_unchanged(klo, "k_lo");
        if (vlo) t_assert_unchanged(vlo, "v_lo");
        return;
    }
    const double tol = 1e-6, mtol = 1e-5;
    float *out = t_alloc(4 * (size_t)(nq * H * dv)), *rm = t_alloc(4 * (size_t)(nq * H)), *rs = t_alloc(4 * (size_t)(nq * H));
    t_download(ot, out);
    t_download(rmt, rm);
    t_download(rst, rs);
    for (int64_t i = 0; i < nq * H; i++) {
        if (r.argmax[i] < 0) {
            T_ASSERT(rm[i] == -FLT_MAX && rs[i] == 0.0f, "row %lld head %lld: no visible key but row_max %g row_sum %g",
                     (long long)(i / H), (long long)(i % H), (double)rm[i], (double)rs[i]);
            continue;
        }
        const double err = fabs((double)rm[i] - r.row_max[i]);
        T_ASSERT(err <= mtol * r.bound[i] + 1e-30, "row_max[row %lld head %lld] = %.9g, want %.9g", (long long)(i / H),
                 (long long)(i % H), (double)rm[i], r.row_max[i]);
        rs[i] = (float)(rs[i] * exp((double)rm[i] - r.row_max[i]));
        char what[64];
        snprintf(what, sizeof what, "out[row %lld head %lld]", (long long)(i / H), (long long)(i % H));
        t_check_nmse(what, out + i * dv, r.out + i * dv, dv, tol);
    }
    t_check_nmse("out", out, r.out, nq * H * dv, tol);
    t_check_nmse("row_sum (rescaled)", rs, r.row_sum, nq * H, tol);
    int32_t *am = t_alloc(4 * (size_t)(nq * H));
    t_download(amt, am);
    for (int64_t i = 0; i < nq * H; i++) {
        if (r.argmax[i] < 0) {
            T_ASSERT(am[i] == -1, "argmax[%lld] = %d, want -1", (long long)i, am[i]);
            continue;
        }
        T_ASSERT(am[i] >= 0 && am[i] < nkv, "argmax[%lld] = %d outside [0, %lld)", (long long)i, am[i], (long long)nkv);
        const double lg = r.logits[i * nkv + am[i]];
        T_ASSERT(lg != -INFINITY && lg >= r.row_max[i] - mtol * r.bound[i],
                 "argmax[row %lld head %lld] = %d (logit %.9g), best %d (%.9g)", (long long)(i / H), (long long)(i % H),
                 am[i], lg, r.argmax[i], r.row_max[i]);
    }
    float *pb = t_alloc(4 * (size_t)(n_probe * H * cap));
    t_download(pbt, pb);
    for (int64_t i = 0; i < n_probe * H * cap; i++)
        if (r.probs[i] == 0.0) T_ASSERT(pb[i] == 0.0f, "probs[%lld] = %g, want 0 (invisible key)", (long long)i, (double)pb[i]);
    t_check_nmse("probs", pb, r.probs, n_probe * H * cap, tol);
    unsigned char *kmb = t_alloc(kmt->nbytes);
    t_download(kmt, kmb);
    const float *km = (const float *)kmb;
    float *kmv = t_alloc(4 * (size_t)(Hkv * cap));
    double *kmr = t_alloc(sizeof(double) * (size_t)(Hkv * cap));
    int64_t nv = 0;
    for (int64_t h = 0; h < Hkv; h++) {
        const int64_t valid = ref_attn_valid(&r, h);
        for (int64_t j = 0; j < cap; j++) {
            if (j < valid) {
                kmv[nv] = km[h * cap + j];
                kmr[nv++] = r.key_mass[h * cap + j];
            } else {
                T_ASSERT(memcmp(kmb + 4 * (h * cap + j), km_before + 4 * (h * cap + j), 4) == 0,
                         "key_mass[%lld][%lld] beyond the valid length was written", (long long)h, (long long)j);
            }
        }
    }
    t_check_nmse("key_mass", kmv, kmr, nv, tol);
    t_assert_unchanged(kt, "k");
    t_assert_unchanged(vt, "v");
    t_assert_unchanged(qt, "q");
    if (klo) t_assert_unchanged(klo, "k_lo");
    if (vlo) t_assert_unchanged(vlo, "v_lo");
}

static void kvq_run(int ci) {
    kvq_run_types(&shapes[ci / (N_TYPES * N_TYPES)], kv_types[(ci / N_TYPES) % N_TYPES], kv_types[ci % N_TYPES]);
}

/* Under the 8-bit query variants only the pairs with a q8_0 / q4_0 K or V run (the other pairs take
 * the avx512 / avx2 kernels, swept under those variants). */
static int kvq_q8_pair(int ci) {
    if (!q8_variant()) return 1;
    const kvs_dtype k = kv_types[(ci / N_TYPES) % N_TYPES], v = kv_types[ci % N_TYPES];
    return q8_type(k) || q8_type(v);
}

START_TEST(test_attention_kvq) {
    if (!kvq_selected(_i, 0) || !kvq_q8_pair(_i)) return;
    char tname[96];
    snprintf(tname, sizeof tname, "attention_kvq_%d", _i);
    t_begin(tname);
    kvq_run(_i);
    t_end();
}
END_TEST

/* The refusals: a K type the cache does not take, a converting scatter from a non-f32 source, a
 * block type whose rows are not whole blocks cannot even be created. */
START_TEST(test_attention_kvq_refusals) {
    kvs_device *dev = t_begin("attention_kvq_refusals");
    t_case("attention-kvq refusals");
    tt *qt = t_new3(KVS_F32, 256, 2, 1), *ot = t_new3(KVS_F32, 256, 2, 1);
    tt *k4 = t_new3(KVS_Q4_K, 256, 8, 1), *vf = t_new3(KVS_F32, 256, 8, 1);
    kvs_attention_params p = kvs_attention_params_default();
    t_expect(kvs_attention(dev, qt->t, k4->t, vf->t, ot->t, &p), KVS_ERR_DTYPE, "attention with a q4_k K");
    T_ASSERT(strstr(kvs_last_error(), "q4_k") != NULL, "message: %s", kvs_last_error());
    tt *src = t_new3(KVS_F16, 64, 1, 2), *dst = t_new3(KVS_Q8_0, 64, 4, 1), *idx = t_new1(KVS_I32, 2);
    t_expect(kvs_scatter(dev, src->t, idx->t, dst->t, 1), KVS_ERR_DTYPE, "scatter f16 -> q8_0");
    T_ASSERT(strstr(kvs_last_error(), "f16") != NULL, "message: %s", kvs_last_error());
    kvs_tensor *bad = NULL;
    t_expect(kvs_tensor_new(&bad, dev, KVS_Q4_0, 48, 4, 1, 0), KVS_ERR_DTYPE, "a q4_0 tensor of 48-value rows");
    t_end();
}
END_TEST

/* A q8_0 / q4_0 / q4_1 V with one non-finite block scale (NaN, inf) under every variant: the columns of that
 * block come out NaN or inf for every query head that sees the key (as in exact arithmetic: the key
 * has p > 0), the other columns finite (the 8-bit weights of the -vnni / -q8 variants hand such a
 * tile to their f32 kernel). 2 heads of G = 4, head_dim 64, 300 keys: the bad key in the second tile. */
START_TEST(test_attention_kvq_nonfinite) {
    t_begin("attention_kvq_nonfinite");
    const int64_t d = 64, Hkv = 2, G = 4, H = Hkv * G, cap = 300, bad_j = 270, bad_b = 1;
    for (int vi = 0; vi < 3; vi++)
        for (int nan = 0; nan < 2; nan++) {
            const kvs_dtype vt_ = vi == 2 ? KVS_Q4_1 : vi ? KVS_Q4_0 : KVS_Q8_0;
            t_case("attention-kvq non-finite V scale: v=%s %s at key %lld block %lld", kvs_dtype_name(vt_), nan ? "nan" : "inf",
                   (long long)bad_j, (long long)bad_b);
            float *q = t_alloc(4 * (size_t)(H * d)), *k = t_alloc(4 * (size_t)(Hkv * cap * d)), *v = t_alloc(4 * (size_t)(Hkv * cap * d));
            t_fill_normal(q, H * d, 1.0);
            t_fill_normal(k, Hkv * cap * d, 1.0);
            t_fill_normal(v, Hkv * cap * d, 1.0);
            double *kd = NULL, *vd = NULL;
            tt *kt = store(KVS_Q8_0, k, Hkv, cap, d, cap, &kd);
            if (!kt) return;
            tt *vt = store(vt_, v, Hkv, cap, d, cap, &vd);
            if (!vt) return;
            unsigned char *raw = t_alloc(vt->nbytes);
            memcpy(raw, vt->shadow + vt->guard, vt->nbytes);
            const size_t bb = kvs_dtype_bytes(vt_, 32), at = (size_t)((1 * cap + bad_j) * (d / 32) + bad_b) * bb;
            raw[at] = 0x00, raw[at + 1] = nan ? 0x7e : 0x7c; /* f16 NaN / inf (kv head 1) */
            t_upload(vt, raw);
            tt *qt = t_new3(KVS_F32, d, H, 1), *ot = t_new3(KVS_F32, d, H, 1);
            t_upload_f32(qt, q);
            kvs_attention_params p = kvs_attention_params_default();
            if (t_op(kvs_attention(t_dev(), qt->t, kt->t, vt->t, ot->t, &p))) return;
            float *out = t_alloc(4 * (size_t)(H * d));
            t_download(ot, out);
            for (int64_t g = 0; g < H; g++)
                for (int64_t t = 0; t < d; t++) {
                    const float x = out[g * d + t];
                    if (g / G == 1 && t / 32 == bad_b)
                        T_ASSERT(!isfinite(x), "head %lld column %lld = %g: the non-finite V scale was lost", (long long)g,
                                 (long long)t, (double)x);
                    else
                        T_ASSERT(isfinite(x), "head %lld column %lld = %g: not finite", (long long)g, (long long)t, (double)x);
                }
        }
    t_end();
}
END_TEST

/* A non-finite query under every variant of every backend, K and V q8_0 / q4_0: query head 1 holds a
 * NaN, head 6 an inf; every output column of those heads must be non-finite (a NaN logit makes a NaN
 * row; the 8-bit query codes of -vnni / -q8 give such a block a NaN step instead of finite codes; the
 * OpenCL and Vulkan kernels keep NaN logits, and their split-key combine a NaN partial sum), the other
 * heads finite. 2 kv heads of G = 4, head_dim 64, 300 keys. */
START_TEST(test_attention_kvq_nonfinite_q) {
    t_begin("attention_kvq_nonfinite_q");
    const int64_t d = 64, Hkv = 2, G = 4, H = Hkv * G, cap = 300;
    for (int ti = 0; ti < 2; ti++) {
        const kvs_dtype kt_ = ti ? KVS_Q4_0 : KVS_Q8_0;
        t_case("attention-kvq NaN / inf in q: k=v=%s", kvs_dtype_name(kt_));
        float *q = t_alloc(4 * (size_t)(H * d)), *k = t_alloc(4 * (size_t)(Hkv * cap * d)), *v = t_alloc(4 * (size_t)(Hkv * cap * d));
        t_fill_normal(q, H * d, 1.0);
        t_fill_normal(k, Hkv * cap * d, 1.0);
        t_fill_normal(v, Hkv * cap * d, 1.0);
        q[1 * d + 5] = NAN;
        q[6 * d + 40] = INFINITY;
        double *kd = NULL, *vd = NULL;
        tt *kt = store(kt_, k, Hkv, cap, d, cap, &kd);
        if (!kt) return;
        tt *vt = store(kt_, v, Hkv, cap, d, cap, &vd);
        if (!vt) return;
        tt *qt = t_new3(KVS_F32, d, H, 1), *ot = t_new3(KVS_F32, d, H, 1);
        t_upload_f32(qt, q);
        kvs_attention_params p = kvs_attention_params_default();
        if (t_op(kvs_attention(t_dev(), qt->t, kt->t, vt->t, ot->t, &p))) return;
        float *out = t_alloc(4 * (size_t)(H * d));
        t_download(ot, out);
        for (int64_t g = 0; g < H; g++)
            for (int64_t t = 0; t < d; t++) {
                const float x = out[g * d + t];
                if (g == 1 || g == 6)
                    T_ASSERT(!isfinite(x), "head %lld column %lld = %g: the non-finite query was lost", (long long)g,
                             (long long)t, (double)x);
                else
                    T_ASSERT(isfinite(x), "head %lld column %lld = %g: not finite", (long long)g, (long long)t, (double)x);
            }
    }
    t_end();
}
END_TEST

/* Non-finite rows reaching a quantized cache (quant_encode.c's rule, on every backend's converting
 * scatter): for q8_0, q4_0, q4_1 and iq4_nl, 5 token-major rows of 3 kv heads x 96 values in which
 * block (row r, head h, block b) holds a NaN, an inf or a -inf at one value when (r + h + b) % 3 == 0:
 * those blocks must be exactly the NaN block (zero bytes, f16 NaN 0x7e00 as d, and as m for q4_1), so
 * that every value they decode to is NaN; the other blocks decode to finite values. */
START_TEST(test_scatter_nonfinite) {
    t_begin("scatter_nonfinite");
    const kvs_dtype types[] = {KVS_Q8_0, KVS_Q4_0, KVS_Q4_1, KVS_IQ4_NL};
    const int64_t d = 96, Hkv = 3, n = 5, nb = d / 32;
    for (int ti = 0; ti < 4; ti++) {
        const kvs_dtype t = types[ti];
        t_case("scatter f32 -> %s with NaN / inf blocks", kvs_dtype_name(t));
        float *x = t_alloc(4 * (size_t)(n * Hkv * d));
        t_fill_normal(x, n * Hkv * d, 1.0);
        for (int64_t r = 0; r < n; r++)
            for (int64_t h = 0; h < Hkv; h++)
                for (int64_t b = 0; b < nb; b++)
                    if ((r + h + b) % 3 == 0) {
                        const float bad[3] = {NAN, INFINITY, -INFINITY};
                        x[(r * Hkv + h) * d + 32 * b + (r * 7 + b) % 32] = bad[(r + b) % 3];
                    }
        tt *dst = t_new3(t, d, n, Hkv), *src = t_new3(KVS_F32, d, Hkv, n), *idx = t_new1(KVS_I32, n);
        int32_t ix[5] = {0, 1, 2, 3, 4};
        t_upload_f32(src, x);
        t_upload_i32(idx, ix);
        if (t_op(kvs_scatter(t_dev(), src->t, idx->t, dst->t, 1))) return;
        unsigned char *raw = t_alloc(dst->nbytes);
        t_download(dst, raw);
        const size_t bb = kvs_dtype_bytes(t, 32);
        unsigned char nanb[34] = {0};
        nanb[1] = 0x7e;
        if (t == KVS_Q4_1) nanb[3] = 0x7e;
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t r = 0; r < n; r++)
                for (int64_t b = 0; b < nb; b++) {
                    const unsigned char *blk = raw + (size_t)((h * n + r) * nb + b) * bb;
                    double v[32];
                    decode_row(t, blk, 32, v);
                    if ((r + h + b) % 3 == 0) {
                        T_ASSERT(memcmp(blk, nanb, bb) == 0, "head %lld row %lld block %lld: not the NaN block (d %02x%02x)",
                                 (long long)h, (long long)r, (long long)b, blk[1], blk[0]);
                        for (int i = 0; i < 32; i++) T_ASSERT(isnan(v[i]), "value %d of a NaN block decodes to %g", i, v[i]);
                    } else {
                        for (int i = 0; i < 32; i++)
                            T_ASSERT(isfinite(v[i]), "head %lld row %lld block %lld value %d: %g from finite input",
                                     (long long)h, (long long)r, (long long)b, i, v[i]);
                    }
                }
    }
    t_end();
}
END_TEST

/* QuantSpec's qh8 (k_lo / v_lo: the verify's 8-bit read) beside other types, on every shape (odd
 * sizes, GQA 1-4, 1 / 3 / 13 / 17 query rows as a verify step reads, ragged kv_len, capacities up to
 * 2100), under every variant: against float64 attention over the 8-bit values at the f32 tolerances,
 * under avx512-vnni / avx2-q8 (8-bit query codes and weights) inside q8_check's bound. The CPU runs
 * every (shape, pair); the GPU backends pair p on shape p % 5. */
static const kvs_dtype qh8_pairs[][2] = {{KVS_QH8, KVS_QH8}, {KVS_QH8, KVS_Q8_0}, {KVS_Q4_0, KVS_QH8},
                                         {KVS_QH8, KVS_F16},  {KVS_F32, KVS_QH8},  {KVS_QH8, KVS_Q4_1}};
#define N_QH8P ((int)(sizeof qh8_pairs / sizeof qh8_pairs[0]))

START_TEST(test_attention_kvq_qh8) {
    const int sh = _i / N_QH8P, pi = _i % N_QH8P;
    if (t_params.backend != KVS_BACKEND_CPU && pi % N_SHAPES != sh) return;
    char tname[96];
    snprintf(tname, sizeof tname, "attention_kvq_qh8_%d", _i);
    t_begin(tname);
    kvq_run_types(&shapes[sh], qh8_pairs[pi][0], qh8_pairs[pi][1]);
    t_end();
}
END_TEST

/* A verify step packs 4 query rows of G heads where a decode step packs one: each row's output must not
 * depend on how many rows share the call (QuantSpec's greedy equality for drafts up to 3 rests on
 * it; the 8-bit variants take other qh8 P.V paths past 4 packed rows). CPU (the GPU kernels make no
 * such promise, nor does the portable variant's cblas_sgemm over a tile): 4 copies of one query row
 * against qh8/qh8, q4_1/q4_1, q8_0/q8_0 and q4_0/q4_0 (the caches a greedy speculative decode reads
 * on 8-bit codes under the automatic choice on x86), G = 4, 300 keys (a full tile and 44 keys),
 * head_dim 64, bit for bit the one-row call's output. */
START_TEST(test_attention_kvq_rows_independent) {
    t_begin("attention_kvq_rows_independent");
    if (t_params.backend != KVS_BACKEND_CPU || strstr(t_variant, "portable")) {
        t_end();
        return;
    }
    const int64_t d = 64, Hkv = 2, G = 4, H = Hkv * G, cap = 300;
    static const kvs_dtype types[] = {KVS_QH8, KVS_Q4_1, KVS_Q8_0, KVS_Q4_0};
    for (int ti = 0; ti < 4; ti++) {
        const kvs_dtype ty = types[ti];
        const int h8 = ty == KVS_QH8;
        t_case("attention-kvq rows independent: %s/%s, 1 vs 4 identical query rows", h8 ? "qh8" : kvs_dtype_name(ty),
               h8 ? "qh8" : kvs_dtype_name(ty));
        float *q = t_alloc(4 * (size_t)(4 * H * d)), *k = t_alloc(4 * (size_t)(Hkv * cap * d)), *v = t_alloc(4 * (size_t)(Hkv * cap * d));
        t_fill_normal(q, H * d, 1.0);
        for (int r = 1; r < 4; r++) memcpy(q + r * H * d, q, 4 * (size_t)(H * d));
        t_fill_normal(k, Hkv * cap * d, 1.0);
        t_fill_normal(v, Hkv * cap * d, 1.0);
        double *kd = NULL, *vd = NULL;
        tt *klo = NULL, *vlo = NULL;
        tt *kt = h8 ? store_qh8(k, Hkv, cap, d, cap, &kd, &klo) : store(ty, k, Hkv, cap, d, cap, &kd);
        if (!kt) return;
        tt *vt = h8 ? store_qh8(v, Hkv, cap, d, cap, &vd, &vlo) : store(ty, v, Hkv, cap, d, cap, &vd);
        if (!vt) return;
        tt *q1 = t_new3(KVS_F32, d, H, 1), *q4 = t_new3(KVS_F32, d, H, 4), *o1 = t_new3(KVS_F32, d, H, 1), *o4 = t_new3(KVS_F32, d, H, 4);
        t_upload_f32(q1, q);
        t_upload_f32(q4, q);
        kvs_attention_params p = kvs_attention_params_default();
        if (klo) p.k_lo = klo->t;
        if (vlo) p.v_lo = vlo->t;
        if (t_op(kvs_attention(t_dev(), q1->t, kt->t, vt->t, o1->t, &p))) return;
        if (t_op(kvs_attention(t_dev(), q4->t, kt->t, vt->t, o4->t, &p))) return;
        float *a = t_alloc(4 * (size_t)(H * d)), *b = t_alloc(4 * (size_t)(4 * H * d));
        t_download(o1, a);
        t_download(o4, b);
        for (int r = 0; r < 4; r++)
            T_ASSERT(memcmp(a, b + r * H * d, 4 * (size_t)(H * d)) == 0, "row %d of the 4-row call differs from the one-row call", r);
    }
    t_end();
}
END_TEST

static void kvq_seq_run(int ci) {
    if (kvq_selected(ci, 1) && kvq_q8_pair(ci)) kvq_run(ci);
}
static const t_seq kvq_seq[] = {{kvq_seq_run, N_KVQ}};
T_SEQUENCE_TEST(test_attention_kvq_sequence, kvq_seq)

Suite *suite_attention_kvq(void) {
    Suite *s = suite_create("attention-kvq");
    TCase *tc = tcase_create("attention-kvq");
    tcase_add_loop_test(tc, test_attention_kvq, 0, N_KVQ);
    tcase_add_test(tc, test_attention_kvq_refusals);
    tcase_add_test(tc, test_attention_kvq_nonfinite);
    tcase_add_test(tc, test_scatter_nonfinite);
    tcase_add_test(tc, test_attention_kvq_nonfinite_q);
    tcase_add_loop_test(tc, test_attention_kvq_qh8, 0, N_SHAPES * N_QH8P);
    tcase_add_test(tc, test_attention_kvq_rows_independent);
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_attention_kvq_sequence);
    suite_add_tcase(s, tc);
    return s;
}
