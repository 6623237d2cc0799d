/* Suite "matmul-quant": kvs_matmul and kvs_embedding with block-quantized weights (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) against the float64 product of the exactly
 * decoded matrix (ref_quant.h), swept over the matmul variants (CPU: auto, portable, avx2, avx512,
 * avx512-blas, and the 8-bit activation ones portable-q8, avx2-q8, avx512-vnni, checked against
 * their own derived budget: check_q8; OpenCL: auto, gemv, tiled: qmatmul.cl's qgemv and qgemm on every
 * shape; Vulkan: auto, tiled, vec). Weights are random blocks: random bytes with random finite f16 scales (|d| <= 0.02,
 * dmin / m in [0, 0.02)), so every bit pattern of the codes and sub-scales occurs.
 * Shapes: m odd; k = 3 and 11 blocks of 32 (11: a 256-value chunk plus a remainder) or 1 and 3
 * super-blocks of 256; n = 1 and 3 (the decoding GEMV, one pass over W) and 13, 37 (the GEMM tiles
 * under the f32-activation variants; the 8-bit ones take up to 64 rows in groups of 4); and for the
 * 512-bit VNNI kernels' groups of 16 blocks: k = 35 blocks (two groups and an odd remainder) with
 * n = 2, 22 (a group and an even remainder) with n = 4, 32 (groups only) with n = 1 (K types: 3,
 * 2, 4 super-blocks).
 * matmul-quant-rows: under the 8-bit activation variants a row's product does not depend on the
 * rows beside it (QuantSpec's verify step relies on it: ops_dense.c): 7 rows at once (a group of 4
 * and one of 3) equal, bit for bit, each row alone.
 * Guarded tensors: writes outside y, or any write to W and x, fail the case.
 *
 * Tolerance of the f32-activation variants (normalised MSE): 1e-7, the F32-weight budget. The CPU kernels decode each weight to f32
 * (relative error <= 3 * 2^-24 against the exact value, measured in test_quant) and multiply in f32
 * with f32 accumulation (relative error ~k * 2^-24 per product in the worst case, ~sqrt(k) * 2^-24
 * typically): nmse ~1e-13 at these k. A kernel that quantized x to 8 bits as llama.cpp's CPU path does
 * (relative error ~2^-8 per term, nmse ~1e-5) or that misread one sub-block (nmse >= 1/(k/16)) fails.
 * Embedding rows: |out - exact| <= 2^-22 * max|row| (a decode of f32 roundings, never a product).
 * The OpenCL kernels decode with the same operations (qblocks.cl, fma contraction off) and
 * accumulate in f32 in another order: the same budget holds. Vulkan runs every type too (quant.glsl
 * decoders in the tiled and GEMV shaders, both swept; its reductions are f32 as well).
 * A backend without a type must refuse it through supports() (KVS_ERR_UNSUPPORTED, the reason
 * naming the type); such cases are listed as skipped, never passed (t_query), and the CPU, OpenCL
 * and Vulkan backends may refuse none. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref_quant.h"
#include "reference.h"
#include "suites.h"

static const kvs_dtype qtypes[] = {KVS_Q4_0, KVS_Q4_1, KVS_Q5_0, KVS_Q5_1, KVS_Q8_0, KVS_IQ4_NL,
                                   KVS_Q2_K, KVS_Q3_K, KVS_Q4_K, KVS_Q5_K, KVS_Q6_K, KVS_IQ4_XS};
#define N_QT (int)(sizeof qtypes / sizeof qtypes[0])

/* Byte offsets of a block's f16 fields: [0] the scale d, [1] dmin / m (-1: none). */
static void f16_fields(kvs_dtype dt, int *d, int *m) {
    *m = -1;
    switch (dt) {
    case KVS_Q2_K: *d = 80; *m = 82; break;
    case KVS_Q3_K: *d = 108; break;
    case KVS_Q6_K: *d = 208; break;
    case KVS_Q4_1: case KVS_Q5_1: case KVS_Q4_K: case KVS_Q5_K: *d = 0; *m = 2; break;
    default: *d = 0; break;
    }
}

