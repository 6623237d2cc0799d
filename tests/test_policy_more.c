/* The issue-18 eviction scorers (keydiff, lagkv, critical, expected) and the DMS-style threshold
 * mode on small hand-checked inputs. Scorer tests call kvs_policy_score on plain arrays; keep-set
 * tests append rows to a real APPEND cache on the backend given by --backend (default cpu; skips with
 * 77 when absent) and check the positions each head keeps after the evictor's trigger, so the
 * device top-k and compaction run on every backend. critical and expected read the attention
 * weights of stories260K (skipped when the fixture is missing); their expected values are worked
 * out so that they do not depend on the weights (a common positive factor, or none). Every keep-set
 * is derived by hand in the comment above its test. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/kvsieve.h"
#include "probe.h"
#include "kvsieve/cache.h"
#include "kvsieve/model.h"
#include "kvsieve/policy.h"

static kvs_device_params g_params;

/* ---- a one-layer keep-set harness --------------------------------------------------------------- */

typedef struct harness {
    kvs_device *dev;
    kvs_kv_cache *c;
    kvs_model_hparams hp;
    kvs_policy *pol;
    kvs_evictor *ev;
    int32_t next_pos;
    kvs_layer_plan lp[1];
    kvs_layer_stats st[1];
} harness;

static kvs_budget_scope g_scope = KVS_SCOPE_HEAD; /* the scope h_init gives the evictor */
static const float *g_key_mass;                   /* the key mass h_step reports ([H][n_kv]), or NULL */

static void h_init(harness *h, int H, int hd, const char *policy, const kvs_policy_params *pp, double budget, int64_t buffer) {
    memset(h, 0, sizeof *h);
    ck_assert_msg(kvs_device_open(&h->dev, &g_params) == KVS_OK, "device: %s", kvs_last_error());
    h->hp.n_layers = 1;
    h->hp.n_kv_heads = H;
    h->hp.n_heads = H;
    h->hp.head_dim = hd;
    ck_assert_msg(kvs_policy_create(&h->pol, policy, pp) == KVS_OK, "%s", kvs_last_error());
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = h->pol;
    ep.budget = budget;
    ep.buffer = buffer;
    ep.scope = g_scope;
    ck_assert_msg(kvs_evictor_create(&h->ev, &ep, &h->hp, 100) == KVS_OK, "%s", kvs_last_error());
    kvs_cache_params cp = kvs_cache_params_default();
    cp.n_layers = 1;
    cp.n_kv_heads = H;
    cp.head_dim = hd;
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(h->ev, 8);
    ck_assert_msg(kvs_cache_create(&h->c, h->dev, &cp) == KVS_OK, "%s", kvs_last_error());
    ck_assert_msg(kvs_evictor_begin(h->ev, h->c) == KVS_OK, "%s", kvs_last_error());
}

static void h_free(harness *h) {
    kvs_evictor_destroy(&h->ev);
    kvs_policy_destroy(&h->pol);
    kvs_cache_destroy(&h->c);
    kvs_device_destroy(&h->dev);
}

/* Appends n rows to every head: k[i][h][d], v likewise ([n][H][hd]); then the evictor's update. */
static void h_step(harness *h, int64_t n, const float *k, const float *v) {
    int H = h->hp.n_kv_heads, hd = h->hp.head_dim;
    int any = 0;
    ck_assert_msg(kvs_evictor_plan(h->ev, n, h->lp, &any) == KVS_OK, "%s", kvs_last_error());
    int32_t pos[64];
    for (int64_t i = 0; i < n; i++) pos[i] = h->next_pos + (int32_t)i;
    kvs_tensor *kt = NULL, *vt = NULL;
    ck_assert(kvs_tensor_new(&kt, h->dev, KVS_F32, hd, H, n, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&vt, h->dev, KVS_F32, hd, H, n, 0) == KVS_OK);
    ck_assert(kvs_tensor_upload(kt, k, 0, (size_t)n * H * hd * 4) == KVS_OK);
    ck_assert(kvs_tensor_upload(vt, v, 0, (size_t)n * H * hd * 4) == KVS_OK);
    ck_assert_msg(kvs_cache_write_rows(h->c, 0, kt, vt, pos, n) == KVS_OK, "%s", kvs_last_error());
    kvs_tensor_destroy(&kt);
    kvs_tensor_destroy(&vt);
    h->next_pos += (int32_t)n;
    h->st[0].n_kv = kvs_cache_max_len(h->c, 0);
    h->st[0].key_mass = g_key_mass;
    kvs_step_result r = {.logits = NULL, .layers = h->st};
    ck_assert_msg(kvs_evictor_update(h->ev, h->c, &r) == KVS_OK, "update: %s", kvs_last_error());
}

