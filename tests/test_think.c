/* ThinK (Xu et al. 2024, arXiv 2407.21018; kvpress ThinKPress): query-driven key channel pruning.
 *  - kvs_think_select on hand-made queries and keys (the channels are worked out in the comments);
 *  - through the evictor on stories260K (backend given by --backend; 77 without it or the model):
 *    think_ratio 0 is exact (the same logits, bit for bit, as no ThinK, with the same token policy),
 *    and with think_ratio 0.5 every layer's every kv head has exactly head_dim/2 key channels zero
 *    in all its rows right after each eviction (the others not), counted in channels_pruned;
 *  - the refusals at kvs_evictor_begin (bf16 keys, Hadamard-rotated keys). */
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
static char g_model[4096];

/* head 0: q_sq = [1, 4, 1, 0.25]; rows (len 2) [1,1,2,4], [1,0,0,4] -> sum k^2 = [2, 1, 4, 32];
 *   scores [2, 4, 4, 8]: ratio 0.5 prunes channel 0, then the tie 1/2 goes to the lower, 1;
 *   ratio 0.3 (floor(1.2) = 1 channel) prunes 0. Row 2 (beyond len) holds 1e6 and must not count.
 * head 1: q_sq = [1, 1, 2, 1]; rows (len 3) [5,1,1,1], [5,1,1,0], [5,1,0,0] -> [75, 3, 2, 1];
 *   scores [75, 3, 4, 1]: ratio 0.5 prunes 3 then 1; ratio 0.3 prunes 3. */