static void random_blocks(kvs_dtype dt, uint8_t *b, int64_t nblocks) {
    const size_t bytes = kvs_dtype_bytes(dt, kvs_dtype_block(dt));
    int fd, fm;
    f16_fields(dt, &fd, &fm);
    for (int64_t i = 0; i < nblocks; i++) {
        uint8_t *p = b + (size_t)i * bytes;
        for (size_t j = 0; j < bytes; j++) p[j] = (uint8_t)t_rand_u64();
        uint16_t h = kvs_f32_to_f16((float)t_rand_uniform(-0.02, 0.02));
        memcpy(p + fd, &h, 2);
        if (fm >= 0) {
            /* q4_1 / q5_1: m is added, any sign; the K types subtract dmin * m (dmin >= 0 in practice) */
            h = kvs_f32_to_f16((float)t_rand_uniform(dt == KVS_Q4_1 || dt == KVS_Q5_1 ? -0.02 : 0.0, 0.02));
            memcpy(p + fm, &h, 2);
        }
    }
}

/* After the support query refused a case (t_query: recorded as skipped, never passed): only a GPU
 * backend may, and its reason must name the weight type. */
static void check_refusal(kvs_dtype dt) {
    ck_assert_msg(t_params.backend != KVS_BACKEND_CPU && t_params.backend != KVS_BACKEND_OPENCL &&
                      t_params.backend != KVS_BACKEND_VULKAN,
                  "the %s backend must run %s", kvs_backend_name(t_params.backend), kvs_dtype_name(dt));
    ck_assert_msg(strstr(kvs_last_error(), kvs_dtype_name(dt)) != NULL, "refusal does not name %s: %s",
                  kvs_dtype_name(dt), kvs_last_error());
}

/* 1 when the CPU may run this product on 8-bit activations (matmul.h): n <= 64 (KVS_Q8_MAX_N) under
 * a -q8 / -vnni variant, or under the automatic choice (which picks it on x86 with AVX2). */
static int q8_may_apply(int64_t n) {
    if (t_params.backend != KVS_BACKEND_CPU || n > 64) return 0;
    return t_variant[0] == 0 || strstr(t_variant, "-q8") || strstr(t_variant, "vnni");
}

/* The 8-bit activation budget (matmul.h): x is quantized in blocks of ba (32, or 256 for the K types
 * and iq4_xs) with step d_b = amax_b / 127, and |x - x_hat| <= 0.5 d_b + 127 |d_b - f16(d_b)| <=
 * 0.5625 d_b per value, so per output
 *   |y - y_exact| <= sum_b 0.57 d_b sum_{j in b} |w_j|   (+ |m_b| 2^-11 32 amax_b for q4_1 / q5_1,
 *                                                          whose x sum s is an f16)
 *                   + 2^-16 sum_j |w_j x_j|               (f32 rounding of the block sums)
 * (a worst case: every error aligned). It alone would pass a kernel that misreads a 16-value group
 * of a long row, so the normalised MSE is bounded too: with independent rounding errors it is
 * E[(d/2)^2 / 3] / E[x^2] ~ d^2 / 4 ~ 1.6e-5 for x uniform in [-1, 1]; 1e-4 leaves a 6x margin,
 * while a misread group gives >= 1e-2. */
static void check_q8(kvs_dtype dt, const uint8_t *blocks, const double *Wd, const float *x, const float *y,
                     const double *ref, int64_t m, int64_t k, int64_t n) {
    const int ba = kvs_dtype_block(dt) == 256 ? 256 : 32;
    const size_t bb = kvs_dtype_bytes(dt, 32);
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < m; r++) {
            double bound = 0, mag = 0;
            for (int64_t b = 0; b < k / ba; b++) {
                double amax = 0, wabs = 0;
                for (int64_t j = b * ba; j < (b + 1) * ba; j++) {
                    amax = fmax(amax, fabs(x[i * k + j]));
                    wabs += fabs(Wd[r * k + j]);
                    mag += fabs(Wd[r * k + j] * x[i * k + j]);
                }
                bound += 0.57 * amax / 127.0 * wabs;
                if (dt == KVS_Q4_1 || dt == KVS_Q5_1) {
                    const uint8_t *blk = blocks + (size_t)((r * k) / 32 + b) * bb;
                    uint16_t h;
                    memcpy(&h, blk + 2, 2);
                    bound += fabs(kvs_f16_to_f32(h)) * 0x1p-11 * 32.0 * amax;
                }
            }
            bound += 0x1p-16 * mag + 0x1p-20 * fabs(ref[i * m + r]) + 1e-30;
            const double err = fabs((double)y[i * m + r] - ref[i * m + r]);
            ck_assert_msg(err <= bound, "%s: y[%lld][%lld] = %.9g, exact %.9g: error %.3g above the 8-bit bound %.3g",
                          t_case_str(), (long long)i, (long long)r, (double)y[i * m + r], ref[i * m + r], err, bound);
        }
    t_check_nmse("y (8-bit activations)", y, ref, n * m, 1e-4);
}

