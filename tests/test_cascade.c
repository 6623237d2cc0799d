/* The cascading KV cache policy (arXiv 2406.17808; core/policy/cascade.c) on a hand-checked
 * sequence: tokens are appended one per step to a real APPEND cache on the backend given by
 * --backend (default cpu; 77 when absent) with a chosen per-row attention mass, and the positions
 * kept at the evictor's trigger are compared with the cascade worked out by hand below, so the
 * device top-k and compaction run on every backend. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/kvsieve.h"
#include "probe.h"
#include "kvsieve/cache.h"
#include "kvsieve/policy.h"

static kvs_device_params g_params;

/* One kv head, head_dim 2, n_sink 1, 2 cascades, budget 5 -> W = (5 - 1) / 2 = 2, buffer 3: the
 * trigger fires when the 8th token (0..7) is appended. u = t - 1 (tokens after the sink); eager
 * (every cascade takes every token) while u < C * W = 4.
 *   t0 sink.  t1: c0 [1].  t2: c0 [1 2].  t3: c0 full, 1 moves on: c0 [2 3], c1 [1].
 *   t4: 2 moves on: c0 [3 4], c1 [1 2].
 *   t5 (u 4, c1 takes since 4 % 2 = 0): 3 -> c1, 1 drops: c0 [4 5], c1 [2 3].
 *   t6 (u 5, c1 does not take): 4 is carried to c1 and compared with its newest, 3, by the EMA
 *     of attention: the better stays: c1 [2 3] or [2 4].  c0 [5 6].
 *   t7 (u 6, c1 takes): 5 -> c1, its oldest 2 drops: c1 [X 5], c0 [6 7].
 * Kept: 0 (sink), X, 5, 6, 7 with X = 3 when token 3 drew more attention than token 4, else 4. */
