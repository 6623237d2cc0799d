/* QuantSpec (issue 17, second half): the hierarchical qh8 cache type and self-speculative decoding.
 *  - format: random blocks (odd ranges, offsets, a constant block, zeros, NaN-free) encode so that
 *    the upper plane decoded as q4_1 (core's decoder: the 4-bit view) equals the float64 reference
 *    of the view, the 8-bit kernel decoder equals the float64 reference of the 8-bit value (both to
 *    binary32 rounding), and the coding error is within the documented bounds (8-bit: s/2; view:
 *    8 s; plus the f16 rounding of d and m);
 *  - the device encoder (kvs_scatter_qh8) against kvs_qh8_encode_row, byte for byte, on blocks of
 *    seven kinds (decades of scales, constant, zero, outlier, f16-subnormal, near the f16 top, half
 *    steps), with a duplicate index and untouched rows; its refusals;
 *  - attention on a qh8 cache written by kvs_cache_write_rows (qh8/qh8, qh8 K with q8_0 V, f16 K
 *    with qh8 V): with k_lo/v_lo against float64 attention over the reference 8-bit values (and the
 *    key mass of all rows and the probabilities of a probe row against float64), without them (the
 *    draft) against float64 attention over the reference 4-bit view, under every attention variant
 *    of the backend, causal, GQA, n_kv across a tile edge (normalised MSE <= 1e-7, the f32 budget;
 *    under the CPU's 8-bit variants and its automatic choice on x86 (tests/probe.h), which read qh8 /
 *    q4_1 through 8-bit query codes and weights,
 *    2e-4 and the key mass and probabilities within their bound (e^(2E) - 1) p, E the logit
 *    bound of backends/cpu/attention_q8.h; the exact bounds are checked by ops-attention-kvq);
 *  - refusals: head_dim 8 (stories260K) KVS_ERR_DTYPE; a k_lo with a k that is not q4_1;
 *    draft with a non-qh8 cache, a policy, or out of range;
 *  - rollback: a cache that took rows and then lost some by kvs_cache_truncate is byte for byte
 *    (every plane, positions, lengths, next position) the cache that only took the kept rows;
 *  - compaction (kvs_cache_keep) moves every plane's rows; kvs_gather copies qh8_lo rows;
 *  - speculative sampling's acceptance (kvs_spec_accept) gives exactly the target distribution:
 *    for a 5-token vocabulary, the output distribution integrated over fine grids of both uniforms
 *    equals the analytic p to the grid's resolution;
 *  - greedy speculative decoding of tiny-llama-mixed-q.gguf (head_dim 64) on a qh8 cache gives the
 *    same tokens as plain greedy decoding on that cache, for drafts of 1, 2, 3, 5 and 8 tokens (8: a
 *    verify of 9 rows, past the 4-row GEMV: the GEMM path), a draft of 8 under every CPU attention
 *    variant, 3 and 8 under the portable matmul; on OpenCL and Vulkan drafts of 1, 3 and 8 and a
 *    draft of 8 under each of their attention variants; a sampling run; the draft pass really reads
 *    the 4-bit view (its logits differ from the 8-bit pass's); the refusals; kvs_generate_ar_continue
 *    after a 300-token context, also under the CPU's other attention precision than the automatic
 *    choice's (f32 query codes or 8-bit ones: drafts 3, 1, 8 give that variant's plain tokens);
 *  - on the trained models/kjv-ar-hd64.gguf: greedy speculative decoding (CPU: drafts 1-4, and 3 with
 *    q4_0 draft weights; OpenCL / Vulkan: draft 3) gives plain greedy's 256 tokens after a held-out
 *    prompt, with an acceptance above a measured bound.
 * Every case but the CPU-only format check and the CPU's 4-row bit-identity runs on each backend
 * (quantspec-cpu, -opencl, -vulkan): on OpenCL and Vulkan the cache's rows are coded on the device
 * (kvs_scatter_qh8) and must equal kvs_qh8_encode_row's bytes (test_encode, and every row of the
 * attention cases), and attention reads the lower planes in every kernel variant (attn_main /
 * attn_dec / split-K and the key-mass and probe passes on OpenCL; attn / split-K / attn_stats on
 * Vulkan). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/kvsieve.h"
#include "probe.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"
#include "internal.h" /* kvs_scatter_qh8 */

/* Forces on the CPU device dev the attention variant of the other query precision than the
 * automatic choice's: the f32-query avx512 / avx2 where the automatic choice takes the 8-bit
 * kernels (tests/probe.h, kvs_test_att_q8), else the 8-bit avx512-vnni, else avx2-q8. 0 when the CPU
 * runs none of them. */
static int set_other_attention(kvs_device *dev) {
    const char *a = kvs_test_att_q8(KVS_BACKEND_CPU, "");
    if (a) return kvs_device_set_variants(dev, strcmp(a, "avx512-vnni") == 0 ? "attention:avx512" : "attention:avx2") == KVS_OK;
    return kvs_device_set_variants(dev, "attention:avx512-vnni") == KVS_OK ||
           kvs_device_set_variants(dev, "attention:avx2-q8") == KVS_OK;
}

static kvs_device_params g_params;
static char g_model[4096];

static uint64_t g_rng = 0x51ed270b27a3c1f5ull;
static double urand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static kvs_device *open_dev(void) {
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    return dev;
}

START_TEST(test_format) {
    if (g_params.backend != KVS_BACKEND_CPU) return;
    printf("# qh8 format: seed %llx\n", (unsigned long long)g_rng);
    for (int it = 0; it < 400; it++) {
        float x[32];
        const double scale = pow(10.0, -3.0 + 6.0 * urand()), off = it % 3 == 0 ? 0.0 : (urand() - 0.5) * 4.0 * scale;
        for (int i = 0; i < 32; i++) x[i] = (float)(off + scale * (urand() - 0.5));
        if (it == 1) for (int i = 0; i < 32; i++) x[i] = 0.0f;
        if (it == 2) for (int i = 0; i < 32; i++) x[i] = 0.3125f;
        if (it == 3) x[7] = 40.0f * (float)scale; /* one outlier */
        uint8_t hi[20], lo[16];
        kvs_qh8_encode_row(x, 32, hi, lo);
        double r4[32], r8[32];
        float y4[32], y8[32];
        kvs_qh8_ref_view4(hi, r4);
        kvs_qh8_ref_value8(hi, lo, r8);
        ck_assert_int_eq(kvs_dequant_row(KVS_Q4_1, hi, 32, y4), KVS_OK); /* the view as a q4_1 block */
        kvs_qb_qh8(hi, lo, y8);
        const double d = kvs_qf16(hi), m = kvs_qf16(hi + 2), s = d / 16.0;
        for (int i = 0; i < 32; i++) {
            const double mag = fabs(m) + 16.0 * d;
            ck_assert_msg(fabs(y4[i] - r4[i]) <= 2.0 * 0x1p-24 * mag, "it %d [%d]: view %g vs ref %g", it, i, (double)y4[i], r4[i]);
            ck_assert_msg(fabs(y8[i] - r8[i]) <= 3.0 * 0x1p-24 * mag, "it %d [%d]: 8-bit %g vs ref %g", it, i, (double)y8[i], r8[i]);
            /* x4 is the centre of the 8-bit cell: |x8 - x4| <= 7.5 s exactly */
            ck_assert_msg(fabs(r8[i] - r4[i]) <= 7.5 * s * (1 + 1e-12), "it %d [%d]: |x8 - x4| > 7.5 s", it, i);
            const double slack = 0x1p-10 * fabs(m) + 0.13 * s + 1e-6 * fabs((double)x[i]);
            ck_assert_msg(fabs(r8[i] - x[i]) <= 0.5 * s + slack, "it %d [%d]: 8-bit error %g > s/2 = %g", it, i,
                          fabs(r8[i] - x[i]), 0.5 * s);
            ck_assert_msg(fabs(r4[i] - x[i]) <= 8.0 * s + slack, "it %d [%d]: 4-bit error %g > 8 s = %g", it, i,
                          fabs(r4[i] - x[i]), 8.0 * s);
        }
        if (it == 1 || it == 2)
            for (int i = 0; i < 32; i++) ck_assert_msg(r8[i] == x[i] && r4[i] == x[i], "constant block not exact");
    }
    ck_assert_int_eq(kvs_dtype_bytes(KVS_QH8, 64), 72);
    ck_assert_int_eq(kvs_dtype_bytes(KVS_QH8_LO, 64), 32);
    ck_assert_int_eq(kvs_dtype_is_quant(KVS_QH8), 0);
    ck_assert_int_eq(kvs_dtype_from_ggml(UINT32_MAX), KVS_DTYPE_COUNT); /* no GGUF type maps to the qh8 planes */
    {
        kvs_device *dev = open_dev();
        kvs_tensor *t = NULL;
        ck_assert_int_eq(kvs_tensor_new(&t, dev, KVS_QH8, 64, 2, 0, 0), KVS_ERR_DTYPE); /* a cache type only */
        ck_assert_msg(strstr(kvs_last_error(), "two tensors"), "%s", kvs_last_error());
        ck_assert_int_eq(kvs_tensor_new(&t, dev, KVS_QH8_LO, 64, 2, 0, 0), KVS_OK);
        ck_assert_int_eq(kvs_tensor_nbytes(t), 64);
        kvs_tensor_destroy(&t);
        kvs_device_destroy(&dev);
    }
    ck_assert_str_eq(kvs_dtype_name(KVS_QH8), "qh8");
    kvs_dtype t;
    ck_assert_int_eq(kvs_cache_type_from_name("qh8", &t), KVS_OK);
    ck_assert_int_eq(t, KVS_QH8);
}
END_TEST

/* float64 causal GQA attention; k, v: [H][cap][d] doubles, q [nq][nh][d], qpos(i) = n_kv - nq + i;
 * P (optional): the probabilities [nq][nh][n_kv] (0 for invisible keys). */