#define N_SHAPES 7
static void qmm_run(int _i) {
    const kvs_dtype dt = qtypes[_i / N_SHAPES];
    const int shape = _i % N_SHAPES;
    const int blk = kvs_dtype_block(dt);
    static const int ms[N_SHAPES] = {37, 5, 67, 301, 19, 23, 9}, ns[N_SHAPES] = {1, 3, 13, 37, 2, 4, 1};
    const int kb32[N_SHAPES] = {3, 11, 11, 3, 35, 22, 32}, kb256[N_SHAPES] = {1, 3, 3, 1, 3, 2, 4};
    const int64_t m = ms[shape], n = ns[shape], k = (int64_t)blk * (blk == 32 ? kb32[shape] : kb256[shape]);
    const int accumulate = shape % 2;
    t_case("matmul W=%s m=%lld k=%lld n=%lld accumulate=%d", kvs_dtype_name(dt), (long long)m, (long long)k,
           (long long)n, accumulate);
    const int64_t nblocks = m * k / blk;
    uint8_t *blocks = t_alloc(kvs_dtype_bytes(dt, m * k));
    random_blocks(dt, blocks, nblocks);
    double *Wd = t_alloc(sizeof(double) * (size_t)(m * k));
    ref_quant_dequant(dt, blocks, m * k, Wd);
    float *x = t_alloc(sizeof(float) * (size_t)(n * k));
    float *y0 = t_alloc(sizeof(float) * (size_t)(n * m));
    float *y = t_alloc(sizeof(float) * (size_t)(n * m));
    t_fill_uniform(x, n * k, -1, 1);
    t_fill_uniform(y0, n * m, -1, 1);
    tt *Wt = t_new2(dt, k, m), *xt = t_new2(KVS_F32, k, n), *yt = t_new2(KVS_F32, m, n);
    t_upload(Wt, blocks);
    t_upload_f32(xt, x);
    if (accumulate) t_upload_f32(yt, y0);
    double *xd = t_alloc(sizeof(double) * (size_t)(n * k)), *ref = t_alloc(sizeof(double) * (size_t)(n * m));
    for (int64_t i = 0; i < n * k; i++) xd[i] = x[i];
    for (int64_t i = 0; i < n * m; i++) ref[i] = y0[i];
    ref_matmul(Wd, xd, ref, m, k, n, accumulate);
    if (t_query(kvs_matmul(t_dev(), Wt->t, xt->t, yt->t, accumulate))) {
        check_refusal(dt);
        return;
    }
    t_run_end(kvs_matmul(t_dev(), Wt->t, xt->t, yt->t, accumulate));
    t_download(yt, y);
    if (q8_may_apply(n)) check_q8(dt, blocks, Wd, x, y, ref, m, k, n);
    else t_check_nmse("y", y, ref, n * m, 1e-7);
    t_assert_unchanged(Wt, "W");
    t_assert_unchanged(xt, "x");
}

/* Row independence under the 8-bit activation variants (see the top): W m x k (k = 35 blocks of
 * 32, or 3 super-blocks), x 7 rows; y of the 7-row call against each row's own 1-row call. */
