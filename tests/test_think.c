/* ThinK (Xu et al. 2024, arXiv 2407.21018; kvpress ThinKPress): query-driven key channel pruning.
 *  - kvs_think_select on hand-made queries and keys (the channels are worked out in the comments);
 *  - through the evictor on stories260K (backend given by --backend; 77 without it or the model):
 *    think_ratio 0 is exact (the same logits, bit for bit, as no ThinK, with the same token policy),
 *    and with think_ratio 0.5 every layer's every kv head has exactly head_dim/2 key channels zero
 *    in all its rows right after each eviction (the others not), counted in channels_pruned;
 *  - the cache's pruned key segment by hand (kvs_cache_prune_keys: values, channels, bytes, re-pruning,
 *    truncation and eviction within the pruned layout, back to full width when no pruned row is
 *    left, refusals);
 *  - the pruned layout's anchor: decoding with it equals decoding with the channels zeroed in place
 *    (snapkv and h2o at ratio 0.4; logits, key mass, probe rows), with fewer bytes in use;
 *  - the host merge of the tail's statistics when the tail runs past a head's capacity (a per-head
 *    keep, then a write that grows the tail) equals the dense full-width path;
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
    int64_t peak, alloc, last; /* bytes in use: peak, after the last step; allocated after the last step */
    int64_t alloc_peak, alloc_ev; /* bytes allocated: the most over the run, the most after the first eviction */
    double mean;               /* bytes in use, mean over the steps */
    int64_t km_steps;          /* steps with a key mass */
    double *pr;                /* [2 * n * n_layers]: per step and layer with probe rows, their sum and
                                * index-weighted sum (first probe row block); NULL: not kept */
    int64_t pr_n;
    int rerotate;              /* in: kvs_evict_params.rerotate (steps with rope_in_cache) */
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
    ep.rerotate = rec ? rec->rerotate : 0;
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
        kvs_step_plan plan = {.tokens = &tok, .n_tokens = 1, .positions = &pos, .logit_rows = &zero, .n_logit_rows = 1,
                              .rope_in_cache = ep.rerotate};
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
        if (rec) {
            rec->last = kvs_cache_bytes_used(c);
            const int64_t al = kvs_cache_bytes_allocated(c);
            if (al > rec->alloc_peak) rec->alloc_peak = al;
            if (kvs_evictor_get_stats(ev).evictions > 0 && al > rec->alloc_ev) rec->alloc_ev = al;
        }
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

/* From dev's profile (kvs_device_profile), the forward's work inside the layers (layer >= 0): its
 * attention calls and its downloads to the host. */
