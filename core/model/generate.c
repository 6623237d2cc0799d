/* Generation loops: autoregressive sampling and LLaDA-style masked diffusion. See generate.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_internal.h"
#include "kvsieve/generate.h"
#include "kvsieve/schedule.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- sampling (llama2.c run.c sampler: xorshift RNG, greedy / temperature / top-p) ------------ */

static uint32_t rng_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

static float rng_f32(uint64_t *state) { return (float)(rng_u32(state) >> 8) / 16777216.0f; }

static int32_t argmax_f32(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

typedef struct prob_idx {
    float p;
    int32_t i;
} prob_idx;

static int cmp_prob_desc(const void *a, const void *b) {
    const prob_idx *x = a, *y = b;
    if (x->p > y->p) return -1;
    if (x->p < y->p) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Samples from logits[n] (modified in place). probs: scratch of n prob_idx. */
static int32_t sample(float *logits, int64_t n, const kvs_ar_params *p, uint64_t *rng, prob_idx *scratch) {
    if (p->temperature <= 0.0f) return argmax_f32(logits, n);
    float mx = logits[0];
    for (int64_t i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        logits[i] = expf((logits[i] - mx) / p->temperature);
        sum += logits[i];
    }
    for (int64_t i = 0; i < n; i++) logits[i] = (float)(logits[i] / sum);
    float coin = rng_f32(rng);
    if (p->top_p <= 0.0f || p->top_p >= 1.0f) {
        float cdf = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            cdf += logits[i];
            if (coin < cdf) return (int32_t)i;
        }
        return (int32_t)(n - 1);
    }
    /* top-p: keep the smallest set of most likely tokens whose mass exceeds top_p */
    for (int64_t i = 0; i < n; i++) scratch[i] = (prob_idx){logits[i], (int32_t)i};
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_prob_desc);
    float cum = 0.0f;
    int64_t last = n - 1;
    for (int64_t i = 0; i < n; i++) {
        cum += scratch[i].p;
        if (cum > p->top_p) {
            last = i;
            break;
        }
    }
    float r = coin * cum, cdf = 0.0f;
    for (int64_t i = 0; i <= last; i++) {
        cdf += scratch[i].p;
        if (r < cdf) return scratch[i].i;
    }
    return scratch[last].i;
}

kvs_ar_params kvs_ar_params_default(void) {
    kvs_ar_params p = {.max_new = 256, .temperature = 0.0f, .top_p = 1.0f, .seed = 42, .stop_at_bos = 1, .stop_at_eos = 1,
                       .policy = NULL, .budget = 1.0, .scope = KVS_SCOPE_HEAD, .evict_buffer = 0, .budget_tokens = 0};
    return p;
}

static void stats_finish(kvs_gen_stats *st, double t0, int64_t n_gen, const kvs_kv_cache *c) {
    st->seconds = now_s() - t0;
    st->tokens_per_s = st->seconds > 0 ? (double)n_gen / st->seconds : 0.0;
    st->compute_fraction = st->rows_baseline > 0 ? (double)st->rows_computed / (double)st->rows_baseline : 1.0;
    st->cache_bytes_allocated = kvs_cache_bytes_allocated(c);
}

static kvs_status ar_evictor(const kvs_model *m, int64_t n_prompt, const kvs_ar_params *p, kvs_evictor **out) {
    *out = NULL;
    if (!p->policy) return KVS_OK;
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = p->policy;
    ep.budget = p->budget;
    ep.scope = p->scope;
    ep.buffer = p->evict_buffer;
    ep.budget_tokens = p->budget_tokens;
    return kvs_evictor_create(out, &ep, kvs_model_get_hparams(m), n_prompt + p->max_new);
}

int64_t kvs_ar_capacity(const kvs_model *m, int64_t n_prompt, const kvs_ar_params *pp) {
    if (!m || n_prompt < 1) {
        kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_ar_capacity: NULL model or empty prompt");
        return -1;
    }
    kvs_ar_params p = pp ? *pp : kvs_ar_params_default();
    if (!p.policy) return n_prompt + p.max_new;
    kvs_evictor *ev = NULL;
    if (ar_evictor(m, n_prompt, &p, &ev) != KVS_OK) return -1;
    int64_t cap = kvs_evictor_capacity(ev, n_prompt);
    kvs_evictor_destroy(&ev);
    return cap;
}