static void qmm_rows_run(int _i) {
    const kvs_dtype dt = qtypes[_i];
    const int blk = kvs_dtype_block(dt);
    const int64_t m = 13, k = blk == 32 ? 35 * 32 : 3 * 256, n = 7;
    t_case("matmul W=%s m=%lld k=%lld: %lld rows at once against each alone", kvs_dtype_name(dt), (long long)m,
           (long long)k, (long long)n);
    /* the f32-activation variants take 7 rows through the GEMM tiles, and so does the automatic
     * choice where it has no SIMD integer kernel (ops_quant.c kvs_cpu_q8_kernel: q2_K, q3_K,
     * iq4_xs; x86 without AVX2; aarch64) */
    if (!q8_may_apply(n)) return;
    if (t_variant[0] == 0) {
#if defined(__x86_64__)
        if (!__builtin_cpu_supports("avx2") || dt == KVS_Q2_K || dt == KVS_Q3_K || dt == KVS_IQ4_XS) return;
#else
        return;
#endif
    }
    uint8_t *blocks = t_alloc(kvs_dtype_bytes(dt, m * k));
    random_blocks(dt, blocks, m * k / blk);
    float *x = t_alloc(sizeof(float) * (size_t)(n * k)), *y = t_alloc(sizeof(float) * (size_t)(n * m));
    float *y1 = t_alloc(sizeof(float) * (size_t)m);
    t_fill_uniform(x, n * k, -1, 1);
    tt *Wt = t_new2(dt, k, m), *xt = t_new2(KVS_F32, k, n), *yt = t_new2(KVS_F32, m, n);
    tt *x1 = t_new2(KVS_F32, k, 1), *yt1 = t_new2(KVS_F32, m, 1);
    t_upload(Wt, blocks);
    t_upload_f32(xt, x);
    if (t_query(kvs_matmul(t_dev(), Wt->t, xt->t, yt->t, 0))) {
        check_refusal(dt);
        return;
    }
    t_run_end(kvs_matmul(t_dev(), Wt->t, xt->t, yt->t, 0));
    t_download(yt, y);
    for (int64_t i = 0; i < n; i++) {
        t_upload_f32(x1, x + i * k);
        t_run_end(kvs_matmul(t_dev(), Wt->t, x1->t, yt1->t, 0));
        t_download(yt1, y1);
        for (int64_t r = 0; r < m; r++)
            T_ASSERT(memcmp(&y1[r], &y[i * m + r], sizeof(float)) == 0,
                     "y[%lld][%lld] = %.9g among %lld rows, %.9g alone", (long long)i, (long long)r,
                     (double)y[i * m + r], (long long)n, (double)y1[r]);
    }
    t_assert_unchanged(Wt, "W");
}

START_TEST(test_qmatmul_rows) {
    char name[64];
    snprintf(name, sizeof name, "matmul-quant-rows#%d", _i);
    t_begin(name);
    qmm_rows_run(_i);
    t_end();
}
END_TEST

START_TEST(test_qmatmul) {
    char name[64];
    /* the case's seed comes from its name: the first four shapes keep the numbers they had before
     * the last three were added (type * 4 + shape), those three follow them */
    const int t = _i / N_SHAPES, sh = _i % N_SHAPES;
    snprintf(name, sizeof name, "matmul-quant#%d", sh < 4 ? t * 4 + sh : N_QT * 4 + t * (N_SHAPES - 4) + sh - 4);
    t_begin(name);
    qmm_run(_i);
    t_end();
}
END_TEST

static void qemb_run(int _i) {
    const kvs_dtype dt = qtypes[_i];
    const int blk = kvs_dtype_block(dt);
    const int64_t dim = blk == 32 ? 96 : 512, vocab = 29, n = 7;
    t_case("embedding table=%s vocab=%lld dim=%lld n=%lld", kvs_dtype_name(dt), (long long)vocab, (long long)dim,
           (long long)n);
    uint8_t *blocks = t_alloc(kvs_dtype_bytes(dt, vocab * dim));
    random_blocks(dt, blocks, vocab * dim / blk);
    double *tab = t_alloc(sizeof(double) * (size_t)(vocab * dim));
    ref_quant_dequant(dt, blocks, vocab * dim, tab);
    int32_t ids[7] = {0, 28, 5, 5, 17, 1, 27};
    tt *tt_ = t_new2(dt, dim, vocab), *out = t_new2(KVS_F32, dim, n);
    t_upload(tt_, blocks);
    if (t_query(kvs_embedding(t_dev(), tt_->t, ids, n, out->t))) {
        check_refusal(dt);
        return;
    }
    t_run_end(kvs_embedding(t_dev(), tt_->t, ids, n, out->t));
    float *o = t_alloc(sizeof(float) * (size_t)(n * dim));
    double *ref = t_alloc(sizeof(double) * (size_t)(n * dim));
    double amax = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < dim; c++) {
            ref[i * dim + c] = tab[ids[i] * dim + c];
            amax = fmax(amax, fabs(ref[i * dim + c]));
        }
    t_download(out, o);
    t_check_close("out", o, ref, n * dim, 0x1p-22 * amax, 0);
    t_assert_unchanged(tt_, "table");
}

