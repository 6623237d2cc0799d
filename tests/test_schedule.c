/* Cache schedules as pure host logic: the plans they produce for synthetic decoding states, and how
 * they read synthetic statistics (no model, no device except the CPU one WaveFilter's DWT uses).
 *  - prefix / dual: full first step of a block, then rows [block start, n) / [block start, end);
 *  - delayed (dKV-Cache decode): full at steps 0, 1 and multiples of reload; else masked + just decoded;
 *  - elastic: step 0 full with window statistics, tracked token = most attended unmasked key,
 *    reuse plans Q = tracked + decoded + window, the drift hook switches to all rows on a changed
 *    attention row and keeps reusing on an unchanged one; block_refresh makes a later block's first
 *    step full;
 *  - wavefilter: keep-sets of the budget's size with sinks, block, recent rows, a sharp peak and a
 *    hot region; budget 1 keeps everything. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/kvsieve.h"
#include "kvsieve/schedule.h"
#include "probe.h"

#define N 40
#define L 3
#define NH 2
#define NKV 1

/* sequence: prompt [0, 8), block 0 = [8, 24), block 1 = [24, 40) */
typedef struct state {
    int32_t tokens[N];
    uint8_t masked[N];
    int32_t dec[N];
    kvs_dlm_view v;
} state;

static void state_init(state *s, int step, int step_in_block, int block) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < N; i++) {
        s->masked[i] = i >= 8;
        s->tokens[i] = i >= 8 ? 0 : 10 + i;
    }
    s->v = (kvs_dlm_view){.tokens = s->tokens, .n_tokens = N, .prompt_len = 8, .mask_id = 0, .masked = s->masked,
                          .block_start = 8 + 16 * block, .block_end = 24 + 16 * block, .block = block,
                          .step_in_block = step_in_block, .step = step, .decoded_prev = s->dec, .n_decoded_prev = 0,
                          .n_layers = L, .n_heads = NH, .n_kv_heads = NKV};
}

static void unmask(state *s, int pos) {
    s->masked[pos] = 0;
    s->tokens[pos] = 7;
}

START_TEST(test_prefix_dual) {
    for (int dual = 0; dual < 2; dual++) {
        kvs_dlm_schedule *sc = NULL;
        ck_assert(dual ? kvs_dlm_schedule_dual(&sc) == KVS_OK : kvs_dlm_schedule_prefix(&sc) == KVS_OK);
        ck_assert_str_eq(kvs_dlm_schedule_name(sc), dual ? "dual" : "prefix");
        ck_assert(sc->ops->begin(sc->self, N, L) == KVS_OK);
        state s;
        state_init(&s, 0, 0, 0);
        kvs_dlm_step st;
        ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
        ck_assert_ptr_null(st.plan.layers); /* block start: every row */
        ck_assert_int_eq(st.plan.n_logit_rows, 16);
        ck_assert_int_eq(st.plan.logit_rows[0], 8);
        unmask(&s, 9);
        s.v.step = 1;
        s.v.step_in_block = 1;
        ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
        ck_assert_ptr_nonnull(st.plan.layers);
        int64_t want = dual ? 16 : N - 8;
        ck_assert_int_eq(st.plan.layers[0].n_rows, want);
        for (int64_t i = 0; i < want; i++) ck_assert_int_eq(st.plan.layers[0].rows[i], 8 + i);
        for (int l = 1; l < L; l++) ck_assert_ptr_null(st.plan.layers[l].rows); /* same rows */
        ck_assert_int_eq(st.plan.n_logit_rows, 15);
        kvs_dlm_schedule_stats ss;
        ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
        ck_assert_int_eq(ss.steps, 2);
        ck_assert_int_eq(ss.full_steps, 1);
        ck_assert_int_eq(ss.rows[L - 1], N + want);
        kvs_dlm_schedule_destroy(&sc);
        ck_assert_ptr_null(sc);
    }
}
END_TEST

