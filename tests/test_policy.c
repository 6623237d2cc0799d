/* Eviction policies and the evictor on small hand-checked inputs, no model needed.
 *
 * A harness appends token rows to a real APPEND cache (through the cache's internal host mirrors,
 * as the forward does), hands the evictor fabricated attention statistics in a kvs_step_result,
 * and checks the positions each head keeps after the trigger. Every expected keep-set is worked
 * out by hand in the comment above its test. Runs on the backend given by --backend (default cpu;
 * skips with 77 when absent), so keep-sets are compared across backends with the same inputs.
 * Over 600 lines by reason: one Check suite of independent hand-worked cases sharing one harness;
 * splitting it would split the harness, not a concern. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/kvsieve.h"
#include "probe.h"
#include "kvsieve/cache.h"
#include "kvsieve/policy.h"


static kvs_device_params g_params;

#define MAXL 4
typedef struct harness {
    kvs_device *dev;
    kvs_kv_cache *c;
    kvs_model_hparams hp;
    kvs_policy *pol;
    kvs_evictor *ev;
    int32_t next_pos;
    kvs_layer_plan lp[MAXL];
    kvs_layer_stats st[MAXL];
    int any;
} harness;

static void h_init(harness *h, int L, int H, int NH, int hd, const char *policy, const kvs_policy_params *pp,
                   double budget, int64_t buffer, kvs_budget_scope scope, double head_cap, int64_t seq_len) {
    memset(h, 0, sizeof *h);
    kvs_status s = kvs_device_open(&h->dev, &g_params);
    ck_assert_msg(s == KVS_OK, "device: %s", kvs_last_error());
    h->hp.n_layers = L;
    h->hp.n_kv_heads = H;
    h->hp.n_heads = NH;
    h->hp.head_dim = hd;
    if (policy) ck_assert_msg(kvs_policy_create(&h->pol, policy, pp) == KVS_OK, "%s", kvs_last_error());
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = h->pol;
    ep.budget = budget;
    ep.buffer = buffer;
    ep.scope = scope;
    if (head_cap > 0) ep.head_cap = head_cap;
    ck_assert_msg(kvs_evictor_create(&h->ev, &ep, &h->hp, seq_len) == KVS_OK, "%s", kvs_last_error());
    kvs_cache_params cp = kvs_cache_params_default();
    cp.n_layers = L;
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

/* Plans a step of n_new tokens (the plan is checked by the caller through h->lp / h->any). */
static void h_plan(harness *h, int64_t n_new) {
    ck_assert_msg(kvs_evictor_plan(h->ev, n_new, h->lp, &h->any) == KVS_OK, "%s", kvs_last_error());
}

/* Appends n_new rows at every layer and head (positions next_pos..), then runs the update with
 * key_mass[l] ([H][n_kv]) and probs[l] ([n_probe][NH][n_kv]) as this step's statistics. */
