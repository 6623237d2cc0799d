/* DLM cache schedules through the real forward (stories260K-llada), one backend per run
 * (test_dlm_cache --backend cpu|opencl|vulkan). The correctness anchors of issue 7:
 *  - prefix / dual with one step per block reproduce the no-cache tokens;
 *  - delayed with reload 1 reproduces the reference decodes (stories260K-llada-ref.json);
 *  - elastic with gamma 1 and a window as wide as the block reproduces the reference decodes;
 *  - WaveFilter at budget 1 (every row kept, through the sparse gather path) reproduces its base
 *    schedule (none, dual, delayed, elastic) token for token;
 *  - at default settings the caches compute fewer rows than the baseline (loose bounds; the
 *    measured figures, with token agreement, are in README "Cache schedules"). */
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
#include "kvsieve/schedule.h"

static kvs_device_params g_params;

typedef struct refcase {
    int32_t prompt[512];
    int64_t np;
    kvs_dlm_params p;
    int32_t tokens[1024];
} refcase;

static refcase g_cases[8];
static int g_ncases;

static void load_cases(void) {
    char path[4096];
    ck_assert(kvs_model_locate("stories260K-llada-ref.json", path, sizeof path) == KVS_OK);
    json_object *ref = json_object_from_file(path), *cases;
    ck_assert(ref && json_object_object_get_ex(ref, "cases", &cases));
    g_ncases = (int)json_object_array_length(cases);
    ck_assert_int_le(g_ncases, 8);
    for (int ci = 0; ci < g_ncases; ci++) {
        json_object *cj = json_object_array_get_idx(cases, (size_t)ci), *v, *pt, *toks;
        refcase *rc = &g_cases[ci];
        rc->p = kvs_dlm_params_default();
        ck_assert(json_object_object_get_ex(cj, "gen", &v));
        rc->p.gen_len = json_object_get_int(v);
        ck_assert(json_object_object_get_ex(cj, "block", &v));
        rc->p.block_len = json_object_get_int(v);
        ck_assert(json_object_object_get_ex(cj, "steps", &v));
        rc->p.steps = json_object_get_int(v);
        if (json_object_object_get_ex(cj, "threshold", &v) && v) rc->p.threshold = (float)json_object_get_double(v);
        ck_assert(json_object_object_get_ex(cj, "prompt_tokens", &pt));
        ck_assert(json_object_object_get_ex(cj, "tokens", &toks));
        rc->np = (int64_t)json_object_array_length(pt);
        for (int64_t i = 0; i < rc->np; i++) rc->prompt[i] = json_object_get_int(json_object_array_get_idx(pt, (size_t)i));
        for (int64_t i = 0; i < rc->p.gen_len; i++)
            rc->tokens[i] = json_object_get_int(json_object_array_get_idx(toks, (size_t)i));
    }
    json_object_put(ref);
}

typedef struct env {
    kvs_device *dev;
    kvs_model *m;
} env;

/* Every reference case on the CPU and OpenCL; every other one on Vulkan, whose lavapipe forward is
 * the suite's long pole (cases 0, 2, 4: thresholds none / 0.9 / 0.3; WaveFilter there case 0 only,
 * the defaults test 64 positions instead of 128) */
static int case_stride(void) { return g_params.backend == KVS_BACKEND_VULKAN ? 2 : 1; }
static int wavefilter_case_stride(void) { return g_params.backend == KVS_BACKEND_VULKAN ? 8 : 2; }

static void env_open(env *e) {
    char path[4096];
    ck_assert(kvs_device_open(&e->dev, &g_params) == KVS_OK);
    ck_assert(kvs_model_locate("stories260K-llada-f32.gguf", path, sizeof path) == KVS_OK);
    ck_assert_msg(kvs_model_load(&e->m, e->dev, path, NULL) == KVS_OK, "%s", kvs_last_error());
    load_cases();
}

static void env_close(env *e) {
    kvs_model_destroy(&e->m);
    kvs_device_destroy(&e->dev);
}

/* Decodes with schedule `sc` (NULL: none); out[gen_len]. */
static void decode(env *e, const int32_t *prompt, int64_t np, kvs_dlm_params p, kvs_dlm_schedule *sc, int32_t *out,
                   kvs_gen_stats *st) {
    kvs_cache_params cp = kvs_model_cache_params(e->m);
    cp.capacity = np + p.gen_len;
    cp.flags = kvs_dlm_schedule_cache_flags(sc);
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, e->dev, &cp) == KVS_OK, "%s", kvs_last_error());
    p.schedule = sc;
    kvs_status s = kvs_generate_dlm(e->m, c, prompt, np, &p, NULL, NULL, out, st);
    ck_assert_msg(s == KVS_OK, "%s [%s]: %s", kvs_dlm_schedule_name(sc), kvs_backend_name(g_params.backend),
                  kvs_last_error());
    kvs_cache_destroy(&c);
}

