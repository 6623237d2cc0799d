/* A quantized model end to end (issue 15): models/tiny-llama-mixed-q.gguf (written by
 * llama.cpp's gguf-py, tools/fixtures/make_quant_model.py; every matrix in one of the 12 block types)
 * runs its forward (12 tokens: the GEMM tiles; 3 tokens: the decoding GEMV) with the weights kept in
 * their block types (the products read the blocks), and its logits are compared with the same file
 * loaded with force_f32 (every weight dequantized to F32 on load, the products then F32 BLAS/GEMM),
 * under every matmul variant of the backend under test (--backend: cpu by default; opencl runs its
 * qgemv / qgemm kernels against its own F32 GEMV / CLBlast path; vulkan its tiled and GEMV shaders
 * reading the blocks).
 *
 * Tolerance, derived: both runs use bit-identical weight values (the decoders are bit-exact against
 * gguf-py and force_f32 uses the same decoders; test quant-blocks), so they differ only by f32
 * rounding in the products' summation order. A product of depth k <= 256 has relative error at most
 * k * 2^-24 = 1.5e-5 (worst case; ~sqrt(k) * 2^-24 = 1e-6 typically); 16 products lie on the path to a
 * logit (7 per layer, the output), so |delta logit| <= 16 * 1.5e-5 * |the logit's terms| in the worst
 * case. Checked: max |delta| <= 1e-3 * rms(logits) (the worst case with a margin of 4), normalised MSE
 * <= 1e-8 (typical ~1e-12), and the greedy token identical at every position whose top-2 margin
 * exceeds twice the largest difference.
 * The GPU backends multiply in f32 with f32 accumulation too (their reductions in another fixed
 * order), so the same bounds hold there.
 * Under the 8-bit activation variants (portable-q8, avx2-q8, avx512-vnni; the automatic choice on
 * x86, which may pick them: README "Weight types") every block-type product also rounds x to 8 bits
 * per block of 32/256 values: per product a relative error of about (amax / rms) / 127 / sqrt(12) ~
 * 0.008 of its output RMS (amax / rms ~ 3.5 for these activations), compounding over the 16 products
 * on a logit's path to ~4 x 0.008 ~ 0.03 RMS typical (nmse ~ 16 x 6e-5 ~ 1e-3). Checked there: max
 * |delta| <= 0.25 RMS (the maximum over all logits, ~4 sigma, with a margin of 2), nmse <= 1e-2, and
 * the greedy token where the margin exceeds twice the largest difference, as above. Measured: max
 * 0.046 RMS.
 * Also: the weights stay quantized on the device (kvs_model_weight_bytes equals the file's matrices'
 * bytes, not 4 bytes a value).
 * Usage: test_quant_model MODEL_GGUF [--backend cpu|opencl|vulkan] (exit 77: no such device). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* kvs_tensor_host_ptr: where a CPU tensor's bytes are */
#include "kvsieve/kvsieve.h"
#include "probe.h"

static const char *g_path;
static kvs_backend g_backend = KVS_BACKEND_CPU;

/* Logits [nt][vocab] of the first nt tokens of a fixed prompt on a fresh cache (nt <= 4: the
 * products take the decoding GEMV path, else the GEMM tiles). */
static float *run_p(kvs_device *dev, const kvs_model_file *mf, int nt, int64_t *vocab, int64_t *wbytes,
                    const kvs_model_params *mp) {
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_create(&m, dev, mf, mp) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.capacity = 32;
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
    int32_t toks[12] = {1, 45, 67, 89, 300, 2, 511, 17, 99, 128, 64, 3}, rows[12];
    for (int i = 0; i < 12; i++) rows[i] = i;
    kvs_step_plan plan = {.tokens = toks, .n_tokens = nt, .logit_rows = rows, .n_logit_rows = nt};
    kvs_step_result r;
    ck_assert_msg(kvs_model_forward(m, c, &plan, &r) == KVS_OK, "%s", kvs_last_error());
    *vocab = hp->vocab;
    *wbytes = kvs_model_weight_bytes(m);
    float *out = malloc((size_t)nt * (size_t)hp->vocab * sizeof *out);
    ck_assert(out != NULL);
    memcpy(out, r.logits, (size_t)nt * (size_t)hp->vocab * sizeof *out);
    kvs_cache_destroy(&c);
    kvs_model_destroy(&m);
    return out;
}