static void h_step(harness *h, int64_t n_new, const float *const *key_mass, const float *const *probs) {
    const kvs_cache_params *cp = kvs_cache_get_params(h->c);
    int H = cp->n_kv_heads, hd = cp->head_dim;
    size_t cap_elems = (size_t)H * cp->capacity * hd, new_elems = (size_t)n_new * H * hd;
    float *kall = malloc(cap_elems * sizeof *kall), *vall = malloc(cap_elems * sizeof *vall);
    float *knew = malloc(new_elems * sizeof *knew), *vnew = malloc(new_elems * sizeof *vnew);
    int32_t *pos = malloc((size_t)n_new * sizeof *pos);
    ck_assert(kall && vall && knew && vnew && pos);
    for (int64_t i = 0; i < n_new; i++) pos[i] = h->next_pos + (int32_t)i;
    for (int l = 0; l < cp->n_layers; l++) {
        /* the rows about to be appended keep what the test uploaded there (upload_keys): read them
         * back and write them through kvs_cache_write_rows, as the forward writes new K/V */
        ck_assert(kvs_tensor_download(kvs_cache_k(h->c, l), kall, 0, cap_elems * 4) == KVS_OK);
        ck_assert(kvs_tensor_download(kvs_cache_v(h->c, l), vall, 0, cap_elems * 4) == KVS_OK);
        for (int hh = 0; hh < H; hh++)
            for (int64_t i = 0; i < n_new; i++)
                for (int d = 0; d < hd; d++) {
                    size_t src = ((size_t)hh * cp->capacity + (size_t)(kvs_cache_len(h->c, l, hh) + i)) * hd + d;
                    size_t dst = ((size_t)i * H + hh) * hd + d;
                    knew[dst] = kall[src];
                    vnew[dst] = vall[src];
                }
        kvs_tensor *kt = NULL, *vt = NULL;
        ck_assert(kvs_tensor_new(&kt, h->dev, KVS_F32, hd, H, n_new, 0) == KVS_OK);
        ck_assert(kvs_tensor_new(&vt, h->dev, KVS_F32, hd, H, n_new, 0) == KVS_OK);
        ck_assert(kvs_tensor_upload(kt, knew, 0, new_elems * 4) == KVS_OK);
        ck_assert(kvs_tensor_upload(vt, vnew, 0, new_elems * 4) == KVS_OK);
        ck_assert_msg(kvs_cache_write_rows(h->c, l, kt, vt, pos, n_new) == KVS_OK, "%s", kvs_last_error());
        kvs_tensor_destroy(&kt);
        kvs_tensor_destroy(&vt);
        h->st[l].n_kv = kvs_cache_max_len(h->c, l);
        h->st[l].key_mass = key_mass ? key_mass[l] : NULL;
        h->st[l].probs = probs ? probs[l] : NULL;
        h->st[l].argmax = NULL;
    }
    free(kall), free(vall), free(knew), free(vnew), free(pos);
    h->next_pos += (int32_t)n_new;
    ck_assert_int_eq(kvs_cache_next_pos(h->c), h->next_pos);
    kvs_step_result r = {.logits = NULL, .layers = h->st};
    kvs_status s = kvs_evictor_update(h->ev, h->c, &r);
    ck_assert_msg(s == KVS_OK, "update: %s", kvs_last_error());
}

static void h_plan_step(harness *h, int64_t n_new, const float *const *key_mass, const float *const *probs) {
    h_plan(h, n_new);
    h_step(h, n_new, key_mass, probs);
}