static void ref_attention(const float *q, const double *k, const double *v, int64_t nq, int64_t nh, int64_t H, int64_t cap,
                          int64_t n_kv, int64_t d, double *out, double *P) {
    const int64_t G = nh / H;
    double *w = malloc((size_t)n_kv * sizeof *w);
    for (int64_t i = 0; i < nq; i++)
        for (int64_t g = 0; g < nh; g++) {
            const int64_t h = g / G, qp = n_kv - nq + i;
            const float *qi = q + (i * nh + g) * d;
            double mx = -1e300, sum = 0.0;
            for (int64_t j = 0; j <= qp; j++) {
                double a = 0.0;
                for (int64_t t = 0; t < d; t++) a += (double)qi[t] * k[(h * cap + j) * d + t];
                w[j] = a / sqrt((double)d);
                if (w[j] > mx) mx = w[j];
            }
            for (int64_t j = 0; j <= qp; j++) sum += w[j] = exp(w[j] - mx);
            double *o = out + (i * nh + g) * d;
            for (int64_t t = 0; t < d; t++) {
                double acc = 0.0;
                for (int64_t j = 0; j <= qp; j++) acc += w[j] * v[(h * cap + j) * d + t];
                o[t] = acc / sum;
            }
            if (P)
                for (int64_t j = 0; j < n_kv; j++) P[(i * nh + g) * n_kv + j] = j <= qp ? w[j] / sum : 0.0;
        }
    free(w);
}

/* decodes a qh8 plane pair [H][cap][d] to doubles (8-bit values, or the view when lo is NULL) */
static void ref_planes(const uint8_t *hi, const uint8_t *lo, int64_t rows, int64_t d, double *y) {
    for (int64_t b = 0; b < rows * d / 32; b++) {
        if (lo)
            kvs_qh8_ref_value8(hi + 20 * b, lo + 16 * b, y + 32 * b);
        else
            kvs_qh8_ref_view4(hi + 20 * b, y + 32 * b);
    }
}

/* The references of one side (which 0: K, 1: V) of cache layer 0, [H][cap][d]: a qh8 side's 8-bit
 * values (r8) and 4-bit view (r4) from its downloaded planes, after checking that every row of
 * both planes equals kvs_qh8_encode_row of the f32 row written (rows [H][cap][d] f32 src, n_kv
 * written): the device's encoder bit for bit; another type's decoded values (both). */
static void side_ref(kvs_kv_cache *c, int which, const float *src, int64_t n_kv, double *r8, double *r4) {
    const kvs_cache_params *p = kvs_cache_get_params(c);
    const int64_t H = p->n_kv_heads, d = p->head_dim, cap = p->capacity, ne = H * cap * d;
    kvs_tensor *hi = which ? kvs_cache_v(c, 0) : kvs_cache_k(c, 0), *lo = which ? kvs_cache_v_lo(c, 0) : kvs_cache_k_lo(c, 0);
    if (!lo) {
        float *f = malloc((size_t)ne * sizeof *f);
        ck_assert_int_eq(kvs_cache_read_f32(c, 0, which, f), KVS_OK);
        for (int64_t e = 0; e < ne; e++) r8[e] = r4[e] = f[e];
        free(f);
        return;
    }
    ck_assert(kvs_tensor_dtype(hi) == KVS_Q4_1 && kvs_tensor_dtype(lo) == KVS_QH8_LO);
    const size_t rbh = kvs_dtype_bytes(KVS_Q4_1, d), rbl = kvs_dtype_bytes(KVS_QH8_LO, d);
    uint8_t *h8 = malloc(rbh * (size_t)(H * cap)), *l8 = malloc(rbl * (size_t)(H * cap));
    uint8_t *eh = malloc(rbh), *el = malloc(rbl);
    ck_assert_int_eq(kvs_tensor_download(hi, h8, 0, rbh * (size_t)(H * cap)), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(lo, l8, 0, rbl * (size_t)(H * cap)), KVS_OK);
    for (int64_t h = 0; h < H; h++)
        for (int64_t j = 0; j < n_kv; j++) {
            kvs_qh8_encode_row(src + (h * cap + j) * d, d, eh, el);
            const size_t r = (size_t)(h * cap + j);
            ck_assert_msg(memcmp(eh, h8 + r * rbh, rbh) == 0 && memcmp(el, l8 + r * rbl, rbl) == 0,
                          "%s head %lld row %lld: the cache's qh8 planes differ from kvs_qh8_encode_row", which ? "V" : "K",
                          (long long)h, (long long)j);
        }
    ref_planes(h8, l8, H * cap, d, r8);
    ref_planes(h8, NULL, H * cap, d, r4);
    /* kvs_cache_read_f32 reads the 8-bit values */
    float *rd = malloc((size_t)ne * sizeof *rd);
    ck_assert_int_eq(kvs_cache_read_f32(c, 0, which, rd), KVS_OK);
    for (int64_t e = 0; e < ne; e++) ck_assert_msg(fabs(rd[e] - r8[e]) <= 1e-6 * (1 + fabs(r8[e])), "read_f32 [%lld]", (long long)e);
    free(rd); free(h8); free(l8); free(eh); free(el);
}