static void layer_counts(const kvs_device *dev, int64_t *att, int64_t *down) {
    kvs_profile_entry e[512];
    int64_t n = kvs_device_profile_read(dev, e, 512);
    ck_assert(n > 0 && n <= 512);
    *att = *down = 0;
    for (int64_t i = 0; i < n; i++) {
        if (e[i].layer < 0) continue;
        if (!strcmp(e[i].kind, "attention")) *att += e[i].calls;
        if (!strcmp(e[i].kind, "download")) *down += e[i].calls;
    }
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
 * bytes in use drop (keys of d_k' = 5 of 8 channels for the kept rows). snapkv again with re-rotation
 * (kvs_cache_rerotate shifts the pruned rows at full width before they are pruned again). */
START_TEST(test_think_pruned_anchor) {
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    const int64_t n = 90, V = hp->vocab, per = n * hp->n_layers * hp->n_kv_heads;
    const char *pols[3] = {"snapkv", "h2o", "snapkv"}; /* the last with re-rotation */
    for (int pi = 0; pi < 3; pi++) {
        float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V);
        run_rec ra = {.km = calloc((size_t)per, sizeof(double)), .pr = calloc((size_t)(2 * n * hp->n_layers), sizeof(double))};
        run_rec rb = {.km = calloc((size_t)per, sizeof(double)), .pr = calloc((size_t)(2 * n * hp->n_layers), sizeof(double))};
        kvs_evict_stats ea, eb;
        ra.rerotate = rb.rerotate = pi == 2;
        int64_t att_a, att_b, down_a, down_b;
        ck_assert(kvs_device_profile(dev, 1) == KVS_OK);
        run_ex(m, dev, pols[pi], 24, 0.4, n, a, 1, &ea, 1, &ra); /* zeroed in place */
        layer_counts(dev, &att_a, &down_a);
        ck_assert(kvs_device_profile(dev, 1) == KVS_OK); /* from zero */
        run_ex(m, dev, pols[pi], 24, 0.4, n, b, 1, &eb, 0, &rb); /* the pruned segment */
        layer_counts(dev, &att_b, &down_b);
        ck_assert(kvs_device_profile(dev, 0) == KVS_OK);
        /* a (step, layer) in the pruned layout makes three attention calls instead of one, and no
         * download beyond the in-place run's: the log-normalisers (kvs_log_mass) and the statistics
         * (key mass, probe rows: kvs_scatter) are merged on the device, not through the host */
        const int64_t pruned_steps = (att_b - att_a) / 2;
        printf("think 0.4 %s%s: %lld (step, layer)s in the pruned layout; downloads in the layers %lld vs %lld in place\n",
               pols[pi], pi == 2 ? " (rerotate)" : "", (long long)pruned_steps, (long long)down_b, (long long)down_a);
        ck_assert_int_gt(pruned_steps, n);
        ck_assert_int_eq(down_b, down_a);
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
        printf("think 0.4 %s%s: probe rows at %lld (step, layer)s, max diff of their sums %.3g\n", pols[pi],
               pi == 2 ? " (rerotate)" : "", (long long)ra.pr_n, pworst);
        ck_assert_msg(pworst < 1e-4, "%s: probe rows differ by %g", pols[pi], pworst);
        printf("think 0.4 %s%s: pruned vs in place: max |logit diff| %.3g, max |key mass diff| %.3g over %lld steps, "
               "top-1 differs at %d steps; cache bytes in use: peak %lld vs %lld, mean %.0f vs %.0f, after the last "
               "eviction %lld vs %lld; allocated: peak %lld vs %lld, most after the first eviction %lld vs %lld, "
               "after the last step %lld vs %lld\n",
               pols[pi], pi == 2 ? " (rerotate)" : "", worst, kworst, (long long)ra.km_steps, top_differs, (long long)rb.peak,
               (long long)ra.peak, rb.mean, ra.mean, (long long)rb.last, (long long)ra.last, (long long)rb.alloc_peak,
               (long long)ra.alloc_peak, (long long)rb.alloc_ev, (long long)ra.alloc_ev, (long long)rb.alloc, (long long)ra.alloc);
        ck_assert_msg(worst < 1e-3, "%s: logits differ by %g", pols[pi], worst);
        ck_assert_msg(kworst < 1e-4, "%s: key mass differs by %g", pols[pi], kworst);
        ck_assert_int_eq(top_differs, 0);
        /* the peak is the first fill (no eviction yet: every row full width); afterwards the kept rows
         * hold d_k' key channels */
        ck_assert_int_eq(rb.peak, ra.peak);
        ck_assert_msg(rb.mean < ra.mean && rb.last < ra.last, "%s: bytes in use (mean %g, last %lld) not below the in-place "
                      "(%g, %lld)", pols[pi], rb.mean, (long long)rb.last, ra.mean, (long long)ra.last);
        /* allocated: the same before the first eviction (full width); after it every layer holds the
         * pruned segment and a tail of the buffer's rows instead of the full-width keys */
        ck_assert_int_eq(rb.alloc_peak, ra.alloc_peak);
        ck_assert_msg(rb.alloc_ev < ra.alloc_ev, "%s: allocated after the first eviction %lld, not below the in-place %lld",
                      pols[pi], (long long)rb.alloc_ev, (long long)ra.alloc_ev);
        free(ra.km), free(rb.km), free(ra.pr), free(rb.pr);
        free(a), free(b);
    }
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* One forward step of the n tokens tok[0..n) at positions p0.. into c, with key mass over all rows,
 * probe rows {0, n-1} and the argmax in every layer when stats; the step's result in *res. */
static void step_rows(kvs_model *m, kvs_kv_cache *c, const int32_t *tok, int64_t n, int32_t p0, int stats,
                      kvs_step_result *res) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int32_t pos[16], probe[2] = {0, (int32_t)(n - 1)}, last = (int32_t)(n - 1);
    ck_assert(n <= 16);
    for (int64_t i = 0; i < n; i++) pos[i] = p0 + (int32_t)i;
    kvs_layer_plan lp[16];
    ck_assert(hp->n_layers <= 16);
    memset(lp, 0, sizeof lp);
    for (int l = 0; l < hp->n_layers; l++) {
        lp[l].stat_all_rows = 1;
        lp[l].probe_rows = probe;
        lp[l].n_probe = 2;
        lp[l].want_argmax = 1;
    }
    kvs_step_plan plan = {.tokens = tok, .n_tokens = n, .positions = pos, .logit_rows = &last, .n_logit_rows = 1,
                          .layers = stats ? lp : NULL};
    ck_assert_msg(kvs_model_forward(m, c, &plan, res) == KVS_OK, "%s", kvs_last_error());
}

/* The pruned layout's host merge of the tail's statistics (core/model/forward_attention.c,
 * pruned_attention: the tail's key mass and probe rows go to cache rows P[h] + j on the host when
 * some head's P[h] + T exceeds the capacity, T the tail's capacity). kv_cache.c does not rule it
 * out: after kvs_cache_keep keeps, per head, a different split of pruned rows and tail rows
 * (head 0: pruned rows 0, 1 and the 4 tail rows; the others: their 8 pruned rows), a write of 6 rows
 * grows the tail to the 10 rows head 0 needs (tail_grow: at least the need), past the 16 - 8 = 8
 * the heads keeping 8 pruned rows have left. That step's key mass, probe rows, argmax and logits
 * equal the dense device path's on a copy of the cache with the same channels zeroed at full width
 * (kvs_cache_unprune_keys after the same pruning; same tokens, same keep). */
START_TEST(test_think_tail_past_capacity) {
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    const int L = hp->n_layers, H = hp->n_kv_heads, NH = hp->n_heads, hd = hp->head_dim;
    const int64_t cap = 16;
    ck_assert_int_ge(H, 2);
    ck_assert_int_le(H, 8);
    kvs_kv_cache *c[2] = {NULL, NULL}; /* 0: the pruned layout, 1: full width, the channels zeroed */
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = cap;
    cp.type_k = cp.type_v = KVS_F32;
    for (int i = 0; i < 2; i++) ck_assert_msg(kvs_cache_create(&c[i], dev, &cp) == KVS_OK, "%s", kvs_last_error());
    int32_t tok[18];
    uint32_t st = 4242;
    for (int i = 0; i < 18; i++) {
        st = st * 1664525u + 1013904223u;
        tok[i] = i == 0 && hp->bos_id >= 0 ? hp->bos_id : 3 + (int32_t)((st >> 8) % (uint32_t)(hp->vocab - 3));
    }
    uint8_t *pr = calloc((size_t)H * hd, 1);
    for (int h = 0; h < H; h++) /* a quarter of the channels, a different set per head */
        for (int t = 0; t < hd / 4; t++) pr[h * hd + (4 * t + h) % hd] = 1;
    int32_t keep[8 * 16];
    int64_t nk[8];
    for (int h = 0; h < H; h++) {
        int n = 0;
        if (h == 0) {
            const int32_t k0[6] = {0, 1, 8, 9, 10, 11}; /* 2 pruned rows and the 4 tail rows */
            for (int i = 0; i < 6; i++) keep[h * 16 + n++] = k0[i];
        } else {
            for (int r = 0; r < 8; r++) keep[h * 16 + n++] = r; /* the 8 pruned rows */
        }
        nk[h] = n;
    }
    kvs_step_result res;
    for (int i = 0; i < 2; i++) {
        step_rows(m, c[i], tok, 8, 0, 0, &res);
        for (int l = 0; l < L; l++) {
            ck_assert_msg(kvs_cache_prune_keys(c[i], l, pr) == KVS_OK, "%s", kvs_last_error());
            if (i == 1) ck_assert_msg(kvs_cache_unprune_keys(c[i], l) == KVS_OK, "%s", kvs_last_error());
        }
        step_rows(m, c[i], tok + 8, 4, 8, 0, &res);
        for (int l = 0; l < L; l++) ck_assert_msg(kvs_cache_keep(c[i], l, keep, nk, 16) == KVS_OK, "%s", kvs_last_error());
    }
    for (int l = 0; l < L; l++) {
        ck_assert_int_eq(kvs_cache_pruned_rows(c[0], l, 0), 2);
        for (int h = 1; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c[0], l, h), 8);
        ck_assert_int_eq(kvs_cache_tail_capacity(c[0], l), 8);
        for (int h = 0; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c[1], l, h), 0);
    }
    /* the step under test: 6 rows, key mass, probe rows 0 and 5, argmax */
    const int64_t n = 6;
    float *km[2], *pv[2], *lg[2];
    int32_t *am[2];
    int64_t nkv[2];
    for (int i = 0; i < 2; i++) {
        step_rows(m, c[i], tok + 12, n, 12, 1, &res);
        nkv[i] = res.layers[0].n_kv;
        km[i] = malloc(sizeof(float) * (size_t)(L * H * cap));
        pv[i] = malloc(sizeof(float) * (size_t)(L * 2 * NH * cap));
        am[i] = malloc(sizeof(int32_t) * (size_t)(L * n * NH));
        lg[i] = malloc(sizeof(float) * (size_t)hp->vocab);
        memcpy(lg[i], res.logits, sizeof(float) * (size_t)hp->vocab);
        for (int l = 0; l < L; l++) {
            const kvs_layer_stats *ls = &res.layers[l];
            ck_assert_int_eq(ls->n_kv, 14);
            ck_assert(ls->key_mass && ls->probs && ls->argmax);
            memcpy(km[i] + (size_t)l * H * cap, ls->key_mass, sizeof(float) * (size_t)(H * ls->n_kv));
            memcpy(pv[i] + (size_t)l * 2 * NH * cap, ls->probs, sizeof(float) * (size_t)(2 * NH * ls->n_kv));
            memcpy(am[i] + (size_t)l * n * NH, ls->argmax, sizeof(int32_t) * (size_t)(n * NH));
        }
    }
    ck_assert_int_eq(nkv[0], nkv[1]);
    /* the merge's condition held: the tail grew to head 0's need, past what heads 1.. have left */
    for (int l = 0; l < L; l++) {
        ck_assert_int_eq(kvs_cache_tail_capacity(c[0], l), 10);
        ck_assert_int_gt(kvs_cache_pruned_rows(c[0], l, 1) + kvs_cache_tail_capacity(c[0], l), cap);
        ck_assert_int_eq(kvs_cache_len(c[0], l, 0), 12);
        ck_assert_int_eq(kvs_cache_len(c[0], l, 1), 14);
    }
    const int64_t K = nkv[0];
    double kworst = 0.0, pworst = 0.0, lworst = 0.0, kmass = 0.0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            for (int64_t j = 0; j < K; j++) {
                const double a = km[0][(size_t)l * H * cap + h * K + j], b = km[1][(size_t)l * H * cap + h * K + j];
                if (fabs(a - b) > kworst) kworst = fabs(a - b);
                kmass += b;
            }
    for (int l = 0; l < L; l++)
        for (int64_t r = 0; r < 2 * NH; r++) {
            double sum = 0.0;
            for (int64_t j = 0; j < K; j++) {
                const double a = pv[0][(size_t)l * 2 * NH * cap + r * K + j], b = pv[1][(size_t)l * 2 * NH * cap + r * K + j];
                if (fabs(a - b) > pworst) pworst = fabs(a - b);
                sum += a;
            }
            ck_assert_msg(fabs(sum - 1.0) < 1e-4, "layer %d probe row %lld sums to %g", l, (long long)r, sum);
        }
    for (int64_t v = 0; v < hp->vocab; v++)
        if (fabs((double)lg[0][v] - (double)lg[1][v]) > lworst) lworst = fabs((double)lg[0][v] - (double)lg[1][v]);
    int am_diff = 0;
    for (int64_t i = 0; i < L * n * NH; i++) am_diff += am[0][i] != am[1][i];
    printf("think: the tail past the capacity (P + T = %lld > %lld): vs the dense full-width path: max |key mass diff| "
           "%.3g (total mass %.3g), max |probe diff| %.3g, max |logit diff| %.3g, argmax differs at %d of %lld\n",
           (long long)(kvs_cache_pruned_rows(c[0], 0, 1) + kvs_cache_tail_capacity(c[0], 0)), (long long)cap, kworst, kmass,
           pworst, lworst, am_diff, (long long)(L * n * NH));
    /* the key mass (the group's mean probability summed over the n rows) is n per kv head and layer */
    ck_assert_msg(fabs(kmass - (double)(L * H * n)) < 1e-3 * L * H * n, "total key mass %g, want %d", kmass, L * H * (int)n);
    ck_assert_msg(kworst < 1e-4, "key mass differs by %g", kworst);
    ck_assert_msg(pworst < 1e-5, "probe rows differ by %g", pworst);
    ck_assert_msg(lworst < 1e-3, "logits differ by %g", lworst);
    ck_assert_int_eq(am_diff, 0);
    for (int i = 0; i < 2; i++) {
        free(km[i]), free(pv[i]), free(am[i]), free(lg[i]);
        kvs_cache_destroy(&c[i]);
    }
    free(pr);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* Appends n rows to layer 0 of c: key (row r, head h, channel t) = 100 h + 10 r + t + 1 (r the row's
 * index in the head, from r0), value = its negative; positions p0.. */