/* Asserts that (layer, head) holds exactly the positions want[0..n). */
static void expect_pos(harness *h, int l, int hh, const int32_t *want, int64_t n) {
    int64_t len = kvs_cache_len(h->c, l, hh);
    const int32_t *pos = kvs_cache_positions(h->c, l, hh);
    char got[512] = "", exp[512] = "";
    for (int64_t i = 0; i < len && strlen(got) < 480; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", pos[i]);
    for (int64_t i = 0; i < n && strlen(exp) < 480; i++) snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%d ", want[i]);
    ck_assert_msg(len == n && memcmp(pos, want, (size_t)n * 4) == 0, "layer %d head %d keeps [%s], want [%s]", l, hh, got, exp);
}

/* ---- scorers and budgets on plain arrays ---------------------------------------------------- */

START_TEST(test_policy_names_and_errors) {
    const char *const *n = kvs_policy_names();
    int count = 0;
    for (; n[count]; count++) {
        kvs_policy *p = NULL;
        ck_assert_msg(kvs_policy_create(&p, n[count], NULL) == KVS_OK, "%s: %s", n[count], kvs_last_error());
        ck_assert_str_eq(kvs_policy_name(p), n[count]);
        kvs_policy_destroy(&p);
        ck_assert_ptr_null(p);
    }
    ck_assert_int_eq(count, 14);
    kvs_policy *p = NULL;
    ck_assert_int_eq(kvs_policy_create(&p, "lru", NULL), KVS_ERR_NOT_FOUND);
    kvs_policy_params pp = kvs_policy_params_default();
    pp.kernel = 4;
    ck_assert_int_eq(kvs_policy_create(&p, "snapkv", &pp), KVS_ERR_INVALID_ARGUMENT);
    pp = kvs_policy_params_default();
    pp.base = "adakv";
    ck_assert_int_eq(kvs_policy_create(&p, "pyramidkv", &pp), KVS_ERR_INVALID_ARGUMENT);
    kvs_budget_scope sc;
    ck_assert_int_eq(kvs_budget_scope_from_name("global", &sc), KVS_OK);
    ck_assert_int_eq(sc, KVS_SCOPE_GLOBAL);
    ck_assert_int_eq(kvs_budget_scope_from_name("row", &sc), KVS_ERR_INVALID_ARGUMENT);
    kvs_model_hparams hp = {.n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 8};
    kvs_evict_params ep = kvs_evict_params_default();
    kvs_evictor *e = NULL;
    ep.budget = 2.5;
    ck_assert_int_eq(kvs_evictor_create(&e, &ep, &hp, 100), KVS_ERR_INVALID_ARGUMENT);
    ep.budget = 0.0;
    ck_assert_int_eq(kvs_evictor_create(&e, &ep, &hp, 100), KVS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* PyramidKV: B 100, beta 20, S 1000, 5 layers: min 5, max 195, step 47.5
 * -> 195, 147.5 -> 148, 100, 52.5 -> 53, 5. S 150, 4 layers: max 195 > 150 -> max 150, min 50,
 * step 33.33 -> 150, 116.67 -> 117, 83.33 -> 83, 50. */
START_TEST(test_pyramid_budgets) {
    int64_t b[5];
    ck_assert_int_eq(kvs_pyramid_budgets(5, 100, 20, 1000, b), KVS_OK);
    const int64_t w1[5] = {195, 148, 100, 53, 5};
    for (int i = 0; i < 5; i++) ck_assert_int_eq(b[i], w1[i]);
    ck_assert_int_eq(kvs_pyramid_budgets(4, 100, 20, 150, b), KVS_OK);
    const int64_t w2[4] = {150, 117, 83, 50};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(b[i], w2[i]);
    ck_assert_int_eq(kvs_pyramid_budgets(1, 7, 20, 10, b), KVS_OK);
    ck_assert_int_eq(b[0], 7);
    ck_assert_int_eq(kvs_pyramid_budgets(3, 7, 0, 10, b), KVS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* SnapKV scorer directly: window 2, kernel 3, one head, 6 rows, cur_pos 5, 2 queries summed into
 * win = [.3 .4 .1 .4 .5 .3]: mean over queries [.15 .2 .05 .2], zero-padded pooling /3 ->
 * [.35/3, .4/3, .45/3, .25/3]; rows 4, 5 (the window) +inf. */
START_TEST(test_snapkv_scores) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.window = 2;
    pp.kernel = 3;
    kvs_policy *p = NULL;
    ck_assert(kvs_policy_create(&p, "snapkv", &pp) == KVS_OK);
    int64_t len = 6;
    int32_t pos[8] = {0, 1, 2, 3, 4, 5, -1, -1};
    float win[8] = {.3f, .4f, .1f, .4f, .5f, .3f, 0, 0}, sc[8];
    kvs_policy_input in = {.layer = 0, .n_layers = 1, .n_kv_heads = 1, .n_heads = 2, .head_dim = 4, .stride = 8,
                           .len = &len, .pos = pos, .cur_pos = 5, .budget = 4, .win_mass = win, .win_queries = 2};
    ck_assert(kvs_policy_score(p, &in, sc) == KVS_OK);
    const double want[4] = {.35 / 3, .4 / 3, .45 / 3, .25 / 3};
    for (int i = 0; i < 4; i++) ck_assert_msg(fabs(sc[i] - want[i]) < 1e-6, "row %d: %g vs %g", i, sc[i], want[i]);
    ck_assert(isinf(sc[4]) && sc[4] > 0 && isinf(sc[5]) && sc[5] > 0);
    ck_assert(isinf(sc[6]) && sc[6] < 0);
    /* a missing declared input is refused */
    in.win_mass = NULL;
    ck_assert_int_eq(kvs_policy_score(p, &in, sc), KVS_ERR_INVALID_ARGUMENT);
    kvs_policy_destroy(&p);
}
END_TEST

/* ---- keep-sets through the evictor --------------------------------------------------------- */

/* StreamingLLM, 2 kv heads, budget 6, buffer 2: at 8 rows keep sinks 0-3 + 6, 7; two more tokens
 * -> 0-3 + 8, 9. No statistics are ever collected. */
START_TEST(test_streaming_keep) {
    harness h;
    h_init(&h, 1, 2, 2, 4, "streaming", NULL, 6, 2, KVS_SCOPE_HEAD, 0, 100);
    for (int t = 0; t < 8; t++) {
        h_plan(&h, 1);
        ck_assert_int_eq(h.any, 0);
        h_step(&h, 1, NULL, NULL);
    }
    const int32_t w1[6] = {0, 1, 2, 3, 6, 7};
    expect_pos(&h, 0, 0, w1, 6);
    expect_pos(&h, 0, 1, w1, 6);
    h_plan_step(&h, 1, NULL, NULL);
    h_plan_step(&h, 1, NULL, NULL);
    const int32_t w2[6] = {0, 1, 2, 3, 8, 9};
    expect_pos(&h, 0, 0, w2, 6);
    expect_pos(&h, 0, 1, w2, 6);
    kvs_evict_stats es = kvs_evictor_get_stats(h.ev);
    ck_assert_int_eq(es.evictions, 2);
    ck_assert_int_eq(es.rows_evicted, 8);
    ck_assert_int_eq(es.stat_steps, 0);
    h_free(&h);
}
END_TEST

/* H2O, one kv head, budget 4 (recent window 2), buffer 2: prefill of 6 with key mass
 * [3 .5 1.2 .9 .6 .3]; seen by 6-p queries -> [.5 .1 .3 .3 inf inf] -> keep 0, 2 (tie .3: lower
 * row), 4, 5. Then tokens 6, 7 with masses [.1 .5 .1 .1 .2] and [.1 .4 .2 .1 .1 .1]: acc over
 * positions 0 2 4 5 6 7 = [3.2 2.1 .9 .5 .3 .1], seen [8 6 4 3 2 1] -> .4 .35 .225 .167, 6 and 7
 * recent -> keep 0, 2, 6, 7. */
START_TEST(test_h2o_keep) {
    harness h;
    h_init(&h, 1, 1, 2, 4, "h2o", NULL, 4, 2, KVS_SCOPE_HEAD, 0, 100);
    static const float km0[6] = {3.0f, .5f, 1.2f, .9f, .6f, .3f};
    const float *k0[1] = {km0};
    h_plan(&h, 6);
    ck_assert_int_eq(h.any, 1);
    ck_assert_int_eq(h.lp[0].stat_all_rows, 1);
    h_step(&h, 6, k0, NULL);
    const int32_t w1[4] = {0, 2, 4, 5};
    expect_pos(&h, 0, 0, w1, 4);
    static const float km1[5] = {.1f, .5f, .1f, .1f, .2f}, km2[6] = {.1f, .4f, .2f, .1f, .1f, .1f};
    const float *k1[1] = {km1}, *k2[1] = {km2};
    h_plan_step(&h, 1, k1, NULL);
    h_plan_step(&h, 1, k2, NULL);
    const int32_t w2[4] = {0, 2, 6, 7};
    expect_pos(&h, 0, 0, w2, 4);
    h_free(&h);
}
END_TEST

/* SnapKV, one kv head, 2 query heads (GQA group mean), window 2, kernel 3, budget 4, buffer 2:
 * a prefill of 6 triggers at once and probes rows 4, 5. Query 4: heads [.1 .2 .1 .3 .3 0] and
 * [.3 .2 .1 .1 .3 0] -> [.2 .2 .1 .2 .3 0]; query 5: [0 .4 0 .2 .1 .3], [.2 0 0 .2 .2 .4] ->
 * [.1 .2 0 .2 .15 .35]. Sum over rows 0-3 [.3 .4 .1 .4] / 2 queries = [.15 .2 .05 .2]; pooled
 * [.117 .133 .15 .083] -> keep 1, 2 and the window 4, 5 (without pooling it would be 1, 3). */
START_TEST(test_snapkv_keep) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.window = 2;
    pp.kernel = 3;
    harness h;
    h_init(&h, 1, 1, 2, 4, "snapkv", &pp, 4, 2, KVS_SCOPE_HEAD, 0, 100);
    static const float pr[2 * 2 * 6] = {.1f, .2f, .1f, .3f, .3f, 0, .3f, .2f, .1f, .1f, .3f, 0,
                                        0,   .4f, 0,   .2f, .1f, .3f, .2f, 0,  0,   .2f, .2f, .4f};
    const float *p0[1] = {pr};
    h_plan(&h, 6);
    ck_assert_int_eq(h.any, 1);
    ck_assert_int_eq(h.lp[0].n_probe, 2);
    ck_assert_int_eq(h.lp[0].probe_rows[0], 4);
    ck_assert_int_eq(h.lp[0].probe_rows[1], 5);
    ck_assert_int_eq(h.lp[0].stat_all_rows, 0);
    h_step(&h, 6, NULL, p0);
    const int32_t w[4] = {1, 2, 4, 5};
    expect_pos(&h, 0, 0, w, 4);
    h_free(&h);
}
END_TEST

/* The plan collects window statistics only for the queries that fall in the window of the next
 * eviction: SnapKV window 2, budget 4, buffer 3 (trigger at 7 rows), one token per step. */
START_TEST(test_plan_only_near_trigger) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.window = 2;
    harness h;
    h_init(&h, 1, 1, 1, 4, "snapkv", &pp, 4, 3, KVS_SCOPE_HEAD, 0, 100);
    float pr[16];
    for (int t = 0; t < 7; t++) {
        h_plan(&h, 1);
        /* after this step the cache has t+1 rows; the trigger is at 7: probe when 7-(t+1) < 2 */
        ck_assert_msg(h.any == (t >= 5), "step %d any %d", t, h.any);
        for (int i = 0; i <= t; i++) pr[i] = 1.0f / (float)(t + 1);
        const float *p[1] = {pr};
        h_step(&h, 1, NULL, h.any ? p : NULL);
    }
    ck_assert_int_eq(kvs_cache_len(h.c, 0, 0), 4);
    ck_assert_int_eq(kvs_evictor_get_stats(h.ev).stat_steps, 2);
    h_free(&h);
}
END_TEST

/* TOVA, 2 kv heads (G = 1), budget 3, buffer 1: prefill of 4, last query's attention
 * head 0 [.1 .5 .1 .3], head 1 [.4 .1 .2 .3]; mean over heads [.25 .3 .15 .3], newest (3) kept
 * -> both heads keep 0, 1, 3 (head 1 alone would keep 0, 2, 3). */
START_TEST(test_tova_keep) {
    harness h;
    h_init(&h, 1, 2, 2, 4, "tova", NULL, 3, 1, KVS_SCOPE_HEAD, 0, 100);
    static const float pr[2 * 4] = {.1f, .5f, .1f, .3f, .4f, .1f, .2f, .3f};
    const float *p[1] = {pr};
    h_plan(&h, 4);
    ck_assert_int_eq(h.lp[0].n_probe, 1);
    ck_assert_int_eq(h.lp[0].probe_rows[0], 3);
    h_step(&h, 4, NULL, p);
    const int32_t w[3] = {0, 1, 3};
    expect_pos(&h, 0, 0, w, 3);
    expect_pos(&h, 0, 1, w, 3);
    h_free(&h);
}
END_TEST

static void upload_keys(harness *h, int l, const float *k, int64_t rows_per_head) {
    const kvs_cache_params *cp = kvs_cache_get_params(h->c);
    for (int hh = 0; hh < cp->n_kv_heads; hh++) {
        size_t off = ((size_t)hh * cp->capacity) * cp->head_dim * 4;
        ck_assert(kvs_tensor_upload(kvs_cache_k(h->c, l), k + hh * rows_per_head * cp->head_dim, off,
                                    (size_t)rows_per_head * cp->head_dim * 4) == KVS_OK);
        ck_assert(kvs_tensor_upload(kvs_cache_v(h->c, l), k + hh * rows_per_head * cp->head_dim, off,
                                    (size_t)rows_per_head * cp->head_dim * 4) == KVS_OK);
    }
}

/* K-norm, one kv head, head_dim 2, budget 3, buffer 2: keys [3 4] [1 0] [0 2] [1 1] [6 8] with
 * norms 5 1 2 1.41 10 -> keep rows 1, 2, 3; K and V rows are compacted on the device. */
START_TEST(test_knorm_keep) {
    harness h;
    h_init(&h, 1, 1, 1, 2, "knorm", NULL, 3, 2, KVS_SCOPE_HEAD, 0, 100);
    static const float k[10] = {3, 4, 1, 0, 0, 2, 1, 1, 6, 8};
    upload_keys(&h, 0, k, 5);
    h_plan_step(&h, 5, NULL, NULL);
    const int32_t w[3] = {1, 2, 3};
    expect_pos(&h, 0, 0, w, 3);
    float got[6];
    ck_assert(kvs_tensor_download(kvs_cache_k(h.c, 0), got, 0, sizeof got) == KVS_OK);
    const float want[6] = {1, 0, 0, 2, 1, 1};
    for (int i = 0; i < 6; i++) ck_assert(got[i] == want[i]);
    ck_assert(kvs_tensor_download(kvs_cache_v(h.c, 0), got, 0, sizeof got) == KVS_OK);
    for (int i = 0; i < 6; i++) ck_assert(got[i] == want[i]);
    h_free(&h);
}
END_TEST

/* Ada-KV over K-norm, 2 kv heads, budget 3 (pool 6), buffer 1, alpha 0.5 (floor 1 per head):
 * norms head 0 [1 2 3 4], head 1 [10 20 30 40]. Floors: row 0 of each head. The rest by one
 * top-k over both heads: head 0 rows 1 2 3, then head 1 row 1 -> head 0 keeps 0-3, head 1 keeps
 * 0, 1. With head_cap 1 (at most 3 rows a head) head 0 stops at 0-2 and head 1 keeps 0-2. */
START_TEST(test_adakv_keep) {
    static const float k[16] = {1, 0, 2, 0, 3, 0, 4, 0, 10, 0, 20, 0, 30, 0, 40, 0};
    kvs_policy_params pp = kvs_policy_params_default();
    pp.base = "knorm";
    pp.alpha = 0.5f;
    for (int cap_case = 0; cap_case < 2; cap_case++) {
        harness h;
        h_init(&h, 1, 2, 2, 2, "adakv", &pp, 3, 1, KVS_SCOPE_HEAD, cap_case ? 1.0 : 2.0, 100);
        upload_keys(&h, 0, k, 4);
        h_plan_step(&h, 4, NULL, NULL);
        const int32_t all[4] = {0, 1, 2, 3};
        if (cap_case == 0) {
            expect_pos(&h, 0, 0, all, 4);
            expect_pos(&h, 0, 1, all, 2);
        } else {
            expect_pos(&h, 0, 0, all, 3);
            expect_pos(&h, 0, 1, all, 3);
        }
        h_free(&h);
    }
}
END_TEST

/* Global scope over K-norm, 2 layers x 1 kv head, budget 2 (pool 4), buffer 2 (trigger at 8 rows
 * in all): norms layer 0 [1 2 3 4], layer 1 [5 6 .5 7] -> best four: l1 r2, l0 r0, r1, r2
 * -> layer 0 keeps 0, 1, 2; layer 1 keeps 2. */
START_TEST(test_global_keep) {
    harness h;
    h_init(&h, 2, 1, 1, 2, "knorm", NULL, 2, 2, KVS_SCOPE_GLOBAL, 0, 100);
    static const float k0[8] = {1, 0, 2, 0, 3, 0, 4, 0}, k1[8] = {5, 0, 6, 0, .5f, 0, 7, 0};
    upload_keys(&h, 0, k0, 4);
    upload_keys(&h, 1, k1, 4);
    for (int t = 0; t < 4; t++) h_plan_step(&h, 1, NULL, NULL);
    const int32_t w0[3] = {0, 1, 2}, w1[1] = {2};
    expect_pos(&h, 0, 0, w0, 3);
    expect_pos(&h, 1, 0, w1, 1);
    ck_assert_int_eq(kvs_evictor_get_stats(h.ev).evictions, 1);
    h_free(&h);
}
END_TEST

/* PyramidKV with streaming (no sinks) as the base, 2 layers, budget 4 of 8 planned tokens, beta 4:
 * min 1, max 7 -> layer budgets 7 and 1; buffer 1. Layer 0 triggers at 8 rows and keeps the 7
 * newest; layer 1 triggers every 2 rows and ends with the newest alone. */
START_TEST(test_pyramid_layers) {
    kvs_policy_params pp = kvs_policy_params_default();
    pp.base = "streaming";
    pp.beta = 4;
    pp.n_sink = 0;
    harness h;
    h_init(&h, 2, 1, 1, 2, "pyramidkv", &pp, 4, 1, KVS_SCOPE_HEAD, 0, 8);
    ck_assert_int_eq(kvs_evictor_budget(h.ev, 0), 7);
    ck_assert_int_eq(kvs_evictor_budget(h.ev, 1), 1);
    for (int t = 0; t < 8; t++) h_plan_step(&h, 1, NULL, NULL);
    /* layer 0: trigger at 8 -> keeps the 7 most recent; layer 1 keeps the newest */
    const int32_t w0[7] = {1, 2, 3, 4, 5, 6, 7}, w1[1] = {7};
    expect_pos(&h, 0, 0, w0, 7);
    expect_pos(&h, 1, 0, w1, 1);
    h_free(&h);
}
END_TEST

/* A budget covering the planned length never evicts and plans no statistics. */
START_TEST(test_full_budget_noop) {
    harness h;
    h_init(&h, 1, 1, 1, 2, "h2o", NULL, 1.0, 0, KVS_SCOPE_HEAD, 0, 16);
    ck_assert(kvs_evictor_is_noop(h.ev));
    for (int t = 0; t < 16; t++) {
        h_plan(&h, 1);
        ck_assert_int_eq(h.any, 0);
        h_step(&h, 1, NULL, NULL);
    }
    ck_assert_int_eq(kvs_cache_len(h.c, 0, 0), 16);
    h_free(&h);
}
END_TEST

/* A user (learned) policy through kvs_policy_custom: keeps the oldest tokens (score -pos), asks to
 * observe every step (so key mass is collected), and sees every compaction of its layer. Budget 3,
 * buffer 2, one token per step: evictions after 5 and 7 tokens keep positions 0, 1, 2. */
typedef struct user_pol {
    int observed, compacted, begun, destroyed;
    int64_t last_n_keep;
} user_pol;

static kvs_policy_needs user_needs(const void *self, int layer, int64_t budget) {
    (void)self, (void)layer, (void)budget;
    kvs_policy_needs n = {KVS_POLICY_NEED_OBSERVE, 0};
    return n;
}
static kvs_status user_score(void *self, const kvs_policy_input *in, float *scores) {
    (void)self;
    for (int h = 0; h < in->n_kv_heads; h++)
        for (int64_t r = 0; r < in->len[h]; r++) scores[h * in->stride + r] = -(float)in->pos[h * in->stride + r];
    return KVS_OK;
}
static kvs_status user_begin(void *self, const kvs_policy_shape *sh) {
    ((user_pol *)self)->begun = sh->n_layers;
    return KVS_OK;
}
static kvs_status user_observe(void *self, int layer, const kvs_layer_stats *st, const int64_t *len, int64_t n_new) {
    (void)layer, (void)len, (void)n_new;
    ck_assert_ptr_nonnull(st->key_mass);
    ((user_pol *)self)->observed++;
    return KVS_OK;
}
static kvs_status user_compact(void *self, int layer, const int32_t *keep, const int64_t *n_keep, int64_t stride) {
    (void)layer, (void)keep, (void)stride;
    ((user_pol *)self)->compacted++;
    ((user_pol *)self)->last_n_keep = n_keep[0];
    return KVS_OK;
}
static void user_destroy(void *self) { ((user_pol *)self)->destroyed = 1; }

START_TEST(test_custom_policy) {
    static const kvs_policy_ops ops = {.name = "oldest", .needs = user_needs, .score = user_score, .begin = user_begin,
                                       .observe = user_observe, .compact = user_compact, .destroy = user_destroy};
    user_pol u = {0, 0, 0, 0, 0};
    harness h;
    memset(&h, 0, sizeof h);
    ck_assert(kvs_device_open(&h.dev, &g_params) == KVS_OK);
    h.hp = (kvs_model_hparams){.n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .head_dim = 2};
    ck_assert(kvs_policy_custom(&h.pol, &ops, &u, 0.0f, 0) == KVS_OK);
    ck_assert_str_eq(kvs_policy_name(h.pol), "oldest");
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = h.pol;
    ep.budget = 3;
    ep.buffer = 2;
    ck_assert(kvs_evictor_create(&h.ev, &ep, &h.hp, 100) == KVS_OK);
    kvs_cache_params cp = kvs_cache_params_default();
    cp.n_layers = 1;
    cp.n_kv_heads = 1;
    cp.head_dim = 2;
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(h.ev, 1);
    ck_assert_int_eq(cp.capacity, 5);
    ck_assert(kvs_cache_create(&h.c, h.dev, &cp) == KVS_OK);
    ck_assert(kvs_evictor_begin(h.ev, h.c) == KVS_OK);
    ck_assert_int_eq(u.begun, 1);
    static const float km[8] = {.1f, .2f, .3f, .4f, .5f, .6f, .7f, .8f};
    const float *k[1] = {km};
    for (int t = 0; t < 7; t++) {
        h_plan(&h, 1);
        ck_assert_int_eq(h.lp[0].stat_all_rows, 1);
        h_step(&h, 1, k, NULL);
    }
    const int32_t w[3] = {0, 1, 2};
    expect_pos(&h, 0, 0, w, 3);
    ck_assert_int_eq(u.observed, 7);
    ck_assert_int_eq(u.compacted, 2);
    ck_assert_int_eq(u.last_n_keep, 3);
    h_free(&h);
    ck_assert_int_eq(u.destroyed, 1);
}
END_TEST

/* kvs_cache_write_rows: the cache owns its writes (positional refresh in place, append after len,
 * host mirrors, next position) and refuses bad input with a message. */
START_TEST(test_cache_write_rows) {
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    for (int mode = 0; mode < 2; mode++) {
        kvs_cache_params cp = kvs_cache_params_default();
        cp.n_layers = 2, cp.n_kv_heads = 2, cp.head_dim = 3, cp.capacity = 6;
        cp.mode = mode ? KVS_CACHE_APPEND : KVS_CACHE_POSITIONAL;
        kvs_kv_cache *c = NULL;
        ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
        ck_assert_int_eq(kvs_cache_next_pos(c), 0);
        float kv[3 * 2 * 3]; /* [3 rows][2 heads][3] */
        for (int i = 0; i < 18; i++) kv[i] = (float)i;
        kvs_tensor *k = NULL, *bad = NULL;
        ck_assert(kvs_tensor_new(&k, dev, KVS_F32, 3, 2, 3, 0) == KVS_OK);
        ck_assert(kvs_tensor_new(&bad, dev, KVS_F32, 3, 2, 2, 0) == KVS_OK);
        ck_assert(kvs_tensor_upload(k, kv, 0, sizeof kv) == KVS_OK);
        const int32_t pos[3] = {4, 1, 2};
        ck_assert_msg(kvs_cache_write_rows(c, 1, k, k, pos, 3) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(kvs_cache_next_pos(c), 5);
        ck_assert_int_eq(kvs_cache_len(c, 0, 0), 0);
        float got[2 * 6 * 3];
        ck_assert(kvs_tensor_download(kvs_cache_k(c, 1), got, 0, sizeof got) == KVS_OK);
        for (int h = 0; h < 2; h++) {
            const int32_t *p = kvs_cache_positions(c, 1, h);
            for (int i = 0; i < 3; i++) {
                int row = mode ? i : pos[i];
                ck_assert_int_eq(p[row], pos[i]);
                for (int d = 0; d < 3; d++) ck_assert(got[(h * 6 + row) * 3 + d] == kv[(i * 2 + h) * 3 + d]);
            }
            ck_assert_int_eq(kvs_cache_len(c, 1, h), mode ? 3 : 5);
        }
        ck_assert_int_eq(kvs_cache_write_rows(c, 1, bad, k, pos, 3), KVS_ERR_SHAPE);
        ck_assert_int_eq(kvs_cache_write_rows(c, 2, k, k, pos, 3), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(kvs_cache_write_rows(c, 1, k, k, pos, 0), KVS_ERR_INVALID_ARGUMENT);
        if (mode) { /* 3 + 3 fits, 3 more do not */
            ck_assert(kvs_cache_write_rows(c, 1, k, k, pos, 3) == KVS_OK);
            ck_assert_int_eq(kvs_cache_write_rows(c, 1, k, k, pos, 3), KVS_ERR_OUT_OF_RANGE);
        } else {
            const int32_t far[3] = {0, 1, 6};
            ck_assert_int_eq(kvs_cache_write_rows(c, 1, k, k, far, 3), KVS_ERR_OUT_OF_RANGE);
        }
        ck_assert(strlen(kvs_last_error()) > 0);
        kvs_tensor_destroy(&k);
        kvs_tensor_destroy(&bad);
        kvs_cache_destroy(&c);
    }
    kvs_device_destroy(&dev);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_policy_names_and_errors);
    tcase_add_test(tc, test_pyramid_budgets);
    tcase_add_test(tc, test_snapkv_scores);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("keep");
    tcase_set_timeout(tk, 1200);
    tcase_add_test(tk, test_cache_write_rows);
    tcase_add_test(tk, test_streaming_keep);
    tcase_add_test(tk, test_h2o_keep);
    tcase_add_test(tk, test_snapkv_keep);
    tcase_add_test(tk, test_plan_only_near_trigger);
    tcase_add_test(tk, test_tova_keep);
    tcase_add_test(tk, test_knorm_keep);
    tcase_add_test(tk, test_adakv_keep);
    tcase_add_test(tk, test_global_keep);
    tcase_add_test(tk, test_pyramid_layers);
    tcase_add_test(tk, test_full_budget_noop);
    tcase_add_test(tk, test_custom_policy);
    suite_add_tcase(s, tk);
    return s;
}

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_policy", &g_params, NULL, NULL, 0);
    if (setup >= 0) return setup;
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
