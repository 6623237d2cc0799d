/* llama.cpp as the oracle for its own quantized files: stories260K quantized by llama.cpp's
 * llama-quantize to Q8_0, Q4_0, Q5_1 and IQ4_NL (models/stories260K-*.llamacpp.gguf; the ffn_down
 * matrices, rows of 172, fall back to F16 and output.weight to Q8_0 as llama-quantize decides), and
 * llama.cpp's greedy continuation of "Once upon a time" on each (tests/data/llamacpp/greedy.json,
 * its `source` field says how it was made). kvsieve decodes the same file greedily and its text must
 * agree with llama.cpp's over at least the characters measured when the data was made:
 * with kvsieve's f32-activation products, all of llama.cpp's text for Q8_0 and IQ4_NL, 204 and 123
 * characters for Q4_0 and Q5_1, where the two part at a near-tie; with its 8-bit activation products
 * (llama.cpp's scheme; the default on x86: README "Weight types") all of it for Q8_0, 204 and 123 for
 * Q4_0 and Q5_1 (the same near-ties), 155 for IQ4_NL (common_chars_measured_q8: the two still differ
 * in f32 summation order and in llama.cpp's f16 activations for the F16 ffn_down rows, so a near-tie
 * falls the other way). A decoder or layout bug breaks the text within a few tokens.
 * The decode runs on the backend named by --backend (cpu by default; OpenCL and Vulkan read every
 * block type, so their text must agree over the same measured prefix). A GPU backend must load the
 * Q4_0 and Q8_0 files (test_gpu_load, the CPU run: every GPU backend with a device, PoCL and lavapipe
 * here); one that lacked a type would have to refuse it when the model is created, naming the
 * weight, never at the first op of a decode.
 * Usage: test_llamacpp_oracle GREEDY_JSON [--backend cpu|opencl|vulkan] (exit 77: no such device). */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/kvsieve.h"
#include "probe.h"
#include "kvsieve/generate.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/tokenizer.h"

static json_object *g_ref;
static kvs_backend g_backend = KVS_BACKEND_CPU;

static const char *jstr(json_object *o, const char *key) {
    json_object *v;
    ck_assert_msg(json_object_object_get_ex(o, key, &v), "greedy.json: no %s", key);
    return json_object_get_string(v);
}

/* 1 when the block-type products run on 8-bit activations (README "Weight types"): on the CPU, a
 * forced -q8 / -vnni matmul variant (KVS_VARIANT), or the automatic choice on x86 with AVX2. */
static int q8_path(void) {
    if (g_backend != KVS_BACKEND_CPU) return 0; /* OpenCL and Vulkan keep f32 activations */
    const char *v = getenv("KVS_VARIANT");
    const char *mm = v ? strstr(v, "matmul:") : NULL;
    if (mm && strncmp(mm, "matmul:auto", 11) != 0) {
        char name[64];
        snprintf(name, sizeof name, "%s", mm);
        name[strcspn(name, ",")] = 0;
        return strstr(name, "-q8") || strstr(name, "vnni") ? 1 : 0;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

START_TEST(test_greedy_agrees_with_llamacpp) {
    json_object *cases, *c;
    ck_assert(json_object_object_get_ex(g_ref, "cases", &cases));
    c = json_object_array_get_idx(cases, (size_t)_i);
    const char *model = jstr(c, "model"), *want = jstr(c, "llamacpp_text"), *prompt = jstr(g_ref, "prompt");
    json_object *jn;
    ck_assert(json_object_object_get_ex(c, q8_path() ? "common_chars_measured_q8" : "common_chars_measured", &jn));
    const size_t need = (size_t)json_object_get_int(jn);

    char path[4096];
    ck_assert_msg(kvs_model_locate(model, path, sizeof path) == KVS_OK, "%s", kvs_last_error());
    kvs_model_file *mf = NULL;
    kvs_tokenizer *tok = NULL;
    ck_assert_msg(kvs_model_file_open(&mf, path, NULL) == KVS_OK, "%s", kvs_last_error());
    ck_assert_msg(kvs_tokenizer_from_model_file(&tok, mf) == KVS_OK, "%s", kvs_last_error());
    kvs_device_params dp = kvs_device_params_default();
    dp.backend = g_backend;
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &dp) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_create(&m, dev, mf, NULL) == KVS_OK, "%s: %s", model, kvs_last_error());

    int32_t ids[64];
    int64_t np = 0;
    ck_assert(kvs_tokenizer_encode(tok, prompt, strlen(prompt), KVS_TOKENIZE_ADD_BOS, ids, 64, &np) == KVS_OK);
    kvs_ar_params p = kvs_ar_params_default();
    p.max_new = 128;
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_ar_capacity(m, np, &p);
    kvs_kv_cache *cache = NULL;
    ck_assert_msg(kvs_cache_create(&cache, dev, &cp) == KVS_OK, "%s", kvs_last_error());
    int32_t out[256];
    int64_t n = 0;
    kvs_gen_stats st;
    ck_assert_msg(kvs_generate_ar(m, cache, ids, np, &p, NULL, NULL, out, &n, &st) == KVS_OK, "%s: %s", model,
                  kvs_last_error());

    /* the continuation as llama.cpp prints it: pieces after the prompt's last token */
    char text[8192];
    size_t len = 0;
    int32_t prev = ids[np - 1];
    for (int64_t i = 0; i < n && len + 64 < sizeof text; i++) {
        size_t pl = 0;
        ck_assert(kvs_tokenizer_token_to_piece(tok, prev, out[i], text + len, sizeof text - len, &pl) == KVS_OK);
        len += pl;
        prev = out[i];
    }
    text[len] = 0;
    size_t common = 0;
    while (want[common] && common < len && text[common] == want[common]) common++;
    printf("%s (%s): %zu of llama.cpp's %zu characters agree (%zu measured when the data was made)\n", model,
           kvs_backend_name(g_backend), common, strlen(want), need);
    ck_assert_msg(common >= need, "%s: kvsieve parts from llama.cpp after %zu characters (want >= %zu):\n kvsieve:   %.*s\n "
                  "llama.cpp: %.*s", model, common, need, (int)(common + 40 < len ? common + 40 : len), text,
                  (int)(common + 40), want);
    kvs_cache_destroy(&cache);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
    kvs_tokenizer_destroy(&tok);
    kvs_model_file_close(&mf);
}
END_TEST