/* kvs_dlm_schedule_stats is sized by the model (once capped at 128 layers by fixed arrays). */
START_TEST(test_stats_many_layers) {
    enum { BIG = 300 };
    kvs_dlm_schedule *sc = NULL;
    ck_assert(kvs_dlm_schedule_none(&sc) == KVS_OK);
    kvs_dlm_schedule_stats ss;
    ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
    ck_assert_int_eq(ss.n_layers, 0);
    ck_assert_ptr_null(ss.rows);
    ck_assert(sc->ops->begin(sc->self, N, BIG) == KVS_OK);
    state s;
    state_init(&s, 0, 0, 0);
    s.v.n_layers = BIG;
    kvs_dlm_step st;
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
    ck_assert_int_eq(ss.n_layers, BIG);
    ck_assert_int_eq(ss.steps, 2);
    for (int l = 0; l < BIG; l++) {
        ck_assert_int_eq(ss.rows[l], 2 * N);
        ck_assert_int_eq(ss.refreshes[l], 2);
    }
    /* a new decode with fewer layers starts from zero */
    ck_assert(sc->ops->begin(sc->self, N, 2) == KVS_OK);
    ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
    ck_assert_int_eq(ss.n_layers, 2);
    ck_assert_int_eq(ss.rows[1], 0);
    ck_assert_int_eq(ss.refreshes[0], 0);
    kvs_dlm_schedule_destroy(&sc);
    /* the block schedules too */
    ck_assert(kvs_dlm_schedule_prefix(&sc) == KVS_OK);
    ck_assert(sc->ops->begin(sc->self, N, BIG) == KVS_OK);
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
    ck_assert_int_eq(ss.n_layers, BIG);
    ck_assert_int_eq(ss.rows[BIG - 1], N);
    kvs_dlm_schedule_destroy(&sc);
}
END_TEST

START_TEST(test_delayed) {
    kvs_dlm_schedule *sc = NULL;
    ck_assert_int_eq(kvs_dlm_schedule_delayed(&sc, 0), KVS_ERR_INVALID_ARGUMENT);
    ck_assert(kvs_dlm_schedule_delayed(&sc, 4) == KVS_OK);
    state s;
    state_init(&s, 0, 0, 0);
    kvs_dlm_step st;
    for (int i = 0; i < 6; i++) {
        s.v.step = i;
        s.v.step_in_block = i;
        if (i > 0) {
            /* one token per step, decoded at position 8 + i - 1 */
            unmask(&s, 8 + i - 1);
            s.dec[0] = 8 + i - 1;
            s.v.n_decoded_prev = 1;
        }
        ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
        int full = i == 0 || i == 1 || i == 4;
        ck_assert_msg(full == (st.plan.layers == NULL), "step %d full %d", i, full);
        if (!full) {
            /* masked rows (8 + i .. N) plus the row decoded by the previous step */
            const kvs_layer_plan *lp = &st.plan.layers[0];
            ck_assert_int_eq(lp->n_rows, N - (8 + i) + 1);
            ck_assert_int_eq(lp->rows[0], 8 + i - 1);
            ck_assert_int_eq(lp->rows[1], 8 + i);
            ck_assert_int_eq(lp->rows[lp->n_rows - 1], N - 1);
        }
    }
    kvs_dlm_schedule_destroy(&sc);
}
END_TEST

/* A synthetic step result for elastic: key mass [NKV][N] peaked at `hot`, probs of `n_probe` rows
 * [NH][N] filled with `row`. */
typedef struct fake_result {
    float mass[L][NKV * N];
    float probs[L][N * NH * N];
    kvs_layer_stats ls[L];
    kvs_step_result r;
} fake_result;

static void fake_fill(fake_result *f, int hot, int n_probe, const float *row) {
    memset(f, 0, sizeof *f);
    for (int l = 0; l < L; l++) {
        for (int j = 0; j < N; j++) f->mass[l][j] = j == hot ? 5.0f : 0.1f + 0.001f * (float)j;
        for (int r = 0; r < n_probe; r++) memcpy(f->probs[l] + r * NH * N, row, sizeof(float) * NH * N);
        f->ls[l] = (kvs_layer_stats){.n_kv = N, .key_mass = f->mass[l], .probs = f->probs[l]};
    }
    f->r.layers = f->ls;
}