static void expect_pos(harness *h, int hh, const int32_t *want, int64_t n) {
    int64_t len = kvs_cache_len(h->c, 0, hh);
    const int32_t *pos = kvs_cache_positions(h->c, 0, hh);
    char got[256] = "";
    for (int64_t i = 0; i < len && strlen(got) < 200; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", pos[i]);
    ck_assert_msg(len == n && memcmp(pos, want, (size_t)n * 4) == 0, "head %d keeps [%s]", hh, got);
}

/* ---- names, parameters ------------------------------------------------------------------------- */

START_TEST(test_names_and_params) {
    const char *names[] = {"keydiff", "lagkv", "critical", "expected", "prefixkv", "critical:knorm", "critical:expected"};
    for (int i = 0; i < 7; i++) {
        kvs_policy *p = NULL;
        ck_assert_msg(kvs_policy_create(&p, names[i], NULL) == KVS_OK, "%s: %s", names[i], kvs_last_error());
        ck_assert_str_eq(kvs_policy_name(p), names[i]);
        kvs_policy_destroy(&p);
    }
    kvs_policy *p = NULL;
    kvs_policy_params pp = kvs_policy_params_default();
    ck_assert_int_eq(kvs_policy_create(&p, "critical:adakv", &pp), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_policy_create(&p, "critical:critical", &pp), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_policy_create(&p, "critical:lru", &pp), KVS_ERR_INVALID_ARGUMENT);
    pp.lag = 1;
    ck_assert_int_eq(kvs_policy_create(&p, "lagkv", &pp), KVS_ERR_INVALID_ARGUMENT);
    pp.lag = -3; /* checked for every name */
    ck_assert_int_eq(kvs_policy_create(&p, "snapkv", &pp), KVS_ERR_INVALID_ARGUMENT);
    pp = kvs_policy_params_default();
    pp.n_future = -1;
    ck_assert_int_eq(kvs_policy_create(&p, "expected", &pp), KVS_ERR_INVALID_ARGUMENT);
    pp = kvs_policy_params_default();
    pp.threshold = 1.0f;
    ck_assert_int_eq(kvs_policy_create(&p, "knorm", &pp), KVS_ERR_INVALID_ARGUMENT);
    /* the threshold by name */
    ck_assert_msg(kvs_policy_create(&p, "critical:snapkv@0.25", NULL) == KVS_OK, "%s", kvs_last_error());
    ck_assert_str_eq(kvs_policy_name(p), "critical:snapkv@0.25");
    kvs_policy_destroy(&p);
    const char *bad[] = {"snapkv@", "snapkv@1", "snapkv@0", "snapkv@0.3x", "@0.3", "lru@0.3"};
    for (int i = 0; i < 6; i++) {
        kvs_status st = kvs_policy_create(&p, bad[i], NULL);
        ck_assert_msg(st == (i == 5 ? KVS_ERR_NOT_FOUND : KVS_ERR_INVALID_ARGUMENT), "%s: %d", bad[i], (int)st);
        ck_assert_ptr_null(p);
    }
    pp = kvs_policy_params_default();
    pp.first_stage = 1.5f;
    ck_assert_int_eq(kvs_policy_create(&p, "critical", &pp), KVS_ERR_INVALID_ARGUMENT);
    /* the budget shapes take the new scorers as their base */
    pp = kvs_policy_params_default();
    pp.base = "keydiff";
    ck_assert_msg(kvs_policy_create(&p, "adakv", &pp) == KVS_OK, "%s", kvs_last_error());
    kvs_policy_destroy(&p);
    pp.base = "critical";
    ck_assert_int_eq(kvs_policy_create(&p, "pyramidkv", &pp), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(kvs_policy_create(&p, "prefixkv", &pp) == KVS_OK, "%s", kvs_last_error()); /* critical:snapkv below */
    kvs_policy_destroy(&p);
    pp.base = "prefixkv";
    ck_assert_int_eq(kvs_policy_create(&p, "prefixkv", &pp), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(p);
}
END_TEST

/* ---- KeyDiff ---------------------------------------------------------------------------------- */

/* One head, head_dim 2, keys [1 0] [3 4] [0 2] [2 0]; unit keys [1 0] [.6 .8] [0 1] [1 0], anchor
 * a = their mean [.65 .45], |a| = sqrt(.625) = .790569. Scores -cos(k, a): -.65/.790569 = -.822192,
 * -.75/.790569 = -.948683, -.45/.790569 = -.569210, -.822192. Budget 3, buffer 1 (trigger at 4
 * rows): the row most like the mean (1) goes; positions 0 2 3 stay. */
static const float kd_keys[8] = {1, 0, 3, 4, 0, 2, 2, 0};

START_TEST(test_keydiff_scores) {
    kvs_policy *p = NULL;
    ck_assert(kvs_policy_create(&p, "keydiff", NULL) == KVS_OK);
    int64_t len = 4;
    int32_t pos[4] = {0, 1, 2, 3};
    float sc[4];
    kvs_policy_input in = {.layer = 0, .n_layers = 1, .n_kv_heads = 1, .n_heads = 1, .head_dim = 2, .stride = 4,
                           .len = &len, .pos = pos, .cur_pos = 3, .budget = 3, .keys = kd_keys};
    ck_assert_msg(kvs_policy_score(p, &in, sc) == KVS_OK, "%s", kvs_last_error());
    const float want[4] = {-0.822192f, -0.948683f, -0.569210f, -0.822192f};
    for (int i = 0; i < 4; i++) ck_assert_msg(fabsf(sc[i] - want[i]) < 1e-5f, "row %d: %g", i, (double)sc[i]);
    in.keys = NULL; /* a declared input missing */
    ck_assert_int_eq(kvs_policy_score(p, &in, sc), KVS_ERR_INVALID_ARGUMENT);
    kvs_policy_destroy(&p);
}
END_TEST

START_TEST(test_keydiff_keep) {
    harness h;
    h_init(&h, 1, 2, "keydiff", NULL, 3, 1);
    h_step(&h, 4, kd_keys, kd_keys);
    const int32_t w[3] = {0, 2, 3};
    expect_pos(&h, 0, w, 3);
    float got[6];
    ck_assert(kvs_tensor_download(kvs_cache_k(h.c, 0), got, 0, sizeof got) == KVS_OK);
    const float want[6] = {1, 0, 0, 2, 2, 0};
    for (int i = 0; i < 6; i++) ck_assert(got[i] == want[i]);
    h_free(&h);
}
END_TEST

/* ---- LagKV ------------------------------------------------------------------------------------ */

/* n_sink 1, lag 2, one head, head_dim 2, K = V, 6 rows: [5 5] [0 0] [1 0] [0 0] [2 2] [7 1].
 * 6 >= 1 + 2*2 rows: P = (6-1)/2 = 2 partitions, end 5; the last partition + remainder (rows 3..5)
 * and the sink (row 0) score 1. Partition 0 (rows 1, 2) against partition 1 (rows 3, 4): min [0 0],
 * max [2 2]; normalised row 1 [0 0] (std 0), row 2 [.5 0] (unbiased std .353553): the softmax is
 * larger for row 2 -> ranks 0 and 1 -> scores 0 and .5. Keep 5 (buffer 1: trigger at 6 rows):
 * row 1 goes. With 4 rows (< 5): recency, [1, 0, 1/3, 2/3]. */
static const float lag_kv[12] = {5, 5, 0, 0, 1, 0, 0, 0, 2, 2, 7, 1};

START_TEST(test_lagkv_scores) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.n_sink = 1;
    pp.lag = 2;
    kvs_policy *p = NULL;
    ck_assert(kvs_policy_create(&p, "lagkv", &pp) == KVS_OK);
    int64_t len = 6;
    int32_t pos[6] = {0, 1, 2, 3, 4, 5};
    float sc[6];
    kvs_policy_input in = {.layer = 0, .n_layers = 1, .n_kv_heads = 1, .n_heads = 1, .head_dim = 2, .stride = 6,
                           .len = &len, .pos = pos, .cur_pos = 5, .budget = 5, .keys = lag_kv, .values = lag_kv};
    ck_assert_msg(kvs_policy_score(p, &in, sc) == KVS_OK, "%s", kvs_last_error());
    const float want[6] = {1, 0, 0.5f, 1, 1, 1};
    for (int i = 0; i < 6; i++) ck_assert_msg(sc[i] == want[i], "row %d: %g", i, (double)sc[i]);
    len = 4;
    ck_assert(kvs_policy_score(p, &in, sc) == KVS_OK);
    const float want4[4] = {1, 0, 1.0f / 3.0f, 2.0f / 3.0f};
    for (int i = 0; i < 4; i++) ck_assert_msg(fabsf(sc[i] - want4[i]) < 1e-6f, "short row %d: %g", i, (double)sc[i]);
    kvs_policy_destroy(&p);
}
END_TEST

START_TEST(test_lagkv_keep) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.n_sink = 1;
    pp.lag = 2;
    harness h;
    h_init(&h, 1, 2, "lagkv", &pp, 5, 1);
    h_step(&h, 6, lag_kv, lag_kv);
    const int32_t w[5] = {0, 2, 3, 4, 5};
    expect_pos(&h, 0, w, 5);
    h_free(&h);
}
END_TEST

/* ---- threshold mode ----------------------------------------------------------------------------- */

/* K-norm with threshold .5, one head, head_dim 1, keys 1 2 9 10 3: scores -1 -2 -9 -10 -3, min -10,
 * max -1, normalised (s + 10) / 9 = 1 .889 .111 0 .778: rows 2 and 3 fall below .5. Budget 4, buffer
 * 1 (trigger at 5 rows): the top 4 are rows 0 1 4 2, less row 2 -> 0 1 4 (without the threshold:
 * 0 1 2 4). Layer scope over two identical heads: the pool keeps 8 of 10; the same rows go. */
static const float thr_keys[10] = {1, 1, 2, 2, 9, 9, 10, 10, 3, 3}; /* [5 rows][2 heads][1] */

START_TEST(test_threshold_keep) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.threshold = 0.5f;
    harness h;
    h_init(&h, 2, 1, "knorm", &pp, 4, 1);
    h_step(&h, 5, thr_keys, thr_keys);
    const int32_t w[3] = {0, 1, 4};
    expect_pos(&h, 0, w, 3);
    expect_pos(&h, 1, w, 3);
    h_free(&h);
    h_init(&h, 2, 1, "knorm", NULL, 4, 1);
    h_step(&h, 5, thr_keys, thr_keys);
    const int32_t w0[4] = {0, 1, 2, 4};
    expect_pos(&h, 0, w0, 4);
    h_free(&h);
    h_init(&h, 2, 1, "knorm@0.5", NULL, 4, 1); /* the same threshold by name */
    h_step(&h, 5, thr_keys, thr_keys);
    expect_pos(&h, 1, w, 3);
    h_free(&h);
}
END_TEST