static void put_rows(kvs_device *dev, kvs_kv_cache *c, int H, int hd, int64_t r0, int64_t n) {
    kvs_tensor *k = NULL, *v = NULL;
    ck_assert(kvs_tensor_new(&k, dev, KVS_F32, hd, H, n, 0) == KVS_OK);
    ck_assert(kvs_tensor_new(&v, dev, KVS_F32, hd, H, n, 0) == KVS_OK);
    float *kh = malloc(sizeof(float) * (size_t)(n * H * hd)), *vh = malloc(sizeof(float) * (size_t)(n * H * hd));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        pos[i] = (int32_t)(r0 + i);
        for (int h = 0; h < H; h++)
            for (int t = 0; t < hd; t++) {
                kh[(i * H + h) * hd + t] = (float)(100 * h + 10 * (r0 + i) + t + 1);
                vh[(i * H + h) * hd + t] = -kh[(i * H + h) * hd + t];
            }
    }
    ck_assert(kvs_tensor_upload(k, kh, 0, sizeof(float) * (size_t)(n * H * hd)) == KVS_OK);
    ck_assert(kvs_tensor_upload(v, vh, 0, sizeof(float) * (size_t)(n * H * hd)) == KVS_OK);
    ck_assert_msg(kvs_cache_write_rows(c, 0, k, v, pos, n) == KVS_OK, "%s", kvs_last_error());
    free(kh), free(vh), free(pos);
    kvs_tensor_destroy(&k);
    kvs_tensor_destroy(&v);
}