static float *run(kvs_device *dev, const kvs_model_file *mf, int nt, int64_t *vocab, int64_t *wbytes) {
    return run_p(dev, mf, nt, vocab, wbytes, NULL);
}

/* Zero-copy CPU weights (kvs_model_params.map_weights; kvs_model_load always): every weight of the
 * file (block-type matrices, F32 norms) is used in place, so the model's tensors point into the
 * model file's own arrays (its mmap) and the mapped bytes are all the weight bytes; the logits are
 * bit-identical to the copying load's (the same bytes, the same kernels) for 3 and 12 tokens. A
 * weight whose dtype is converted (weight_dtype f16 on F32 norms stays F32: mapped; F32 matrices to
 * f16 would be copies) is copied: checked with a file forced to F32 and weight_dtype F16. */
START_TEST(test_weights_mapped) {
    kvs_model_file *mf = NULL;
    ck_assert_msg(kvs_model_file_open(&mf, g_path, NULL) == KVS_OK, "%s: %s", g_path, kvs_last_error());
    kvs_device *dev = NULL;
    ck_assert_int_eq(kvs_device_open(&dev, NULL), KVS_OK);
    kvs_model_params mp = kvs_model_params_default();
    ck_assert_int_eq(mp.map_weights, 0);
    mp.map_weights = 1;
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_create(&m, dev, mf, &mp) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_gt(kvs_model_weight_bytes(m), 0);
    ck_assert_int_eq(kvs_model_mapped_bytes(m), kvs_model_weight_bytes(m));
    const kvs_model_weights *w = kvs_model_file_weights(mf);
    ck_assert_ptr_eq(kvs_tensor_host_ptr(kvs_model_tensor(m, "token_embd")), w->token_embd.data);
    for (int l = 0; l < kvs_model_file_hparams(mf)->n_layers; l++) {
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%d.ffn_down", l);
        ck_assert_ptr_eq(kvs_tensor_host_ptr(kvs_model_tensor(m, nm)), w->layers[l].w_down.data);
        snprintf(nm, sizeof nm, "blk.%d.attn_norm", l);
        ck_assert_ptr_eq(kvs_tensor_host_ptr(kvs_model_tensor(m, nm)), w->layers[l].attn_norm.data);
    }
    kvs_model_destroy(&m);
    for (int nt = 3; nt <= 12; nt += 9) {
        int64_t vocab, wb0, wb1;
        float *a = run_p(dev, mf, nt, &vocab, &wb0, NULL), *b = run_p(dev, mf, nt, &vocab, &wb1, &mp);
        ck_assert_int_eq(wb0, wb1);
        ck_assert_msg(memcmp(a, b, sizeof(float) * (size_t)(nt * vocab)) == 0, "%d tokens: mapped logits differ", nt);
        free(a);
        free(b);
    }
    /* kvs_model_load keeps the file open itself and maps */
    ck_assert_msg(kvs_model_load(&m, dev, g_path, NULL) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_model_mapped_bytes(m), kvs_model_weight_bytes(m));
    kvs_model_destroy(&m);
    /* converted weights are copies: an F32 file as f16 maps only its F32 norms */
    kvs_model_file *m32 = NULL;
    kvs_model_file_params fp = kvs_model_file_params_default();
    fp.force_f32 = 1;
    ck_assert_msg(kvs_model_file_open(&m32, g_path, &fp) == KVS_OK, "%s", kvs_last_error());
    mp.weight_dtype = KVS_F16;
    ck_assert_msg(kvs_model_create(&m, dev, m32, &mp) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_gt(kvs_model_mapped_bytes(m), 0);
    ck_assert_int_lt(kvs_model_mapped_bytes(m) * 100, kvs_model_weight_bytes(m));
    kvs_model_destroy(&m);
    kvs_model_file_close(&m32);
    kvs_device_destroy(&dev);
    kvs_model_file_close(&mf);
}
END_TEST

START_TEST(test_quant_vs_f32) {
    kvs_model_file *mq = NULL, *mf = NULL;
    ck_assert_msg(kvs_model_file_open(&mq, g_path, NULL) == KVS_OK, "%s: %s", g_path, kvs_last_error());
    kvs_model_file_params fp = kvs_model_file_params_default();
    fp.force_f32 = 1;
    ck_assert_msg(kvs_model_file_open(&mf, g_path, &fp) == KVS_OK, "%s", kvs_last_error());
    /* the file holds all 12 block types */
    const kvs_model_weights *w = kvs_model_file_weights(mq);
    int seen[KVS_DTYPE_COUNT] = {0};
    seen[w->token_embd.dtype] = seen[w->output.dtype] = 1;
    for (int l = 0; l < kvs_model_file_hparams(mq)->n_layers; l++) {
        const kvs_layer_weights *L = &w->layers[l];
        const kvs_weight *all[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) seen[all[i]->dtype] = 1;
    }
    for (int t = KVS_Q8_0; t <= KVS_IQ4_XS; t++) /* the GGUF block types (not the qh8 cache planes) */
        ck_assert_msg(seen[t], "fixture lacks %s", kvs_dtype_name((kvs_dtype)t));

    kvs_device_params dp = kvs_device_params_default();
    dp.backend = g_backend;
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &dp) == KVS_OK, "%s", kvs_last_error());
    int64_t vocab, wb_f32, wb_q;
    const int n_var = kvs_device_variant_count(dev, "matmul");
    for (int run_i = 0; run_i < 2 * (n_var + 1); run_i++) {
        const int v = run_i / 2 - 1, NT = run_i % 2 ? 3 : 12;
        char spec[64] = "matmul:auto";
        if (v >= 0) snprintf(spec, sizeof spec, "matmul:%s", kvs_device_variant_name(dev, "matmul", v));
        if (kvs_device_set_variants(dev, spec) != KVS_OK) {
            printf("# %s: not runnable here (%s)\n", spec, kvs_last_error());
            continue;
        }
        float *ref = run(dev, mf, NT, &vocab, &wb_f32);
        float *q = run(dev, mq, NT, &vocab, &wb_q);
        ck_assert_msg(wb_q * 3 < wb_f32, "weights not kept quantized: %lld bytes vs %lld as f32", (long long)wb_q,
                      (long long)wb_f32);
        double ss = 0, se = 0, dmax = 0;
        for (int64_t i = 0; i < NT * vocab; i++) {
            ck_assert_msg(isfinite(q[i]), "%s: logit %lld not finite", spec, (long long)i);
            ss += (double)ref[i] * ref[i];
            se += ((double)q[i] - ref[i]) * ((double)q[i] - ref[i]);
            dmax = fmax(dmax, fabs((double)q[i] - ref[i]));
        }
        const double rms = sqrt(ss / (double)(NT * vocab)), nmse = se / ss;
        int agree = 0, decided = 0;
        for (int t = 0; t < NT; t++) {
            const float *a = q + t * vocab, *b = ref + t * vocab;
            int ia = 0, ib = 0;
            for (int64_t j = 1; j < vocab; j++) {
                if (a[j] > a[ia]) ia = (int)j;
                if (b[j] > b[ib]) ib = (int)j;
            }
            float second = -INFINITY;
            for (int64_t j = 0; j < vocab; j++)
                if (j != ib && b[j] > second) second = b[j];
            if (b[ib] - second > 2 * dmax) {
                decided++;
                ck_assert_msg(ia == ib, "%s: position %d greedy token %d, f32 %d (margin %g)", spec, t, ia, ib,
                              b[ib] - second);
            }
            agree += ia == ib;
        }
        printf("# %s, %d tokens: weights %lld bytes (f32: %lld); logits rms %.4g, max |quant - f32| %.3g (%.2g rms), nmse "
               "%.3g; greedy agrees at %d/%d positions (%d with a decisive margin)\n",
               spec, NT, (long long)wb_q, (long long)wb_f32, rms, dmax, dmax / rms, nmse, agree, NT, decided);
        /* 8-bit activations (portable-q8, avx2-q8, avx512-vnni, and the automatic choice on x86) */
        const int q8 = strstr(spec, "-q8") || strstr(spec, "vnni") || strcmp(spec, "matmul:auto") == 0;
        const double tol_max = q8 ? 0.25 : 1e-3, tol_nmse = q8 ? 1e-2 : 1e-8;
        ck_assert_msg(dmax <= tol_max * rms, "%s: max |delta logit| %g > %g * rms %g", spec, dmax, tol_max, rms);
        ck_assert_msg(nmse <= tol_nmse, "%s: nmse %g > %g", spec, nmse, tol_nmse);
        free(q);
        free(ref);
    }
    kvs_device_destroy(&dev);
    kvs_model_file_close(&mq);
    kvs_model_file_close(&mf);
}
END_TEST