static void assert_same(const int32_t *a, const int32_t *b, int64_t n, const char *what, int ci) {
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "%s, case %d [%s]: token %lld is %d, want %d", what, ci,
                      kvs_backend_name(g_params.backend), (long long)i, a[i], b[i]);
}

START_TEST(test_prefix_dual_one_step_per_block) {
    env e = {0};
    env_open(&e);
    for (int ci = 0; ci < g_ncases; ci += case_stride()) {
        refcase *rc = &g_cases[ci];
        kvs_dlm_params p = rc->p;
        p.threshold = 0.0f;
        p.steps = p.gen_len / p.block_len;
        int32_t base[1024], got[1024];
        kvs_gen_stats st;
        decode(&e, rc->prompt, rc->np, p, NULL, base, &st);
        for (int dual = 0; dual < 2; dual++) {
            kvs_dlm_schedule *sc = NULL;
            ck_assert(dual ? kvs_dlm_schedule_dual(&sc) == KVS_OK : kvs_dlm_schedule_prefix(&sc) == KVS_OK);
            decode(&e, rc->prompt, rc->np, p, sc, got, &st);
            assert_same(got, base, p.gen_len, kvs_dlm_schedule_name(sc), ci);
            ck_assert(st.compute_fraction == 1.0);
            kvs_dlm_schedule_destroy(&sc);
        }
    }
    env_close(&e);
}
END_TEST

START_TEST(test_delayed_reload1_and_elastic_gamma1) {
    env e = {0};
    env_open(&e);
    for (int ci = 0; ci < g_ncases; ci += case_stride()) {
        refcase *rc = &g_cases[ci];
        int32_t got[1024];
        kvs_gen_stats st;
        kvs_dlm_schedule *sc = NULL;
        ck_assert(kvs_dlm_schedule_delayed(&sc, 1) == KVS_OK);
        decode(&e, rc->prompt, rc->np, rc->p, sc, got, &st);
        assert_same(got, rc->tokens, rc->p.gen_len, "delayed reload 1", ci);
        kvs_dlm_schedule_destroy(&sc);
        kvs_elastic_params ep = kvs_elastic_params_default();
        ep.gamma = 1.0f;
        ep.window = (int)rc->p.block_len;
        ck_assert(kvs_dlm_schedule_elastic(&sc, &ep) == KVS_OK);
        decode(&e, rc->prompt, rc->np, rc->p, sc, got, &st);
        assert_same(got, rc->tokens, rc->p.gen_len, "elastic gamma 1", ci);
        kvs_dlm_schedule_destroy(&sc);
    }
    env_close(&e);
}
END_TEST

/* WaveFilter at budget 1 over each base reproduces the base (the sparse path gathers every row);
 * so does its PSA-style mode at keep_mass 1 (which at budget 1 keeps every row, also those whose key
 * mass a backend rounds to 0) over none. */
START_TEST(test_wavefilter_budget1) {
    env e = {0};
    env_open(&e);
    const char *bases[] = {"none", "dual", "delayed", "elastic"};
    for (int ci = 0; ci < g_ncases; ci += wavefilter_case_stride()) {
        refcase *rc = &g_cases[ci];
        for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
            int32_t want[1024], got[1024];
            kvs_gen_stats st;
            kvs_dlm_schedule *sc = NULL, *base = NULL;
            kvs_dlm_params p = rc->p;
            if (!strcmp(bases[b], "elastic")) p.threshold = 0.9f;
            ck_assert(kvs_dlm_schedule_from_name(&sc, bases[b], 4, NULL) == KVS_OK);
            decode(&e, rc->prompt, rc->np, p, sc, want, &st);
            kvs_dlm_schedule_destroy(&sc);
            ck_assert(kvs_dlm_schedule_from_name(&base, bases[b], 4, NULL) == KVS_OK);
            kvs_wavefilter_params wp = kvs_wavefilter_params_default();
            wp.budget = 1.0f;
            ck_assert(kvs_dlm_schedule_wavefilter(&sc, base, &wp) == KVS_OK);
            decode(&e, rc->prompt, rc->np, p, sc, got, &st);
            kvs_dlm_schedule_stats ss;
            ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
            ck_assert_msg(ss.context_rows > 0 && ss.kept_rows == ss.context_rows, "%s: sparse path used, all kept",
                          kvs_dlm_schedule_name(sc));
            assert_same(got, want, p.gen_len, kvs_dlm_schedule_name(sc), ci);
            kvs_dlm_schedule_destroy(&sc);
            if (b > 0) continue;
            /* PSA-style keep_mass 1 at budget 1 (kvs_topp on this device): softmax gives every row
             * positive mass, so every row is kept and the base is reproduced */
            ck_assert(kvs_dlm_schedule_from_name(&base, bases[b], 4, NULL) == KVS_OK);
            wp.keep_mass = 1.0f;
            wp.dev = e.dev;
            ck_assert(kvs_dlm_schedule_wavefilter(&sc, base, &wp) == KVS_OK);
            decode(&e, rc->prompt, rc->np, p, sc, got, &st);
            ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
            ck_assert_msg(ss.context_rows > 0 && ss.kept_rows == ss.context_rows, "%s keep_mass 1: all kept",
                          kvs_dlm_schedule_name(sc));
            assert_same(got, want, p.gen_len, "wavefilter keep_mass 1", ci);
            kvs_dlm_schedule_destroy(&sc);
        }
    }
    env_close(&e);
}
END_TEST