static void run(int favour, const int32_t *want) {
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    kvs_model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layers = 1, hp.n_kv_heads = 1, hp.n_heads = 1, hp.head_dim = 2;
    kvs_policy_params pp = kvs_policy_params_default();
    pp.n_sink = 1;
    pp.cascades = 2;
    kvs_policy *pol = NULL;
    ck_assert_msg(kvs_policy_create(&pol, "cascade", &pp) == KVS_OK, "%s", kvs_last_error());
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = pol;
    ep.budget = 5;
    ep.buffer = 3;
    kvs_evictor *ev = NULL;
    ck_assert_msg(kvs_evictor_create(&ev, &ep, &hp, 100) == KVS_OK, "%s", kvs_last_error());
    kvs_cache_params cp = kvs_cache_params_default();
    cp.n_layers = 1, cp.n_kv_heads = 1, cp.head_dim = 2, cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(ev, 1);
    ck_assert_int_eq(cp.capacity, 8);
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
    ck_assert(kvs_evictor_begin(ev, c) == KVS_OK);
    /* attention mass per row each step: token `favour` (3 or 4) draws 0.9, the other of 3/4 none */
    float km[8] = {0.02f, 0.02f, 0.02f, 0.0f, 0.0f, 0.02f, 0.02f, 0.02f};
    km[favour] = 0.9f;
    kvs_layer_plan lp[1];
    kvs_layer_stats st[1];
    for (int32_t t = 0; t < 8; t++) {
        int any = 0;
        ck_assert(kvs_evictor_plan(ev, 1, lp, &any) == KVS_OK);
        float k[2] = {(float)t, 1.0f}, v[2] = {1.0f, (float)t};
        kvs_tensor *kt = NULL, *vt = NULL;
        ck_assert(kvs_tensor_new(&kt, dev, KVS_F32, 2, 1, 1, 0) == KVS_OK);
        ck_assert(kvs_tensor_new(&vt, dev, KVS_F32, 2, 1, 1, 0) == KVS_OK);
        ck_assert(kvs_tensor_upload(kt, k, 0, 8) == KVS_OK);
        ck_assert(kvs_tensor_upload(vt, v, 0, 8) == KVS_OK);
        ck_assert_msg(kvs_cache_write_rows(c, 0, kt, vt, &t, 1) == KVS_OK, "%s", kvs_last_error());
        kvs_tensor_destroy(&kt);
        kvs_tensor_destroy(&vt);
        memset(st, 0, sizeof st);
        st[0].n_kv = kvs_cache_max_len(c, 0);
        st[0].key_mass = km;
        kvs_step_result r = {.logits = NULL, .layers = st};
        ck_assert_msg(kvs_evictor_update(ev, c, &r) == KVS_OK, "%s", kvs_last_error());
    }
    ck_assert_int_eq(kvs_evictor_get_stats(ev).evictions, 1);
    int64_t len = kvs_cache_len(c, 0, 0);
    const int32_t *pos = kvs_cache_positions(c, 0, 0);
    char got[64] = "";
    for (int64_t i = 0; i < len; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", pos[i]);
    ck_assert_msg(len == 5 && memcmp(pos, want, 5 * sizeof *want) == 0, "favour %d: kept [%s]", favour, got);
    /* the K rows followed their tokens through the compaction */
    float kb[16];
    ck_assert(kvs_tensor_download(kvs_cache_k(c, 0), kb, 0, sizeof kb) == KVS_OK);
    for (int i = 0; i < 5; i++) ck_assert(kb[2 * i] == (float)want[i]);
    kvs_cache_destroy(&c);
    kvs_evictor_destroy(&ev);
    kvs_policy_destroy(&pol);
    kvs_device_destroy(&dev);
}

START_TEST(test_cascade_keep) {
    const int32_t keep3[5] = {0, 3, 5, 6, 7}, keep4[5] = {0, 4, 5, 6, 7};
    run(3, keep3);
    run(4, keep4);
}
END_TEST

/* The anchor: one cascade is StreamingLLM (the sinks and the most recent budget - sinks tokens):
 * over 40 tokens with budget 9 and buffer 3, the kept positions equal `streaming`'s at every
 * eviction (attention mass arbitrary: it only matters between cascades). */
static void keep_after(const char *policy, int32_t *kept, int64_t *n_kept, int64_t *events) {
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    kvs_model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layers = 1, hp.n_kv_heads = 1, hp.n_heads = 1, hp.head_dim = 2;
    kvs_policy_params pp = kvs_policy_params_default();
    pp.n_sink = 2;
    pp.cascades = 1;
    kvs_policy *pol = NULL;
    ck_assert(kvs_policy_create(&pol, policy, &pp) == KVS_OK);
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = pol;
    ep.budget = 9;
    ep.buffer = 3;
    kvs_evictor *ev = NULL;
    ck_assert(kvs_evictor_create(&ev, &ep, &hp, 100) == KVS_OK);
    kvs_cache_params cp = kvs_cache_params_default();
    cp.n_layers = 1, cp.n_kv_heads = 1, cp.head_dim = 2, cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(ev, 1);
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
    ck_assert(kvs_evictor_begin(ev, c) == KVS_OK);
    float km[16];
    for (int i = 0; i < 16; i++) km[i] = (float)((i * 7) % 5) / 10.0f;
    kvs_layer_plan lp[1];
    kvs_layer_stats st[1];
    *n_kept = 0;
    for (int32_t t = 0; t < 40; t++) {
        int any = 0;
        ck_assert(kvs_evictor_plan(ev, 1, lp, &any) == KVS_OK);
        float k[2] = {(float)t, 1.0f};
        kvs_tensor *kt = NULL;
        ck_assert(kvs_tensor_new(&kt, dev, KVS_F32, 2, 1, 1, 0) == KVS_OK);
        ck_assert(kvs_tensor_upload(kt, k, 0, 8) == KVS_OK);
        ck_assert(kvs_cache_write_rows(c, 0, kt, kt, &t, 1) == KVS_OK);
        kvs_tensor_destroy(&kt);
        memset(st, 0, sizeof st);
        st[0].n_kv = kvs_cache_max_len(c, 0);
        st[0].key_mass = km;
        kvs_step_result r = {.logits = NULL, .layers = st};
        int64_t e0 = kvs_evictor_get_stats(ev).evictions;
        ck_assert(kvs_evictor_update(ev, c, &r) == KVS_OK);
        if (kvs_evictor_get_stats(ev).evictions > e0) { /* record the kept positions of each eviction */
            int64_t len = kvs_cache_len(c, 0, 0);
            memcpy(kept + *n_kept, kvs_cache_positions(c, 0, 0), (size_t)len * 4);
            *n_kept += len;
        }
    }
    *events = kvs_evictor_get_stats(ev).evictions;
    kvs_cache_destroy(&c);
    kvs_evictor_destroy(&ev);
    kvs_policy_destroy(&pol);
    kvs_device_destroy(&dev);
}

START_TEST(test_one_cascade_is_streaming) {
    int32_t a[512], b[512];
    int64_t na = 0, nb = 0, ea = 0, eb = 0;
    keep_after("cascade", a, &na, &ea);
    keep_after("streaming", b, &nb, &eb);
    ck_assert_int_gt(ea, 2);
    ck_assert_int_eq(ea, eb);
    ck_assert_int_eq(na, nb);
    ck_assert(memcmp(a, b, (size_t)na * 4) == 0);
}
END_TEST

START_TEST(test_cascade_params) {
    kvs_policy *p = NULL;
    kvs_policy_params pp = kvs_policy_params_default();
    pp.cascades = 17;
    ck_assert_int_eq(kvs_policy_create(&p, "cascade", &pp), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(p);
    ck_assert(kvs_policy_create(&p, "cascade", NULL) == KVS_OK);
    ck_assert_str_eq(kvs_policy_name(p), "cascade");
    kvs_policy_destroy(&p);
}
END_TEST

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_cascade", &g_params, NULL, NULL, 0);
    if (setup >= 0) return setup;
    Suite *s = suite_create("cascade");
    TCase *tc = tcase_create("cascade");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cascade_params);
    tcase_add_test(tc, test_cascade_keep);
    tcase_add_test(tc, test_one_cascade_is_streaming);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