/* One forward of the AR loop, with the evictor's statistics plan and its update (eviction) after. */
static kvs_status ar_step(kvs_model *m, kvs_kv_cache *cache, kvs_evictor *ev, kvs_layer_plan *lp, kvs_step_plan *plan,
                          kvs_step_result *r, kvs_gen_stats *st) {
    if (ev) {
        int any = 0;
        KVS_TRY(kvs_evictor_plan(ev, plan->n_tokens, lp, &any));
        plan->layers = any ? lp : NULL;
    }
    KVS_TRY(kvs_model_forward(m, cache, plan, r));
    /* the peak is reached before eviction: budget + buffer rows */
    int64_t used = kvs_cache_bytes_used(cache);
    if (used > st->cache_bytes_peak) st->cache_bytes_peak = used;
    if (ev) KVS_TRY(kvs_evictor_update(ev, cache, r));
    return KVS_OK;
}

kvs_status kvs_generate_ar(kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt, int64_t n_prompt,
                           const kvs_ar_params *pp, kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out,
                           kvs_gen_stats *stats) {
    const char *op = "kvs_generate_ar";
    if (!m || !cache || !prompt || !out || !n_out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *n_out = 0;
    kvs_ar_params p = pp ? *pp : kvs_ar_params_default();
    if (n_prompt < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: the prompt needs at least one token (BOS)", op);
    if (p.max_new < 0 || p.temperature < 0.0f || !(p.top_p > 0.0f && p.top_p <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: max_new >= 0, temperature >= 0, top_p in (0, 1] required", op);
    const kvs_cache_params *cp = kvs_cache_get_params(cache);
    if (cp->mode != KVS_CACHE_APPEND) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: needs an APPEND cache", op);
    kvs_evictor *ev = NULL;
    KVS_TRY(ar_evictor(m, n_prompt, &p, &ev));
    int64_t need = ev ? kvs_evictor_capacity(ev, n_prompt) : n_prompt + p.max_new;
    if (need > cp->capacity) {
        kvs_evictor_destroy(&ev);
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: prompt %lld + %lld new tokens need %lld cache rows, capacity is %lld", op,
                         (long long)n_prompt, (long long)p.max_new, (long long)need, (long long)cp->capacity);
    }
    kvs_status s = kvs_cache_reset(cache);
    if (s == KVS_OK && ev) s = kvs_evictor_begin(ev, cache);
    if (s != KVS_OK) {
        kvs_evictor_destroy(&ev);
        return s;
    }
    kvs_gen_stats st;
    memset(&st, 0, sizeof st);
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int64_t V = hp->vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    prob_idx *scratch = malloc((size_t)V * sizeof *scratch);
    kvs_layer_plan *lp = calloc((size_t)hp->n_layers, sizeof *lp);
    if (!logits || !scratch || !lp) {
        free(logits);
        free(scratch);
        free(lp);
        kvs_evictor_destroy(&ev);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    uint64_t rng = p.seed ? p.seed : 0x9E3779B97F4A7C15ull;
    double t0 = now_s();
    int32_t tok = 0;
    int64_t pos = 0;
    /* prefill: all prompt tokens at once; logits of the last */
    {
        int32_t last = (int32_t)(n_prompt - 1);
        kvs_step_plan plan = {.tokens = prompt, .n_tokens = n_prompt, .logit_rows = &last, .n_logit_rows = 1};
        kvs_step_result r;
        s = ar_step(m, cache, ev, lp, &plan, &r, &st);
        if (s == KVS_OK) {
            memcpy(logits, r.logits, (size_t)V * sizeof *logits);
            st.rows_computed += r.rows_computed;
            st.rows_baseline += r.rows_computed;
            st.steps++;
        }
        pos = n_prompt;
    }
    int64_t n = 0;
    while (s == KVS_OK && n < p.max_new) {
        tok = sample(logits, V, &p, &rng, scratch);
        if ((p.stop_at_bos && tok == hp->bos_id) || (p.stop_at_eos && tok == hp->eos_id)) break;
        out[n++] = tok;
        if (cb && cb(user, tok)) break;
        if (n == p.max_new) break;
        int32_t zero = 0, position = (int32_t)pos;
        kvs_step_plan plan = {.tokens = &tok, .n_tokens = 1, .positions = &position, .logit_rows = &zero, .n_logit_rows = 1};
        kvs_step_result r;
        s = ar_step(m, cache, ev, lp, &plan, &r, &st);
        if (s == KVS_OK) {
            memcpy(logits, r.logits, (size_t)V * sizeof *logits);
            st.rows_computed += r.rows_computed;
            /* without a cache, step t recomputes all pos+1 rows at every layer */
            st.rows_baseline += (pos + 1) * hp->n_layers;
            st.steps++;
        }
        pos++;
    }
    int64_t used = kvs_cache_bytes_used(cache);
    if (used > st.cache_bytes_peak) st.cache_bytes_peak = used;
    if (ev) {
        kvs_evict_stats es = kvs_evictor_get_stats(ev);
        st.evictions = es.evictions;
        st.rows_evicted = es.rows_evicted;
    }
    *n_out = n;
    stats_finish(&st, t0, n, cache);
    if (stats) *stats = st;
    free(logits);
    free(scratch);
    free(lp);
    kvs_evictor_destroy(&ev);
    return s;
}

/* ---- masked diffusion ------------------------------------------------------------------------ */

kvs_dlm_params kvs_dlm_params_default(void) {
    kvs_dlm_params p = {.gen_len = 64, .block_len = 32, .steps = 0, .threshold = 0.0f, .schedule = NULL};
    return p;
}

typedef struct cand {
    double conf;
    int32_t pos;
    int32_t tok;
} cand;

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->conf > y->conf) return -1;
    if (x->conf < y->conf) return 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* float64 softmax confidence of one logits row: argmax id (lowest on ties) and its probability. */
static void confidence(const float *l, int64_t V, int32_t *tok, double *conf) {
    int32_t best = argmax_f32(l, V);
    double mx = l[best], sum = 0.0;
    for (int64_t j = 0; j < V; j++) sum += exp((double)l[j] - mx);
    *tok = best;
    *conf = 1.0 / sum;
}

kvs_status kvs_generate_dlm(kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt, int64_t n_prompt,
                            const kvs_dlm_params *pp, kvs_token_cb cb, void *user, int32_t *out, kvs_gen_stats *stats) {
    const char *op = "kvs_generate_dlm";
    if (!m || !cache || !out || (n_prompt > 0 && !prompt)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    kvs_dlm_params p = pp ? *pp : kvs_dlm_params_default();
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    if (hp->arch != KVS_ARCH_LLADA || hp->mask_id < 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: model '%s' is not a masked-diffusion model with a mask id", op,
                         kvs_arch_name(hp->arch));
    if (n_prompt < 0 || p.gen_len < 1 || p.block_len < 1 || p.gen_len % p.block_len)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: gen_len %lld must be a positive multiple of block_len %lld", op,
                         (long long)p.gen_len, (long long)p.block_len);
    int64_t nb = p.gen_len / p.block_len;
    if (p.steps == 0) p.steps = p.gen_len;
    if (p.threshold < 0.0f || p.threshold > 1.0f)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: threshold %g outside [0, 1]", op, (double)p.threshold);
    if (p.threshold == 0.0f && (p.steps < nb || p.steps % nb))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: steps %lld must be a positive multiple of the block count %lld", op,
                         (long long)p.steps, (long long)nb);
    int64_t spb = p.steps / nb;
    const kvs_cache_params *cp = kvs_cache_get_params(cache);
    int64_t n = n_prompt + p.gen_len;
    if (cp->mode != KVS_CACHE_POSITIONAL) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: needs a POSITIONAL cache", op);
    if (n > cp->capacity)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: %lld tokens exceed the cache capacity %lld", op, (long long)n,
                         (long long)cp->capacity);
    unsigned need = kvs_dlm_schedule_cache_flags(p.schedule);
    if ((cp->flags & need) != need)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: schedule '%s' needs cache flags 0x%x", op,
                         kvs_dlm_schedule_name(p.schedule), need);
    KVS_TRY(kvs_cache_reset(cache));

    kvs_dlm_schedule *own = NULL, *sched = p.schedule;
    if (!sched) {
        KVS_TRY(kvs_dlm_schedule_none(&own));
        sched = own;
    }
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    uint8_t *masked = calloc((size_t)n, 1);
    int32_t *decoded = malloc((size_t)n * sizeof *decoded);
    int32_t *row_of = malloc((size_t)n * sizeof *row_of);
    int64_t *quota = malloc((size_t)(spb > 0 ? spb : 1) * sizeof *quota);
    cand *cands = malloc((size_t)n * sizeof *cands);
    kvs_status s = KVS_OK;
    if (!tokens || !masked || !decoded || !row_of || !quota || !cands) {
        s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        tokens[i] = i < n_prompt ? prompt[i] : hp->mask_id;
        masked[i] = i >= n_prompt;
    }
    if (sched->ops->begin) s = sched->ops->begin(sched->self, n, hp->n_layers);
    kvs_gen_stats st;
    memset(&st, 0, sizeof st);
    double t0 = now_s();
    int64_t n_decoded = 0, step = 0;
    for (int64_t b = 0; b < nb && s == KVS_OK; b++) {
        int64_t bs = n_prompt + b * p.block_len, be = bs + p.block_len;
        int64_t mcount = 0;
        for (int64_t i = bs; i < be; i++) mcount += masked[i];
        for (int64_t i = 0; i < spb; i++) quota[i] = mcount / spb + (i < mcount % spb ? 1 : 0);
        int step_in_block = 0;
        while (mcount > 0 && s == KVS_OK) {
            kvs_dlm_view v = {.tokens = tokens, .n_tokens = n, .prompt_len = n_prompt, .mask_id = hp->mask_id,
                              .masked = masked, .block_start = bs, .block_end = be, .block = (int)b,
                              .step_in_block = step_in_block, .step = step, .decoded_prev = decoded,
                              .n_decoded_prev = n_decoded, .n_layers = hp->n_layers,
                              .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads};
            kvs_dlm_step ds;
            memset(&ds, 0, sizeof ds);
            s = sched->ops->plan(sched->self, &v, &ds);
            if (s != KVS_OK) break;
            ds.plan.tokens = tokens;
            ds.plan.n_tokens = n;
            ds.plan.positions = NULL;
            kvs_step_result r;
            s = kvs_model_forward(m, cache, &ds.plan, &r);
            if (s != KVS_OK) break;
            st.rows_computed += r.rows_computed;
            st.rows_baseline += n * hp->n_layers;
            int64_t used = kvs_cache_bytes_used(cache);
            if (used > st.cache_bytes_peak) st.cache_bytes_peak = used;
            if (sched->ops->feedback) {
                s = sched->ops->feedback(sched->self, &v, &r);
                if (s != KVS_OK) break;
            }
            /* candidates and their confidences */
            for (int64_t i = 0; i < ds.plan.n_logit_rows; i++) row_of[ds.plan.logit_rows[i]] = (int32_t)i;
            int64_t nc = 0;
            const int32_t *cpos = ds.candidates;
            int64_t ncand = ds.candidates ? ds.n_candidates : 0;
            if (!cpos) {
                for (int64_t i = bs; i < be; i++)
                    if (masked[i]) decoded[ncand++] = (int32_t)i; /* decoded[] reused as scratch */
                cpos = decoded;
            }
            for (int64_t i = 0; i < ncand; i++) {
                int32_t pos = cpos[i];
                int found = 0;
                for (int64_t j = 0; j < ds.plan.n_logit_rows; j++)
                    if (ds.plan.logit_rows[j] == pos) { found = 1; break; }
                if (pos < bs || pos >= be || !masked[pos] || !found) {
                    s = kvs_error(KVS_ERR_INVALID_ARGUMENT,
                                  "%s: schedule '%s' proposed candidate %d that is not a masked position of the block with logits",
                                  op, kvs_dlm_schedule_name(sched), pos);
                    break;
                }
                cands[nc].pos = pos;
                confidence(r.logits + (int64_t)row_of[pos] * hp->vocab, hp->vocab, &cands[nc].tok, &cands[nc].conf);
                nc++;
            }
            if (s != KVS_OK) break;
            if (nc == 0) {
                s = kvs_error(KVS_ERR_STATE, "%s: schedule '%s' proposed no candidates", op, kvs_dlm_schedule_name(sched));
                break;
            }
            qsort(cands, (size_t)nc, sizeof *cands, cmp_cand);
            int64_t k;
            if (p.threshold > 0.0f) {
                k = 0;
                while (k < nc && cands[k].conf >= (double)p.threshold) k++;
                if (k == 0) k = 1;
            } else {
                k = step_in_block < spb ? quota[step_in_block] : 1;
                if (k < 1) k = 1;
                if (k > nc) k = nc;
            }
            n_decoded = 0;
            for (int64_t i = 0; i < k; i++) {
                tokens[cands[i].pos] = cands[i].tok;
                masked[cands[i].pos] = 0;
                decoded[n_decoded++] = cands[i].pos;
            }
            mcount -= k;
            step++;
            step_in_block++;
        }
        if (s == KVS_OK) {
            int stop = 0;
            for (int64_t i = bs; i < be; i++) {
                out[i - n_prompt] = tokens[i];
                if (cb && !stop) stop = cb(user, tokens[i]);
            }
            if (stop) break;
        }
    }
    st.steps = step;
    stats_finish(&st, t0, p.gen_len, cache);
    if (stats) *stats = st;
done:
    kvs_dlm_schedule_destroy(&own);
    free(tokens); free(masked); free(decoded); free(row_of); free(quota); free(cands);
    return s;
}