START_TEST(test_gpu_load) {
    const kvs_backend gpus[] = {KVS_BACKEND_OPENCL, KVS_BACKEND_VULKAN};
    for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
        int count = 0;
        if (!kvs_backend_built(gpus[g]) || kvs_device_count(gpus[g], &count) != KVS_OK || count == 0) {
            printf("SKIP: no %s device\n", kvs_backend_name(gpus[g]));
            continue;
        }
        kvs_device_params dp = kvs_device_params_default();
        dp.backend = gpus[g];
        kvs_device *dev = NULL;
        ck_assert_msg(kvs_device_open(&dev, &dp) == KVS_OK, "%s", kvs_last_error());
        char path[4096];
        kvs_model *m = NULL;
        ck_assert(kvs_model_locate("stories260K-q4_0.llamacpp.gguf", path, sizeof path) == KVS_OK);
        kvs_status s = kvs_model_load(&m, dev, path, NULL);
        ck_assert_msg(s == KVS_OK, "%s: %s", kvs_backend_name(gpus[g]), kvs_last_error());
        kvs_model_destroy(&m);
        /* Q8_0 weights every backend multiplies: the model loads */
        ck_assert(kvs_model_locate("stories260K-q8_0.llamacpp.gguf", path, sizeof path) == KVS_OK);
        ck_assert_msg(kvs_model_load(&m, dev, path, NULL) == KVS_OK, "%s", kvs_last_error());
        kvs_model_destroy(&m);
        kvs_device_destroy(&dev);
    }
}
END_TEST

/* Usage: test_llamacpp_oracle tests/data/llamacpp/greedy.json [--backend cpu|opencl|vulkan] (exit 77:
 * backend without a device; the load test runs with the CPU run only) */
int main(int argc, char **argv) {
    const char *ref = argc > 1 ? argv[1] : "tests/data/llamacpp/greedy.json";
    kvs_device_params dp; /* --backend B, and the skip (77) when it has no device: probe.h */
    int setup = kvs_test_setup(argc, argv, "test_llamacpp_oracle", &dp, NULL, NULL, 0);
    if (setup >= 0) return setup;
    g_backend = dp.backend;
    g_ref = json_object_from_file(ref);
    if (!g_ref) {
        fprintf(stderr, "cannot read %s\n", ref);
        return 1;
    }
    json_object *cases;
    if (!json_object_object_get_ex(g_ref, "cases", &cases)) return 1;
    Suite *s = suite_create("llamacpp-oracle");
    TCase *tc = tcase_create("greedy");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_greedy_agrees_with_llamacpp, 0, (int)json_object_array_length(cases));
    suite_add_tcase(s, tc);
    if (g_backend == KVS_BACKEND_CPU) {
        TCase *tg = tcase_create("gpu-load");
        tcase_set_timeout(tg, 300);
        tcase_add_test(tg, test_gpu_load);
        suite_add_tcase(s, tg);
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    json_object_put(g_ref);
    return nf ? 1 : 0;
}