START_TEST(test_threshold_layer_scope) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.threshold = 0.5f;
    harness h;
    g_scope = KVS_SCOPE_LAYER; /* one pool of 2 * 4 over both heads: only the 6 rows above stay */
    h_init(&h, 2, 1, "knorm", &pp, 4, 1);
    g_scope = KVS_SCOPE_HEAD;
    h_step(&h, 5, thr_keys, thr_keys);
    const int32_t w[3] = {0, 1, 4};
    expect_pos(&h, 0, w, 3);
    expect_pos(&h, 1, w, 3);
    h_free(&h);
}
END_TEST

/* ---- PrefixKV ------------------------------------------------------------------------------------ */

/* prefixkv over h2o (window 1: the newest row kept), 2 kv heads, budget 3 per head, buffer 1, one
 * step of 5 rows (cur_pos 4; the rows were seen by 5 4 3 2 1 queries). Key mass chosen so that the
 * H2O scores (mass / seen) of rows 0..3 are head 0 .09 .005 .003 .002 (concentrated, small) and head
 * 1 .35 .3 .2 .15 (flat, large). PrefixKV raises the scope to global (one pool of 6):
 * normalised, head 0 is .9 .05 .03 .02 -> 1 - mass before = 1 .1 .05 .02; head 1 -> 1 .65 .35 .15.
 * The pool: rows 4 (+inf) of both heads, then 1 (h0 r0), 1 (h1 r0), .65 (h1 r1), .35 (h1 r2):
 * head 0 keeps 0 4, head 1 keeps 0 1 2 4. Plain h2o under the global scope ranks the raw scores
 * (.35 .3 .2 .15 beat .09): head 0 would keep only 4. */