START_TEST(test_qembedding) {
    char name[64];
    snprintf(name, sizeof name, "embedding-quant#%d", _i);
    t_begin(name);
    qemb_run(_i);
    t_end();
}
END_TEST

/* Non-finite x under every W type and variant: x row 1 holds a NaN and row 2 a +inf (in different
 * blocks); every output of those rows must be non-finite, as in exact arithmetic (W is finite: NaN * w
 * and inf * 0 are NaN, inf * w is inf), and row 0 finite. The 8-bit activation path codes such a block with a NaN scale
 * (matmul.h); rounding it to codes would lose the NaN and decode garbage. */
static void qmm_nonfinite_run(int _i) {
    const kvs_dtype dt = qtypes[_i];
    const int blk = kvs_dtype_block(dt);
    const int64_t m = 7, n = 3, k = 2 * (int64_t)blk;
    t_case("matmul W=%s with NaN / inf in x, m=%lld k=%lld n=%lld", kvs_dtype_name(dt), (long long)m, (long long)k,
           (long long)n);
    uint8_t *blocks = t_alloc(kvs_dtype_bytes(dt, m * k));
    random_blocks(dt, blocks, m * k / blk);
    double *Wd = t_alloc(sizeof(double) * (size_t)(m * k));
    ref_quant_dequant(dt, blocks, m * k, Wd);
    float *x = t_alloc(sizeof(float) * (size_t)(n * k)), *y = t_alloc(sizeof(float) * (size_t)(n * m));
    t_fill_uniform(x, n * k, -1, 1);
    x[1 * k + 3] = NAN;
    x[2 * k + blk + 1] = INFINITY;
    tt *Wt = t_new2(dt, k, m), *xt = t_new2(KVS_F32, k, n), *yt = t_new2(KVS_F32, m, n);
    t_upload(Wt, blocks);
    t_upload_f32(xt, x);
    if (t_query(kvs_matmul(t_dev(), Wt->t, xt->t, yt->t, 0))) {
        check_refusal(dt);
        return;
    }
    t_run_end(kvs_matmul(t_dev(), Wt->t, xt->t, yt->t, 0));
    t_download(yt, y);
    for (int64_t r = 0; r < m; r++) {
        T_ASSERT(isfinite(y[r]), "y[0][%lld] = %g from finite x", (long long)r, (double)y[r]);
        T_ASSERT(!isfinite(y[m + r]), "y[1][%lld] = %g: the NaN in x was lost", (long long)r, (double)y[m + r]);
        T_ASSERT(!isfinite(y[2 * m + r]), "y[2][%lld] = %g: the inf in x was lost", (long long)r, (double)y[2 * m + r]);
    }
}

START_TEST(test_qmatmul_nonfinite) {
    char name[64];
    snprintf(name, sizeof name, "matmul-quant-nonfinite#%d", _i);
    t_begin(name);
    qmm_nonfinite_run(_i);
    t_end();
}
END_TEST

Suite *suite_matmul_quant(void) {
    Suite *s = suite_create("matmul-quant");
    TCase *tc = tcase_create("matmul-quant");
    tcase_add_loop_test(tc, test_qmatmul, 0, N_QT * N_SHAPES);
    tcase_add_loop_test(tc, test_qembedding, 0, N_QT);
    tcase_add_loop_test(tc, test_qmatmul_nonfinite, 0, N_QT);
    tcase_add_loop_test(tc, test_qmatmul_rows, 0, N_QT);
    suite_add_tcase(s, tc);
    return s;
}