START_TEST(test_select_hand) {
    const double q[8] = {1, 4, 1, 0.25, 1, 1, 2, 1};
    const float k[2 * 3 * 4] = {1, 1, 2, 4, 1, 0, 0, 4, 1e6f, 1e6f, 1e6f, 1e6f,
                                5, 1, 1, 1, 5, 1, 1, 0, 5, 1, 0, 0};
    const int64_t len[2] = {2, 3};
    uint8_t pr[8];
    double sc[8];
    ck_assert_msg(kvs_think_select(q, k, len, 2, 3, 4, 0.5, pr, sc) == KVS_OK, "%s", kvs_last_error());
    const uint8_t want5[8] = {1, 1, 0, 0, 0, 1, 0, 1};
    ck_assert(memcmp(pr, want5, 8) == 0);
    const double want_sc[8] = {2, 4, 4, 8, 75, 3, 4, 1};
    for (int i = 0; i < 8; i++) ck_assert(sc[i] == want_sc[i]);
    ck_assert(kvs_think_select(q, k, len, 2, 3, 4, 0.3, pr, NULL) == KVS_OK);
    const uint8_t want3[8] = {1, 0, 0, 0, 0, 0, 0, 1};
    ck_assert(memcmp(pr, want3, 8) == 0);
    ck_assert(kvs_think_select(q, k, len, 2, 3, 4, 0.0, pr, NULL) == KVS_OK);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(pr[i], 0);
    ck_assert_int_eq(kvs_think_select(q, k, len, 2, 3, 4, 1.0, pr, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_think_select(q, k, len, 2, 3, 4, -0.1, pr, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_think_select(NULL, k, len, 2, 3, 4, 0.5, pr, NULL), KVS_ERR_INVALID_ARGUMENT);
    const int64_t bad[2] = {2, 4};
    ck_assert_int_eq(kvs_think_select(q, k, bad, 2, 3, 4, 0.5, pr, NULL), KVS_ERR_OUT_OF_RANGE);
    /* evictor parameters */
    kvs_model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layers = 1, hp.n_heads = 2, hp.n_kv_heads = 2, hp.head_dim = 4;
    kvs_policy *pol = NULL;
    ck_assert(kvs_policy_create(&pol, "snapkv", NULL) == KVS_OK);
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = pol;
    ep.budget = 0.5;
    kvs_evictor *ev = NULL;
    ep.think_ratio = 1.0;
    ck_assert_int_eq(kvs_evictor_create(&ev, &ep, &hp, 100), KVS_ERR_INVALID_ARGUMENT);
    ep.think_ratio = 0.4;
    ep.think_window = 0;
    ck_assert_int_eq(kvs_evictor_create(&ev, &ep, &hp, 100), KVS_ERR_INVALID_ARGUMENT);
    kvs_policy_destroy(&pol);
}
END_TEST

/* What one run records beside its logits: the layers' key mass per step (summed over keys, in the
 * order the steps come; NULL: not kept), the peak of the cache's bytes in use, the bytes allocated. */
typedef struct run_rec {
    double *km;       /* [n][n_layers][n_kv_heads] or NULL */
    int64_t peak, alloc, last; /* bytes in use: peak, after the last step */
    double mean;               /* bytes in use, mean over the steps */
    int64_t km_steps;          /* steps with a key mass */
    double *pr;                /* [2 * n * n_layers]: per step and layer with probe rows, their sum and
                                * index-weighted sum (first probe row block); NULL: not kept */
    int64_t pr_n;
} run_rec;

/* Teacher-forced decode of n pseudo-random tokens with `policy` at budget_tokens, ThinK ratio r
 * (in_place: kvs_evict_params.think_in_place); logits [n-1][V] out; after every eviction (when
 * check) the channels read 0 in every kept row (kvs_cache_read_f32) are counted, and, with the
 * pruned layout, the segment's rows and d_k' are checked. */
static void run_ex(kvs_model *m, kvs_device *dev, const char *policy, int64_t budget, double r, int64_t n, float *logits,
                   int check, kvs_evict_stats *es, int in_place, run_rec *rec) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_policy *pol = NULL;
    ck_assert(kvs_policy_create(&pol, policy, NULL) == KVS_OK);
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = pol;
    ep.budget_tokens = budget;
    ep.buffer = 6;
    ep.think_ratio = r;
    ep.think_in_place = in_place;
    kvs_evictor *ev = NULL;
    ck_assert_msg(kvs_evictor_create(&ev, &ep, hp, n) == KVS_OK, "%s", kvs_last_error());
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_evictor_capacity(ev, 1);
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
    ck_assert(kvs_evictor_begin(ev, c) == KVS_OK);
    kvs_layer_plan *lp = calloc((size_t)hp->n_layers, sizeof *lp);
    int H = hp->n_kv_heads, hd = hp->head_dim;
    size_t per = (size_t)H * cp.capacity * hd;
    float *kbuf = malloc(per * 4);
    uint32_t st = 777;
    int32_t tok = hp->bos_id >= 0 ? hp->bos_id : 1;
    int events = 0;
    for (int64_t t = 0; t + 1 < n; t++) {
        int32_t zero = 0, pos = (int32_t)t;
        kvs_step_plan plan = {.tokens = &tok, .n_tokens = 1, .positions = &pos, .logit_rows = &zero, .n_logit_rows = 1};
        int any = 0;
        ck_assert(kvs_evictor_plan(ev, 1, lp, &any) == KVS_OK);
        plan.layers = any ? lp : NULL;
        kvs_step_result res;
        ck_assert_msg(kvs_model_forward(m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
        if (rec) {
            int64_t used = kvs_cache_bytes_used(c);
            if (used > rec->peak) rec->peak = used;
            rec->mean += (double)used / (double)(n - 1);
            rec->alloc = kvs_cache_bytes_allocated(c);
            if (rec->km && res.layers[0].key_mass) {
                for (int l = 0; l < hp->n_layers; l++)
                    for (int h = 0; h < H; h++) {
                        double sum = 0.0;
                        const kvs_layer_stats *ls = &res.layers[l];
                        for (int64_t j = 0; ls->key_mass && j < kvs_cache_len(c, l, h); j++) sum += ls->key_mass[h * ls->n_kv + j];
                        rec->km[(rec->km_steps * hp->n_layers + l) * H + h] = sum;
                    }
                rec->km_steps++;
            }
            for (int l = 0; l < hp->n_layers && rec->pr; l++) { /* probe rows: mass and mean key index */
                const kvs_layer_stats *ls = &res.layers[l];
                if (!ls->probs) continue;
                double sum = 0.0, at = 0.0;
                for (int64_t i = 0; i < (int64_t)hp->n_heads * ls->n_kv; i++) {
                    sum += ls->probs[i];
                    at += ls->probs[i] * (double)(i % ls->n_kv);
                }
                rec->pr[2 * rec->pr_n] = sum;
                rec->pr[2 * rec->pr_n + 1] = at;
                rec->pr_n++;
            }
        }
        int64_t e0 = kvs_evictor_get_stats(ev).evictions;
        ck_assert_msg(kvs_evictor_update(ev, c, &res) == KVS_OK, "%s", kvs_last_error());
        memcpy(logits + t * hp->vocab, res.logits, sizeof(float) * hp->vocab);
        if (rec) rec->last = kvs_cache_bytes_used(c);
        if (check && kvs_evictor_get_stats(ev).evictions > e0) {
            events++;
            for (int l = 0; l < hp->n_layers; l++) {
                ck_assert(kvs_cache_read_f32(c, l, 0, kbuf) == KVS_OK);
                if (!in_place && r > 0.0) { /* the kept rows moved into the pruned segment of d_k' channels */
                    ck_assert_int_eq(kvs_cache_pruned_dim(c, l), hd - (int)floor(hd * r));
                    for (int h = 0; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c, l, h), kvs_cache_len(c, l, h));
                }
                for (int h = 0; h < H; h++) {
                    int64_t len = kvs_cache_len(c, l, h);
                    int zeros = 0;
                    for (int ch = 0; ch < hd; ch++) {
                        int all0 = 1;
                        for (int64_t row = 0; row < len && all0; row++) all0 = kbuf[((size_t)h * cp.capacity + row) * hd + ch] == 0.0f;
                        zeros += all0;
                    }
                    ck_assert_msg(zeros == (int)floor(hd * r), "layer %d head %d: %d zero channels, want %d", l, h, zeros,
                                  (int)floor(hd * r));
                }
            }
        }
        st = st * 1664525u + 1013904223u;
        tok = 3 + (int32_t)((st >> 8) % (uint32_t)(hp->vocab - 3));
    }
    if (check) ck_assert_int_gt(events, 1);
    *es = kvs_evictor_get_stats(ev);
    free(kbuf);
    free(lp);
    kvs_cache_destroy(&c);
    kvs_evictor_destroy(&ev);
    kvs_policy_destroy(&pol);
}

static void run(kvs_model *m, kvs_device *dev, const char *policy, int64_t budget, double r, int64_t n, float *logits, int check,
                kvs_evict_stats *es) {
    run_ex(m, dev, policy, budget, r, n, logits, check, es, 0, NULL);
}

START_TEST(test_think_model) {
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int64_t n = 90, V = hp->vocab;
    float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V);
    kvs_evict_stats ea, eb;
    run(m, dev, "snapkv", 24, 0.0, n, a, 0, &ea);
    /* the anchor: ratio 0 prunes nothing; the same run with ThinK off is the same run */
    run(m, dev, "snapkv", 24, 0.0, n, b, 0, &eb);
    ck_assert(memcmp(a, b, sizeof(float) * (n - 1) * V) == 0);
    ck_assert_int_eq(ea.channels_pruned, 0);
    run(m, dev, "snapkv", 24, 0.5, n, b, 1, &eb);
    ck_assert_int_eq(eb.channels_pruned, eb.evictions * hp->n_kv_heads * (hp->head_dim / 2));
    ck_assert_msg(memcmp(a, b, sizeof(float) * (n - 1) * V) != 0, "pruning half the key channels changed nothing");
    free(a), free(b);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* The anchor of the pruned layout: decoding with the pruned key segment (the attention over its two
 * segments merged through lse_extra) equals decoding with the channels zeroed in place in the
 * full-width cache, for ThinK 0.4 with snapkv and with h2o (whose scores accumulate the key mass):
 * the same evictions and channels, logits and per-step key mass within float tolerance; the cache's
 * bytes in use drop (keys of d_k' = 5 of 8 channels for the kept rows). */
START_TEST(test_think_pruned_anchor) {
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    const int64_t n = 90, V = hp->vocab, per = n * hp->n_layers * hp->n_kv_heads;
    const char *pols[2] = {"snapkv", "h2o"};
    for (int pi = 0; pi < 2; pi++) {
        float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V);
        run_rec ra = {.km = calloc((size_t)per, sizeof(double)), .pr = calloc((size_t)(2 * n * hp->n_layers), sizeof(double))};
        run_rec rb = {.km = calloc((size_t)per, sizeof(double)), .pr = calloc((size_t)(2 * n * hp->n_layers), sizeof(double))};
        kvs_evict_stats ea, eb;
        run_ex(m, dev, pols[pi], 24, 0.4, n, a, 1, &ea, 1, &ra); /* zeroed in place */
        run_ex(m, dev, pols[pi], 24, 0.4, n, b, 1, &eb, 0, &rb); /* the pruned segment */
        ck_assert_int_eq(ea.evictions, eb.evictions);
        ck_assert_int_eq(ea.rows_evicted, eb.rows_evicted);
        ck_assert_int_eq(ea.channels_pruned, eb.channels_pruned);
        ck_assert_int_gt(eb.evictions, 1);
        double worst = 0.0, kworst = 0.0;
        int top_differs = 0;
        for (int64_t t = 0; t + 1 < n; t++) {
            int64_t ia = 0, ib = 0;
            for (int64_t v = 0; v < V; v++) {
                double d = fabs((double)a[t * V + v] - (double)b[t * V + v]);
                if (d > worst) worst = d;
                if (a[t * V + v] > a[t * V + ia]) ia = v;
                if (b[t * V + v] > b[t * V + ib]) ib = v;
            }
            top_differs += ia != ib;
        }
        ck_assert_int_eq(ra.km_steps, rb.km_steps);
        for (int64_t i = 0; i < ra.km_steps * hp->n_layers * hp->n_kv_heads; i++) {
            double d = fabs(ra.km[i] - rb.km[i]);
            if (d > kworst) kworst = d;
        }
        ck_assert_int_eq(ra.pr_n, rb.pr_n);
        double pworst = 0.0;
        for (int64_t i = 0; i < 2 * ra.pr_n; i++)
            if (fabs(ra.pr[i] - rb.pr[i]) > pworst) pworst = fabs(ra.pr[i] - rb.pr[i]);
        printf("think 0.4 %s: probe rows at %lld (step, layer)s, max diff of their sums %.3g\n", pols[pi], (long long)ra.pr_n, pworst);
        ck_assert_msg(pworst < 1e-4, "%s: probe rows differ by %g", pols[pi], pworst);
        printf("think 0.4 %s: pruned vs in place: max |logit diff| %.3g, max |key mass diff| %.3g over %lld steps, "
               "top-1 differs at %d steps; cache bytes in use: peak %lld vs %lld, mean %.0f vs %.0f, after the last "
               "eviction %lld vs %lld; allocated %lld vs %lld\n",
               pols[pi], worst, kworst, (long long)ra.km_steps, top_differs, (long long)rb.peak, (long long)ra.peak, rb.mean,
               ra.mean, (long long)rb.last, (long long)ra.last, (long long)rb.alloc, (long long)ra.alloc);
        ck_assert_msg(worst < 1e-3, "%s: logits differ by %g", pols[pi], worst);
        ck_assert_msg(kworst < 1e-4, "%s: key mass differs by %g", pols[pi], kworst);
        ck_assert_int_eq(top_differs, 0);
        /* the peak is the first fill (no eviction yet: every row full width); afterwards the kept rows
         * hold d_k' key channels */
        ck_assert_int_eq(rb.peak, ra.peak);
        ck_assert_msg(rb.mean < ra.mean && rb.last < ra.last, "%s: bytes in use (mean %g, last %lld) not below the in-place "
                      "(%g, %lld)", pols[pi], rb.mean, (long long)rb.last, ra.mean, (long long)ra.last);
        free(ra.km), free(rb.km), free(ra.pr), free(rb.pr);
        free(a), free(b);
    }
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* The caches ThinK cannot prune are refused at kvs_evictor_begin, before decoding: keys of a type
 * other than f32 / f16 (bf16, q8_0) and Hadamard-rotated keys (KVS_CACHE_ROTATE); f16 keys are taken. */
START_TEST(test_think_refusals) {
    ck_assert_int_eq(kvs_think_check_cache(NULL), KVS_ERR_INVALID_ARGUMENT);
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_policy *pol = NULL;
    ck_assert(kvs_policy_create(&pol, "snapkv", NULL) == KVS_OK);
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = pol;
    ep.budget_tokens = 24;
    ep.think_ratio = 0.25;
    kvs_evictor *ev = NULL;
    ck_assert(kvs_evictor_create(&ev, &ep, hp, 90) == KVS_OK);
    const struct { kvs_dtype k; unsigned flags; kvs_status want; const char *msg; } cases[] = {
        {KVS_BF16, 0, KVS_ERR_UNSUPPORTED, "bf16"},
        {KVS_F32, KVS_CACHE_ROTATE, KVS_ERR_UNSUPPORTED, "Hadamard"},
        {KVS_F16, 0, KVS_OK, ""},
    };
    for (int i = 0; i < 3; i++) {
        kvs_cache_params cp = kvs_model_cache_params(m);
        cp.mode = KVS_CACHE_APPEND;
        cp.capacity = kvs_evictor_capacity(ev, 1);
        cp.type_k = cases[i].k;
        cp.flags |= cases[i].flags;
        ck_assert_int_eq(kvs_think_check_cache(&cp), cases[i].want);
        kvs_kv_cache *c = NULL;
        ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(kvs_evictor_begin(ev, c), cases[i].want);
        if (cases[i].want != KVS_OK) ck_assert_msg(strstr(kvs_last_error(), cases[i].msg), "%s", kvs_last_error());
        kvs_cache_destroy(&c);
    }
    kvs_evictor_destroy(&ev);
    kvs_policy_destroy(&pol);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_think", &g_params, "stories260K-f32.v3.gguf", g_model, sizeof g_model);
    if (setup >= 0) return setup;
    Suite *s = suite_create("think");
    TCase *tc = tcase_create("think");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_select_hand);
    tcase_add_test(tc, test_think_model);
    tcase_add_test(tc, test_think_pruned_anchor);
    tcase_add_test(tc, test_think_refusals);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