START_TEST(test_elastic) {
    kvs_dlm_schedule *sc = NULL;
    kvs_elastic_params ep = kvs_elastic_params_default();
    ck_assert(ep.gamma == 0.9f && ep.window == 16 && ep.track == 1);
    ep.window = 4;
    ep.gamma = 1.5f;
    ck_assert_int_eq(kvs_dlm_schedule_elastic(&sc, &ep), KVS_ERR_INVALID_ARGUMENT);
    ep.gamma = 0.9f;
    ck_assert(kvs_dlm_schedule_elastic(&sc, &ep) == KVS_OK);
    ck_assert_uint_eq(kvs_dlm_schedule_cache_flags(sc), KVS_CACHE_KEEP_X);
    ck_assert(sc->ops->begin(sc->self, N, L) == KVS_OK);
    state s;
    state_init(&s, 0, 0, 0);
    kvs_dlm_step st;
    /* step 0: every row, key mass over the window's rows, probes of the unmasked rows */
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    ck_assert_int_eq(st.n_candidates, 4);
    ck_assert_int_eq(st.candidates[0], 8);
    ck_assert_int_eq(st.candidates[3], 11);
    ck_assert_ptr_nonnull(st.plan.layers);
    ck_assert_int_eq(st.plan.layers[0].n_rows, N);
    ck_assert_int_eq(st.plan.layers[0].n_stat_rows, 4);
    ck_assert_int_eq(st.plan.layers[0].stat_rows[0], 8);
    ck_assert_int_eq(st.plan.layers[0].n_probe, 8);
    float row[NH * N];
    for (int j = 0; j < NH * N; j++) row[j] = (float)(j % 7) + 1.0f;
    static fake_result f;
    /* hot key 12 is masked: excluded; the tracked token is the hottest unmasked key, 7 */
    fake_fill(&f, 12, 8, row);
    ck_assert(sc->ops->feedback(sc->self, &s.v, &f.r) == KVS_OK);
    /* step 1: positions 8, 9 decoded */
    unmask(&s, 8);
    unmask(&s, 9);
    s.dec[0] = 8;
    s.dec[1] = 9;
    s.v.n_decoded_prev = 2;
    s.v.step = 1;
    s.v.step_in_block = 1;
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    const kvs_layer_plan *lp = st.plan.layers;
    /* Q = {7} U {8, 9} U window {10, 11, 12, 13} */
    int32_t wantq[] = {7, 8, 9, 10, 11, 12, 13};
    ck_assert_int_eq(lp[0].n_rows, 7);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(lp[0].rows[i], wantq[i]);
    ck_assert_int_eq(lp[0].n_stat_rows, 4);
    ck_assert_int_eq(lp[0].stat_rows[0], 3); /* index of 10 within Q */
    ck_assert_int_eq(lp[0].n_probe, 3);      /* 7, 8, 9: queried and unmasked */
    ck_assert_int_eq(lp[0].probe_rows[0], 0);
    ck_assert_ptr_nonnull(lp[0].hook);
    /* unchanged attention row of the tracked token: no drift, keep reusing */
    fake_fill(&f, 7, 3, row);
    ck_assert_ptr_null(lp[0].hook(lp[0].hook_user, 0, &f.ls[0]));
    /* a changed row at layer 1 (cosine well below 0.9): layers 2.. recompute every row */
    float other[NH * N];
    for (int j = 0; j < NH * N; j++) other[j] = (j % 7) == 3 ? 9.0f : 0.01f;
    fake_result *g = malloc(sizeof *g);
    fake_fill(g, 7, 3, other);
    const kvs_layer_plan *rest = lp[1].hook(lp[1].hook_user, 1, &g->ls[1]);
    ck_assert_ptr_nonnull(rest);
    ck_assert_int_eq(rest[0].n_rows, N);
    ck_assert_int_eq(rest[0].rows[N - 1], N - 1);
    ck_assert_int_eq(rest[0].n_stat_rows, 4);
    ck_assert_int_eq(rest[0].stat_rows[0], 10);
    ck_assert_ptr_null(rest[0].hook);
    ck_assert(sc->ops->feedback(sc->self, &s.v, &f.r) == KVS_OK);
    kvs_dlm_schedule_stats ss;
    ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
    ck_assert_int_eq(ss.full_steps, 1);
    ck_assert_int_eq(ss.rows[0], N + 7);
    ck_assert_int_eq(ss.rows[2], N + N);
    ck_assert_int_eq(ss.refreshes[1], 1);
    ck_assert_int_eq(ss.refreshes[2], 2);
    free(g);
    /* gamma 1: every step is a full step without statistics */
    kvs_dlm_schedule_destroy(&sc);
    ep.gamma = 1.0f;
    ck_assert(kvs_dlm_schedule_elastic(&sc, &ep) == KVS_OK);
    ck_assert(sc->ops->begin(sc->self, N, L) == KVS_OK);
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    ck_assert_ptr_null(st.plan.layers);
    kvs_dlm_schedule_destroy(&sc);
    /* by name */
    ck_assert(kvs_dlm_schedule_from_name(&sc, "delayed", 2, NULL) == KVS_OK);
    ck_assert_str_eq(kvs_dlm_schedule_name(sc), "delayed");
    kvs_dlm_schedule_destroy(&sc);
    ck_assert_int_eq(kvs_dlm_schedule_from_name(&sc, "bogus", 1, NULL), KVS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* block_refresh: the first step of a later block runs every row at every layer (1, the default) or
 * reuses like any other step (0, the reference's loop without blocks). */
START_TEST(test_elastic_block_refresh) {
    kvs_elastic_params ep = kvs_elastic_params_default();
    ck_assert_int_eq(ep.block_refresh, 1);
    kvs_dlm_schedule *sc = NULL;
    ep.block_refresh = 2;
    ck_assert_int_eq(kvs_dlm_schedule_elastic(&sc, &ep), KVS_ERR_INVALID_ARGUMENT);
    float row[NH * N];
    for (int j = 0; j < NH * N; j++) row[j] = (float)(j % 5) + 1.0f;
    static fake_result f;
    for (int br = 0; br < 2; br++) {
        ep.block_refresh = br;
        ep.window = 4;
        ck_assert(kvs_dlm_schedule_elastic(&sc, &ep) == KVS_OK);
        ck_assert(sc->ops->begin(sc->self, N, L) == KVS_OK);
        state s;
        state_init(&s, 0, 0, 0);
        kvs_dlm_step st;
        ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK); /* step 0: full */
        fake_fill(&f, 7, 8, row);
        ck_assert(sc->ops->feedback(sc->self, &s.v, &f.r) == KVS_OK);
        /* block 0 decoded; block 1's first step, position 23 decoded by the previous step */
        for (int i = 8; i < 24; i++) unmask(&s, i);
        s.dec[0] = 23;
        s.v.n_decoded_prev = 1;
        s.v.step = 16;
        s.v.step_in_block = 0;
        s.v.block = 1;
        s.v.block_start = 24;
        s.v.block_end = 40;
        ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
        ck_assert_ptr_nonnull(st.plan.layers);
        ck_assert_int_eq(st.n_candidates, 4);
        ck_assert_int_eq(st.candidates[0], 24);
        for (int l = 0; l < L; l++) {
            if (br) {
                ck_assert_int_eq(st.plan.layers[l].n_rows, N);
                ck_assert_ptr_null(st.plan.layers[l].hook);
                /* key mass exists (step 0's feedback): the likely set, not every unmasked row:
                 * tracked {7} U decoded {23} U the 4 * track rows of most mass */
                ck_assert_int_eq(st.plan.layers[l].n_probe, 6);
                int has7 = 0, has23 = 0;
                for (int64_t i = 0; i < st.plan.layers[l].n_probe; i++) {
                    has7 |= st.plan.layers[l].probe_rows[i] == 7;
                    has23 |= st.plan.layers[l].probe_rows[i] == 23;
                }
                ck_assert(has7 && has23);
            } else {
                /* Q = tracked {7} U decoded {23} U window {24..27} */
                ck_assert_int_eq(st.plan.layers[l].n_rows, 6);
                ck_assert_ptr_nonnull(st.plan.layers[l].hook);
            }
        }
        fake_fill(&f, 7, br ? 24 : 2, row);
        ck_assert(sc->ops->feedback(sc->self, &s.v, &f.r) == KVS_OK);
        kvs_dlm_schedule_stats ss;
        ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
        ck_assert_int_eq(ss.full_steps, br ? 2 : 1);
        ck_assert_int_eq(ss.rows[0], br ? 2 * N : N + 6);
        kvs_dlm_schedule_destroy(&sc);
    }
}
END_TEST

START_TEST(test_wavefilter_keep) {
    /* base none; signal: a sharp peak at 30 (in block 1's future) and a hot region [0, 8) */
    kvs_dlm_schedule *base = NULL, *sc = NULL;
    ck_assert(kvs_dlm_schedule_none(&base) == KVS_OK);
    kvs_wavefilter_params wp = kvs_wavefilter_params_default();
    ck_assert(wp.levels == 3 && wp.rho == 0.5f && wp.family == KVS_WAVELET_HAAR);
    wp.budget = 0.0f;
    ck_assert_int_eq(kvs_dlm_schedule_wavefilter(&sc, base, &wp), KVS_ERR_INVALID_ARGUMENT); /* base freed */
    ck_assert(kvs_dlm_schedule_none(&base) == KVS_OK);
    wp.budget = 0.8f;
    wp.n_sink = 2;
    wp.n_recent = 2;
    ck_assert(kvs_dlm_schedule_wavefilter(&sc, base, &wp) == KVS_OK);
    ck_assert_str_eq(kvs_dlm_schedule_name(sc), "none+wavefilter");
    ck_assert(sc->ops->begin(sc->self, N, L) == KVS_OK);
    state s;
    state_init(&s, 0, 0, 1); /* block [24, 40) */
    for (int i = 8; i < 24; i++) unmask(&s, i);
    kvs_dlm_step st;
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    /* first step of the block: dense, key mass from the block's rows */
    ck_assert_ptr_nonnull(st.plan.layers);
    ck_assert_ptr_null(st.plan.layers[0].keep);
    ck_assert_int_eq(st.plan.layers[0].n_stat_rows, 16);
    ck_assert_int_eq(st.plan.layers[0].stat_rows[0], 24);
    static fake_result f;
    memset(&f, 0, sizeof f);
    for (int l = 0; l < L; l++) {
        for (int j = 0; j < N; j++) f.mass[l][j] = 0.01f * (float)((j * 7) % 5);
        for (int j = 8; j < 16; j++) f.mass[l][j] = 1.0f; /* a hot region */
        f.mass[l][19] = 3.0f;                               /* a sharp peak */
        f.ls[l] = (kvs_layer_stats){.n_kv = N, .key_mass = f.mass[l]};
    }
    f.r.layers = f.ls;
    ck_assert_msg(sc->ops->feedback(sc->self, &s.v, &f.r) == KVS_OK, "%s", kvs_last_error());
    s.v.step = 1;
    s.v.step_in_block = 1;
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    for (int l = 0; l < L; l++) {
        const kvs_layer_plan *lp = &st.plan.layers[l];
        ck_assert_ptr_nonnull(lp->keep);
        ck_assert_int_eq(lp->n_keep[0], 32); /* ceil(0.8 * 40) */
        uint8_t in[N] = {0};
        for (int64_t i = 0; i < lp->n_keep[0]; i++) {
            if (i) ck_assert_int_gt(lp->keep[i], lp->keep[i - 1]);
            in[lp->keep[i]] = 1;
        }
        for (int j = 24; j < 40; j++) ck_assert_msg(in[j], "block row %d kept", j);
        ck_assert(in[0] && in[1] && in[22] && in[23]); /* sinks, recent */
        ck_assert_msg(in[19], "peak kept");
        int hot = 0;
        for (int j = 8; j < 16; j++) hot += in[j];
        ck_assert_msg(hot >= 4, "hot region kept (%d of 8)", hot);
    }
    kvs_dlm_schedule_destroy(&sc);
    /* budget 1: every row kept */
    ck_assert(kvs_dlm_schedule_none(&base) == KVS_OK);
    wp.budget = 1.0f;
    ck_assert(kvs_dlm_schedule_wavefilter(&sc, base, &wp) == KVS_OK);
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    ck_assert(sc->ops->feedback(sc->self, &s.v, &f.r) == KVS_OK);
    s.v.step = 2;
    s.v.step_in_block = 2;
    ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
    ck_assert_int_eq(st.plan.layers[1].n_keep[0], N);
    kvs_dlm_schedule_destroy(&sc);
}
END_TEST

/* d2Cache, by hand (current_k 2, rollout_p 0.1, sigma 10). Step 0: every row, logits of the 32 masked
 * positions, candidates the block's 16. Its feedback: confidence .98 at position 20 (logit 5 vs
 * three 0s), .95 at 12 (logit 4), .25 elsewhere; every row of every layer and head puts .9 of its
 * attention on row 3 and .0025 on each of the 40 rows. Step 1 (position 20 decoded):
 *  masked by prior: the search ends at the block boundary holding 2 masked (position 23); the block
 *  bias is common to the block, so conf x density ranks: 12 (.95 x .355) then 8 (.25 x .499, the
 *  densest: the canvas's left counts as decoded) above any other .25 position;
 *  decoded: 20; rollout: row 3 holds about half the importance (> .1): the nucleus is row 3 alone.
 *  Rows {3 8 12 20}; logits and candidates {8 12}. With inflate_w 4 the gap 8..12 fills: {3 8 9 10 11
 *  12 20}, logits {8 9 10 11 12}. rollout_p 1 with current_k 0: the no-cache plan. */
START_TEST(test_d2cache_plan) {
    for (int inflate = 0; inflate < 3; inflate++) {
        kvs_dlm_schedule *sc = NULL;
        kvs_d2cache_params dp = kvs_d2cache_params_default();
        dp.current_k = 2;
        if (inflate == 1) dp.inflate_w = 4;
        if (inflate == 2) {
            dp.rollout_p = 1.0f;
            dp.current_k = 0;
        }
        ck_assert(kvs_dlm_schedule_d2cache(&sc, &dp) == KVS_OK);
        ck_assert_str_eq(kvs_dlm_schedule_name(sc), "d2cache");
        ck_assert(sc->ops->begin(sc->self, N, L) == KVS_OK);
        state s;
        state_init(&s, 0, 0, 0);
        kvs_dlm_step st;
        ck_assert_msg(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK, "%s", kvs_last_error());
        if (inflate == 2) { /* the anchor: no layers, the block's masked logits, no candidates list */
            ck_assert_ptr_null(st.plan.layers);
            ck_assert_int_eq(st.plan.n_logit_rows, 16);
            ck_assert_ptr_null(st.candidates);
            kvs_dlm_schedule_destroy(&sc);
            continue;
        }
        ck_assert_ptr_nonnull(st.plan.layers);
        ck_assert_int_eq(st.plan.layers[0].n_rows, N);
        ck_assert_int_eq(st.plan.n_logit_rows, 32);
        ck_assert_int_eq(st.n_candidates, 16);
        ck_assert_int_eq(st.plan.layers[2].n_probe, N);
        static float logits[32 * 4], probs[L][N * NH * N];
        static kvs_layer_stats ls[L];
        memset(logits, 0, sizeof logits);
        logits[(20 - 8) * 4] = 5.0f;
        logits[(12 - 8) * 4] = 4.0f;
        for (int l = 0; l < L; l++) {
            for (int i = 0; i < N * NH; i++)
                for (int j = 0; j < N; j++) probs[l][i * N + j] = 0.0025f + (j == 3 ? 0.9f : 0.0f);
            ls[l] = (kvs_layer_stats){.n_kv = N, .probs = probs[l]};
        }
        kvs_step_result r = {.logits = logits, .n_logit_rows = 32, .vocab = 4, .layers = ls};
        ck_assert_msg(sc->ops->feedback(sc->self, &s.v, &r) == KVS_OK, "%s", kvs_last_error());
        state_init(&s, 1, 1, 0);
        unmask(&s, 20);
        s.dec[0] = 20;
        s.v.n_decoded_prev = 1;
        ck_assert_msg(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK, "%s", kvs_last_error());
        const int32_t want0[4] = {3, 8, 12, 20}, want1[7] = {3, 8, 9, 10, 11, 12, 20};
        const int32_t *want = inflate ? want1 : want0;
        int64_t nw = inflate ? 7 : 4, nl = inflate ? 5 : 2;
        const kvs_layer_plan *lp = &st.plan.layers[0];
        char got[256] = "";
        for (int64_t i = 0; i < lp->n_rows; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", lp->rows[i]);
        ck_assert_msg(lp->n_rows == nw && memcmp(lp->rows, want, (size_t)nw * 4) == 0, "inflate %d: rows [%s]", inflate, got);
        ck_assert_int_eq(st.plan.n_logit_rows, nl);
        ck_assert_int_eq(st.n_candidates, nl);
        ck_assert_int_eq(st.plan.logit_rows[0], 8);
        ck_assert_int_eq(st.plan.logit_rows[nl - 1], 12);
        ck_assert_ptr_null(st.plan.layers[1].rows); /* the same rows at every layer */
        ck_assert_int_eq(st.plan.layers[1].n_probe, nw);
        /* this step's feedback: nw computed rows */
        r.n_logit_rows = nl;
        ck_assert_msg(sc->ops->feedback(sc->self, &s.v, &r) == KVS_OK, "%s", kvs_last_error());
        kvs_dlm_schedule_stats ss;
        ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
        ck_assert_int_eq(ss.full_steps, 1);
        ck_assert_int_eq(ss.rows[0], N + nw);
        kvs_dlm_schedule_destroy(&sc);
    }
}
END_TEST

/* PSA-style keep-sets (keep_mass), on the device of --backend (g_mass_dev; default: the schedule's own
 * CPU device). N 40, block [24, 40), 2 sinks, 2 recent: always kept {0 1 22 23 24..39} (20 rows).
 * Signal: row 19 = 6, rows 8..15 = 1, row 5 = .5, row 30 (block) = 100, the rest 0; the mass outside
 * the always-kept rows T = 14.5.
 *   keep_mass .4: 6 >= 5.8 -> + {19} (21 rows);
 *   keep_mass .9: 6 + 7 = 13 < 13.05, 6 + 8 = 14 -> + {19, 8..15} (29 rows);
 *   keep_mass 1: every row with mass -> + {5} too (30 rows; budget .8 caps at 32);
 *   keep_mass .9, budget .6 (24 rows: room for 4): + {19, 8, 9, 10} (ties by index). */
static kvs_device_params g_mass_params;
static int g_mass_backend; /* 1: --backend given: run the op on that device */

START_TEST(test_wavefilter_mass_keep) {
    static const struct {
        float keep_mass, budget;
        int n_extra;
        int extra[10];
    } cases[] = {{0.4f, 0.8f, 1, {19}},
                 {0.9f, 0.8f, 9, {8, 9, 10, 11, 12, 13, 14, 15, 19}},
                 {1.0f, 0.8f, 10, {5, 8, 9, 10, 11, 12, 13, 14, 15, 19}},
                 {0.9f, 0.6f, 4, {8, 9, 10, 19}}};
    kvs_device *dev = NULL;
    if (g_mass_backend) ck_assert_msg(kvs_device_open(&dev, &g_mass_params) == KVS_OK, "%s", kvs_last_error());
    static fake_result f;
    memset(&f, 0, sizeof f);
    for (int l = 0; l < L; l++) {
        for (int j = 8; j < 16; j++) f.mass[l][j] = 1.0f;
        f.mass[l][19] = 6.0f;
        f.mass[l][5] = 0.5f;
        f.mass[l][30] = 100.0f;
        f.ls[l] = (kvs_layer_stats){.n_kv = N, .key_mass = f.mass[l]};
    }
    f.r.layers = f.ls;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kvs_dlm_schedule *base = NULL, *sc = NULL;
        ck_assert(kvs_dlm_schedule_none(&base) == KVS_OK);
        kvs_wavefilter_params wp = kvs_wavefilter_params_default();
        ck_assert(wp.keep_mass == 0.0f && wp.dev == NULL);
        wp.budget = cases[c].budget;
        wp.n_sink = 2;
        wp.n_recent = 2;
        wp.keep_mass = cases[c].keep_mass;
        wp.dev = dev;
        ck_assert(kvs_dlm_schedule_wavefilter(&sc, base, &wp) == KVS_OK);
        ck_assert(sc->ops->begin(sc->self, N, L) == KVS_OK);
        state s;
        state_init(&s, 0, 0, 1); /* block [24, 40) */
        kvs_dlm_step st;
        ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
        ck_assert_msg(sc->ops->feedback(sc->self, &s.v, &f.r) == KVS_OK, "%s", kvs_last_error());
        s.v.step = 1;
        s.v.step_in_block = 1;
        ck_assert(sc->ops->plan(sc->self, &s.v, &st) == KVS_OK);
        uint8_t want[N] = {0};
        want[0] = want[1] = want[22] = want[23] = 1;
        for (int j = 24; j < 40; j++) want[j] = 1;
        for (int i = 0; i < cases[c].n_extra; i++) want[cases[c].extra[i]] = 1;
        for (int l = 0; l < L; l++) {
            const kvs_layer_plan *lp = &st.plan.layers[l];
            ck_assert_ptr_nonnull(lp->keep);
            ck_assert_msg(lp->n_keep[0] == 20 + cases[c].n_extra, "case %zu layer %d: %lld rows, want %d", c, l,
                          (long long)lp->n_keep[0], 20 + cases[c].n_extra);
            for (int64_t i = 0; i < lp->n_keep[0]; i++)
                ck_assert_msg(want[lp->keep[i]], "case %zu layer %d: row %d kept", c, l, lp->keep[i]);
        }
        kvs_dlm_schedule_destroy(&sc);
    }
    /* refusal */
    kvs_dlm_schedule *base = NULL, *sc = NULL;
    ck_assert(kvs_dlm_schedule_none(&base) == KVS_OK);
    kvs_wavefilter_params wp = kvs_wavefilter_params_default();
    wp.keep_mass = 1.5f;
    ck_assert_int_eq(kvs_dlm_schedule_wavefilter(&sc, base, &wp), KVS_ERR_INVALID_ARGUMENT);
    kvs_device_destroy(&dev);
}
END_TEST

int main(int argc, char **argv) {
    if (argc > 1) { /* --backend B: the device-op keep-sets alone, on B */
        int setup = kvs_test_setup(argc, argv, "test_schedule", &g_mass_params, NULL, NULL, 0);
        if (setup >= 0) return setup;
        g_mass_backend = 1;
        Suite *s = suite_create("schedule-mass");
        TCase *tc = tcase_create("mass");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_wavefilter_mass_keep);
        suite_add_tcase(s, tc);
        return kvs_test_run(s);
    }
    Suite *s = suite_create("schedule");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_prefix_dual);
    tcase_add_test(tc, test_delayed);
    tcase_add_test(tc, test_stats_many_layers);
    tcase_add_test(tc, test_elastic);
    tcase_add_test(tc, test_elastic_block_refresh);
    tcase_add_test(tc, test_wavefilter_keep);
    tcase_add_test(tc, test_wavefilter_mass_keep);
    tcase_add_test(tc, test_d2cache_plan);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
