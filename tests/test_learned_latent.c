/* Latent memory (latent.h) on one backend per run (--backend):
 *  - nothing evicted: a stories260K forward with an empty latent memory in every layer plan gives
 *    bit-identical logits to the plain forward; with the merge forced (unnormalised attention +
 *    row_max/row_sum + host merge on this backend) the logits agree to 2e-6 of the largest logit;
 *  - the merge against a float64 softmax over kept + folded tokens: with 4096 positive random
 *    features the merged output is within 0.03 of the exact attention (and closer than dropping
 *    the folded tokens);
 *  - the learned indexer folds every evicted row: after a decode at budget 0.25 (scopes head, layer,
 *    global) the memory holds the rows evicted (kvs_evict_stats.rows_evicted == sum of counts).
 * Missing fixtures or backend skip (77). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"
#include "kvsieve/kvsieve.h"
#include "kvsieve/latent.h"
#include "kvsieve/learned.h"
#include "kvsieve/policy.h"

static kvs_device_params g_params;
static char g_model[4096];

static uint64_t g_s = 99;
static double urand(void) {
    g_s = g_s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_s >> 11) / 9007199254740992.0;
}

/* Prefill of 40 tokens then 4 single-token steps; logits of every step into out[5][V]. */
static void run(kvs_model *m, kvs_device *dev, kvs_latent *lat, float *out) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = 64;
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
    kvs_layer_plan lp[16];
    memset(lp, 0, sizeof lp);
    for (int l = 0; l < hp->n_layers; l++) lp[l].latent = lat;
    int32_t tok[44];
    for (int i = 0; i < 44; i++) tok[i] = i == 0 ? 1 : 3 + (i * 37) % (hp->vocab - 3);
    int32_t last = 39, zero = 0;
    kvs_step_plan plan = {.tokens = tok, .n_tokens = 40, .layers = lat ? lp : NULL, .logit_rows = &last, .n_logit_rows = 1};
    kvs_step_result r;
    ck_assert_msg(kvs_model_forward(m, c, &plan, &r) == KVS_OK, "%s", kvs_last_error());
    memcpy(out, r.logits, (size_t)hp->vocab * 4);
    for (int t = 40; t < 44; t++) {
        kvs_step_plan p1 = {.tokens = tok + t, .n_tokens = 1, .layers = lat ? lp : NULL, .logit_rows = &zero, .n_logit_rows = 1};
        ck_assert_msg(kvs_model_forward(m, c, &p1, &r) == KVS_OK, "%s", kvs_last_error());
        memcpy(out + (t - 39) * hp->vocab, r.logits, (size_t)hp->vocab * 4);
    }
    kvs_cache_destroy(&c);
}