/* d2Cache: rollout_p 1 with current_k 0 (every row every step) reproduces the no-cache tokens; the
 * defaults run (one full step, then partial steps: compute < 1) and commit only block positions. */
START_TEST(test_d2cache) {
    env e = {0};
    env_open(&e);
    for (int ci = 0; ci < g_ncases && ci < 1; ci++) { /* one case: the rollout's probes are slow on lavapipe */
        refcase *rc = &g_cases[ci];
        int32_t got[1024];
        kvs_gen_stats st;
        kvs_dlm_schedule *sc = NULL;
        kvs_d2cache_params dp = kvs_d2cache_params_default();
        ck_assert(dp.rollout_p == 0.1f && dp.current_k == 32 && dp.sigma == 10.0f && dp.inflate_w == 0);
        dp.rollout_p = 1.0f;
        dp.current_k = 0;
        ck_assert(kvs_dlm_schedule_d2cache(&sc, &dp) == KVS_OK);
        decode(&e, rc->prompt, rc->np, rc->p, sc, got, &st);
        assert_same(got, rc->tokens, rc->p.gen_len, "d2cache refresh-all", ci);
        ck_assert(st.compute_fraction == 1.0);
        kvs_dlm_schedule_destroy(&sc);
        ck_assert(kvs_dlm_schedule_from_name(&sc, "d2cache", 4, NULL) == KVS_OK);
        decode(&e, rc->prompt, rc->np, rc->p, sc, got, &st);
        kvs_dlm_schedule_stats ss;
        ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
        ck_assert_msg(ss.full_steps == 1 && st.compute_fraction < 1.0, "d2cache: %lld full steps, compute %.3f",
                      (long long)ss.full_steps, st.compute_fraction);
        ck_assert_msg(st.tokens == rc->p.gen_len, "d2cache decoded %lld of %lld positions", (long long)st.tokens,
                      (long long)rc->p.gen_len);
        kvs_dlm_schedule_destroy(&sc);
    }
    kvs_d2cache_params bad = kvs_d2cache_params_default();
    kvs_dlm_schedule *sc = NULL;
    bad.sigma = 0.0f;
    ck_assert(kvs_dlm_schedule_d2cache(&sc, &bad) == KVS_ERR_INVALID_ARGUMENT && sc == NULL);
    bad = kvs_d2cache_params_default();
    bad.rollout_p = 1.5f;
    ck_assert(kvs_dlm_schedule_d2cache(&sc, &bad) == KVS_ERR_INVALID_ARGUMENT);
    bad = kvs_d2cache_params_default();
    bad.current_k = -1;
    ck_assert(kvs_dlm_schedule_d2cache(&sc, &bad) == KVS_ERR_INVALID_ARGUMENT);
    env_close(&e);
}
END_TEST

/* The forward's sparse keep-set path: bad keep-sets are refused with a message; a keep-set of
 * every row gives the dense logits bit for bit; a smaller one changes them. */
