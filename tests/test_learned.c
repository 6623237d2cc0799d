/* Learned eviction policies (issue 8) on stories260K, one backend per run (--backend):
 *  - GGUF side files round-trip every weight bit-exactly (and re-saving gives identical bytes);
 *  - wrong kind, another model's shape, truncated, garbage and non-policy files are refused with
 *    the documented status and a message;
 *  - training is deterministic for a seed (two runs: identical weights; another seed: different),
 *    also rl with cycled budgets and model selection (which keeps the best validation KL seen);
 *  - the three policies run in the decode loop: budget 1.0 is exactly the full cache, a small
 *    budget shrinks the cache and keeps the logits finite;
 *  - threshold and floor modes: with constructed retention weights whose score depends only on the
 *    age, the cache after every decode step holds exactly the rows a hand model of the evictor
 *    predicts (threshold evicts below the budget; the budget caps in scope head; a pooled global
 *    budget lets a head keep more; the Ada-KV floor keeps rows the threshold would evict).
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
#include "kvsieve/learned.h"
#include "kvsieve/policy.h"

static kvs_device_params g_params;
static char g_model[4096];

typedef struct fx {
    kvs_device *dev;
    kvs_model *m;
    const kvs_model_hparams *hp;
} fx;

static void fx_open(fx *f) {
    ck_assert_msg(kvs_device_open(&f->dev, &g_params) == KVS_OK, "%s", kvs_last_error());
    ck_assert_msg(kvs_model_load(&f->m, f->dev, g_model, NULL) == KVS_OK, "%s", kvs_last_error());
    f->hp = kvs_model_get_hparams(f->m);
}

static void fx_close(fx *f) {
    kvs_model_destroy(&f->m);
    kvs_device_destroy(&f->dev);
}

/* Deterministic pseudo-text: token ids 3..vocab-1. */
static int32_t *make_tokens(int64_t n, int vocab) {
    int32_t *t = malloc((size_t)n * sizeof *t);
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = 3 + (int32_t)((s >> 33) % (uint64_t)(vocab - 3));
    }
    return t;
}

static void tmp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/kvs_test_learned_%d_%s.gguf", (int)getpid(), tag);
}