START_TEST(test_zero_eviction_exact) {
    kvs_device *dev = NULL;
    kvs_model *m = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int64_t V = hp->vocab;
    float *a = malloc((size_t)(5 * V) * 4), *b = malloc((size_t)(5 * V) * 4);
    kvs_latent *lat = NULL;
    ck_assert(kvs_latent_create(&lat, hp->n_layers, hp->n_kv_heads, hp->n_heads, hp->head_dim, 64, 0.0f, 1) == KVS_OK);
    run(m, dev, NULL, a);
    run(m, dev, lat, b);
    ck_assert_msg(memcmp(a, b, (size_t)(5 * V) * 4) == 0, "empty latent memory changed the logits");
    kvs_latent_set_force(lat, 1);
    run(m, dev, lat, b);
    double worst = 0, amax = 0;
    for (int64_t i = 0; i < 5 * V; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        amax = fmax(amax, fabs((double)a[i]));
    }
    ck_assert_msg(worst <= 2e-6 * amax, "forced merge of an empty memory: max error %g (max |logit| %g)", worst, amax);
    kvs_latent_destroy(&lat);
    free(a), free(b);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

START_TEST(test_merge_vs_float64) {
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    enum { NH = 2, H = 1, D = 8, NK = 12, NE = 12, NQ = 3 };
    float q[NQ][NH][D], k[H][NK][D], v[H][NK][D], ke[NE][D], ve[NE][D];
    for (int i = 0; i < NQ; i++)
        for (int g = 0; g < NH; g++)
            for (int d = 0; d < D; d++) q[i][g][d] = (float)(urand() - 0.5);
    for (int j = 0; j < NK; j++)
        for (int d = 0; d < D; d++) k[0][j][d] = (float)(urand() - 0.5), v[0][j][d] = (float)(2 * urand() - 1);
    for (int j = 0; j < NE; j++)
        for (int d = 0; d < D; d++) ke[j][d] = (float)(urand() - 0.5) + 0.8f * (d == 0), ve[j][d] = (float)(2 * urand() - 1) + 1.5f;
    kvs_tensor *tq, *tk, *tv, *to, *tm, *ts;
    ck_assert(kvs_tensor_new(&tq, dev, KVS_F32, D, NH, NQ, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&tk, dev, KVS_F32, D, NK, H, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&tv, dev, KVS_F32, D, NK, H, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&to, dev, KVS_F32, D, NH, NQ, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&tm, dev, KVS_F32, NH, NQ, 0, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&ts, dev, KVS_F32, NH, NQ, 0, 0) == KVS_OK);
    ck_assert(kvs_tensor_upload(tq, q, 0, sizeof q) == KVS_OK);
    ck_assert(kvs_tensor_upload(tk, k, 0, sizeof k) == KVS_OK);
    ck_assert(kvs_tensor_upload(tv, v, 0, sizeof v) == KVS_OK);
    kvs_attention_params ap = kvs_attention_params_default();
    ap.unnormalised = 1;
    ap.row_max = tm;
    ap.row_sum = ts;
    ck_assert_msg(kvs_attention(dev, tq, tk, tv, to, &ap) == KVS_OK, "%s", kvs_last_error());
    kvs_latent *lat = NULL;
    ck_assert(kvs_latent_create(&lat, 1, H, NH, D, 4096, 0.0f, 5) == KVS_OK);
    ck_assert(kvs_latent_fold(lat, 0, 0, &ke[0][0], &ve[0][0], NE) == KVS_OK);
    ck_assert_int_eq(kvs_latent_count(lat, 0, 0), NE);
    ck_assert_msg(kvs_latent_merge(lat, 0, tq, to, tm, ts) == KVS_OK, "%s", kvs_last_error());
    float o[NQ][NH][D];
    ck_assert(kvs_tensor_download(to, o, 0, sizeof o) == KVS_OK);
    double err = 0, err_drop = 0, sc = 1.0 / sqrt((double)D);
    for (int i = 0; i < NQ; i++)
        for (int g = 0; g < NH; g++) {
            double w[NK + NE], mx = -1e300, z = 0, zk = 0;
            for (int j = 0; j < NK + NE; j++) {
                const float *kk = j < NK ? k[0][j] : ke[j - NK];
                double s = 0;
                for (int d = 0; d < D; d++) s += (double)q[i][g][d] * kk[d];
                w[j] = s * sc;
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int j = 0; j < NK + NE; j++) z += (w[j] = exp(w[j] - mx)), zk += j < NK ? w[j] : 0;
            for (int d = 0; d < D; d++) {
                double ref = 0, drop = 0;
                for (int j = 0; j < NK + NE; j++) {
                    double vv = j < NK ? v[0][j][d] : ve[j - NK][d];
                    ref += w[j] * vv / z;
                    if (j < NK) drop += w[j] * vv / zk;
                }
                err = fmax(err, fabs(o[i][g][d] - ref));
                err_drop = fmax(err_drop, fabs(drop - ref));
            }
        }
    ck_assert_msg(err < 0.03, "latent merge error %g (dropping the folded tokens: %g)", err, err_drop);
    ck_assert_msg(err < err_drop / 3, "latent merge error %g not well below dropping's %g", err, err_drop);
    kvs_tensor *all[] = {tq, tk, tv, to, tm, ts};
    for (int i = 0; i < 6; i++) kvs_tensor_destroy(&all[i]);
    kvs_latent_destroy(&lat);
    kvs_device_destroy(&dev);
}
END_TEST

START_TEST(test_indexer_folds_evicted) {
    kvs_device *dev = NULL;
    kvs_model *m = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_learned *w = NULL;
    ck_assert(kvs_learned_create(&w, KVS_LEARNED_INDEXER, hp, 2) == KVS_OK);
    kvs_policy *pol = NULL;
    ck_assert(kvs_learned_policy(&pol, w, -INFINITY, 0.0f, 32) == KVS_OK);
    kvs_latent *lat = kvs_policy_get_latent(pol);
    ck_assert_ptr_nonnull(lat);
    for (int scope = 0; scope < 3; scope++) {
    int32_t prompt[4] = {1, 403, 407, 261}, out[100];
    kvs_ar_params ap = kvs_ar_params_default();
    ap.max_new = 100;
    ap.policy = pol;
    ap.budget = 0.25;
    ap.scope = (kvs_budget_scope)scope; /* global: ragged heads across layers */
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_ar_capacity(m, 4, &ap);
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
    kvs_gen_stats st;
    int64_t n_out = 0;
    ck_assert_msg(kvs_generate_ar(m, c, prompt, 4, &ap, NULL, NULL, out, &n_out, &st) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(n_out, 100);
    int64_t folded = 0;
    for (int l = 0; l < hp->n_layers; l++)
        for (int h = 0; h < hp->n_kv_heads; h++) folded += kvs_latent_count(lat, l, h);
    ck_assert_int_gt(st.rows_evicted, 0);
    ck_assert_msg(folded == st.rows_evicted, "scope %d: folded %lld, evicted %lld", scope, (long long)folded,
                  (long long)st.rows_evicted);
    /* the merged attention stays finite: the tokens are not stuck at id 0 (NaN logits) */
    int zeros = 0;
    for (int i = 0; i < 100; i++) zeros += out[i] == 0;
    ck_assert_msg(zeros < 50, "scope %d: %d of 100 tokens are id 0 (NaN logits?)", scope, zeros);
    kvs_cache_destroy(&c);
    }
    kvs_policy_destroy(&pol);
    kvs_learned_destroy(&w);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* The device count runs in a child process: OpenCL/Vulkan state must never be created in the
 * parent before Check forks (a forked child then waits forever on the runtime's locks). */
int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_learned_latent", &g_params, "stories260K-f32.v3.gguf", g_model, sizeof g_model);
    if (setup >= 0) return setup;
    Suite *s = suite_create("learned-latent");
    TCase *tc = tcase_create("latent");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_zero_eviction_exact);
    tcase_add_test(tc, test_merge_vs_float64);
    tcase_add_test(tc, test_indexer_folds_evicted);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