START_TEST(test_attention) {
    kvs_device *dev = open_dev();
    /* K / V types per shape: both qh8; a qh8 K with a q8_0 V; an f16 K with a qh8 V (one side's
     * lower plane alone) */
    const struct { int64_t nq, nh, H, d, n_kv; kvs_dtype tk, tv; } sh[] = {
        {1, 4, 2, 64, 300, KVS_QH8, KVS_QH8}, {3, 6, 2, 96, 77, KVS_QH8, KVS_Q8_0}, {5, 8, 8, 32, 261, KVS_F16, KVS_QH8}};
    for (size_t si = 0; si < sizeof sh / sizeof sh[0]; si++) {
        const int64_t nq = sh[si].nq, nh = sh[si].nh, H = sh[si].H, d = sh[si].d, n_kv = sh[si].n_kv, cap = n_kv + 5;
        kvs_cache_params cp = kvs_cache_params_default();
        cp.n_layers = 1;
        cp.n_kv_heads = (int)H;
        cp.head_dim = (int)d;
        cp.capacity = cap;
        cp.mode = KVS_CACHE_APPEND;
        cp.type_k = sh[si].tk;
        cp.type_v = sh[si].tv;
        kvs_kv_cache *c = NULL;
        ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
        /* rows: keys with an offset per channel (and every 7th block constant, every 11th one
         * with an outlier), values plain; written in 2 appends */
        float *kr = malloc((size_t)(n_kv * H * d) * sizeof *kr), *vr = malloc((size_t)(n_kv * H * d) * sizeof *vr);
        for (int64_t e = 0; e < n_kv * H * d; e++) {
            kr[e] = (float)(2.0 * (urand() - 0.5) + 0.5 * (double)(e % d % 5));
            vr[e] = (float)(urand() - 0.5);
            if (e / 32 % 7 == 3) kr[e] = 0.75f;
            if (e / 32 % 11 == 5 && e % 32 == 9) vr[e] = 30.0f;
        }
        int32_t *pos = malloc((size_t)n_kv * sizeof *pos);
        for (int64_t i = 0; i < n_kv; i++) pos[i] = (int32_t)i;
        const int64_t n1 = n_kv / 3;
        for (int part = 0; part < 2; part++) {
            const int64_t a = part ? n1 : 0, n = part ? n_kv - n1 : n1;
            kvs_tensor *kt = NULL, *vt = NULL;
            ck_assert_int_eq(kvs_tensor_new(&kt, dev, KVS_F32, d, H, n, 0), KVS_OK);
            ck_assert_int_eq(kvs_tensor_new(&vt, dev, KVS_F32, d, H, n, 0), KVS_OK);
            kvs_tensor_upload(kt, kr + a * H * d, 0, (size_t)(n * H * d) * 4);
            kvs_tensor_upload(vt, vr + a * H * d, 0, (size_t)(n * H * d) * 4);
            ck_assert_msg(kvs_cache_write_rows(c, 0, kt, vt, pos + a, n) == KVS_OK, "%s", kvs_last_error());
            kvs_tensor_destroy(&kt);
            kvs_tensor_destroy(&vt);
        }
        kvs_tensor *K = kvs_cache_k(c, 0), *V = kvs_cache_v(c, 0), *Klo = kvs_cache_k_lo(c, 0), *Vlo = kvs_cache_v_lo(c, 0);
        ck_assert((Klo != NULL) == (sh[si].tk == KVS_QH8) && (Vlo != NULL) == (sh[si].tv == KVS_QH8));
        /* the written rows in the cache's layout [H][cap][d] (rows past n_kv: never written, 0) */
        float *ks = calloc((size_t)(cap * H * d), sizeof *ks), *vs = calloc((size_t)(cap * H * d), sizeof *vs);
        for (int64_t j = 0; j < n_kv; j++)
            for (int64_t h = 0; h < H; h++) {
                memcpy(ks + (h * cap + j) * d, kr + (j * H + h) * d, (size_t)d * 4);
                memcpy(vs + (h * cap + j) * d, vr + (j * H + h) * d, (size_t)d * 4);
            }
        double *k8 = malloc((size_t)(cap * H * d) * sizeof *k8), *v8 = malloc((size_t)(cap * H * d) * sizeof *v8);
        double *k4 = malloc((size_t)(cap * H * d) * sizeof *k4), *v4 = malloc((size_t)(cap * H * d) * sizeof *v4);
        side_ref(c, 0, ks, n_kv, k8, k4);
        side_ref(c, 1, vs, n_kv, v8, v4);
        float *qh = malloc((size_t)(nq * nh * d) * sizeof *qh), *oh = malloc((size_t)(nq * nh * d) * sizeof *oh);
        for (int64_t e = 0; e < nq * nh * d; e++) qh[e] = (float)(urand() - 0.5);
        double *r8 = malloc((size_t)(nq * nh * d) * sizeof *r8), *r4 = malloc((size_t)(nq * nh * d) * sizeof *r4);
        double *P8 = malloc((size_t)(nq * nh * n_kv) * sizeof *P8);
        ref_attention(qh, k8, v8, nq, nh, H, cap, n_kv, d, r8, P8);
        ref_attention(qh, k4, v4, nq, nh, H, cap, n_kv, d, r4, NULL);
        /* statistics of the 8-bit read: key mass of all rows [H][cap], probabilities of the last row */
        const int64_t G = nh / H;
        double *km = calloc((size_t)(H * cap), sizeof *km);
        for (int64_t i = 0; i < nq; i++)
            for (int64_t g = 0; g < nh; g++)
                for (int64_t j = 0; j < n_kv; j++) km[(g / G) * cap + j] += P8[(i * nh + g) * n_kv + j] / (double)G;
        kvs_tensor *q = NULL, *o = NULL, *kmt = NULL, *prt = NULL, *prow = NULL;
        ck_assert_int_eq(kvs_tensor_new(&q, dev, KVS_F32, d, nh, nq, 0), KVS_OK);
        ck_assert_int_eq(kvs_tensor_new(&o, dev, KVS_F32, d, nh, nq, 0), KVS_OK);
        ck_assert_int_eq(kvs_tensor_new(&kmt, dev, KVS_F32, cap, H, 0, 0), KVS_OK);
        ck_assert_int_eq(kvs_tensor_new(&prt, dev, KVS_F32, cap, nh, 1, 0), KVS_OK);
        ck_assert_int_eq(kvs_tensor_new(&prow, dev, KVS_I32, 1, 0, 0, 0), KVS_OK);
        const int32_t last = (int32_t)(nq - 1);
        kvs_tensor_upload(prow, &last, 0, 4);
        kvs_tensor_upload(q, qh, 0, (size_t)(nq * nh * d) * 4);
        float *kmh = malloc((size_t)(H * cap) * 4), *prh = malloc((size_t)(nh * cap) * 4);
        /* the logit bound of 8-bit query codes (backends/cpu/attention_q8.h): E = scale sum_b dq_b
         * (1/2 + 2^-15) sum_{i in b} |k_i|, dq_b = amax_b / 127 of the query's block, max over
         * rows and keys of the 8-bit values */
        double Emax = 0.0;
        for (int64_t i = 0; i < nq * nh; i++)
            for (int64_t j = 0; j < n_kv; j++) {
                const int64_t h = (i % nh) / G;
                double e = 0.0;
                for (int64_t b = 0; b < d / 32; b++) {
                    double amax = 0.0, sk = 0.0;
                    for (int64_t t = 0; t < 32; t++) {
                        amax = fmax(amax, fabs((double)qh[i * d + b * 32 + t]));
                        sk += fabs(k8[(h * cap + j) * d + b * 32 + t]);
                    }
                    e += amax / 127.0 * (0.5 + 0x1p-15) * sk;
                }
                Emax = fmax(Emax, e / sqrt((double)d));
            }
        const int nv = kvs_device_variant_count(dev, "attention");
        for (int vi = -1; vi < nv; vi++) {
            char spec[64] = "attention:auto";
            if (vi >= 0) snprintf(spec, sizeof spec, "attention:%s", kvs_device_variant_name(dev, "attention", vi));
            if (kvs_device_set_variants(dev, spec) != KVS_OK) continue; /* not runnable on this CPU */
            for (int full = 0; full < 2; full++) {
                kvs_attention_params ap = kvs_attention_params_default();
                ap.causal = 1;
                ap.n_kv = n_kv;
                ap.k_pos = kvs_cache_pos_tensor(c, 0);
                ap.kv_len = kvs_cache_len_tensor(c, 0);
                if (full) {
                    ap.k_lo = Klo;
                    ap.v_lo = Vlo;
                    ap.key_mass = kmt;
                    ap.probe_rows = prow;
                    ap.probs = prt;
                    kvs_tensor_fill(kmt, NAN);
                    kvs_tensor_fill(prt, NAN);
                }
                kvs_tensor_fill(o, NAN);
                ck_assert_msg(kvs_attention(dev, q, K, V, o, &ap) == KVS_OK, "%s", kvs_last_error());
                kvs_tensor_download(o, oh, 0, (size_t)(nq * nh * d) * 4);
                const double *r = full ? r8 : r4;
                double num = 0, den = 0;
                for (int64_t e = 0; e < nq * nh * d; e++) {
                    num += (oh[e] - r[e]) * (oh[e] - r[e]);
                    den += r[e] * r[e];
                }
                /* the CPU's 8-bit variants (and its automatic choice on x86: tests/probe.h) take 8-bit
                 * softmax weights against a q8_0 / q4_0 / qh8 /
                 * q4_1 V (the view) and 8-bit query codes against such a K (backends/cpu/
                 * attention_q8.h; their bounds are checked by ops-attention-kvq): measured nmse
                 * 3e-6 .. 3e-5 on these shapes */
                const int q8var = kvs_test_att_q8(g_params.backend, spec) != NULL; /* also auto on x86 */
                const int w8 = q8var && sh[si].tv != KVS_F16, k8v = q8var && sh[si].tk != KVS_F16;
                ck_assert_msg(num <= (w8 || k8v ? 2e-4 : 1e-7) * den, "%s nq %lld nh %lld H %lld d %lld n_kv %lld %s: nmse %g", spec, (long long)nq,
                              (long long)nh, (long long)H, (long long)d, (long long)n_kv, full ? "8-bit" : "4-bit view",
                              num / den);
                if (!full) continue;
                /* probabilities: within (e^(2E) - 1) p under 8-bit query codes (attention_q8.h) */
                const double ptol = k8v ? exp(2.0 * Emax) - 1.0 : 1e-4;
                kvs_tensor_download(kmt, kmh, 0, (size_t)(H * cap) * 4);
                kvs_tensor_download(prt, prh, 0, (size_t)(nh * cap) * 4);
                for (int64_t h = 0; h < H; h++)
                    for (int64_t j = 0; j < n_kv; j++) {
                        const double ref = km[h * cap + j], got = kmh[h * cap + j];
                        ck_assert_msg(fabs(got - ref) <= 1e-6 + ptol * ref, "%s shape %zu key mass [%lld][%lld] %g vs %g", spec,
                                      si, (long long)h, (long long)j, got, ref);
                    }
                for (int64_t g = 0; g < nh; g++)
                    for (int64_t j = 0; j < cap; j++) {
                        const double ref = j < n_kv ? P8[((nq - 1) * nh + g) * n_kv + j] : 0.0, got = prh[g * cap + j];
                        ck_assert_msg(fabs(got - ref) <= 1e-6 + ptol * ref, "%s shape %zu probs [%lld][%lld] %g vs %g", spec, si,
                                      (long long)g, (long long)j, got, ref);
                    }
            }
        }
        kvs_device_set_variants(dev, "attention:auto");
        /* a lower plane needs the q4_1 upper plane as k / v */
        kvs_attention_params ap = kvs_attention_params_default();
        ap.k_lo = Klo ? Klo : Vlo;
        ck_assert_int_eq(kvs_attention(dev, q, Klo ? V : K, V, o, &ap), Klo && sh[si].tv == KVS_QH8 ? KVS_OK : KVS_ERR_DTYPE);
        free(kr); free(vr); free(pos); free(ks); free(vs); free(k8); free(v8); free(k4); free(v4);
        free(qh); free(oh); free(r8); free(r4); free(P8); free(km); free(kmh); free(prh);
        kvs_tensor_destroy(&q); kvs_tensor_destroy(&o); kvs_tensor_destroy(&kmt); kvs_tensor_destroy(&prt);
        kvs_tensor_destroy(&prow);
        kvs_cache_destroy(&c);
    }
    /* head_dim 8 (stories260K): refused for qh8 on any backend */
    kvs_cache_params cp = kvs_cache_params_default();
    cp.n_layers = 1;
    cp.n_kv_heads = 4;
    cp.head_dim = 8;
    cp.capacity = 16;
    cp.type_v = KVS_QH8;
    kvs_kv_cache *c = NULL;
    ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_ERR_DTYPE);
    ck_assert_msg(strstr(kvs_last_error(), "qh8") && strstr(kvs_last_error(), "head_dim 8"), "%s", kvs_last_error());
    kvs_device_destroy(&dev);
}
END_TEST

/* kvs_scatter_qh8 (the cache's append; on the device for OpenCL / Vulkan) against the host encoder
 * kvs_qh8_encode_row, byte for byte in both planes: 3 groups x 150 token-major rows of 96 values
 * (blocks of 7 kinds: spread values across 8 decades with offsets, constant, zero, one outlier,
 * f16-subnormal scales, values near the f16 range's top, values on the 8-bit grid's half steps),
 * scattered to rows (37 i + g) % 170 of 170 with one duplicate (the later row wins), rows not
 * written left as they were; then the refusals. */