/* The cache's pruned key segment by hand (f32 and f16 keys, 2 kv heads, head_dim 5, capacity 9):
 * 4 rows pruned with head 0 keeping channels {1, 3, 4} and head 1 {0, 2, 3}: the segment holds
 * exactly those values, the full-width keys are replaced by a tail of capacity - 4 rows (bytes
 * allocated), kvs_cache_read_f32 returns the keys with 0 in the other channels, bytes in use count
 * 3 key values a pruned row; 2 rows appended go to the tail at full width (its positions and
 * lengths); a second pruning onto head 0 {0, 1, 4} with a 1-row tail announced re-gathers the old
 * rows (channel 0, not held, reads 0) and takes the new ones; a 2-row write grows the tail;
 * truncation (into the tail, into the pruned rows) and keeping rows (eviction, pruned and tail rows
 * kept) stay in the pruned layout without allocating more; pruning again from it; truncation to no
 * pruned row returns the layer to full width (the allocation of before); the refusals. */
START_TEST(test_prune_storage) {
    kvs_device *dev = NULL;
    ck_assert_msg(kvs_device_open(&dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    const int H = 2, hd = 5, cap = 9;
    for (int f16 = 0; f16 < 2; f16++) {
        kvs_cache_params cp = kvs_cache_params_default();
        cp.n_layers = 2, cp.n_kv_heads = H, cp.head_dim = hd, cp.capacity = cap, cp.mode = KVS_CACHE_APPEND;
        cp.type_k = f16 ? KVS_F16 : KVS_F32;
        kvs_kv_cache *c = NULL;
        ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
        const int64_t es = f16 ? 2 : 4, vrow = 4 * hd; /* key element bytes, f32 value row bytes */
        put_rows(dev, c, H, hd, 0, 4);
        const int64_t full = kvs_cache_bytes_used(c), alloc0 = kvs_cache_bytes_allocated(c);
        ck_assert_int_eq(full, (int64_t)H * 4 * (hd * es + vrow) + (int64_t)0);
        ck_assert_int_eq(kvs_cache_pruned_dim(c, 0), 0);
        ck_assert_ptr_null(kvs_cache_k_pruned(c, 0));
        uint8_t pr[10] = {1, 0, 1, 0, 0, /* head 1 */ 0, 1, 0, 0, 1};
        ck_assert_msg(kvs_cache_prune_keys(c, 0, pr) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(kvs_cache_pruned_dim(c, 0), 3);
        ck_assert_int_eq(kvs_cache_pruned_dim(c, 1), 0);
        for (int h = 0; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, h), 4);
        const int32_t want_ch[6] = {1, 3, 4, 0, 2, 3};
        ck_assert(memcmp(kvs_cache_pruned_channels(c, 0), want_ch, sizeof want_ch) == 0);
        ck_assert_int_eq(kvs_cache_bytes_used(c), (int64_t)H * 4 * (3 * es + vrow));
        /* allocated: the segment [H][cap][3] and a tail of cap - 4 = 5 rows instead of the keys [H][cap][5] */
        ck_assert_int_eq(kvs_cache_tail_capacity(c, 0), cap - 4);
        ck_assert_int_eq(kvs_tensor_ne(kvs_cache_k(c, 0), 1), cap - 4);
        ck_assert_int_eq(kvs_cache_bytes_allocated(c), alloc0 - (int64_t)H * cap * hd * es + (int64_t)H * cap * 3 * es +
                                                           (int64_t)H * (cap - 4) * hd * es);
        float seg[2 * 9 * 3], keys[2 * 9 * 5];
        kvs_tensor *kp = kvs_cache_k_pruned(c, 0);
        ck_assert_int_eq(kvs_tensor_ne(kp, 0), 3);
        ck_assert_int_eq(kvs_tensor_ne(kp, 1), cap);
        if (f16) {
            uint16_t raw[2 * 9 * 3];
            ck_assert(kvs_tensor_download(kp, raw, 0, sizeof raw) == KVS_OK);
            for (int i = 0; i < 2 * 9 * 3; i++) seg[i] = kvs_f16_to_f32(raw[i]);
        } else {
            ck_assert(kvs_tensor_download(kp, seg, 0, sizeof seg) == KVS_OK);
        }
        for (int h = 0; h < H; h++)
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 3; t++)
                    ck_assert_float_eq(seg[(h * cap + r) * 3 + t], (float)(100 * h + 10 * r + want_ch[h * 3 + t] + 1));
        /* two rows appended: full width, outside the segment */
        put_rows(dev, c, H, hd, 4, 2);
        for (int h = 0; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, h), 4);
        ck_assert_int_eq(kvs_cache_bytes_used(c), (int64_t)H * (4 * (3 * es + vrow) + 2 * (hd * es + vrow)));
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int r = 0; r < 6; r++)
                for (int t = 0; t < hd; t++) {
                    int held = r >= 4 || !pr[h * hd + t];
                    ck_assert_float_eq(keys[(h * cap + r) * hd + t], held ? (float)(100 * h + 10 * r + t + 1) : 0.0f);
                }
        /* the pruned rows' positions hidden from a causal attention over the full-width rows */
        int32_t tp[2 * 5], tl[2];
        ck_assert(kvs_tensor_download(kvs_cache_tail_pos_tensor(c, 0), tp, 0, sizeof tp) == KVS_OK);
        ck_assert(kvs_tensor_download(kvs_cache_tail_len_tensor(c, 0), tl, 0, sizeof tl) == KVS_OK);
        for (int h = 0; h < H; h++) {
            ck_assert_int_eq(tl[h], 2);
            for (int j = 0; j < 5; j++) ck_assert_int_eq(tp[h * 5 + j], j < 2 ? 4 + j : INT32_MAX);
        }
        /* a tail of 1 row announced (the evictor's buffer): the next pruning makes it, and a write of 2
         * rows grows it (to 2: doubled, at most cap - 6 = 3) */
        ck_assert_int_eq(kvs_cache_set_tail_rows(NULL, 1), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(kvs_cache_set_tail_rows(c, -1), KVS_ERR_INVALID_ARGUMENT);
        ck_assert(kvs_cache_set_tail_rows(c, 1) == KVS_OK);
        /* second pruning: head 0 keeps {0, 1, 4}, head 1 {1, 2, 4} */
        uint8_t pr2[10] = {0, 0, 1, 1, 0, 1, 0, 0, 1, 0};
        ck_assert(kvs_cache_prune_keys(c, 0, pr2) == KVS_OK);
        for (int h = 0; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, h), 6);
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int r = 0; r < 6; r++)
                for (int t = 0; t < hd; t++) {
                    int held = !pr2[h * hd + t] && (r >= 4 || !pr[h * hd + t]);
                    ck_assert_float_eq(keys[(h * cap + r) * hd + t], held ? (float)(100 * h + 10 * r + t + 1) : 0.0f);
                }
        ck_assert_int_eq(kvs_cache_bytes_used(c), (int64_t)H * 6 * (3 * es + vrow));
        ck_assert_int_eq(kvs_cache_tail_capacity(c, 0), 1);
        put_rows(dev, c, H, hd, 6, 2);
        ck_assert_int_eq(kvs_cache_tail_capacity(c, 0), 2);
        ck_assert_int_eq(kvs_cache_bytes_allocated(c), alloc0 - (int64_t)H * cap * hd * es + (int64_t)H * cap * 3 * es +
                                                           (int64_t)H * 2 * hd * es);
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int r = 0; r < 8; r++)
                for (int t = 0; t < hd; t++) {
                    int held = r >= 6 || (!pr2[h * hd + t] && (r >= 4 || !pr[h * hd + t]));
                    ck_assert_float_eq(keys[(h * cap + r) * hd + t], held ? (float)(100 * h + 10 * r + t + 1) : 0.0f);
                }
        /* truncation (speculative decoding's rollback) keeps the pruned layout: to 7 rows drops the
         * tail's row 1 (P stays 6), writing row 7 again restores the keys bit for bit, to 5 rows drops
         * the tail and pruned row 5 (P = 5); nothing is allocated at full width meanwhile */
        const int64_t alloc2 = kvs_cache_bytes_allocated(c);
        float before[2 * 9 * 5], raw3[2 * 9 * 3];
        ck_assert(kvs_cache_read_f32(c, 0, 0, before) == KVS_OK);
        ck_assert_msg(kvs_cache_truncate(c, 7) == KVS_OK, "%s", kvs_last_error());
        for (int h = 0; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, h), 6);
        ck_assert_ptr_nonnull(kvs_cache_k_pruned(c, 0));
        ck_assert_int_eq(kvs_cache_bytes_allocated(c), alloc2);
        ck_assert_int_eq(kvs_cache_bytes_used(c), (int64_t)H * (6 * (3 * es + vrow) + (hd * es + vrow)));
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int r = 0; r < cap; r++)
                for (int t = 0; t < hd; t++)
                    ck_assert_float_eq(keys[(h * cap + r) * hd + t], r < 7 ? before[(h * cap + r) * hd + t] : 0.0f);
        ck_assert(kvs_tensor_download(kvs_cache_tail_pos_tensor(c, 0), tp, 0, sizeof(int32_t) * 2 * 2) == KVS_OK);
        ck_assert(kvs_tensor_download(kvs_cache_tail_len_tensor(c, 0), tl, 0, sizeof tl) == KVS_OK);
        for (int h = 0; h < H; h++) {
            ck_assert_int_eq(tl[h], 1);
            ck_assert_int_eq(tp[h * 2], 6);
            ck_assert_int_eq(tp[h * 2 + 1], INT32_MAX);
        }
        put_rows(dev, c, H, hd, 7, 1);
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        ck_assert(memcmp(keys, before, sizeof keys) == 0);
        ck_assert_msg(kvs_cache_truncate(c, 5) == KVS_OK, "%s", kvs_last_error());
        for (int h = 0; h < H; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, h), 5);
        ck_assert_int_eq(kvs_cache_bytes_allocated(c), alloc2);
        ck_assert_int_eq(kvs_cache_bytes_used(c), (int64_t)H * 5 * (3 * es + vrow));
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int r = 0; r < cap; r++)
                for (int t = 0; t < hd; t++)
                    ck_assert_float_eq(keys[(h * cap + r) * hd + t], r < 5 ? before[(h * cap + r) * hd + t] : 0.0f);
        if (!f16) { /* the dropped pruned row's bytes are 0, as never written */
            ck_assert(kvs_tensor_download(kvs_cache_k_pruned(c, 0), raw3, 0, sizeof raw3) == KVS_OK);
            for (int h = 0; h < H; h++)
                for (int r = 5; r < cap; r++)
                    for (int t = 0; t < 3; t++) ck_assert_float_eq(raw3[(h * cap + r) * 3 + t], 0.0f);
        }
        /* eviction in the pruned layout: rows 5 and 6 appended (the tail), then head 0 keeps rows
         * {1, 4, 6} and head 1 {0, 5}: the pruned rows compact in the pruned segment (P = 2 and 1), the
         * others in the tail; no full-width key tensor is made (allocation unchanged) */
        put_rows(dev, c, H, hd, 5, 2);
        const int32_t keep[6] = {1, 4, 6, 0, 5, 0};
        const int64_t nk[2] = {3, 2};
        ck_assert(kvs_cache_keep(c, 0, keep, nk, 3) == KVS_OK);
        ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, 0), 2);
        ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, 1), 1);
        ck_assert_ptr_nonnull(kvs_cache_k_pruned(c, 0));
        ck_assert_int_eq(kvs_cache_bytes_allocated(c), alloc2);
        ck_assert_int_eq(kvs_cache_bytes_used(c), (int64_t)3 * (3 * es + vrow) + 2 * (hd * es + vrow));
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < cap; i++)
                for (int t = 0; t < hd; t++) {
                    const int r = i < nk[h] ? keep[h * 3 + i] : -1;
                    const int held = r >= 5 || (r >= 0 && !pr2[h * hd + t] && (r >= 4 || !pr[h * hd + t]));
                    ck_assert_float_eq(keys[(h * cap + i) * hd + t], held ? (float)(100 * h + 10 * r + t + 1) : 0.0f);
                }
        /* the values and positions moved with them */
        int32_t kpos[2 * 9];
        ck_assert(kvs_tensor_download(kvs_cache_pos_tensor(c, 0), kpos, 0, sizeof kpos) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nk[h]; i++) ck_assert_int_eq(kpos[h * cap + i], keep[h * 3 + i]);
        float vals[2 * 9 * 5];
        ck_assert(kvs_cache_read_f32(c, 0, 1, vals) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nk[h]; i++)
                for (int t = 0; t < hd; t++)
                    ck_assert_float_eq(vals[(h * cap + i) * hd + t], -(float)(100 * h + 10 * keep[h * 3 + i] + t + 1));
        /* pruned again (from the pruned layout), then truncated to 1 row and to 0 rows: no pruned
         * row left, the layer returns to its full-width keys */
        ck_assert(kvs_cache_prune_keys(c, 0, pr) == KVS_OK);
        ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, 0), 3);
        ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, 1), 2);
        ck_assert(kvs_cache_truncate(c, 1) == KVS_OK);
        ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, 0), 1);
        ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, 1), 1);
        ck_assert_ptr_nonnull(kvs_cache_k_pruned(c, 0));
        ck_assert(kvs_cache_truncate(c, 0) == KVS_OK);
        ck_assert_ptr_null(kvs_cache_k_pruned(c, 0));
        ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, 0), 0);
        ck_assert_int_eq(kvs_tensor_ne(kvs_cache_k(c, 0), 1), cap);
        ck_assert_int_eq(kvs_cache_bytes_allocated(c), alloc0);
        ck_assert_int_eq(kvs_cache_bytes_used(c), 0);
        put_rows(dev, c, H, hd, 0, 1);
        ck_assert(kvs_cache_read_f32(c, 0, 0, keys) == KVS_OK);
        for (int h = 0; h < H; h++)
            for (int t = 0; t < hd; t++) ck_assert_float_eq(keys[(h * cap) * hd + t], (float)(100 * h + t + 1));
        /* refusals */
        uint8_t bad[10] = {1, 0, 0, 0, 0, 1, 1, 0, 0, 0};
        ck_assert_int_eq(kvs_cache_prune_keys(c, 0, bad), KVS_ERR_INVALID_ARGUMENT);
        uint8_t all[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
        ck_assert_int_eq(kvs_cache_prune_keys(c, 0, all), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(kvs_cache_prune_keys(c, 2, pr), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(kvs_cache_prune_keys(NULL, 0, pr), KVS_ERR_INVALID_ARGUMENT);
        kvs_cache_destroy(&c);
    }
    /* a 7B-like head shape: 4 kv heads of head_dim 64, f16 K and V, capacity 288 = budget 256 + buffer 32,
     * 256 rows, ThinK 0.4 (25 channels pruned, d_k' 39), the buffer announced as the tail */
    {
        const int H2 = 4, hd2 = 64, cap2 = 288, d2 = 39;
        kvs_cache_params cp = kvs_cache_params_default();
        cp.n_layers = 1, cp.n_kv_heads = H2, cp.head_dim = hd2, cp.capacity = cap2, cp.mode = KVS_CACHE_APPEND;
        cp.type_k = cp.type_v = KVS_F16;
        kvs_kv_cache *c = NULL;
        ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
        put_rows(dev, c, H2, hd2, 0, 256);
        const int64_t alloc0 = kvs_cache_bytes_allocated(c), used0 = kvs_cache_bytes_used(c);
        ck_assert_int_eq(alloc0, (int64_t)H2 * cap2 * hd2 * 2 * 2);
        uint8_t *prb = calloc((size_t)H2 * hd2, 1);
        for (int h = 0; h < H2; h++)
            for (int t = 0; t < hd2 - d2; t++) prb[h * hd2 + (t * 5 + h) % hd2] = 1; /* 25 distinct channels */
        ck_assert(kvs_cache_set_tail_rows(c, 32) == KVS_OK);
        /* device peak (kvs_device_bytes_peak) over the pruning: the full-width keys go before the
         * segment is made, so it never holds both (the segment alone is 89856 bytes) */
        const int64_t seg_b = (int64_t)H2 * cap2 * d2 * 2, full_b = (int64_t)H2 * cap2 * hd2 * 2;
        ck_assert_int_eq(kvs_device_bytes_peak(NULL), 0);
        int64_t held = kvs_device_bytes_allocated(dev);
        kvs_device_reset_peak(dev);
        ck_assert_int_eq(kvs_device_bytes_peak(dev), held);
        ck_assert_msg(kvs_cache_prune_keys(c, 0, prb) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(kvs_cache_pruned_dim(c, 0), d2);
        const int64_t peak_prune = kvs_device_bytes_peak(dev) - held;
        ck_assert_msg(peak_prune < seg_b, "pruning held %lld bytes more at its peak (segment %lld)", (long long)peak_prune,
                      (long long)seg_b);
        const int64_t alloc1 = kvs_cache_bytes_allocated(c), used1 = kvs_cache_bytes_used(c);
        ck_assert_int_eq(alloc1, (int64_t)H2 * (cap2 * d2 + 32 * hd2 + cap2 * hd2) * 2);
        ck_assert_int_eq(used1, (int64_t)H2 * 256 * (d2 + hd2) * 2);
        put_rows(dev, c, H2, hd2, 256, 32); /* the buffer fills the tail, no growth */
        ck_assert_int_eq(kvs_cache_tail_capacity(c, 0), 32);
        ck_assert_int_eq(kvs_cache_bytes_allocated(c), alloc1);
        /* the next eviction in the pruned layout (keep 256 of the 288 rows: every 9th dropped), then
         * pruning again onto other channels: no full-width key tensor on the way (peak above what was
         * held: below the full-width keys; it was those plus the segment and the tail) */
        int32_t *kk = malloc(sizeof(int32_t) * (size_t)H2 * 256);
        int64_t nk2[4];
        for (int h = 0; h < H2; h++) {
            int n = 0;
            for (int r = 0; r < 288 && n < 256; r++)
                if (r % 9 != 4) kk[h * 256 + n++] = r;
            nk2[h] = n;
        }
        held = kvs_device_bytes_allocated(dev);
        kvs_device_reset_peak(dev);
        ck_assert_msg(kvs_cache_keep(c, 0, kk, nk2, 256) == KVS_OK, "%s", kvs_last_error());
        ck_assert_ptr_nonnull(kvs_cache_k_pruned(c, 0));
        for (int h = 0; h < H2; h++) ck_assert_int_eq(kvs_cache_pruned_rows(c, 0, h), 228); /* rows < 256 kept */
        for (int h = 0; h < H2; h++)
            for (int t = 0; t < hd2; t++) prb[h * hd2 + t] = (uint8_t)(((t * 7 + h) % hd2) < hd2 - d2);
        ck_assert_msg(kvs_cache_prune_keys(c, 0, prb) == KVS_OK, "%s", kvs_last_error());
        const int64_t peak_evict = kvs_device_bytes_peak(dev) - held;
        printf("head_dim 64, 4 kv heads, f16, ThinK 0.4: device bytes at the peak above those held: first pruning %lld, "
               "eviction + pruning again %lld (full-width keys %lld, segment %lld)\n", (long long)peak_prune,
               (long long)peak_evict, (long long)full_b, (long long)seg_b);
        ck_assert_int_lt(peak_evict, full_b);
        free(kk);
        printf("head_dim 64, 4 kv heads, f16, capacity 288, 256 rows, ThinK 0.4: allocated %lld -> %lld bytes (%.1f%%; keys "
               "%lld -> %lld), in use %lld -> %lld, full with the buffer %lld\n",
               (long long)alloc0, (long long)alloc1, 100.0 * (double)(alloc1 - alloc0) / (double)alloc0,
               (long long)H2 * cap2 * hd2 * 2, (long long)H2 * (cap2 * d2 + 32 * hd2) * 2, (long long)used0, (long long)used1,
               (long long)kvs_cache_bytes_used(c));
        ck_assert_int_lt(alloc1, alloc0);
        free(prb);
        kvs_cache_destroy(&c);
    }
    const kvs_dtype other[2] = {KVS_BF16, KVS_F32};
    for (int i = 0; i < 2; i++) { /* bf16 keys; a positional cache */
        kvs_cache_params cp = kvs_cache_params_default();
        cp.n_layers = 1, cp.n_kv_heads = 1, cp.head_dim = 4, cp.capacity = 4;
        cp.mode = i == 0 ? KVS_CACHE_APPEND : KVS_CACHE_POSITIONAL;
        cp.type_k = other[i];
        kvs_kv_cache *c = NULL;
        ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
        const uint8_t p1[4] = {1, 0, 0, 0};
        ck_assert_int_eq(kvs_cache_prune_keys(c, 0, p1), i == 0 ? KVS_ERR_UNSUPPORTED : KVS_ERR_STATE);
        kvs_cache_destroy(&c);
    }
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
    tcase_add_test(tc, test_prune_storage);
    tcase_add_test(tc, test_think_model);
    tcase_add_test(tc, test_think_pruned_anchor);
    tcase_add_test(tc, test_think_tail_past_capacity);
    tcase_add_test(tc, test_think_refusals);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