START_TEST(test_sparse_keep_forward) {
    env e = {0};
    env_open(&e);
    const kvs_model_hparams *hp = kvs_model_get_hparams(e.m);
    kvs_cache_params cp = kvs_model_cache_params(e.m);
    cp.capacity = 16;
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, e.dev, &cp) == KVS_OK);
    int32_t toks[12] = {1, 45, 67, 89, 0, 0, 0, 0, 0, 0, 0, 0}, lr = 5;
    kvs_step_plan plan = {.tokens = toks, .n_tokens = 12, .logit_rows = &lr, .n_logit_rows = 1};
    kvs_step_result r;
    ck_assert_msg(kvs_model_forward(e.m, c, &plan, &r) == KVS_OK, "%s", kvs_last_error());
    float *dense = malloc((size_t)hp->vocab * sizeof *dense);
    memcpy(dense, r.logits, (size_t)hp->vocab * sizeof *dense);
    int H = hp->n_kv_heads;
    int32_t keep[8 * 12];
    int64_t nk[8];
    ck_assert_int_le(H, 8);
    for (int h = 0; h < H; h++) {
        for (int j = 0; j < 12; j++) keep[h * 12 + j] = j;
        nk[h] = 12;
    }
    kvs_layer_plan lp[16];
    ck_assert_int_le(hp->n_layers, 16);
    memset(lp, 0, sizeof lp);
    for (int l = 0; l < hp->n_layers; l++) {
        lp[l].keep = keep;
        lp[l].n_keep = nk;
        lp[l].keep_stride = 12;
    }
    plan.layers = lp;
    ck_assert_msg(kvs_model_forward(e.m, c, &plan, &r) == KVS_OK, "%s", kvs_last_error());
    for (int i = 0; i < hp->vocab; i++) ck_assert_msg(r.logits[i] == dense[i], "logit %d: %g vs %g", i, r.logits[i], dense[i]);
    /* keep 8 of 12 rows (head-dependent): other logits */
    for (int h = 0; h < H; h++) {
        int n = 0;
        for (int j = 0; j < 12; j++)
            if (j < 2 || j >= 4 + h % 2) keep[h * 12 + n++] = j;
        nk[h] = n;
    }
    ck_assert_msg(kvs_model_forward(e.m, c, &plan, &r) == KVS_OK, "%s", kvs_last_error());
    int differ = 0;
    for (int i = 0; i < hp->vocab; i++) differ += r.logits[i] != dense[i];
    ck_assert_int_gt(differ, 0);
    /* not increasing, beyond the cache length, empty */
    keep[1] = 0;
    ck_assert_int_eq(kvs_model_forward(e.m, c, &plan, &r), KVS_ERR_INVALID_ARGUMENT);
    keep[1] = 1;
    keep[nk[0] - 1] = 13;
    ck_assert_int_eq(kvs_model_forward(e.m, c, &plan, &r), KVS_ERR_INVALID_ARGUMENT);
    keep[nk[0] - 1] = 11;
    nk[0] = 0;
    ck_assert_int_eq(kvs_model_forward(e.m, c, &plan, &r), KVS_ERR_INVALID_ARGUMENT);
    ck_assert(strstr(kvs_last_error(), "keeps") != NULL);
    free(dense);
    kvs_cache_destroy(&c);
    env_close(&e);
}
END_TEST

/* Defaults: fewer rows than the baseline, most tokens agree (gen 128, block 32, threshold 0.9). */
START_TEST(test_defaults_save_compute) {
    env e = {0};
    env_open(&e);
    refcase *rc = &g_cases[0];
    kvs_dlm_params p = kvs_dlm_params_default();
    p.gen_len = 128 / case_stride(); /* Vulkan: 64 */
    p.block_len = 32;
    p.threshold = 0.9f;
    int32_t base[1024], got[1024];
    kvs_gen_stats st0, st;
    decode(&e, rc->prompt, rc->np, p, NULL, base, &st0);
    const char *names[] = {"prefix", "dual", "delayed", "elastic"};
    const double max_frac[] = {0.8, 0.6, 0.8, 0.5};
    for (int i = 0; i < 4; i++) {
        kvs_dlm_schedule *sc = NULL;
        ck_assert(kvs_dlm_schedule_from_name(&sc, names[i], 4, NULL) == KVS_OK);
        decode(&e, rc->prompt, rc->np, p, sc, got, &st);
        int agree = 0;
        for (int64_t j = 0; j < p.gen_len; j++) agree += got[j] == base[j];
        printf("%-8s compute fraction %.3f, agreement %d/%lld\n", names[i], st.compute_fraction, agree,
               (long long)p.gen_len);
        ck_assert_msg(st.compute_fraction < max_frac[i], "%s computes %.3f of the rows", names[i], st.compute_fraction);
        /* positional agreement cascades on this 260K-parameter model (one early flip changes the
         * rest), so it is reported, not bounded; the first committed token must still agree */
        ck_assert_msg(agree >= 1, "%s agrees on %d of %lld tokens", names[i], agree, (long long)p.gen_len);
        kvs_dlm_schedule_destroy(&sc);
    }
    env_close(&e);
}
END_TEST

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_dlm_cache", &g_params, "stories260K-llada-f32.gguf", NULL, 0);
    if (setup >= 0) return setup;
    Suite *s = suite_create("dlm_cache");
    TCase *tc = tcase_create("anchors");
    tcase_set_timeout(tc, 900);
    /* --only NAME runs one test (names as below) */
    const char *only = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
#define ADD(t)                                                                                                         \
    if (!only || strcmp(only, #t) == 0) tcase_add_test(tc, t)
    ADD(test_prefix_dual_one_step_per_block);
    ADD(test_delayed_reload1_and_elastic_gamma1);
    ADD(test_wavefilter_budget1);
    ADD(test_sparse_keep_forward);
    ADD(test_defaults_save_compute);
    ADD(test_d2cache);
#undef ADD
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
