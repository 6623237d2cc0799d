/* Block-causal decoding (issue 15: block diffusion, `kvs_dlm_params.block_causal`, the forward's
 * `kvs_step_plan.key_limit`), one backend per run (test_block_causal --backend cpu|opencl|vulkan).
 * Fixtures: models/stories260K-llada-f32.gguf (llada: bidirectional, no logit shift) and
 * models/tiny-dream.gguf (dream: Qwen2 blocks, shifted logits).
 *  - the mask: under a block-causal key_limit, the logits of every row before the last block are
 *    bit-identical whatever the last block holds (nothing later reaches them), and rows of the last
 *    block do change;
 *  - key_limit = position + 1 on the causal tiny-qwen2 equals its own causal rule (logits within
 *    1e-6 rms: the same keys, through the attention's causal path either way);
 *  - the anchors: one block without a prompt = the bidirectional decode (tokens identical);
 *    block_len 1 on dream = causal autoregressive greedy decoding (the reference loop below runs
 *    kvs_model_forward with a causal key_limit on prompt + tokens so far + one mask, reads row
 *    p - 1 for position p, argmax lowest id on ties: tokens identical);
 *  - prefix under block-causal is exact: tokens identical to none's with fewer rows computed, one
 *    refresh per layer (block 0's), on llada and dream, fixed-count and threshold decoding;
 *  - refusals: dual/elastic with block_causal, a key_limit that hides a token's own key. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"
#include "kvsieve/kvsieve.h"
#include "kvsieve/generate.h"
#include "kvsieve/model.h"
#include "kvsieve/schedule.h"

static kvs_device_params g_params;

typedef struct env {
    kvs_device *dev;
    kvs_model *m;
    kvs_kv_cache *c;
} env;

static env open_env(const char *model, int64_t cap, unsigned flags) {
    env e = {0};
    char path[4096];
    ck_assert_msg(kvs_model_locate(model, path, sizeof path) == KVS_OK, "%s", kvs_last_error());
    ck_assert(kvs_device_open(&e.dev, &g_params) == KVS_OK);
    ck_assert_msg(kvs_model_load(&e.m, e.dev, path, NULL) == KVS_OK, "%s: %s", model, kvs_last_error());
    kvs_cache_params cp = kvs_model_cache_params(e.m);
    cp.capacity = cap;
    cp.mode = KVS_CACHE_POSITIONAL;
    cp.flags = flags;
    ck_assert_msg(kvs_cache_create(&e.c, e.dev, &cp) == KVS_OK, "%s", kvs_last_error());
    return e;
}

static void close_env(env *e) {
    kvs_cache_destroy(&e->c);
    kvs_model_destroy(&e->m);
    kvs_device_destroy(&e->dev);
}

/* logits of rows[0..nr) of tokens[0..n) under key_limit (NULL: the architecture's rule), into out
 * [nr][vocab]; returns vocab */
static int64_t logits_of(env *e, const int32_t *tokens, int64_t n, const int32_t *key_limit, const int32_t *rows,
                         int64_t nr, float *out) {
    ck_assert(kvs_cache_reset(e->c) == KVS_OK);
    kvs_step_plan plan = {.tokens = tokens, .n_tokens = n, .logit_rows = rows, .n_logit_rows = nr, .key_limit = key_limit};
    kvs_step_result r;
    ck_assert_msg(kvs_model_forward(e->m, e->c, &plan, &r) == KVS_OK, "%s", kvs_last_error());
    memcpy(out, r.logits, (size_t)(nr * r.vocab) * sizeof *out);
    return r.vocab;
}

/* the block-causal limits kvs_generate_dlm builds: prompt causal, blocks of b after it */
static void block_limits(int32_t *kl, int64_t n, int64_t n_prompt, int64_t b) {
    for (int64_t i = 0; i < n; i++) kl[i] = (int32_t)(i < n_prompt ? i + 1 : n_prompt + ((i - n_prompt) / b + 1) * b);
}

START_TEST(test_mask_isolates_later_blocks) {
    env e = open_env("stories260K-llada-f32.gguf", 64, 0);
    enum { N = 40, P = 8, B = 8 };
    int32_t a[N], b[N], kl[N], rows[N];
    for (int i = 0; i < N; i++) {
        a[i] = b[i] = (int32_t)(3 + (i * 37) % 500);
        rows[i] = i;
    }
    for (int i = N - B; i < N; i++) b[i] = i % 2 ? 0 : (int32_t)(100 + i); /* the last block differs */
    block_limits(kl, N, P, B);
    int64_t V = kvs_model_get_hparams(e.m)->vocab;
    float *la = malloc((size_t)(N * V) * sizeof *la), *lb = malloc((size_t)(N * V) * sizeof *lb);
    logits_of(&e, a, N, kl, rows, N, la);
    logits_of(&e, b, N, kl, rows, N, lb);
    ck_assert_msg(memcmp(la, lb, (size_t)((N - B) * V) * sizeof *la) == 0, "rows before the last block changed");
    double d = 0;
    for (int64_t i = (N - B) * V; i < N * V; i++) d = fmax(d, fabs((double)la[i] - lb[i]));
    ck_assert_msg(d > 1e-3, "rows of the last block did not see their own block (max delta %g)", d);
    /* without the mask (bidirectional llada) an early row does see the last block */
    logits_of(&e, a, N, NULL, rows, N, la);
    logits_of(&e, b, N, NULL, rows, N, lb);
    ck_assert(memcmp(la, lb, (size_t)V * sizeof *la) != 0);
    free(la), free(lb);
    close_env(&e);
}
END_TEST