START_TEST(test_encode) {
    kvs_device *dev = open_dev();
    const int64_t G = 3, d = 96, n = 150, Nd = 170, nb = n * G * d / 32;
    float *x = malloc((size_t)(n * G * d) * sizeof *x);
    for (int64_t b = 0; b < nb; b++) {
        float *y = x + 32 * b;
        const double sc = pow(10.0, -4.0 + 8.0 * urand()), off = (urand() - 0.5) * 6.0 * sc;
        for (int i = 0; i < 32; i++) y[i] = (float)(off + sc * (urand() - 0.5));
        switch (b % 7) {
        case 1: for (int i = 0; i < 32; i++) y[i] = -1.3125f; break;
        case 2: for (int i = 0; i < 32; i++) y[i] = 0.0f; break;
        case 3: y[b % 32] = (float)(50.0 * sc); break;
        case 4: for (int i = 0; i < 32; i++) y[i] = (float)(1e-6 * (urand() - 0.5)); break;
        case 5: for (int i = 0; i < 32; i++) y[i] = (float)(30000.0 + 20000.0 * (urand() - 0.5)); break;
        case 6: { /* min 0, max 255 / 64: s = 1/64 exactly; values at u + 0.5 steps of it */
            for (int i = 0; i < 32; i++) y[i] = (float)((double)(int)(urand() * 255.0) / 64.0 + (i % 3 == 0 ? 1.0 / 128.0 : 0.0));
            y[0] = 0.0f;
            y[1] = 255.0f / 64.0f;
        } break;
        default: break;
        }
    }
    int32_t idx[3 * 150];
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = 0; i < n; i++) idx[g * n + i] = (int32_t)((37 * i + g) % Nd);
    idx[n - 1] = idx[0]; /* group 0: rows 0 and n-1 both go to the same row; n-1 wins */
    const size_t rbh = kvs_dtype_bytes(KVS_Q4_1, d), rbl = kvs_dtype_bytes(KVS_QH8_LO, d);
    const size_t bh = rbh * (size_t)(G * Nd), bl = rbl * (size_t)(G * Nd);
    uint8_t *eh = malloc(bh), *el = malloc(bl), *gh = malloc(bh), *gl = malloc(bl);
    memset(eh, 0xa5, bh);
    memset(el, 0x5a, bl);
    for (int64_t i = 0; i < n; i++)
        for (int64_t g = 0; g < G; g++) {
            const size_t r = (size_t)(g * Nd + idx[g * n + i]);
            kvs_qh8_encode_row(x + (i * G + g) * d, d, eh + r * rbh, el + r * rbl);
        }
    kvs_tensor *src = NULL, *ti = NULL, *hi = NULL, *lo = NULL;
    ck_assert_int_eq(kvs_tensor_new(&src, dev, KVS_F32, d, G, n, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_new(&ti, dev, KVS_I32, n, G, 0, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_new(&hi, dev, KVS_Q4_1, d, Nd, G, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_new(&lo, dev, KVS_QH8_LO, d, Nd, G, 0), KVS_OK);
    kvs_tensor_upload(src, x, 0, (size_t)(n * G * d) * 4);
    kvs_tensor_upload(ti, idx, 0, sizeof idx);
    memset(gh, 0xa5, bh);
    memset(gl, 0x5a, bl);
    kvs_tensor_upload(hi, gh, 0, bh);
    kvs_tensor_upload(lo, gl, 0, bl);
    ck_assert_msg(kvs_scatter_qh8(dev, src, ti, hi, lo, 1) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_tensor_download(hi, gh, 0, bh), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(lo, gl, 0, bl), KVS_OK);
    int64_t bad = 0;
    for (int64_t r = 0; r < G * Nd; r++)
        for (int64_t b = 0; b < d / 32; b++) {
            const uint8_t *a1 = eh + r * rbh + 20 * b, *a2 = gh + r * rbh + 20 * b;
            const uint8_t *c1 = el + r * rbl + 16 * b, *c2 = gl + r * rbl + 16 * b;
            if (memcmp(a1, a2, 20) == 0 && memcmp(c1, c2, 16) == 0) continue;
            if (bad++ < 3)
                printf("# row %lld block %lld differs: d %04x/%04x m %04x/%04x\n", (long long)r, (long long)b,
                       a1[0] | a1[1] << 8, a2[0] | a2[1] << 8, a1[2] | a1[3] << 8, a2[2] | a2[3] << 8);
        }
    ck_assert_msg(bad == 0, "%s: %lld of %lld qh8 blocks differ from kvs_qh8_encode_row", kvs_backend_name(g_params.backend),
                  (long long)bad, (long long)(G * Nd * d / 32));
    /* refusals */
    kvs_tensor *f = NULL, *q41 = NULL, *sm = NULL;
    ck_assert_int_eq(kvs_tensor_new(&f, dev, KVS_F32, d, Nd, G, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_new(&q41, dev, KVS_Q4_1, d, Nd, G, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_new(&sm, dev, KVS_QH8_LO, d, Nd - 1, G, 0), KVS_OK);
    ck_assert_int_eq(kvs_scatter_qh8(dev, src, ti, hi, NULL, 1), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_scatter_qh8(dev, src, ti, hi, q41, 1), KVS_ERR_DTYPE);
    ck_assert_msg(strstr(kvs_last_error(), "lo"), "%s", kvs_last_error());
    ck_assert_int_eq(kvs_scatter_qh8(dev, src, ti, f, lo, 1), KVS_ERR_DTYPE);
    ck_assert_int_eq(kvs_scatter_qh8(dev, src, ti, hi, sm, 1), KVS_ERR_SHAPE);
    ck_assert_int_eq(kvs_scatter_qh8(dev, src, ti, hi, hi, 1), KVS_ERR_DTYPE);
    kvs_tensor_destroy(&f); kvs_tensor_destroy(&q41); kvs_tensor_destroy(&sm);
    kvs_tensor_destroy(&src); kvs_tensor_destroy(&ti); kvs_tensor_destroy(&hi); kvs_tensor_destroy(&lo);
    free(x); free(eh); free(el); free(gh); free(gl);
    kvs_device_destroy(&dev);
}
END_TEST

/* every byte of a cache's state: K/V (and lower) planes, device pos/len, host positions, next pos */
static void cache_bytes(kvs_kv_cache *c, uint8_t **buf, size_t *n) {
    const kvs_cache_params *p = kvs_cache_get_params(c);
    size_t cap = 0, at = 0;
    *buf = NULL;
    for (int pass = 0; pass < 2; pass++) {
        at = 0;
        for (int l = 0; l < p->n_layers; l++) {
            kvs_tensor *ts[6] = {kvs_cache_k(c, l), kvs_cache_v(c, l), kvs_cache_k_lo(c, l), kvs_cache_v_lo(c, l),
                                 kvs_cache_pos_tensor(c, l), kvs_cache_len_tensor(c, l)};
            for (int i = 0; i < 6; i++) {
                if (!ts[i]) continue;
                size_t nb = kvs_tensor_nbytes(ts[i]);
                if (pass) ck_assert_int_eq(kvs_tensor_download(ts[i], *buf + at, 0, nb), KVS_OK);
                at += nb;
            }
            for (int h = 0; h < p->n_kv_heads; h++) {
                if (pass) {
                    memcpy(*buf + at, kvs_cache_positions(c, l, h), (size_t)p->capacity * 4);
                    memcpy(*buf + at + p->capacity * 4, kvs_cache_rope_positions(c, l, h), (size_t)p->capacity * 4);
                    int64_t len = kvs_cache_len(c, l, h);
                    memcpy(*buf + at + 8 * p->capacity, &len, 8);
                }
                at += (size_t)p->capacity * 8 + 8;
            }
        }
        if (pass) {
            int64_t np = kvs_cache_next_pos(c), bu = kvs_cache_bytes_used(c);
            memcpy(*buf + at, &np, 8);
            memcpy(*buf + at + 8, &bu, 8);
        }
        at += 16;
        if (!pass) {
            cap = at;
            *buf = malloc(cap);
        }
    }
    *n = at;
}

static void append(kvs_device *dev, kvs_kv_cache *c, const float *rows, int64_t r0, int64_t n) {
    const kvs_cache_params *p = kvs_cache_get_params(c);
    const int64_t w = (int64_t)p->n_kv_heads * p->head_dim;
    int32_t pos[64];
    for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)(r0 + i);
    kvs_tensor *k = NULL, *v = NULL;
    ck_assert_int_eq(kvs_tensor_new(&k, dev, KVS_F32, p->head_dim, p->n_kv_heads, n, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_new(&v, dev, KVS_F32, p->head_dim, p->n_kv_heads, n, 0), KVS_OK);
    kvs_tensor_upload(k, rows + r0 * w, 0, (size_t)(n * w) * 4);
    kvs_tensor_upload(v, rows + (r0 + 40) * w, 0, (size_t)(n * w) * 4);
    for (int l = 0; l < p->n_layers; l++) ck_assert_msg(kvs_cache_write_rows(c, l, k, v, pos, n) == KVS_OK, "%s", kvs_last_error());
    kvs_tensor_destroy(&k);
    kvs_tensor_destroy(&v);
}

START_TEST(test_rollback) {
    kvs_device *dev = open_dev();
    const kvs_dtype ty[][2] = {{KVS_QH8, KVS_QH8}, {KVS_QH8, KVS_F32}, {KVS_F32, KVS_F32}, {KVS_Q8_0, KVS_Q4_0}};
    for (int ti = 0; ti < 4; ti++) {
        kvs_cache_params p = kvs_cache_params_default();
        p.n_layers = 2;
        p.n_kv_heads = 3;
        p.head_dim = 64;
        p.capacity = 23;
        p.mode = KVS_CACHE_APPEND;
        p.type_k = ty[ti][0];
        p.type_v = ty[ti][1];
        const int64_t w = p.n_kv_heads * p.head_dim;
        float *rows = malloc((size_t)(80 * w) * sizeof *rows);
        for (int64_t e = 0; e < 80 * w; e++) rows[e] = (float)(urand() - 0.5) * 3.0f;
        kvs_kv_cache *a = NULL, *b = NULL;
        ck_assert_msg(kvs_cache_create(&a, dev, &p) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(kvs_cache_create(&b, dev, &p), KVS_OK);
        /* a: 10 rows, 7 (drafts), back to 12 -> rows 10, 11 kept from the second write; then 6 more */
        append(dev, a, rows, 0, 4);
        append(dev, a, rows, 4, 6);
        append(dev, a, rows, 10, 7);
        ck_assert_int_eq(kvs_cache_truncate(a, 12), KVS_OK);
        /* b: only the kept rows */
        append(dev, b, rows, 0, 4);
        append(dev, b, rows, 4, 6);
        append(dev, b, rows, 10, 2);
        uint8_t *ba, *bb;
        size_t na, nb;
        cache_bytes(a, &ba, &na);
        cache_bytes(b, &bb, &nb);
        ck_assert_int_eq(na, nb);
        ck_assert_msg(memcmp(ba, bb, na) == 0, "%s/%s: truncated cache differs from one that never saw the rows",
                      kvs_dtype_name(p.type_k), kvs_dtype_name(p.type_v));
        free(ba); free(bb);
        append(dev, a, rows, 12, 6);
        append(dev, b, rows, 12, 6);
        ck_assert_int_eq(kvs_cache_truncate(a, 30), KVS_OK); /* beyond every length: nothing changes */
        cache_bytes(a, &ba, &na);
        cache_bytes(b, &bb, &nb);
        ck_assert_msg(na == nb && memcmp(ba, bb, na) == 0, "after the second append");
        free(ba); free(bb);
        ck_assert_int_eq(kvs_cache_truncate(a, -1), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(kvs_cache_truncate(NULL, 0), KVS_ERR_INVALID_ARGUMENT);
        kvs_cache_destroy(&a);
        kvs_cache_destroy(&b);
        p.mode = KVS_CACHE_POSITIONAL;
        ck_assert_int_eq(kvs_cache_create(&a, dev, &p), KVS_OK);
        ck_assert_int_eq(kvs_cache_truncate(a, 0), KVS_ERR_STATE);
        kvs_cache_destroy(&a);
        free(rows);
    }
    kvs_device_destroy(&dev);
}
END_TEST

/* kvs_cache_keep (eviction's compaction) moves both planes of a qh8 cache: after keeping a
 * different increasing row set per head and layer, row i of every plane (upper, lower, K and V) is
 * the old row keep[h][i]; kvs_gather copies lower-plane rows (the rows ops take qh8_lo tensors). */
START_TEST(test_keep_gather) {
    kvs_device *dev = open_dev();
    kvs_cache_params p = kvs_cache_params_default();
    p.n_layers = 2;
    p.n_kv_heads = 3;
    p.head_dim = 64;
    p.capacity = 23;
    p.mode = KVS_CACHE_APPEND;
    p.type_k = p.type_v = KVS_QH8;
    const int64_t H = 3, d = 64, cap = 23, w = H * d, nr = 17;
    float *rows = malloc((size_t)(80 * w) * sizeof *rows);
    for (int64_t e = 0; e < 80 * w; e++) rows[e] = (float)(urand() - 0.5) * 3.0f;
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, dev, &p) == KVS_OK, "%s", kvs_last_error());
    append(dev, c, rows, 0, 9);
    append(dev, c, rows, 9, 8);
    int32_t keep[3 * 17];
    int64_t n_keep[3];
    for (int64_t h = 0; h < H; h++) {
        n_keep[h] = 0;
        for (int32_t r = 0; r < nr; r++)
            if ((r * (h + 2)) % 5 != 1) keep[h * nr + n_keep[h]++] = r;
    }
    for (int l = 0; l < 2; l++) {
        kvs_tensor *ts[4] = {kvs_cache_k(c, l), kvs_cache_v(c, l), kvs_cache_k_lo(c, l), kvs_cache_v_lo(c, l)};
        uint8_t *before[4], *after[4];
        for (int t = 0; t < 4; t++) {
            const size_t nb = kvs_tensor_nbytes(ts[t]);
            before[t] = malloc(nb);
            after[t] = malloc(nb);
            ck_assert_int_eq(kvs_tensor_download(ts[t], before[t], 0, nb), KVS_OK);
        }
        /* layer 1 keeps the sets of the heads shifted by one */
        int32_t kl[3 * 17];
        int64_t nk[3];
        for (int64_t h = 0; h < H; h++) {
            const int64_t hs = (h + l) % H;
            nk[h] = n_keep[hs];
            memcpy(kl + h * nr, keep + hs * nr, (size_t)nk[h] * 4);
        }
        ck_assert_msg(kvs_cache_keep(c, l, kl, nk, nr) == KVS_OK, "%s", kvs_last_error());
        for (int t = 0; t < 4; t++) {
            const size_t nb = kvs_tensor_nbytes(ts[t]), rb = nb / (size_t)(H * cap);
            ck_assert_int_eq(kvs_tensor_download(ts[t], after[t], 0, nb), KVS_OK);
            for (int64_t h = 0; h < H; h++) {
                ck_assert_int_eq(kvs_cache_len(c, l, h), nk[h]);
                for (int64_t i = 0; i < nk[h]; i++)
                    ck_assert_msg(memcmp(after[t] + (size_t)(h * cap + i) * rb, before[t] + (size_t)(h * cap + kl[h * nr + i]) * rb,
                                         rb) == 0,
                                  "layer %d plane %d head %lld: kept row %lld is not old row %d", l, t, (long long)h,
                                  (long long)i, kl[h * nr + i]);
            }
        }
        for (int t = 0; t < 4; t++) {
            free(before[t]);
            free(after[t]);
        }
    }
    /* gather of lower-plane rows [H][5] */
    kvs_tensor *ti = NULL, *dst = NULL;
    const int32_t gi[3 * 5] = {4, 0, 3, 3, 1, 2, 2, 0, 5, 1, 0, 1, 2, 3, 4};
    ck_assert_int_eq(kvs_tensor_new(&ti, dev, KVS_I32, 5, H, 0, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_new(&dst, dev, KVS_QH8_LO, d, 5, H, 0), KVS_OK);
    kvs_tensor_upload(ti, gi, 0, sizeof gi);
    ck_assert_msg(kvs_gather(dev, kvs_cache_v_lo(c, 1), ti, dst) == KVS_OK, "%s", kvs_last_error());
    const size_t rb = kvs_dtype_bytes(KVS_QH8_LO, d);
    uint8_t *src = malloc(rb * (size_t)(H * cap)), *got = malloc(rb * (size_t)(H * 5));
    kvs_tensor_download(kvs_cache_v_lo(c, 1), src, 0, rb * (size_t)(H * cap));
    kvs_tensor_download(dst, got, 0, rb * (size_t)(H * 5));
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < 5; i++)
            ck_assert(memcmp(got + (size_t)(h * 5 + i) * rb, src + (size_t)(h * cap + gi[h * 5 + i]) * rb, rb) == 0);
    free(src); free(got); free(rows);
    kvs_tensor_destroy(&ti); kvs_tensor_destroy(&dst);
    kvs_cache_destroy(&c);
    kvs_device_destroy(&dev);
}
END_TEST

START_TEST(test_accept) {
    const double p[5] = {0.1, 0.35, 0.05, 0.3, 0.2}, q[5] = {0.3, 0.1, 0.25, 0.05, 0.3};
    const int GRID = 20000;
    double out[5] = {0};
    for (int x = 0; x < 5; x++) {
        int acc = 0;
        double rdist[5] = {0};
        for (int g = 0; g < GRID; g++) {
            int32_t y;
            const double u = (g + 0.5) / GRID;
            int r = kvs_spec_accept(p, q, 5, x, u, 0.5, &y);
            ck_assert(r == 0 || r == 1);
            if (r == 1) {
                ck_assert_int_eq(y, x);
                acc++;
            }
            ck_assert_int_eq(kvs_spec_accept(p, q, 5, x, 0.9999999, u, &y), p[x] / q[x] > 0.9999999 ? 1 : 0);
            if (p[x] / q[x] <= 0.9999999) rdist[y] += 1.0 / GRID; /* the residual draw over u2 */
        }
        const double a = (double)acc / GRID;
        ck_assert_msg(fabs(a - fmin(1.0, p[x] / q[x])) <= 1.0 / GRID, "x %d: acceptance %g", x, a);
        out[x] += q[x] * a;
        if (a < 1.0)
            for (int y = 0; y < 5; y++) out[y] += q[x] * (1.0 - a) * rdist[y];
    }
    for (int y = 0; y < 5; y++) ck_assert_msg(fabs(out[y] - p[y]) <= 5e-4, "token %d: %g vs p %g", y, out[y], p[y]);
    /* the residual is norm(max(0, p - q)): mass 0.25 + 0.25 on tokens 1 and 3 */
    int32_t y;
    ck_assert_int_eq(kvs_spec_accept(p, q, 5, 0, 0.99, 0.2, &y), 0);
    ck_assert_int_eq(y, 1);
    ck_assert_int_eq(kvs_spec_accept(p, q, 5, 0, 0.99, 0.8, &y), 0);
    ck_assert_int_eq(y, 3);
    /* p == q: always accepted; refusals */
    ck_assert_int_eq(kvs_spec_accept(p, p, 5, 2, 0.999, 0.5, &y), 1);
    const double q0[5] = {0, 0.5, 0.5, 0, 0};
    ck_assert_int_eq(kvs_spec_accept(p, q0, 5, 0, 0.5, 0.5, &y), -1);
    ck_assert_int_eq(y, -1);
    ck_assert_int_eq(kvs_spec_accept(p, q, 5, 5, 0.5, 0.5, &y), -1);
    ck_assert_int_eq(kvs_spec_accept(NULL, q, 5, 1, 0.5, 0.5, &y), -1);
}
END_TEST

/* Decodes max_new tokens after prompt[np] (stop tokens off) on a fresh qh8 K/V cache; draft 0 = plain
 * decoding, else QuantSpec with that draft length. Returns the token count; *status the result. */
static int64_t gen_n(kvs_device *dev, kvs_model *m, const int32_t *prompt, int64_t np, int draft, float temp,
                     int64_t max_new, int32_t *tok, kvs_gen_stats *st, kvs_status *status) {
    kvs_ar_params ap = kvs_ar_params_default();
    ap.max_new = max_new;
    ap.stop_at_bos = ap.stop_at_eos = 0;
    ap.draft = draft;
    ap.temperature = temp;
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_ar_capacity(m, np, &ap);
    cp.type_k = cp.type_v = KVS_QH8;
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
    int64_t n = 0;
    *status = kvs_generate_ar(m, c, prompt, np, &ap, NULL, NULL, tok, &n, st);
    kvs_cache_destroy(&c);
    return n;
}

static int64_t gen(kvs_device *dev, kvs_model *m, const int32_t *prompt, int64_t np, int draft, float temp, int32_t *tok,
                   kvs_gen_stats *st, kvs_status *status) {
    return gen_n(dev, m, prompt, np, draft, temp, 40, tok, st, status);
}

START_TEST(test_greedy_equal) {
    const int cpu = g_params.backend == KVS_BACKEND_CPU;
    kvs_device *dev = open_dev();
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const int32_t prompt[5] = {1, 17, 230, 5, 88};
    int32_t ref[40], tok[40];
    kvs_gen_stats st;
    kvs_status s;
    /* OpenCL / Vulkan: the automatic matmul, their attention variants (no "portable": skipped) */
    const char *mm[2] = {"matmul:auto", "matmul:portable"};
    const int nv = kvs_device_variant_count(dev, "attention");
    int64_t drafted = 0, accepted = 0;
    for (int mi = 0; mi < 2; mi++)
        for (int vi = -1; vi < nv; vi++) {
            char spec[96];
            snprintf(spec, sizeof spec, "%s,attention:%s", mm[mi], vi < 0 ? "auto" : kvs_device_variant_name(dev, "attention", vi));
            if (mi == 1 && vi >= 0) continue; /* portable matmul: with the automatic attention only */
            if (kvs_device_set_variants(dev, spec) != KVS_OK) continue;
            int64_t nr = gen(dev, m, prompt, 5, 0, 0.0f, ref, &st, &s);
            ck_assert_msg(s == KVS_OK && nr == 40, "%s", kvs_last_error());
            const int drafts[5] = {1, 2, 3, 5, 8};
            for (int di = 0; di < 5; di++) {
                /* every draft length under the automatic choice; 8 (a GEMM-sized verify) under each
                 * attention variant, 3 and 8 under the portable matmul */
                if (vi >= 0 && drafts[di] != 8) continue;
                if (!cpu && (drafts[di] == 2 || drafts[di] == 5)) continue; /* GPUs (slow on PoCL / lavapipe): 1, 3, 8 */
                if (mi == 1 && drafts[di] != 3 && drafts[di] != 8) continue;
                int64_t n = gen(dev, m, prompt, 5, drafts[di], 0.0f, tok, &st, &s);
                ck_assert_msg(s == KVS_OK, "%s", kvs_last_error());
                ck_assert_int_eq(n, 40);
                int same = 0;
                while (same < 40 && tok[same] == ref[same]) same++;
                ck_assert_msg(same == 40, "%s draft %d: speculative greedy differs from plain greedy at token %d", spec,
                              drafts[di], same);
                ck_assert(st.spec_verify_steps > 0 && st.spec_accepted <= st.spec_drafted);
                ck_assert_int_eq(st.tokens, 40);
                drafted += st.spec_drafted;
                accepted += st.spec_accepted;
            }
        }
    printf("# greedy: %lld of %lld drafted tokens accepted\n", (long long)accepted, (long long)drafted);
    kvs_device_set_variants(dev, "matmul:auto,attention:auto");
    /* the draft with a q4_0 copy of the weights (kvs_model_set_draft_weights): the verify keeps the
     * model's own, so greedy output is still plain greedy's; the copies change the draft's logits
     * and only those */
    {
        const int64_t V = kvs_model_get_hparams(m)->vocab;
        float *lw[2][2]; /* [draft weights off/on][kv_draft 0/1] logits after the prompt */
        for (int on = 0; on < 2; on++) {
            if (on) {
                ck_assert_msg(kvs_model_set_draft_weights(m, KVS_Q4_0) == KVS_OK, "%s", kvs_last_error());
                ck_assert(kvs_model_draft_weight_bytes(m) > 0);
            }
            kvs_cache_params cp = kvs_model_cache_params(m);
            cp.mode = KVS_CACHE_APPEND;
            cp.capacity = 16;
            cp.type_k = cp.type_v = KVS_QH8;
            kvs_kv_cache *c = NULL;
            ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK);
            int32_t last = 4, zero = 0, p5 = 5, t = 42;
            kvs_step_plan plan = {.tokens = prompt, .n_tokens = 5, .logit_rows = &last, .n_logit_rows = 1};
            kvs_step_result r;
            ck_assert_int_eq(kvs_model_forward(m, c, &plan, &r), KVS_OK);
            for (int kd = 0; kd < 2; kd++) {
                kvs_step_plan p1 = {.tokens = &t, .n_tokens = 1, .positions = &p5, .logit_rows = &zero, .n_logit_rows = 1,
                                    .kv_draft = kd};
                ck_assert_int_eq(kvs_model_forward(m, c, &p1, &r), KVS_OK);
                lw[on][kd] = malloc((size_t)V * 4);
                memcpy(lw[on][kd], r.logits, (size_t)V * 4);
                ck_assert_int_eq(kvs_cache_truncate(c, 5), KVS_OK);
            }
            kvs_cache_destroy(&c);
        }
        ck_assert_msg(memcmp(lw[0][0], lw[1][0], (size_t)V * 4) == 0, "draft weights changed a non-draft forward");
        ck_assert_msg(memcmp(lw[0][1], lw[1][1], (size_t)V * 4) != 0, "the draft forward did not use the draft weights");
        for (int i = 0; i < 4; i++) free(lw[i / 2][i % 2]);
        int64_t nr = gen(dev, m, prompt, 5, 0, 0.0f, ref, &st, &s);
        ck_assert_msg(s == KVS_OK && nr == 40, "%s", kvs_last_error());
        const int dw[3] = {3, 1, 8};
        for (int di = 0; di < (cpu ? 3 : 1); di++) { /* PoCL / lavapipe: draft 3 */
            int64_t n = gen(dev, m, prompt, 5, dw[di], 0.0f, tok, &st, &s);
            ck_assert_msg(s == KVS_OK && n == 40, "%s", kvs_last_error());
            int same = 0;
            while (same < 40 && tok[same] == ref[same]) same++;
            ck_assert_msg(same == 40, "q4_0 draft weights, draft %d: speculative greedy differs from plain at token %d", dw[di], same);
            printf("# q4_0 draft weights, draft %d: %lld of %lld drafted tokens accepted\n", dw[di], (long long)st.spec_accepted,
                   (long long)st.spec_drafted);
        }
        /* refusals; f32 removes the copies */
        ck_assert_int_eq(kvs_model_set_draft_weights(m, KVS_F16), KVS_ERR_DTYPE);
        ck_assert_msg(strstr(kvs_last_error(), "q4_0"), "%s", kvs_last_error());
        ck_assert(kvs_model_draft_weight_bytes(m) > 0); /* a refused type leaves the copies as they were */
        ck_assert_int_eq(kvs_model_set_draft_weights(m, KVS_Q4_K), KVS_ERR_DTYPE);
        ck_assert_int_eq(kvs_model_set_draft_weights(m, KVS_QH8), KVS_ERR_DTYPE);
        ck_assert_int_eq(kvs_model_set_draft_weights(NULL, KVS_Q4_0), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(kvs_model_set_draft_weights(m, KVS_Q8_0), KVS_OK);
        ck_assert(kvs_model_draft_weight_bytes(m) > 0);
        ck_assert_int_eq(kvs_model_set_draft_weights(m, KVS_F32), KVS_OK);
        ck_assert_int_eq(kvs_model_draft_weight_bytes(m), 0);
    }
    /* sampling runs (exactness of the rule: test_accept) */
    int64_t n = gen(dev, m, prompt, 5, 4, 0.8f, tok, &st, &s);
    ck_assert_msg(s == KVS_OK && n == 40, "%s", kvs_last_error());
    ck_assert(st.spec_accepted <= st.spec_drafted && st.spec_drafted > 0);
    for (int i = 0; i < 40; i++) ck_assert(tok[i] >= 0 && tok[i] < kvs_model_get_hparams(m)->vocab);
    /* the draft reads the 4-bit view: its logits differ from the 8-bit pass's */
    {
        kvs_cache_params cp = kvs_model_cache_params(m);
        cp.mode = KVS_CACHE_APPEND;
        cp.capacity = 16;
        cp.type_k = cp.type_v = KVS_QH8;
        kvs_kv_cache *c = NULL;
        ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK);
        const int64_t V = kvs_model_get_hparams(m)->vocab;
        float *l8 = malloc((size_t)V * 4), *l4 = malloc((size_t)V * 4);
        int32_t last = 4, zero = 0, p5 = 5, t = 42;
        kvs_step_plan plan = {.tokens = prompt, .n_tokens = 5, .logit_rows = &last, .n_logit_rows = 1};
        kvs_step_result r;
        ck_assert_int_eq(kvs_model_forward(m, c, &plan, &r), KVS_OK);
        for (int draft = 0; draft < 2; draft++) {
            kvs_step_plan p1 = {.tokens = &t, .n_tokens = 1, .positions = &p5, .logit_rows = &zero, .n_logit_rows = 1,
                                .kv_draft = draft};
            ck_assert_int_eq(kvs_model_forward(m, c, &p1, &r), KVS_OK);
            memcpy(draft ? l4 : l8, r.logits, (size_t)V * 4);
            ck_assert_int_eq(kvs_cache_truncate(c, 5), KVS_OK);
        }
        double diff = 0;
        for (int64_t i = 0; i < V; i++) diff += fabs((double)l4[i] - l8[i]);
        ck_assert_msg(diff > 0, "the draft pass gave the 8-bit logits");
        free(l8);
        free(l4);
        kvs_cache_destroy(&c);
    }
    /* why greedy is exact for drafts up to 3: a verify of up to 4 rows (the CPU's GEMV width) computes
     * each row bit for bit as a one-row decode step does (more rows take the GEMM tiles, which round
     * differently, ~1e-6 of these logits: equal tokens then hold unless a near-tie flips). CPU only:
     * the GPU backends' GEMV widths and attention kernels make no such promise */
    /* (also under the CPU's other attention precision, set_other_attention: the 8-bit kernels' qh8
     * paths are per row too) */
    for (int av = 0; cpu && av < 2; av++) {
        if (av && !set_other_attention(dev)) break;
        const int64_t V = kvs_model_get_hparams(m)->vocab;
        const int32_t nx[4] = {42, 7, 99, 300};
        float *one = malloc((size_t)(4 * V) * 4), *multi = malloc((size_t)(4 * V) * 4);
        for (int mode = 0; mode < 2; mode++) {
            kvs_cache_params cp = kvs_model_cache_params(m);
            cp.mode = KVS_CACHE_APPEND;
            cp.capacity = 16;
            cp.type_k = cp.type_v = KVS_QH8;
            kvs_kv_cache *c = NULL;
            ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK);
            int32_t last = 4, rows[4] = {0, 1, 2, 3}, pos[4] = {5, 6, 7, 8};
            kvs_step_plan plan = {.tokens = prompt, .n_tokens = 5, .logit_rows = &last, .n_logit_rows = 1};
            kvs_step_result r;
            ck_assert_int_eq(kvs_model_forward(m, c, &plan, &r), KVS_OK);
            for (int i = 0; i < (mode ? 1 : 4); i++) {
                kvs_step_plan p1 = {.tokens = nx + i, .n_tokens = mode ? 4 : 1, .positions = pos + i, .logit_rows = rows,
                                    .n_logit_rows = mode ? 4 : 1};
                ck_assert_int_eq(kvs_model_forward(m, c, &p1, &r), KVS_OK);
                memcpy(mode ? multi : one + i * V, r.logits, (size_t)((mode ? 4 : 1) * V) * 4);
            }
            kvs_cache_destroy(&c);
        }
        ck_assert_msg(memcmp(one, multi, (size_t)(4 * V) * 4) == 0, "a 4-row verify is not bit-identical to 4 decode steps%s",
                      av ? " (the other attention precision)" : "");
        free(one);
        free(multi);
    }
    kvs_device_set_variants(dev, "attention:auto");
    kvs_clear_error();
    /* refusals */
    kvs_ar_params ap = kvs_ar_params_default();
    ap.max_new = 8;
    ap.draft = 3;
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = 32;
    kvs_kv_cache *c = NULL;
    ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK); /* f32 */
    int64_t no = 0;
    ck_assert_int_eq(kvs_generate_ar(m, c, prompt, 5, &ap, NULL, NULL, tok, &no, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "qh8"), "%s", kvs_last_error());
    kvs_cache_destroy(&c);
    cp.type_v = KVS_QH8;
    ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK);
    ap.draft = KVS_SPEC_MAX_DRAFT + 1;
    ck_assert_int_eq(kvs_generate_ar(m, c, prompt, 5, &ap, NULL, NULL, tok, &no, NULL), KVS_ERR_INVALID_ARGUMENT);
    ap.draft = 2;
    kvs_policy *pol = NULL;
    ck_assert_int_eq(kvs_policy_create(&pol, "h2o", NULL), KVS_OK);
    ap.policy = pol;
    ap.budget = 0.5;
    ck_assert_int_eq(kvs_generate_ar(m, c, prompt, 5, &ap, NULL, NULL, tok, &no, NULL), KVS_ERR_UNSUPPORTED);
    ap.policy = NULL;
    ck_assert_int_eq(kvs_generate_ar(m, c, prompt, 5, &ap, NULL, NULL, tok, &no, NULL), KVS_OK); /* V qh8 alone works */
    ck_assert_int_eq(no, 8);
    kvs_policy_destroy(&pol);
    kvs_cache_destroy(&c);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* QuantSpec on a trained model: models/kjv-ar-hd64.gguf (llama, head_dim 64, trained on the KJV
 * and two other public-domain texts; models/README.md), 256 greedy tokens after a held-out KJV prompt
 * on a qh8 cache. Speculative decoding with drafts of 1-4 (the model's weights) and 3 (a q4_0 copy of
 * them) gives plain decoding's tokens, and accepts at least the fraction of drafted tokens below
 * (measured 2026-12-03 on this prompt with AVX-512: 0.992, 0.988, 0.995, 0.981 for drafts 1-4, 0.894
 * with q4_0 draft weights; bounds 0.85 and 0.75 leave room for other kernels' rounding; README
 * "QuantSpec", acceptance on a trained model). On the random-weight fixture the acceptance says
 * nothing. OpenCL and Vulkan run draft 3 alone (measured there: 191 of 192, as on the CPU). */
START_TEST(test_trained) {
    const int cpu = g_params.backend == KVS_BACKEND_CPU;
    char path[4096];
    ck_assert_msg(kvs_model_locate("kjv-ar-hd64.gguf", path, sizeof path) == KVS_OK, "bundled fixture missing: %s",
                  kvs_last_error());
    kvs_device *dev = open_dev();
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, path, NULL) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_model_get_hparams(m)->head_dim, 64);
    /* [BOS] + "Pharisees confess both. And there arose a great cry: and the scribes that were of the
     * Pharisees' part arose, and strove, saying, We find" (Acts 23:8-9, in the held-out last 10%) */
    static const int32_t prompt[] = {
        1,   410, 460, 415, 295, 293, 411, 406, 280, 289, 431, 406, 419, 268, 309, 415, 426, 410, 447, 264,
        383, 261, 420, 414, 372, 261, 298, 276, 294, 280, 420, 422, 467, 269, 265, 262, 429, 325, 430, 406,
        351, 382, 276, 373, 265, 410, 460, 415, 295, 293, 411, 406, 439, 282, 295, 413, 261, 420, 414, 372,
        432, 269, 349, 420, 414, 360, 432, 262, 283, 299, 432, 410, 448, 411, 272, 417, 264};
    const int64_t np = (int64_t)(sizeof prompt / sizeof prompt[0]), N = 256;
    int32_t ref[256], tok[256];
    kvs_gen_stats st;
    kvs_status s;
    ck_assert_int_eq(gen_n(dev, m, prompt, np, 0, 0.0f, N, ref, &st, &s), N);
    ck_assert_msg(s == KVS_OK, "%s", kvs_last_error());
    /* draft length, draft weights (f32: the model's own), least acceptance */
    static const struct { int draft; kvs_dtype w; double min_accept; } runs[] = {
        {1, KVS_F32, 0.85}, {2, KVS_F32, 0.85}, {3, KVS_F32, 0.85}, {4, KVS_F32, 0.85}, {3, KVS_Q4_0, 0.75}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        if (!cpu && (runs[r].draft != 3 || runs[r].w != KVS_F32)) continue; /* PoCL / lavapipe: draft 3 */
        ck_assert_msg(kvs_model_set_draft_weights(m, runs[r].w) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(gen_n(dev, m, prompt, np, runs[r].draft, 0.0f, N, tok, &st, &s), N);
        ck_assert_msg(s == KVS_OK, "%s", kvs_last_error());
        int same = 0;
        while (same < N && tok[same] == ref[same]) same++;
        ck_assert_msg(same == N, "draft %d (%s weights): speculative greedy differs from plain greedy at token %d",
                      runs[r].draft, runs[r].w == KVS_F32 ? "model" : "q4_0", same);
        ck_assert(st.spec_drafted > 0 && st.spec_accepted <= st.spec_drafted);
        const double acc = (double)st.spec_accepted / (double)st.spec_drafted;
        printf("# trained model, draft %d (%s weights): acceptance %.3f (%lld of %lld)\n", runs[r].draft,
               runs[r].w == KVS_F32 ? "model" : "q4_0", acc, (long long)st.spec_accepted, (long long)st.spec_drafted);
        ck_assert_msg(acc >= runs[r].min_accept, "draft %d: acceptance %.3f below %.2f", runs[r].draft, acc,
                      runs[r].min_accept);
    }
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* kvs_generate_ar_continue (the long-context bench's decode, kvsieve bench model --speculative): on
 * a random-weight llama of head_dim 64 (2 layers) whose cache holds a context of random tokens, the
 * plain continuation gives kvs_generate_ar's tokens after that prompt (the prefill is the same
 * forward), and speculative continuation (greedy) gives the plain tokens, several times on one cache
 * cut back by kvs_cache_truncate; then the refusals. */
static kvs_model *tiny_random(kvs_device *dev) {
    kvs_model_hparams hp = {.arch = KVS_ARCH_LLAMA, .n_layers = 2, .dim = 256, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64,
                            .ffn_dim = 512, .vocab = 512, .ctx_len = 512, .rms_eps = 1e-5f, .rope_base = 1e4f, .rope_dim = 64,
                            .rope_mode = KVS_ROPE_ADJACENT, .bos_id = 1, .eos_id = 2, .mask_id = -1};
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_create_random(&m, dev, &hp, KVS_Q4_0, 7) == KVS_OK, "%s", kvs_last_error());
    return m;
}