START_TEST(test_prefixkv_keep) {
    static const float km[10] = {.45f, .02f, .009f, .004f, 0, 1.75f, 1.2f, .6f, .3f, 0};
    static float kz[10];
    kvs_policy_params pp = kvs_policy_params_default();
    pp.base = "h2o";
    pp.window = 1;
    harness h;
    g_key_mass = km;
    h_init(&h, 2, 1, "prefixkv", &pp, 3, 1);
    h_step(&h, 5, kz, kz);
    const int32_t w0[2] = {0, 4}, w1[4] = {0, 1, 2, 4};
    expect_pos(&h, 0, w0, 2);
    expect_pos(&h, 1, w1, 4);
    h_free(&h);
    g_scope = KVS_SCOPE_GLOBAL;
    h_init(&h, 2, 1, "h2o", &pp, 3, 1);
    g_scope = KVS_SCOPE_HEAD;
    h_step(&h, 5, kz, kz);
    const int32_t r0[1] = {4}, r1[5] = {0, 1, 2, 3, 4};
    expect_pos(&h, 0, r0, 1);
    expect_pos(&h, 1, r1, 5);
    h_free(&h);
    g_key_mass = NULL;
}
END_TEST

/* ---- mass mode (PSA-style top-p, kvs_topp on the device) ----------------------------------------- */

/* h2o (window 1: row 4 kept as +inf), 2 kv heads, budget 4, buffer 1, one step of 5 rows; the
 * key mass of test_prefixkv_keep gives h2o scores head 0 .09 .005 .003 .002 (T .1) and head 1
 * .35 .3 .2 .15 (T 1). keep_mass .6: head 0 reaches .06 with row 0 alone -> keeps 0 4; head 1
 * needs .35 + .3 = .65 >= .6 -> keeps 0 1 4. Without the mass mode the budget keeps 4 rows per head
 * (0 1 2 4). The layer scope (one pool of 8) gives the same sets: the counts cap the heads. */