START_TEST(test_causal_limit_is_causal_rule) {
    env e = open_env("tiny-qwen2.gguf", 32, 0);
    enum { N = 13 };
    int32_t t[N], kl[N], rows[N];
    for (int i = 0; i < N; i++) t[i] = (int32_t)(1 + (i * 53) % 500), kl[i] = i + 1, rows[i] = i;
    int64_t V = kvs_model_get_hparams(e.m)->vocab;
    float *la = malloc((size_t)(N * V) * sizeof *la), *lb = malloc((size_t)(N * V) * sizeof *lb);
    logits_of(&e, t, N, NULL, rows, N, la);
    logits_of(&e, t, N, kl, rows, N, lb);
    double se = 0, ss = 0;
    for (int64_t i = 0; i < N * V; i++) se += ((double)la[i] - lb[i]) * ((double)la[i] - lb[i]), ss += (double)la[i] * la[i];
    ck_assert_msg(sqrt(se / ss) <= 1e-6, "key_limit = pos + 1 differs from the causal rule: rel rms %g", sqrt(se / ss));
    /* a limit that hides the token's own key is refused */
    kl[5] = 5;
    kvs_step_plan plan = {.tokens = t, .n_tokens = N, .logit_rows = rows, .n_logit_rows = 1, .key_limit = kl};
    kvs_step_result r;
    ck_assert(kvs_model_forward(e.m, e.c, &plan, &r) == KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "key_limit") != NULL, "%s", kvs_last_error());
    free(la), free(lb);
    close_env(&e);
}
END_TEST

static void decode(env *e, const int32_t *prompt, int64_t np, int64_t gen, int64_t block, float thr, int bc,
                   kvs_dlm_schedule *s, int32_t *out, kvs_gen_stats *st) {
    kvs_dlm_params p = kvs_dlm_params_default();
    p.gen_len = gen;
    p.block_len = block;
    p.steps = gen;
    p.threshold = thr;
    p.block_causal = bc;
    p.schedule = s;
    ck_assert_msg(kvs_generate_dlm(e->m, e->c, prompt, np, &p, NULL, NULL, out, st) == KVS_OK, "%s", kvs_last_error());
}

START_TEST(test_one_block_is_bidirectional) {
    env e = open_env("stories260K-llada-f32.gguf", 64, 0);
    enum { G = 24 };
    int32_t a[G], b[G];
    kvs_gen_stats st;
    decode(&e, NULL, 0, G, G, 0.0f, 0, NULL, a, &st);
    decode(&e, NULL, 0, G, G, 0.0f, 1, NULL, b, &st);
    for (int i = 0; i < G; i++) ck_assert_msg(a[i] == b[i], "position %d: %d vs %d", i, a[i], b[i]);
    close_env(&e);
}
END_TEST

/* dream, block_len 1: the causal AR greedy decode, computed here with the forward alone */
START_TEST(test_block_of_one_is_causal_ar) {
    env e = open_env("tiny-dream.gguf", 64, 0);
    const kvs_model_hparams *hp = kvs_model_get_hparams(e.m);
    enum { NP = 5, G = 12 };
    const int32_t prompt[NP] = {1, 403, 407, 261, 378};
    int32_t seq[NP + G], kl[NP + G], ref[G], got[G];
    memcpy(seq, prompt, sizeof prompt);
    float *lg = malloc((size_t)hp->vocab * sizeof *lg);
    for (int t = 0; t < G; t++) {
        int64_t n = NP + t + 1; /* prompt, the tokens so far, the mask at position p = n - 1 */
        seq[n - 1] = hp->mask_id;
        for (int64_t i = 0; i < n; i++) kl[i] = (int32_t)(i + 1);
        int32_t row = (int32_t)(n - 2); /* shifted logits: position p from row p - 1 */
        logits_of(&e, seq, n, kl, &row, 1, lg);
        int best = 0;
        for (int v = 1; v < hp->vocab; v++)
            if (lg[v] > lg[best]) best = v;
        seq[n - 1] = ref[t] = best;
    }
    kvs_gen_stats st;
    decode(&e, prompt, NP, G, 1, 0.0f, 1, NULL, got, &st);
    for (int i = 0; i < G; i++) ck_assert_msg(got[i] == ref[i], "none: position %d: %d vs AR %d", i, got[i], ref[i]);
    kvs_dlm_schedule *pre = NULL;
    ck_assert(kvs_dlm_schedule_prefix(&pre) == KVS_OK);
    decode(&e, prompt, NP, G, 1, 0.0f, 1, pre, got, &st);
    for (int i = 0; i < G; i++) ck_assert_msg(got[i] == ref[i], "prefix: position %d: %d vs AR %d", i, got[i], ref[i]);
    kvs_dlm_schedule_destroy(&pre);
    free(lg);
    close_env(&e);
}
END_TEST