static unsigned char *read_all(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n);
    ck_assert_int_eq(fread(b, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return b;
}

START_TEST(test_roundtrip_bit_exact) {
    fx f;
    fx_open(&f);
    for (int k = 0; k < 3; k++) {
        kvs_learned *a = NULL, *b = NULL;
        ck_assert(kvs_learned_create(&a, (kvs_learned_kind)k, f.hp, 7 + (uint64_t)k) == KVS_OK);
        int64_t n = 0;
        float *pa = kvs_learned_params(a, &n);
        ck_assert_int_gt(n, 10);
        /* awkward values: subnormals, negative zero, extremes */
        pa[0] = -0.0f;
        pa[1] = 1e-40f;
        pa[2] = 3.4e38f;
        pa[n - 1] = -1.1754942e-38f;
        char p1[256], p2[256];
        tmp_path(p1, sizeof p1, "rt1");
        tmp_path(p2, sizeof p2, "rt2");
        ck_assert_msg(kvs_learned_save(a, p1) == KVS_OK, "%s", kvs_last_error());
        ck_assert_msg(access(p1, F_OK) == 0, "saved file missing");
        char tmp[300];
        snprintf(tmp, sizeof tmp, "%s.tmp", p1);
        ck_assert_msg(access(tmp, F_OK) != 0, "temporary file left behind");
        ck_assert_msg(kvs_learned_load(&b, p1, f.hp, k) == KVS_OK, "%s", kvs_last_error());
        int64_t nb = 0;
        float *pb = kvs_learned_params(b, &nb);
        ck_assert_int_eq(n, nb);
        ck_assert_msg(memcmp(pa, pb, (size_t)n * sizeof(float)) == 0, "kind %d: weights differ after the round trip", k);
        ck_assert_int_eq(kvs_learned_get_kind(b), k);
        ck_assert(kvs_learned_save(b, p2) == KVS_OK);
        long n1, n2;
        unsigned char *b1 = read_all(p1, &n1), *b2 = read_all(p2, &n2);
        ck_assert_int_eq(n1, n2);
        ck_assert_msg(memcmp(b1, b2, (size_t)n1) == 0, "kind %d: re-saved file differs", k);
        free(b1), free(b2);
        remove(p1), remove(p2);
        kvs_learned_destroy(&a);
        kvs_learned_destroy(&b);
    }
    fx_close(&f);
}
END_TEST

START_TEST(test_refusals) {
    fx f;
    fx_open(&f);
    kvs_learned *a = NULL, *b = NULL;
    ck_assert(kvs_learned_create(&a, KVS_LEARNED_RETENTION, f.hp, 1) == KVS_OK);
    char p[256];
    tmp_path(p, sizeof p, "ref");
    ck_assert(kvs_learned_save(a, p) == KVS_OK);
    /* wrong kind */
    ck_assert_int_eq(kvs_learned_load(&b, p, f.hp, KVS_LEARNED_RL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(kvs_last_error(), "retention") != NULL, "message: %s", kvs_last_error());
    /* another model's shape: layers, kv heads */
    kvs_model_hparams hp = *f.hp;
    hp.n_layers++;
    ck_assert_int_eq(kvs_learned_load(&b, p, &hp, -1), KVS_ERR_SHAPE);
    ck_assert_msg(strstr(kvs_last_error(), "another model") != NULL, "message: %s", kvs_last_error());
    hp = *f.hp;
    hp.n_kv_heads = hp.n_heads;
    ck_assert_int_eq(kvs_learned_load(&b, p, &hp, -1), KVS_ERR_SHAPE);
    /* truncated */
    long n;
    unsigned char *bytes = read_all(p, &n);
    FILE *o = fopen(p, "wb");
    fwrite(bytes, 1, (size_t)(n * 2 / 3), o);
    fclose(o);
    kvs_status s = kvs_learned_load(&b, p, f.hp, -1);
    ck_assert_int_ne(s, KVS_OK);
    ck_assert_ptr_null(b);
    ck_assert(strlen(kvs_last_error()) > 0);
    /* garbage */
    o = fopen(p, "wb");
    fputs("this is not a gguf file at all, not even close", o);
    fclose(o);
    ck_assert_int_ne(kvs_learned_load(&b, p, f.hp, -1), KVS_OK);
    /* a model file is not a policy file */
    ck_assert_int_eq(kvs_learned_load(&b, g_model, f.hp, -1), KVS_ERR_FORMAT);
    ck_assert_msg(strstr(kvs_last_error(), "not a kvsieve policy") != NULL, "message: %s", kvs_last_error());
    /* missing file */
    remove(p);
    ck_assert_int_ne(kvs_learned_load(&b, p, f.hp, -1), KVS_OK);
    free(bytes);
    kvs_learned_destroy(&a);
    fx_close(&f);
}
END_TEST

static void train_once(fx *f, kvs_learned_kind kind, uint64_t seed, int64_t steps, kvs_learned **out) {
    int64_t n = 400;
    int32_t *tok = make_tokens(n, f->hp->vocab);
    ck_assert(kvs_learned_create(out, kind, f->hp, seed) == KVS_OK);
    kvs_train_params tp = kvs_train_params_default();
    tp.steps = steps;
    tp.seed = seed;
    tp.ctx = 48;
    tp.horizon = 8;
    double loss = -1;
    ck_assert_msg(kvs_learned_train(*out, f->m, tok, n, &tp, &loss) == KVS_OK, "%s", kvs_last_error());
    ck_assert_msg(isfinite(loss) && loss >= 0, "loss %g", loss);
    free(tok);
}

START_TEST(test_train_deterministic) {
    fx f;
    fx_open(&f);
    for (int k = 0; k < 3; k++) {
        kvs_learned *a = NULL, *b = NULL, *c = NULL, *init = NULL;
        train_once(&f, (kvs_learned_kind)k, 5, 3, &a);
        train_once(&f, (kvs_learned_kind)k, 5, 3, &b);
        train_once(&f, (kvs_learned_kind)k, 6, 3, &c);
        ck_assert(kvs_learned_create(&init, (kvs_learned_kind)k, f.hp, 5) == KVS_OK);
        int64_t n;
        float *pa = kvs_learned_params(a, &n), *pb = kvs_learned_params(b, NULL), *pc = kvs_learned_params(c, NULL),
              *pi = kvs_learned_params(init, NULL);
        ck_assert_msg(memcmp(pa, pb, (size_t)n * 4) == 0, "kind %d: same seed, different weights", k);
        ck_assert_msg(memcmp(pa, pc, (size_t)n * 4) != 0, "kind %d: another seed, same weights", k);
        ck_assert_msg(memcmp(pa, pi, (size_t)n * 4) != 0, "kind %d: training changed nothing", k);
        kvs_learned_destroy(&a), kvs_learned_destroy(&b), kvs_learned_destroy(&c), kvs_learned_destroy(&init);
    }
    /* bad arguments */
    kvs_learned *a = NULL;
    ck_assert(kvs_learned_create(&a, KVS_LEARNED_RETENTION, f.hp, 1) == KVS_OK);
    int32_t tok[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    kvs_train_params tp = kvs_train_params_default();
    ck_assert_int_eq(kvs_learned_train(a, f.m, tok, 10, &tp, NULL), KVS_ERR_INVALID_ARGUMENT);
    kvs_learned_destroy(&a);
    fx_close(&f);
}
END_TEST

typedef struct val_log { int calls, best_first; double first, best; } val_log;
static void on_validated(int64_t step, double kl, int best, void *user) {
    val_log *v = user;
    if (v->calls == 0) v->first = kl, v->best_first = best;
    if (best) v->best = kl;
    ck_assert_msg(isfinite(kl) && kl >= 0, "step %lld: validation KL %g", (long long)step, kl);
    v->calls++;
}

/* rl with the CLI's options: budgets cycled, model selection on held-back windows (the start
 * included, so the validation KL of the result is the minimum seen), deterministic; bad values
 * refused. */
START_TEST(test_train_rl_selection) {
    fx f;
    fx_open(&f);
    int64_t n = 400;
    int32_t *tok = make_tokens(n, f.hp->vocab);
    float *w0 = NULL;
    int64_t np = 0;
    for (int run = 0; run < 2; run++) {
        kvs_learned *w = NULL;
        ck_assert(kvs_learned_create(&w, KVS_LEARNED_RL, f.hp, 9) == KVS_OK);
        kvs_train_params tp = kvs_train_params_default();
        tp.steps = 4, tp.seed = 9, tp.ctx = 48, tp.horizon = 8;
        tp.n_budgets = 2, tp.budgets[0] = 0.2, tp.budgets[1] = 0.4;
        tp.val_windows = 2;
        val_log vl = {0, 0, 0, INFINITY};
        tp.validated = on_validated, tp.user = &vl;
        ck_assert_msg(kvs_learned_train(w, f.m, tok, n, &tp, NULL) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(vl.calls, 5); /* every step (steps / 10 = 0 -> 1) and after the last */
        ck_assert(vl.best_first);
        ck_assert(vl.best <= vl.first);
        float *p = kvs_learned_params(w, &np);
        if (run == 0) {
            w0 = malloc((size_t)np * sizeof *w0);
            memcpy(w0, p, (size_t)np * sizeof *w0);
        } else {
            ck_assert_msg(memcmp(w0, p, (size_t)np * sizeof *w0) == 0, "same seed, different weights");
        }
        kvs_learned_destroy(&w);
    }
    kvs_learned *w = NULL;
    ck_assert(kvs_learned_create(&w, KVS_LEARNED_RL, f.hp, 9) == KVS_OK);
    kvs_train_params tp = kvs_train_params_default();
    tp.ctx = 48, tp.horizon = 8;
    tp.rl_samples = 1;
    ck_assert_int_eq(kvs_learned_train(w, f.m, tok, n, &tp, NULL), KVS_ERR_INVALID_ARGUMENT);
    tp.rl_samples = 0, tp.n_budgets = 1, tp.budgets[0] = 1.5;
    ck_assert_int_eq(kvs_learned_train(w, f.m, tok, n, &tp, NULL), KVS_ERR_INVALID_ARGUMENT);
    tp.n_budgets = KVS_TRAIN_MAX_BUDGETS + 1;
    ck_assert_int_eq(kvs_learned_train(w, f.m, tok, n, &tp, NULL), KVS_ERR_INVALID_ARGUMENT);
    tp.n_budgets = 0, tp.val_windows = -1;
    ck_assert_int_eq(kvs_learned_train(w, f.m, tok, n, &tp, NULL), KVS_ERR_INVALID_ARGUMENT);
    kvs_learned_destroy(&w);
    free(w0), free(tok);
    fx_close(&f);
}
END_TEST

/* Greedy decode of n tokens after a prompt with a policy; returns the tokens. */
static void decode(fx *f, kvs_policy *pol, double budget, int32_t *out, int64_t n, int64_t *peak_bytes) {
    int32_t prompt[6] = {1, 403, 407, 261, 378, 426};
    kvs_ar_params ap = kvs_ar_params_default();
    ap.max_new = n;
    ap.policy = pol;
    ap.budget = budget;
    kvs_cache_params cp = kvs_model_cache_params(f->m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_ar_capacity(f->m, 6, &ap);
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, f->dev, &cp) == KVS_OK, "%s", kvs_last_error());
    kvs_gen_stats st;
    memset(&st, 0, sizeof st);
    int64_t n_out = 0;
    ck_assert_msg(kvs_generate_ar(f->m, c, prompt, 6, &ap, NULL, NULL, out, &n_out, &st) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(n_out, n);
    if (peak_bytes) *peak_bytes = st.cache_bytes_peak;
    kvs_cache_destroy(&c);
}

START_TEST(test_policies_decode) {
    fx f;
    fx_open(&f);
    int64_t n = 120;
    int32_t ref[120], out[120];
    int64_t ref_peak = 0, peak = 0;
    decode(&f, NULL, 1.0, ref, n, &ref_peak);
    for (int k = 0; k < 3; k++) {
        kvs_learned *w = NULL;
        train_once(&f, (kvs_learned_kind)k, 3, 2, &w);
        kvs_policy *pol = NULL;
        ck_assert(kvs_learned_policy(&pol, w, -INFINITY, 0.0f, 64) == KVS_OK);
        ck_assert_str_eq(kvs_policy_name(pol), kvs_learned_kind_name((kvs_learned_kind)k));
        decode(&f, pol, 1.0, out, n, NULL);
        ck_assert_msg(memcmp(ref, out, sizeof ref) == 0, "%s: budget 1.0 differs from the full cache", kvs_policy_name(pol));
        decode(&f, pol, 0.25, out, n, &peak);
        ck_assert_msg(peak < ref_peak / 2, "%s: peak %lld vs full %lld", kvs_policy_name(pol), (long long)peak, (long long)ref_peak);
        for (int64_t i = 0; i < n; i++) ck_assert(out[i] >= 0 && out[i] < f.hp->vocab);
        kvs_policy_destroy(&pol);
        kvs_learned_destroy(&w);
    }
    fx_close(&f);
}
END_TEST


/* ---- threshold and floor modes: hand-checked keep-sets ---------------------------------------- */

/* Retention weights whose score depends only on the age: W1 = b1 = W2 = 0, so log beta of (l, h) is
 * logsigmoid(b2[l][h]) = -lambda[l][h] for every token, and with the projection (a, c) = (1, 0) a
 * row of age t - pos scores -lambda * age. With threshold -TAU a row goes exactly when
 * age > TAU / lambda; lambda = TAU / (m + 0.5) puts that cut half-way between ages m and m + 1. */
#define THR_TAU 10.0
static int thr_m(int l, int h) { return (3 * l + 5 * h) % 11; } /* rows of age 0..m pass */

static kvs_learned *age_only_retention(const kvs_model_hparams *hp) {
    kvs_learned *w = NULL;
    ck_assert(kvs_learned_create(&w, KVS_LEARNED_RETENTION, hp, 1) == KVS_OK);
    int64_t n = 0;
    float *p = kvs_learned_params(w, &n);
    int L = hp->n_layers, H = hp->n_kv_heads, dim = hp->dim;
    int64_t block = (n - 2) / L, G = (block - H) / (dim + 1 + H); /* W1 [G][dim], b1 [G], W2 [H][G], b2 [H] */
    ck_assert_int_eq(L * (G * dim + G + H * G + H) + 2, n);
    memset(p, 0, (size_t)n * sizeof *p);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            double lam = THR_TAU / (thr_m(l, h) + 0.5);
            /* logsigmoid(z) = -lam  <=>  z = -lam - log(1 - e^-lam) */
            p[l * block + G * dim + G + H * G + h] = (float)(-lam - log(1.0 - exp(-lam)));
        }
    p[n - 2] = 1.0f, p[n - 1] = 0.0f;
    return w;
}

typedef struct thr_case {
    kvs_budget_scope scope;
    float alpha;
    int64_t budget, buffer;
} thr_case;

/* The model of the evictor for these weights: per (l, h) the cache holds a contiguous run of the
 * newest positions (every score falls with age), so a length per (l, h) is the whole state. */
static void thr_expect(const thr_case *tc, int L, int H, int64_t cap, int64_t *len) {
    int64_t B = tc->budget, tot = 0, trig = 0;
    int P0 = 0, P1 = L;
    for (int pool = 0; pool < (tc->scope == KVS_SCOPE_GLOBAL ? 1 : L); pool++) {
        if (tc->scope != KVS_SCOPE_GLOBAL) P0 = pool, P1 = pool + 1;
        tot = 0, trig = 0;
        int full = 0;
        for (int l = P0; l < P1; l++)
            for (int h = 0; h < H; h++) {
                int64_t n = len[l * H + h];
                if (tc->scope == KVS_SCOPE_HEAD) tot = n > tot ? n : tot;
                else tot += n;
                if (n >= cap) full = 1;
            }
        trig = (tc->scope == KVS_SCOPE_HEAD ? 1 : (int64_t)(P1 - P0) * H) * (B + tc->buffer);
        if (tot < trig && !full) continue;
        int64_t fl = (int64_t)floor((double)tc->alpha * (double)B);
        int64_t sum = 0;
        for (int l = P0; l < P1; l++)
            for (int h = 0; h < H; h++) {
                int64_t *n = &len[l * H + h], keep = thr_m(l, h) + 1; /* ages 0..m pass the threshold */
                if (keep < fl) keep = fl;                             /* the floor's newest rows stay */
                if (tc->scope == KVS_SCOPE_HEAD && keep > B) keep = B; /* the budget caps a head */
                if (keep < *n) *n = keep;
                sum += *n;
            }
        /* pooled scopes: the cases below keep the survivors within the pool's budget */
        if (tc->scope != KVS_SCOPE_HEAD) ck_assert_int_le(sum, (int64_t)(P1 - P0) * H * B);
    }
}

START_TEST(test_threshold_keep_set) {
    fx f;
    fx_open(&f);
    int L = f.hp->n_layers, H = f.hp->n_kv_heads;
    kvs_learned *w = age_only_retention(f.hp);
    const thr_case cases[] = {
        {KVS_SCOPE_HEAD, 0.0f, 6, 3},   /* threshold, and the budget caps heads with m + 1 > 6 */
        {KVS_SCOPE_GLOBAL, 0.0f, 8, 3}, /* threshold alone: a head may keep more than 8 */
        {KVS_SCOPE_LAYER, 0.5f, 8, 2},  /* floor 4 rows per head overrides the threshold */
    };
    int64_t T = 70;
    int32_t *tok = make_tokens(T, f.hp->vocab);
    tok[0] = 1;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const thr_case *tc = &cases[ci];
        kvs_policy *pol = NULL;
        ck_assert_msg(kvs_learned_policy(&pol, w, (float)-THR_TAU, tc->alpha, 0) == KVS_OK, "%s", kvs_last_error());
        kvs_evict_params ep = kvs_evict_params_default();
        ep.policy = pol;
        ep.budget = (double)tc->budget;
        ep.scope = tc->scope;
        ep.buffer = tc->buffer;
        kvs_evictor *ev = NULL;
        ck_assert_msg(kvs_evictor_create(&ev, &ep, f.hp, T) == KVS_OK, "%s", kvs_last_error());
        kvs_cache_params cp = kvs_model_cache_params(f.m);
        cp.mode = KVS_CACHE_APPEND;
        cp.capacity = kvs_evictor_capacity(ev, 1);
        kvs_kv_cache *c = NULL;
        ck_assert_msg(kvs_cache_create(&c, f.dev, &cp) == KVS_OK, "%s", kvs_last_error());
        ck_assert(kvs_evictor_begin(ev, c) == KVS_OK);
        kvs_layer_plan *lp = calloc((size_t)L, sizeof *lp);
        int64_t *len = calloc((size_t)(L * H), sizeof *len);
        int below_budget = 0, over_budget = 0;
        for (int64_t t = 0; t < T; t++) {
            int32_t zero = 0, pos = (int32_t)t;
            kvs_step_plan plan = {.tokens = tok + t, .n_tokens = 1, .positions = &pos, .logit_rows = &zero, .n_logit_rows = 1};
            int any = 0;
            ck_assert(kvs_evictor_plan(ev, 1, lp, &any) == KVS_OK);
            plan.layers = any ? lp : NULL;
            kvs_step_result res;
            ck_assert_msg(kvs_model_forward(f.m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
            ck_assert_msg(kvs_evictor_update(ev, c, &res) == KVS_OK, "%s", kvs_last_error());
            for (int i = 0; i < L * H; i++) len[i]++;
            thr_expect(tc, L, H, cp.capacity, len);
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++) {
                    int64_t n = kvs_cache_len(c, l, h);
                    const int32_t *ps = kvs_cache_positions(c, l, h);
                    ck_assert_msg(n == len[l * H + h], "case %zu step %lld layer %d head %d: %lld rows, expected %lld", ci,
                                  (long long)t, l, h, (long long)n, (long long)len[l * H + h]);
                    for (int64_t i = 0; i < n; i++)
                        ck_assert_msg(ps[i] == (int32_t)(t - n + 1 + i), "case %zu step %lld layer %d head %d: row %lld at %d",
                                      ci, (long long)t, l, h, (long long)i, ps[i]);
                    if (t == T - 1 && n < tc->budget) below_budget = 1;
                    if (t == T - 1 && n > tc->budget) over_budget = 1;
                }
        }
        kvs_evict_stats st = kvs_evictor_get_stats(ev);
        ck_assert_int_gt(st.evictions, 2);
        ck_assert_msg(below_budget, "case %zu: the threshold never evicted below the budget", ci);
        if (tc->scope == KVS_SCOPE_GLOBAL) ck_assert_msg(over_budget, "global: no head kept more than its share");
        free(lp), free(len);
        kvs_cache_destroy(&c);
        kvs_evictor_destroy(&ev);
        kvs_policy_destroy(&pol);
    }
    /* refusals */
    kvs_policy *pol = NULL;
    ck_assert_int_eq(kvs_learned_policy(&pol, w, NAN, 0.0f, 0), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_learned_policy(&pol, w, INFINITY, 0.0f, 0), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_learned_policy(&pol, w, -1.0f, 1.5f, 0), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_learned_policy(&pol, w, -1.0f, -0.1f, 0), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(pol);
    free(tok);
    kvs_learned_destroy(&w);
    fx_close(&f);
}
END_TEST

/* The device count runs in a child process: OpenCL/Vulkan state must never be created in the
 * parent before Check forks (a forked child then waits forever on the runtime's locks). */
int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_learned", &g_params, "stories260K-f32.v3.gguf", g_model, sizeof g_model);
    if (setup >= 0) return setup;
    Suite *s = suite_create("learned");
    TCase *tc = tcase_create("learned");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_roundtrip_bit_exact);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_train_deterministic);
    tcase_add_test(tc, test_train_rl_selection);
    tcase_add_test(tc, test_policies_decode);
    tcase_add_test(tc, test_threshold_keep_set);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