/* The eviction policies that read attention weights on the host (critical: Wo, expected: Wq) decode
 * block-type weights with core/quant (a user's run on this file stopped mid-decode before: "layer 0
 * Wo is q5_1"): the decode runs to max_new tokens and evicts. */
START_TEST(test_weight_reading_policies) {
    kvs_model_file *mq = NULL;
    ck_assert_msg(kvs_model_file_open(&mq, g_path, NULL) == KVS_OK, "%s: %s", g_path, kvs_last_error());
    kvs_device_params dp = kvs_device_params_default();
    dp.backend = KVS_BACKEND_CPU;
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &dp) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_create(&m, dev, mq, NULL) == KVS_OK, "%s", kvs_last_error());
    const char *names[] = {"critical", "critical:h2o", "expected"};
    for (int i = 0; i < 3; i++) {
        kvs_policy *pol = NULL;
        ck_assert_msg(kvs_policy_create(&pol, names[i], NULL) == KVS_OK, "%s", kvs_last_error());
        kvs_ar_params p = kvs_ar_params_default();
        p.max_new = 40;
        p.stop_at_bos = p.stop_at_eos = 0;
        p.policy = pol;
        p.budget = 0.5;
        int32_t bos = 1, out[40];
        int64_t n = 0;
        kvs_cache_params cp = kvs_model_cache_params(m);
        cp.mode = KVS_CACHE_APPEND;
        cp.capacity = kvs_ar_capacity(m, 1, &p);
        ck_assert_msg(cp.capacity > 0, "%s", kvs_last_error());
        kvs_kv_cache *c = NULL;
        ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
        kvs_gen_stats st;
        ck_assert_msg(kvs_generate_ar(m, c, &bos, 1, &p, NULL, NULL, out, &n, &st) == KVS_OK, "%s: %s", names[i],
                      kvs_last_error());
        ck_assert_int_eq(n, 40);
        ck_assert_msg(st.rows_evicted > 0, "%s: nothing evicted", names[i]);
        kvs_cache_destroy(&c);
        kvs_policy_destroy(&pol);
    }
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
    kvs_model_file_close(&mq);
}
END_TEST

int main(int argc, char **argv) {
    g_path = argc > 1 ? argv[1] : "models/tiny-llama-mixed-q.gguf";
    kvs_device_params dp; /* --backend B, and the skip (77) when it has no device: probe.h */
    int setup = kvs_test_setup(argc, argv, "test_quant_model", &dp, NULL, NULL, 0);
    if (setup >= 0) return setup;
    g_backend = dp.backend;
    Suite *s = suite_create("quant-model");
    TCase *tc = tcase_create("quant-model");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_quant_vs_f32);
    /* host-side weight reading and the CPU's in-place (mapped) weights: CPU run only */
    if (g_backend == KVS_BACKEND_CPU) {
        tcase_add_test(tc, test_weight_reading_policies);
        tcase_add_test(tc, test_weights_mapped);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