/* prefix under block-causal attention = none, with fewer rows; loop: llada fixed count, llada
 * threshold, dream fixed count, dream threshold */
START_TEST(test_prefix_exact) {
    int dream = _i / 2;
    float thr = _i % 2 ? 0.5f : 0.0f;
    env e = open_env(dream ? "tiny-dream.gguf" : "stories260K-llada-f32.gguf", 64, 0);
    enum { NP = 7, G = 40, B = 8 };
    const int32_t prompt[NP] = {1, 403, 407, 261, 378, 45, 67};
    int32_t a[G], b[G];
    kvs_gen_stats sa, sb;
    kvs_dlm_schedule *pre = NULL;
    ck_assert(kvs_dlm_schedule_prefix(&pre) == KVS_OK);
    decode(&e, prompt, NP, G, B, thr, 1, NULL, a, &sa);
    decode(&e, prompt, NP, G, B, thr, 1, pre, b, &sb);
    for (int i = 0; i < G; i++) ck_assert_msg(a[i] == b[i], "position %d: none %d, prefix %d", i, a[i], b[i]);
    ck_assert_int_lt(sb.rows_computed, sa.rows_computed);
    ck_assert_int_eq(sa.rows_computed, sa.rows_baseline); /* none = the block-causal baseline */
    kvs_dlm_schedule_stats ss;
    ck_assert(kvs_dlm_schedule_get_stats(pre, &ss) == KVS_OK);
    for (int l = 0; l < ss.n_layers; l++) ck_assert_int_eq(ss.refreshes[l], 1);
    /* fixed count (one token per step): block 0's first step runs all NP + B rows, block k >= 1's
     * first step 2B (the previous block again); every other step the block's B rows, plus the row
     * before it on dream (shifted logits) */
    if (thr == 0.0f) {
        int64_t L = kvs_model_get_hparams(e.m)->n_layers, nb = G / B, per = B + dream;
        int64_t want = (NP + B) + (B - 1) * per + (nb - 1) * (2 * B + (B - 1) * per);
        ck_assert_int_eq(sb.rows_computed, want * L);
    }
    kvs_dlm_schedule_destroy(&pre);
    close_env(&e);
}
END_TEST

START_TEST(test_refusals) {
    env e = open_env("stories260K-llada-f32.gguf", 64, KVS_CACHE_KEEP_X);
    const int32_t prompt[3] = {1, 403, 407};
    int32_t out[16];
    kvs_dlm_schedule *s = NULL;
    ck_assert(kvs_dlm_schedule_dual(&s) == KVS_OK);
    kvs_dlm_params p = kvs_dlm_params_default();
    p.gen_len = 16;
    p.block_len = 8;
    p.block_causal = 1;
    p.schedule = s;
    ck_assert(kvs_generate_dlm(e.m, e.c, prompt, 3, &p, NULL, NULL, out, NULL) == KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "block-causal") && strstr(kvs_last_error(), "dual"), "%s", kvs_last_error());
    kvs_dlm_schedule_destroy(&s);
    kvs_elastic_params ep = kvs_elastic_params_default();
    ck_assert(kvs_dlm_schedule_elastic(&s, &ep) == KVS_OK);
    p.schedule = s;
    ck_assert(kvs_generate_dlm(e.m, e.c, prompt, 3, &p, NULL, NULL, out, NULL) == KVS_ERR_INVALID_ARGUMENT);
    kvs_dlm_schedule_destroy(&s);
    close_env(&e);
}
END_TEST

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_block_causal", &g_params, "stories260K-llada-f32.gguf", NULL, 0);
    if (setup >= 0) return setup;
    Suite *s = suite_create("block-causal");
    TCase *tc = tcase_create("block-causal");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_mask_isolates_later_blocks);
    tcase_add_test(tc, test_causal_limit_is_causal_rule);
    tcase_add_test(tc, test_one_block_is_bidirectional);
    tcase_add_test(tc, test_block_of_one_is_causal_ar);
    tcase_add_loop_test(tc, test_prefix_exact, 0, 4);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