START_TEST(test_continue) {
    const int cpu = g_params.backend == KVS_BACKEND_CPU;
    kvs_device *dev = open_dev();
    kvs_model *m = tiny_random(dev);
    const int64_t C = cpu ? 300 : 100, M = 24;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)C), ref[24], tok[24];
    for (int64_t i = 0; i < C; i++) prompt[i] = 3 + (int32_t)(urand() * 500);
    /* kvs_generate_ar after the whole prompt: ref[0] from the prefill, ref[1..] from decode steps */
    kvs_ar_params ap = kvs_ar_params_default();
    ap.max_new = M;
    ap.stop_at_bos = ap.stop_at_eos = 0;
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = C + M;
    cp.type_k = cp.type_v = KVS_QH8;
    kvs_kv_cache *c = NULL;
    ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK);
    int64_t n = 0;
    ck_assert_msg(kvs_generate_ar(m, c, prompt, C, &ap, NULL, NULL, ref, &n, NULL) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(n, M);
    /* the same prefill, then continue from ref[0] */
    ck_assert_int_eq(kvs_cache_reset(c), KVS_OK);
    int32_t last = (int32_t)C - 1;
    kvs_step_plan plan = {.tokens = prompt, .n_tokens = C, .logit_rows = &last, .n_logit_rows = 1};
    kvs_step_result r;
    ck_assert_int_eq(kvs_model_forward(m, c, &plan, &r), KVS_OK);
    ck_assert_int_eq(kvs_cache_next_pos(c), C);
    const int drafts[4] = {0, 3, 1, 8};
    int64_t drafted = 0, accepted = 0;
    for (int di = 0; di < 4; di++) {
        if (!cpu && drafts[di] != 0 && drafts[di] != 3) continue; /* PoCL / lavapipe: plain and draft 3 */
        ap.draft = drafts[di];
        ap.max_new = M - 1;
        kvs_gen_stats st;
        ck_assert_int_eq(kvs_cache_truncate(c, C), KVS_OK);
        ck_assert_msg(kvs_generate_ar_continue(m, c, ref[0], &ap, NULL, NULL, tok, &n, &st) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(n, M - 1);
        ck_assert_int_eq(st.tokens, M - 1);
        int same = 0;
        while (same < M - 1 && tok[same] == ref[same + 1]) same++;
        ck_assert_msg(same == M - 1, "draft %d: continued tokens differ from kvs_generate_ar's at %d", drafts[di], same);
        ck_assert_int_eq(kvs_cache_max_len(c, 0), C + M - 1); /* the last token is not forwarded */
        if (drafts[di]) {
            ck_assert(st.spec_verify_steps > 0 && st.spec_accepted <= st.spec_drafted);
            drafted += st.spec_drafted, accepted += st.spec_accepted;
        } else ck_assert_int_eq(st.spec_verify_steps, 0);
    }
    /* the CPU's other attention precision (set_other_attention: the f32 query where the automatic
     * choice reads qh8 and the q4_1 view on 8-bit query codes and weights, backends/cpu/
     * attention_q8.h, else those 8-bit kernels): greedy speculative (draft 3, 1, 8) gives the plain
     * tokens of the same variant, over the 300-token context (two key tiles) */
    if (cpu && set_other_attention(dev)) {
        int32_t plain8[24];
        const int d8[4] = {0, 3, 1, 8};
        for (int di = 0; di < 4; di++) {
            ap.draft = d8[di];
            ap.max_new = M - 1;
            kvs_gen_stats st;
            ck_assert_int_eq(kvs_cache_truncate(c, C), KVS_OK);
            ck_assert_msg(kvs_generate_ar_continue(m, c, ref[0], &ap, NULL, NULL, di ? tok : plain8, &n, &st) == KVS_OK, "%s",
                          kvs_last_error());
            ck_assert_int_eq(n, M - 1);
            if (!di) continue;
            int same = 0;
            while (same < M - 1 && tok[same] == plain8[same]) same++;
            ck_assert_msg(same == M - 1, "the other attention precision, draft %d: tokens differ from plain decoding's at %d", d8[di],
                          same);
            drafted += st.spec_drafted, accepted += st.spec_accepted;
        }
        kvs_device_set_variants(dev, "attention:auto");
    }
    kvs_clear_error();
    printf("# continue after %lld tokens: %lld of %lld drafted tokens accepted\n", (long long)C, (long long)accepted,
           (long long)drafted);
    /* refusals */
    ck_assert_int_eq(kvs_cache_truncate(c, C), KVS_OK);
    ap.draft = 3;
    ap.max_new = 8;
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 512, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "vocabulary"), "%s", kvs_last_error());
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, -1, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_generate_ar_continue(NULL, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_INVALID_ARGUMENT);
    ap.max_new = M + 1; /* C + M + 1 rows > capacity */
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_OUT_OF_RANGE);
    ck_assert_msg(strstr(kvs_last_error(), "capacity"), "%s", kvs_last_error());
    ap.max_new = 8;
    ap.draft = KVS_SPEC_MAX_DRAFT + 1;
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_INVALID_ARGUMENT);
    ap.draft = 3;
    kvs_policy *pol = NULL;
    ck_assert_int_eq(kvs_policy_create(&pol, "h2o", NULL), KVS_OK);
    ap.policy = pol;
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_UNSUPPORTED);
    ap.policy = NULL;
    kvs_policy_destroy(&pol);
    ck_assert_int_eq(kvs_cache_reset(c), KVS_OK); /* empty */
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "empty"), "%s", kvs_last_error());
    kvs_cache_destroy(&c);
    cp.type_k = cp.type_v = KVS_F32; /* no 4-bit view to draft from */
    ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK);
    ck_assert_int_eq(kvs_model_forward(m, c, &plan, &r), KVS_OK);
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "qh8"), "%s", kvs_last_error());
    ap.draft = 0; /* plain continuation needs no qh8 */
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_OK);
    ck_assert_int_eq(n, 8);
    kvs_cache_destroy(&c);
    cp.mode = KVS_CACHE_POSITIONAL;
    ck_assert_int_eq(kvs_cache_create(&c, dev, &cp), KVS_OK);
    ck_assert_int_eq(kvs_generate_ar_continue(m, c, 5, &ap, NULL, NULL, tok, &n, NULL), KVS_ERR_INVALID_ARGUMENT);
    kvs_cache_destroy(&c);
    free(prompt);
    kvs_model_destroy(&m);
    /* a diffusion model has no speculative draft: draft weight copies are refused, not made unused */
    kvs_model_hparams hp = {.arch = KVS_ARCH_LLADA, .n_layers = 1, .dim = 64, .n_heads = 2, .n_kv_heads = 2, .head_dim = 32,
                            .ffn_dim = 128, .vocab = 64, .ctx_len = 64, .rms_eps = 1e-5f, .rope_base = 1e4f, .rope_dim = 32,
                            .rope_mode = KVS_ROPE_ADJACENT, .bos_id = 1, .eos_id = 2, .mask_id = 63};
    ck_assert_msg(kvs_model_create_random(&m, dev, &hp, KVS_F32, 3) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_model_set_draft_weights(m, KVS_Q4_0), KVS_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(kvs_last_error(), "diffusion"), "%s", kvs_last_error());
    ck_assert_int_eq(kvs_model_draft_weight_bytes(m), 0);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* The forward's keep-set (sparse) attention on a qh8 cache gathers both planes: a keep-set of every
 * row gives the dense logits bit for bit (8-bit read and draft), a keep-set dropping rows gives the
 * logits of a dense step on a copy of the cache compacted to those rows by kvs_cache_keep. */