START_TEST(test_mass_keep) {
    static const float km[10] = {.45f, .02f, .009f, .004f, 0, 1.75f, 1.2f, .6f, .3f, 0};
    static float kz[10];
    kvs_policy_params pp = kvs_policy_params_default();
    pp.window = 1;
    pp.keep_mass = 0.6f;
    const int32_t w0[2] = {0, 4}, w1[3] = {0, 1, 4}, all[4] = {0, 1, 2, 4};
    g_key_mass = km;
    for (int mode = 0; mode < 4; mode++) { /* params, by name, layer scope, off */
        kvs_policy_params q = pp;
        if (mode == 1 || mode == 3) q.keep_mass = 0.0f;
        harness h;
        g_scope = mode == 2 ? KVS_SCOPE_LAYER : KVS_SCOPE_HEAD;
        h_init(&h, 2, 1, mode == 1 ? "h2o@mass0.6" : "h2o", &q, 4, 1);
        g_scope = KVS_SCOPE_HEAD;
        h_step(&h, 5, kz, kz);
        if (mode == 3) {
            expect_pos(&h, 0, all, 4);
            expect_pos(&h, 1, all, 4);
        } else {
            expect_pos(&h, 0, w0, 2);
            expect_pos(&h, 1, w1, 3);
        }
        h_free(&h);
    }
    g_key_mass = NULL;
    /* names and refusals: only scorers whose scores are attention masses */
    kvs_policy *p = NULL;
    const char *good[] = {"snapkv@mass1", "tova@mass0.5", "critical:h2o@mass0.9", "adakv@mass0.9", "expected@mass0.3"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(kvs_policy_create(&p, good[i], NULL) == KVS_OK, "%s: %s", good[i], kvs_last_error());
        ck_assert_str_eq(kvs_policy_name(p), good[i]);
        kvs_policy_destroy(&p);
    }
    const char *bad[] = {"snapkv@mass0", "snapkv@mass1.5", "snapkv@mass", "snapkv@mass0.5x", "knorm@mass0.5",
                         "keydiff@mass0.5", "streaming@mass0.5", "critical:knorm@mass0.5", "prefixkv@mass0.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(kvs_policy_create(&p, bad[i], NULL) == KVS_ERR_INVALID_ARGUMENT, "%s accepted", bad[i]);
        ck_assert(p == NULL && kvs_last_error()[0]);
    }
    kvs_policy_params bp = kvs_policy_params_default();
    bp.keep_mass = 1.5f;
    ck_assert(kvs_policy_create(&p, "snapkv", &bp) == KVS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* ---- the weight readers (stories260K) ------------------------------------------------------------ */

static kvs_model *load_model(kvs_device **dev) {
    char path[4096];
    if (kvs_model_locate("stories260K-f32.v3.gguf", path, sizeof path) != KVS_OK) {
        printf("note: stories260K-f32.v3.gguf not found, model checks skipped\n");
        return NULL;
    }
    ck_assert_msg(kvs_device_open(dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, *dev, path, NULL) == KVS_OK, "%s", kvs_last_error());
    return m;
}

/* critical:streaming (n_sink 0), budget 4, first_stage .5: stage 1 keeps the 2 newest rows (6, 7).
 * Head 0's values are c_r * e_0, c = 1 7 0 1 1 1 1 1, so ||v Wo_j||_1 = c_r * N with one N > 0 for
 * the head (whatever Wo is): stage 2 scores (pos + 1e-4) * c * N ~ 1e-4 N, 7N, 0, 3N, 4N, 5N.
 * The top 4: 6 7 (inf), 1 (7N), 5 (5N); streaming alone would keep 4 5 6 7. Other heads empty. */
START_TEST(test_critical_scores) {
    kvs_device *dev = NULL;
    kvs_model *m = load_model(&dev);
    if (!m) return;
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int H = hp->n_kv_heads, d = hp->head_dim;
    kvs_policy_params pp = kvs_policy_params_default();
    pp.n_sink = 0;
    kvs_policy *p = NULL;
    ck_assert(kvs_policy_create(&p, "critical:streaming", &pp) == KVS_OK);
    int64_t S = 8, len[16] = {0};
    len[0] = 8;
    int32_t pos[16 * 8];
    float *v = calloc((size_t)H * S * d, sizeof *v), *sc = malloc((size_t)H * S * sizeof *sc);
    const float c[8] = {1, 7, 0, 1, 1, 1, 1, 1};
    for (int r = 0; r < 8; r++) pos[r] = r, v[r * d] = c[r];
    kvs_policy_input in = {.layer = 1, .n_layers = hp->n_layers, .n_kv_heads = H, .n_heads = hp->n_heads, .head_dim = d,
                           .stride = S, .len = len, .pos = pos, .cur_pos = 7, .budget = 4, .values = v};
    ck_assert_int_eq(kvs_policy_score(p, &in, sc), KVS_ERR_STATE); /* no model bound */
    kvs_policy_set_model(p, m);
    ck_assert_msg(kvs_policy_score(p, &in, sc) == KVS_OK, "%s", kvs_last_error());
    ck_assert(isinf(sc[6]) && sc[6] > 0 && isinf(sc[7]) && sc[7] > 0);
    double N = sc[1] / (7.0 * (1.0 + 1e-4));
    ck_assert(N > 0.0);
    ck_assert(sc[2] == 0.0f);
    for (int r = 0; r < 6; r++) {
        double want = (r + 1e-4) * c[r] * N;
        ck_assert_msg(fabs(sc[r] - want) <= 1e-5 * N * 7, "row %d: %g vs %g", r, (double)sc[r], want);
    }
    /* the keep-set of budget 4: rows 6 7 1 5 */
    for (int r = 0; r < 6; r++)
        if (r != 1 && r != 5) ck_assert(sc[r] < sc[5] && sc[5] < sc[1]);
    free(v);
    free(sc);
    kvs_policy_destroy(&p);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* expected (n_sink 4) before any query was observed: mean and covariance are 0, every non-sink row
 * gets z = 0 -> the uniform 1/4 over rows 4..7, times ||v||: values c_r * e_0 with c = 1 1 1 1 2 5 3 1
 * give .5 1.25 .75 .25; the sinks (positions 0..3) +inf. Keep 6: 0 1 2 3 5 6. */
START_TEST(test_expected_no_queries) {
    kvs_device *dev = NULL;
    kvs_model *m = load_model(&dev);
    if (!m) return;
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int H = hp->n_kv_heads, d = hp->head_dim;
    kvs_policy *p = NULL;
    ck_assert(kvs_policy_create(&p, "expected", NULL) == KVS_OK);
    kvs_policy_set_model(p, m);
    /* begin through an evictor (sizes the query ring) */
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = p;
    ep.budget_tokens = 6;
    kvs_evictor *ev = NULL;
    ck_assert(kvs_evictor_create(&ev, &ep, hp, 100) == KVS_OK);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(ev, 1);
    kvs_kv_cache *cache = NULL;
    ck_assert(kvs_cache_create(&cache, dev, &cp) == KVS_OK);
    ck_assert_msg(kvs_evictor_begin(ev, cache) == KVS_OK, "%s", kvs_last_error());
    int64_t S = 8, len[16] = {0};
    len[0] = 8;
    int32_t pos[16 * 8];
    float *k = calloc((size_t)H * S * d, sizeof *k), *v = calloc((size_t)H * S * d, sizeof *v);
    float *sc = malloc((size_t)H * S * sizeof *sc);
    const float c[8] = {1, 1, 1, 1, 2, 5, 3, 1};
    for (int r = 0; r < 8; r++) pos[r] = r, v[r * d] = c[r], k[r * d + 1] = (float)r;
    kvs_policy_input in = {.layer = 0, .n_layers = hp->n_layers, .n_kv_heads = H, .n_heads = hp->n_heads, .head_dim = d,
                           .stride = S, .len = len, .pos = pos, .cur_pos = 7, .budget = 6, .keys = k, .values = v};
    ck_assert_msg(kvs_policy_score(p, &in, sc) == KVS_OK, "%s", kvs_last_error());
    for (int r = 0; r < 4; r++) ck_assert(isinf(sc[r]) && sc[r] > 0);
    const float want[4] = {0.5f, 1.25f, 0.75f, 0.25f};
    for (int r = 0; r < 4; r++) ck_assert_msg(fabsf(sc[4 + r] - want[r]) < 1e-6f, "row %d: %g", 4 + r, (double)sc[4 + r]);
    free(k), free(v), free(sc);
    kvs_evictor_destroy(&ev);
    kvs_cache_destroy(&cache);
    kvs_policy_destroy(&p);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* expected is exact for one future position: with n_future 1 the averaged rotation is R(cur+1), so
 * with the observed pre-RoPE queries' mean mu and covariance C,
 *   z_r = R mu . k_r / sqrt(d) + (k_r^T R C R^T k_r) / (2d).
 * One query (C = 0): the attention logit that query would have at position cur+1. Two queries q1, q2:
 * mu = (q1 + q2)/2 and C = e e^T with e = (q1 - q2)/2, so the second term is (R e . k_r)^2 / (2d).
 * The test observes n_obs layer-input rows x through the evictor (q = Wq x inside the policy) and
 * computes the reference independently: Wq from the model file on the host, R by the device's
 * kvs_rope on mu and e, softmax over head 0's rows, mean over its query heads. */
static void expected_exact(int n_obs) {
    kvs_device *dev = NULL;
    kvs_model *m = load_model(&dev);
    if (!m) return;
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int H = hp->n_kv_heads, NH = hp->n_heads, d = hp->head_dim, D = hp->dim, G = NH / H, L = hp->n_layers;
    kvs_policy_params pp = kvs_policy_params_default();
    pp.n_sink = 0;
    pp.window = n_obs;
    pp.n_future = 1;
    kvs_policy *p = NULL;
    ck_assert(kvs_policy_create(&p, "expected", &pp) == KVS_OK);
    kvs_policy_set_model(p, m);
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = p;
    ep.budget_tokens = 50;
    kvs_evictor *ev = NULL;
    ck_assert(kvs_evictor_create(&ev, &ep, hp, 100) == KVS_OK);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(ev, n_obs);
    kvs_kv_cache *cache = NULL;
    ck_assert(kvs_cache_create(&cache, dev, &cp) == KVS_OK);
    ck_assert(kvs_evictor_begin(ev, cache) == KVS_OK);
    /* one step of n_obs tokens: zero K/V rows, the layer inputs x, zero key mass */
    kvs_layer_plan lp[16];
    kvs_layer_stats st[16];
    ck_assert(L <= 16 && n_obs <= 2);
    int any = 0;
    ck_assert(kvs_evictor_plan(ev, n_obs, lp, &any) == KVS_OK);
    ck_assert(lp[0].want_x == 1);
    float *x = malloc((size_t)n_obs * D * sizeof *x), *km = calloc((size_t)H * n_obs, sizeof *km);
    for (int t = 0; t < n_obs; t++)
        for (int c = 0; c < D; c++) x[t * D + c] = sinf((0.7f + 0.4f * (float)t) * (float)c + 1.0f + (float)t);
    kvs_tensor *z = NULL;
    ck_assert(kvs_tensor_new(&z, dev, KVS_F32, d, H, n_obs, 0) == KVS_OK);
    ck_assert(kvs_tensor_fill(z, 0.0) == KVS_OK);
    int32_t p0[2] = {0, 1};
    for (int l = 0; l < L; l++) {
        ck_assert(kvs_cache_write_rows(cache, l, z, z, p0, n_obs) == KVS_OK);
        st[l] = (kvs_layer_stats){.n_kv = n_obs, .key_mass = km, .x = x, .n_x_rows = n_obs};
    }
    kvs_tensor_destroy(&z);
    kvs_step_result r = {.logits = NULL, .layers = st};
    ck_assert_msg(kvs_evictor_update(ev, cache, &r) == KVS_OK, "%s", kvs_last_error());
    /* the reference: q_t = Wq x_t (layer 0); rows 0, 1 of qt = mu, e; rotated to position 6 */
    char path[4096];
    ck_assert(kvs_model_locate("stories260K-f32.v3.gguf", path, sizeof path) == KVS_OK);
    kvs_model_file *mf = NULL;
    ck_assert(kvs_model_file_open(&mf, path, NULL) == KVS_OK);
    int QD = NH * d;
    float *wq = malloc((size_t)QD * D * sizeof *wq), *q = calloc((size_t)2 * QD, sizeof *q), *me = calloc((size_t)2 * QD, sizeof *me);
    ck_assert(kvs_weight_to_f32(&kvs_model_file_weights(mf)->layers[0].wq, wq) == KVS_OK);
    for (int t = 0; t < n_obs; t++)
        for (int j = 0; j < QD; j++) {
            double s = 0.0;
            for (int c = 0; c < D; c++) s += (double)wq[(size_t)j * D + c] * x[t * D + c];
            q[t * QD + j] = (float)s;
        }
    for (int j = 0; j < QD; j++) {
        me[j] = n_obs == 1 ? q[j] : (q[j] + q[QD + j]) / 2.0f;
        me[QD + j] = n_obs == 1 ? 0.0f : (q[j] - q[QD + j]) / 2.0f;
    }
    kvs_tensor *qt = NULL, *pt = NULL;
    ck_assert(kvs_tensor_new(&qt, dev, KVS_F32, d, NH, 2, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&pt, dev, KVS_I32, 2, 0, 0, 0) == KVS_OK);
    int32_t six[2] = {6, 6};
    ck_assert(kvs_tensor_upload(qt, me, 0, (size_t)2 * QD * 4) == KVS_OK);
    ck_assert(kvs_tensor_upload(pt, six, 0, 8) == KVS_OK);
    kvs_rope_params rp = kvs_rope_params_default();
    rp.mode = hp->rope_mode;
    rp.theta_base = hp->rope_base;
    rp.n_rot = hp->rope_dim;
    ck_assert_msg(kvs_rope(dev, qt, pt, &rp) == KVS_OK, "%s", kvs_last_error());
    ck_assert(kvs_tensor_download(qt, me, 0, (size_t)2 * QD * 4) == KVS_OK);
    /* head 0: 6 rows of keys, unit values */
    int64_t S = 6, len[16] = {0};
    len[0] = 6;
    int32_t pos[16 * 6];
    float *k = calloc((size_t)H * S * d, sizeof *k), *v = calloc((size_t)H * S * d, sizeof *v);
    float *sc = malloc((size_t)H * S * sizeof *sc);
    for (int rr = 0; rr < 6; rr++) {
        pos[rr] = rr;
        v[rr * d] = 1.0f;
        for (int a = 0; a < d; a++) k[rr * d + a] = cosf(0.9f * (float)(rr * a) + 0.3f * (float)rr);
    }
    kvs_policy_input in = {.layer = 0, .n_layers = L, .n_kv_heads = H, .n_heads = NH, .head_dim = d, .stride = S,
                           .len = len, .pos = pos, .cur_pos = 5, .budget = 4, .keys = k, .values = v};
    ck_assert_msg(kvs_policy_score(p, &in, sc) == KVS_OK, "%s", kvs_last_error());
    double want[6] = {0};
    for (int g = 0; g < G; g++) {
        double lg[6], mx = -INFINITY, sum = 0.0;
        for (int rr = 0; rr < 6; rr++) {
            double s = 0.0, e = 0.0;
            for (int a = 0; a < d; a++) {
                s += (double)me[g * d + a] * k[rr * d + a];
                e += (double)me[QD + g * d + a] * k[rr * d + a];
            }
            lg[rr] = s / sqrt((double)d) + e * e / (2.0 * d);
            mx = lg[rr] > mx ? lg[rr] : mx;
        }
        for (int rr = 0; rr < 6; rr++) sum += (lg[rr] = exp(lg[rr] - mx));
        for (int rr = 0; rr < 6; rr++) want[rr] += lg[rr] / sum / G;
    }
    for (int rr = 0; rr < 6; rr++)
        ck_assert_msg(fabs(sc[rr] - want[rr]) < 1e-5, "%d queries, row %d: %g vs %g", n_obs, rr, (double)sc[rr], want[rr]);
    free(x), free(km), free(wq), free(q), free(me), free(k), free(v), free(sc);
    kvs_tensor_destroy(&qt);
    kvs_tensor_destroy(&pt);
    kvs_model_file_close(&mf);
    kvs_evictor_destroy(&ev);
    kvs_cache_destroy(&cache);
    kvs_policy_destroy(&p);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}

/* clusterkv on stories260K's shape (5 layers, 4 kv heads, head_dim 8, 8 query heads): one step of 36
 * rows with keys, in every layer and head, rows 0..3 (sinks) 0, then rows 4..35 alternating A = 5 e_0
 * (even rows) and B = -5 e_0 (odd rows). k-means (C = ceil(32 / 16) = 2, farthest-point start: row 4
 * and row 5) separates A and B exactly; the window queries q = Wq x (x = 1 for every observed row)
 * give A and B the scores s and -s, s = qbar . 5 e_0, whatever Wq is (s != 0). Budget 20 (buffer 1):
 * each head keeps the 4 sinks and exactly one whole cluster — all even rows 4..34 or all odd rows
 * 5..35 — where a recency or position rule would keep rows 20..35. */
START_TEST(test_clusterkv_keep) {
    kvs_device *dev = NULL;
    kvs_model *m = load_model(&dev);
    if (!m) return;
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int L = hp->n_layers, H = hp->n_kv_heads, d = hp->head_dim, D = hp->dim;
    kvs_policy *p = NULL;
    ck_assert(kvs_policy_create(&p, "clusterkv", NULL) == KVS_OK);
    kvs_policy_set_model(p, m);
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = p;
    ep.budget_tokens = 20;
    ep.buffer = 1;
    kvs_evictor *ev = NULL;
    ck_assert(kvs_evictor_create(&ev, &ep, hp, 100) == KVS_OK);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(ev, 36);
    kvs_kv_cache *cache = NULL;
    ck_assert(kvs_cache_create(&cache, dev, &cp) == KVS_OK);
    ck_assert_msg(kvs_evictor_begin(ev, cache) == KVS_OK, "%s", kvs_last_error());
    enum { NR = 36 };
    kvs_layer_plan lp[16];
    int any = 0;
    ck_assert_msg(kvs_evictor_plan(ev, NR, lp, &any) == KVS_OK, "%s", kvs_last_error());
    float *k = calloc((size_t)NR * H * d, sizeof *k), *x = malloc((size_t)NR * D * sizeof *x);
    for (int r = 4; r < NR; r++)
        for (int h = 0; h < H; h++) k[((size_t)r * H + h) * d] = r % 2 ? -5.0f : 5.0f;
    for (int i = 0; i < NR * D; i++) x[i] = 1.0f;
    int32_t pos[NR];
    for (int r = 0; r < NR; r++) pos[r] = r;
    kvs_tensor *kt = NULL;
    ck_assert(kvs_tensor_new(&kt, dev, KVS_F32, d, H, NR, 0) == KVS_OK);
    ck_assert(kvs_tensor_upload(kt, k, 0, (size_t)NR * H * d * 4) == KVS_OK);
    static kvs_layer_stats st[16];
    float *km = calloc((size_t)H * NR, sizeof *km); /* key mass (the observe mode asks for it): unused here */
    for (int l = 0; l < L; l++) {
        ck_assert_msg(kvs_cache_write_rows(cache, l, kt, kt, pos, NR) == KVS_OK, "%s", kvs_last_error());
        st[l] = (kvs_layer_stats){.n_kv = NR, .key_mass = km, .x = x, .n_x_rows = NR};
    }
    kvs_step_result res = {.logits = NULL, .layers = st};
    ck_assert_msg(kvs_evictor_update(ev, cache, &res) == KVS_OK, "update: %s", kvs_last_error());
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            int64_t len = kvs_cache_len(cache, l, h);
            const int32_t *kp = kvs_cache_positions(cache, l, h);
            ck_assert_msg(len == 20, "layer %d head %d keeps %lld rows", l, h, (long long)len);
            for (int r = 0; r < 4; r++) ck_assert_int_eq(kp[r], r);
            int parity = kp[4] % 2;
            for (int r = 4; r < 20; r++)
                ck_assert_msg(kp[r] == 4 + parity + 2 * (r - 4), "layer %d head %d: row %d holds position %d", l, h, r, kp[r]);
        }
    kvs_tensor_destroy(&kt);
    free(k);
    free(x);
    free(km);
    kvs_evictor_destroy(&ev);
    kvs_cache_destroy(&cache);
    kvs_policy_destroy(&p);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

START_TEST(test_expected_one_position) {
    expected_exact(1);
    expected_exact(2);
}
END_TEST

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_policy_more", &g_params, NULL, NULL, 0);
    if (setup >= 0) return setup;
    Suite *s = suite_create("policy_more");
    TCase *tc = tcase_create("scorers");
    tcase_add_test(tc, test_names_and_params);
    tcase_add_test(tc, test_keydiff_scores);
    tcase_add_test(tc, test_lagkv_scores);
    tcase_add_test(tc, test_critical_scores);
    tcase_add_test(tc, test_expected_no_queries);
    tcase_add_test(tc, test_expected_one_position);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("keep");
    tcase_set_timeout(tk, 120);
    tcase_add_test(tk, test_keydiff_keep);
    tcase_add_test(tk, test_lagkv_keep);
    tcase_add_test(tk, test_threshold_keep);
    tcase_add_test(tk, test_threshold_layer_scope);
    tcase_add_test(tk, test_prefixkv_keep);
    tcase_add_test(tk, test_mass_keep);
    tcase_add_test(tk, test_clusterkv_keep);
    suite_add_tcase(s, tk);
    return kvs_test_run(s);
}