START_TEST(test_sparse_keep) {
    kvs_device *dev = open_dev();
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    const int64_t V = hp->vocab, H = hp->n_kv_heads;
    ck_assert_int_le(H, 8);
    ck_assert_int_le(hp->n_layers, 16);
    const int32_t prompt[7] = {1, 17, 230, 5, 88, 301, 9};
    float *dense = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
    kvs_kv_cache *c[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        kvs_cache_params cp = kvs_model_cache_params(m);
        cp.mode = KVS_CACHE_APPEND;
        cp.capacity = 16;
        cp.type_k = cp.type_v = KVS_QH8;
        ck_assert_int_eq(kvs_cache_create(&c[i], dev, &cp), KVS_OK);
        int32_t last = 6;
        kvs_step_plan plan = {.tokens = prompt, .n_tokens = 7, .logit_rows = &last, .n_logit_rows = 1};
        kvs_step_result r;
        ck_assert_int_eq(kvs_model_forward(m, c[i], &plan, &r), KVS_OK);
    }
    int32_t keep[8 * 8], zero = 0, p7 = 7, t = 42;
    int64_t nk[8];
    kvs_layer_plan lp[16];
    memset(lp, 0, sizeof lp);
    for (int l = 0; l < hp->n_layers; l++) {
        lp[l].keep = keep;
        lp[l].n_keep = nk;
        lp[l].keep_stride = 8;
    }
    kvs_step_result r;
    for (int draft = 0; draft < 2; draft++) {
        /* every row (the 7 cached and the step's own) vs dense */
        kvs_step_plan p1 = {.tokens = &t, .n_tokens = 1, .positions = &p7, .logit_rows = &zero, .n_logit_rows = 1,
                            .kv_draft = draft};
        ck_assert_int_eq(kvs_model_forward(m, c[0], &p1, &r), KVS_OK);
        memcpy(dense, r.logits, (size_t)V * 4);
        ck_assert_int_eq(kvs_cache_truncate(c[0], 7), KVS_OK);
        for (int64_t h = 0; h < H; h++) {
            for (int j = 0; j < 8; j++) keep[h * 8 + j] = j;
            nk[h] = 8;
        }
        p1.layers = lp;
        ck_assert_msg(kvs_model_forward(m, c[0], &p1, &r) == KVS_OK, "%s", kvs_last_error());
        for (int64_t i = 0; i < V; i++)
            ck_assert_msg(r.logits[i] == dense[i], "draft %d: logit %lld %g vs dense %g", draft, (long long)i, r.logits[i], dense[i]);
        ck_assert_int_eq(kvs_cache_truncate(c[0], 7), KVS_OK);
    }
    /* a head-dependent keep-set of the cached rows (plus the step's own row 7) vs the dense step on
     * the cache compacted to the same rows (same keys, same positions) */
    int32_t ck[8 * 7];
    int64_t cnk[8];
    for (int64_t h = 0; h < H; h++) {
        int n = 0;
        for (int j = 0; j < 7; j++)
            if (j != 2 + h % 3 && j != 5) ck[h * 7 + n] = keep[h * 8 + n] = j, n++;
        keep[h * 8 + n] = 7;
        nk[h] = n + 1;
        cnk[h] = n;
    }
    kvs_step_plan p1 = {.tokens = &t, .n_tokens = 1, .positions = &p7, .logit_rows = &zero, .n_logit_rows = 1, .layers = lp};
    ck_assert_msg(kvs_model_forward(m, c[0], &p1, &r) == KVS_OK, "%s", kvs_last_error());
    memcpy(got, r.logits, (size_t)V * 4);
    for (int l = 0; l < hp->n_layers; l++) ck_assert_int_eq(kvs_cache_keep(c[1], l, ck, cnk, 7), KVS_OK);
    p1.layers = NULL;
    ck_assert_msg(kvs_model_forward(m, c[1], &p1, &r) == KVS_OK, "%s", kvs_last_error());
    double num = 0, den = 0, diff = 0;
    for (int64_t i = 0; i < V; i++) {
        num += ((double)got[i] - r.logits[i]) * ((double)got[i] - r.logits[i]);
        den += (double)r.logits[i] * r.logits[i];
        diff += fabs((double)got[i] - dense[i]);
    }
    ck_assert_msg(num <= 1e-10 * den, "sparse keep-set vs compacted cache: nmse %g", num / den);
    ck_assert_msg(diff > 0, "dropping rows did not change the logits");
    free(dense); free(got);
    kvs_cache_destroy(&c[0]);
    kvs_cache_destroy(&c[1]);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_quantspec", &g_params, "tiny-llama-mixed-q.gguf", g_model, sizeof g_model);
    if (setup >= 0) return setup;
    Suite *s = suite_create("quantspec");
    TCase *tc = tcase_create("quantspec");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_format);
    tcase_add_test(tc, test_encode);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_rollback);
    tcase_add_test(tc, test_keep_gather);
    tcase_add_test(tc, test_accept);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("greedy"); /* the model-level cases (CK_RUN_CASE=greedy alone) */
    tcase_set_timeout(tg, 600);
    tcase_add_test(tg, test_greedy_equal);
    tcase_add_test(tg, test_continue);
    tcase_add_test(tg, test_trained);
    suite_add_tcase(s, tg);
    TCase *tk = tcase_create("sparse");
    tcase_set_timeout(tk, 600);
    tcase_add_test(tk, test_sparse_keep);
    suite_add_tcase(s, tk);
    return kvs_test_run(s);
}
