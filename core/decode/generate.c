/* The autoregressive decode loop (sampling, eviction through the evictor), the diffusion parameters
 * and confidence rule, and the helpers the decode loops share; the masked-diffusion loop is dlm.c.
 * See generate.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode/decode_internal.h"
#include "kvsieve/model.h"
#include "kvsieve/policy.h"

double kvs_decode_now_s(void) {
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

float kvs_decode_rng_f32(uint64_t *state) { return rng_f32(state); }

int32_t kvs_decode_argmax(const float *x, int64_t n) {
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
    if (p->temperature <= 0.0f) return kvs_decode_argmax(logits, n);
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

void kvs_decode_dist(const float *logits, int64_t V, float t, float top_p, double *prob, void *scratch) {
    double mx = logits[0], sum = 0.0;
    for (int64_t i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < V; i++) sum += prob[i] = exp(((double)logits[i] - mx) / (double)t);
    for (int64_t i = 0; i < V; i++) prob[i] /= sum;
    if (top_p <= 0.0f || top_p >= 1.0f) return;
    prob_idx *sc = scratch;
    for (int64_t i = 0; i < V; i++) sc[i] = (prob_idx){(float)prob[i], (int32_t)i};
    qsort(sc, (size_t)V, sizeof *sc, cmp_prob_desc);
    double cum = 0.0;
    int64_t last = V - 1;
    for (int64_t i = 0; i < V; i++) {
        cum += prob[sc[i].i];
        if (cum > top_p) {
            last = i;
            break;
        }
    }
    for (int64_t i = last + 1; i < V; i++) prob[sc[i].i] = 0.0;
    for (int64_t i = 0; i < V; i++) prob[i] /= cum;
}

kvs_ar_params kvs_ar_params_default(void) {
    kvs_ar_params p = {.max_new = 256, .temperature = 0.0f, .top_p = 1.0f, .seed = 42, .stop_at_bos = 1, .stop_at_eos = 1,
                       .policy = NULL, .budget = 1.0, .scope = KVS_SCOPE_HEAD, .evict_buffer = 0, .budget_tokens = 0, .rerotate = 0,
                       .think_ratio = 0.0};
    return p;
}

void kvs_decode_stats_finish(kvs_gen_stats *st, double t0, double b0, const kvs_model *m, const kvs_kv_cache *c) {
    st->seconds = kvs_decode_now_s() - t0;
    st->seconds_build = kvs_device_build_seconds(kvs_model_device(m)) - b0;
    const double run = st->seconds - st->seconds_build;
    st->tokens_per_s = run > 0 ? (double)st->tokens / run : 0.0;
    st->compute_fraction = st->rows_baseline > 0 ? (double)st->rows_computed / (double)st->rows_baseline : 1.0;
    st->cache_bytes_allocated = kvs_cache_bytes_allocated(c);
}

static kvs_status ar_evictor(const kvs_model *m, int64_t n_prompt, const kvs_ar_params *p, kvs_evictor **out) {
    *out = NULL;
    if (!p->policy) return KVS_OK;
    kvs_policy_set_model(p->policy, m); /* critical / expected read Wo / Wq (policy.h) */
    kvs_evict_params ep = kvs_evict_params_default();
    ep.policy = p->policy;
    ep.budget = p->budget;
    ep.scope = p->scope;
    ep.buffer = p->evict_buffer;
    ep.budget_tokens = p->budget_tokens;
    ep.rerotate = p->rerotate;
    ep.think_ratio = p->think_ratio;
    return kvs_evictor_create(out, &ep, kvs_model_get_hparams(m), n_prompt + p->max_new);
}

/* Rows a decode without eviction writes: the prompt and every sampled token but the last, whose K/V no
 * later step reads (the loop stops before forwarding it). */
static int64_t ar_rows_needed(int64_t n_prompt, int64_t max_new) {
    return n_prompt + (max_new > 0 ? max_new - 1 : 0);
}

int64_t kvs_ar_capacity(const kvs_model *m, int64_t n_prompt, const kvs_ar_params *pp) {
    if (!m || n_prompt < 1) {
        kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_ar_capacity: NULL model or empty prompt");
        return -1;
    }
    kvs_ar_params p = pp ? *pp : kvs_ar_params_default();
    if (!p.policy) return ar_rows_needed(n_prompt, p.max_new);
    kvs_evictor *ev = NULL;
    if (ar_evictor(m, n_prompt, &p, &ev) != KVS_OK) return -1;
    int64_t cap = kvs_evictor_capacity(ev, n_prompt);
    kvs_evictor_destroy(&ev);
    return cap;
}

/* One forward of the AR loop, with the evictor's statistics plan and its update (eviction) after. */
static kvs_status ar_step(kvs_model *m, kvs_kv_cache *cache, kvs_evictor *ev, kvs_layer_plan *lp, kvs_step_plan *plan,
                          kvs_step_result *r, kvs_gen_stats *st) {
    double t0 = kvs_now_s();
    if (ev) {
        int any = 0;
        KVS_TRY(kvs_evictor_plan(ev, plan->n_tokens, lp, &any));
        plan->layers = any ? lp : NULL;
    }
    double t1 = kvs_now_s();
    KVS_TRY(kvs_model_forward(m, cache, plan, r));
    double t2 = kvs_now_s();
    /* the peak is reached before eviction: budget + buffer rows */
    int64_t used = kvs_cache_bytes_used(cache);
    if (used > st->cache_bytes_peak) st->cache_bytes_peak = used;
    if (ev) KVS_TRY(kvs_evictor_update(ev, cache, r));
    st->seconds_plan += (t1 - t0) + (kvs_now_s() - t2);
    st->seconds_forward += t2 - t1 - r->seconds_logits;
    st->seconds_logits += r->seconds_logits;
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
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    if (kvs_arch_is_diffusion(hp->arch)) /* bidirectional: the next token is not what its last row predicts */
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: model '%s' is a masked-diffusion model (use kvs_generate_dlm)", op,
                         kvs_arch_name(hp->arch));
    if (p.max_new < 0 || p.temperature < 0.0f || !(p.top_p > 0.0f && p.top_p <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: max_new >= 0, temperature >= 0, top_p in (0, 1] required", op);
    const kvs_cache_params *cp = kvs_cache_get_params(cache);
    if (cp->mode != KVS_CACHE_APPEND) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: needs an APPEND cache", op);
    if (p.draft < 0 || p.draft > KVS_SPEC_MAX_DRAFT)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: draft %d outside 0..%d", op, p.draft, KVS_SPEC_MAX_DRAFT);
    if (p.draft > 0) {
        if (cp->type_k != KVS_QH8 && cp->type_v != KVS_QH8)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: speculative decoding (draft %d) needs a qh8 cache (K %s, V %s): the "
                             "draft reads its 4-bit view", op, p.draft, kvs_dtype_name(cp->type_k), kvs_dtype_name(cp->type_v));
        if (p.policy || p.rerotate)
            return kvs_error(KVS_ERR_UNSUPPORTED, "%s: speculative decoding with %s is not implemented", op,
                             p.policy ? "an eviction policy" : "rerotate");
    }
    kvs_evictor *ev = NULL;
    if (p.policy) KVS_TRY(kvs_policy_check_model(p.policy, m)); /* refused before the first token */
    KVS_TRY(ar_evictor(m, n_prompt, &p, &ev));
    int64_t need = ev ? kvs_evictor_capacity(ev, n_prompt) : ar_rows_needed(n_prompt, p.max_new);
    if (need > cp->capacity) {
        kvs_evictor_destroy(&ev);
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: prompt %lld + %lld new tokens need %lld cache rows, capacity is %lld", op,
                         (long long)n_prompt, (long long)p.max_new, (long long)need, (long long)cp->capacity);
    }
    /* RoPE positions must stay inside the trained context: the last forwarded token sits at
     * n_prompt + max_new - 2; with rerotate and eviction, below the cache rows the evictor needs */
    const kvs_model_hparams *hp0 = kvs_model_get_hparams(m);
    int stream = p.rerotate && ev;
    int64_t last_pos = stream ? need - 1 : ar_rows_needed(n_prompt, p.max_new) - 1;
    if (hp0->ctx_len > 0 && last_pos >= hp0->ctx_len) {
        kvs_evictor_destroy(&ev);
        if (stream)
            return kvs_error(KVS_ERR_OUT_OF_RANGE,
                             "%s: the eviction budget + buffer (%lld cache rows) exceeds the model's context %d: RoPE positions "
                             "within the cache would pass it", op, (long long)need, hp0->ctx_len);
        return kvs_error(KVS_ERR_OUT_OF_RANGE,
                         "%s: prompt %lld + %lld new tokens reach position %lld, past the model's context %d; to stream past "
                         "it, evict (a policy with a budget inside the context) and set rerotate (positions within the cache)",
                         op, (long long)n_prompt, (long long)p.max_new, (long long)last_pos, hp0->ctx_len);
    }
    if (stream) {
        kvs_status rs = kvs_cache_check_rerotate(cp);
        if (rs != KVS_OK) {
            kvs_evictor_destroy(&ev);
            return rs;
        }
    }
    if (p.draft > 0) return kvs_generate_ar_spec(m, cache, prompt, n_prompt, &p, cb, user, out, n_out, stats);
    kvs_status s = kvs_cache_reset(cache);
    if (s == KVS_OK && ev) s = kvs_evictor_begin(ev, cache);
    if (s != KVS_OK) {
        kvs_evictor_destroy(&ev);
        return s;
    }
    kvs_gen_stats st;
    memset(&st, 0, sizeof st);
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
    double t0 = kvs_decode_now_s(), b0 = kvs_device_build_seconds(kvs_model_device(m));
    int32_t tok = 0;
    int64_t pos = 0;
    /* prefill: all prompt tokens at once; logits of the last */
    {
        int32_t last = (int32_t)(n_prompt - 1);
        kvs_step_plan plan = {.tokens = prompt, .n_tokens = n_prompt, .logit_rows = &last, .n_logit_rows = 1,
                              .rope_in_cache = p.rerotate};
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
        double ts = kvs_now_s();
        tok = sample(logits, V, &p, &rng, scratch);
        double tc = kvs_now_s();
        st.seconds_confidence += tc - ts;
        if ((p.stop_at_bos && tok == hp->bos_id) || (p.stop_at_eos && tok == hp->eos_id)) break;
        out[n++] = tok;
        int stop = cb && cb(user, tok);
        st.seconds_commit += kvs_now_s() - tc;
        if (stop) break;
        if (n == p.max_new) break;
        int32_t zero = 0, position = (int32_t)pos;
        kvs_step_plan plan = {.tokens = &tok, .n_tokens = 1, .positions = &position, .logit_rows = &zero, .n_logit_rows = 1,
                              .rope_in_cache = p.rerotate};
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
    st.tokens = n;
    kvs_decode_stats_finish(&st, t0, b0, m, cache);
    if (stats) *stats = st;
    free(logits);
    free(scratch);
    free(lp);
    kvs_evictor_destroy(&ev);
    return s;
}

kvs_status kvs_generate_ar_continue(kvs_model *m, kvs_kv_cache *cache, int32_t tok, const kvs_ar_params *pp,
                                    kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out, kvs_gen_stats *stats) {
    const char *op = "kvs_generate_ar_continue";
    if (!m || !cache || !out || !n_out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *n_out = 0;
    kvs_ar_params p = pp ? *pp : kvs_ar_params_default();
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    if (kvs_arch_is_diffusion(hp->arch))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: model '%s' is a masked-diffusion model (use kvs_generate_dlm)", op,
                         kvs_arch_name(hp->arch));
    if (p.max_new < 0 || p.temperature < 0.0f || !(p.top_p > 0.0f && p.top_p <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: max_new >= 0, temperature >= 0, top_p in (0, 1] required", op);
    if (tok < 0 || tok >= hp->vocab)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: token %d outside the vocabulary 0..%d", op, (int)tok, hp->vocab - 1);
    if (p.draft < 0 || p.draft > KVS_SPEC_MAX_DRAFT)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: draft %d outside 0..%d", op, p.draft, KVS_SPEC_MAX_DRAFT);
    if (p.policy || p.rerotate)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: continuing with %s is not implemented (kvs_generate_ar has it)", op,
                         p.policy ? "an eviction policy" : "rerotate");
    const kvs_cache_params *cp = kvs_cache_get_params(cache);
    if (cp->mode != KVS_CACHE_APPEND) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: needs an APPEND cache", op);
    if (p.draft > 0 && cp->type_k != KVS_QH8 && cp->type_v != KVS_QH8)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: speculative decoding (draft %d) needs a qh8 cache (K %s, V %s): the "
                         "draft reads its 4-bit view", op, p.draft, kvs_dtype_name(cp->type_k), kvs_dtype_name(cp->type_v));
    const int64_t L = kvs_cache_next_pos(cache);
    if (L < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: the cache is empty (kvs_generate_ar prefills a prompt)", op);
    for (int l = 0; l < hp->n_layers; l++)
        for (int h = 0; h < hp->n_kv_heads; h++)
            if (kvs_cache_len(cache, l, h) != L)
                return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d kv head %d holds %lld rows, not the %lld of positions "
                                 "0..%lld (evicted or gapped caches are not continued)", op, l, h,
                                 (long long)kvs_cache_len(cache, l, h), (long long)L, (long long)(L - 1));
    if (L + p.max_new > cp->capacity)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: %lld cached + %lld new tokens need %lld cache rows, capacity is %lld", op,
                         (long long)L, (long long)p.max_new, (long long)(L + p.max_new), (long long)cp->capacity);
    if (hp->ctx_len > 0 && L + p.max_new - 1 >= hp->ctx_len)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: %lld cached + %lld new tokens reach position %lld, past the model's "
                         "context %d", op, (long long)L, (long long)p.max_new, (long long)(L + p.max_new - 1), hp->ctx_len);
    if (p.draft > 0) return kvs_generate_ar_spec_continue(m, cache, L, tok, &p, cb, user, out, n_out, stats);

    kvs_gen_stats st;
    memset(&st, 0, sizeof st);
    const int64_t V = hp->vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    prob_idx *scratch = malloc((size_t)V * sizeof *scratch);
    if (!logits || !scratch) {
        free(logits);
        free(scratch);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    uint64_t rng = p.seed ? p.seed : 0x9E3779B97F4A7C15ull;
    double t0 = kvs_decode_now_s(), b0 = kvs_device_build_seconds(kvs_model_device(m));
    kvs_status s = KVS_OK;
    int64_t n = 0, pos = L;
    while (s == KVS_OK && n < p.max_new) {
        /* forward tok (the one-row step of kvs_generate_ar's loop), then sample the next */
        int32_t zero = 0, position = (int32_t)pos;
        kvs_step_plan plan = {.tokens = &tok, .n_tokens = 1, .positions = &position, .logit_rows = &zero, .n_logit_rows = 1};
        kvs_step_result r;
        s = ar_step(m, cache, NULL, NULL, &plan, &r, &st);
        if (s != KVS_OK) break;
        memcpy(logits, r.logits, (size_t)V * sizeof *logits);
        st.rows_computed += r.rows_computed;
        st.rows_baseline += (pos + 1) * hp->n_layers;
        st.steps++;
        pos++;
        double ts = kvs_now_s();
        tok = sample(logits, V, &p, &rng, scratch);
        double tc = kvs_now_s();
        st.seconds_confidence += tc - ts;
        if ((p.stop_at_bos && tok == hp->bos_id) || (p.stop_at_eos && tok == hp->eos_id)) break;
        out[n++] = tok;
        int stop = cb && cb(user, tok);
        st.seconds_commit += kvs_now_s() - tc;
        if (stop) break;
    }
    *n_out = n;
    st.tokens = n;
    kvs_decode_stats_finish(&st, t0, b0, m, cache);
    if (stats) *stats = st;
    free(logits);
    free(scratch);
    return s;
}

/* ---- masked diffusion: the parameters and the confidence rule (the loop is dlm.c) -------------- */

kvs_dlm_params kvs_dlm_params_default(void) {
    kvs_dlm_params p = {.gen_len = 64, .block_len = 32, .steps = 0, .threshold = 0.0f, .schedule = NULL, .stop_eos = 0,
                        .block_causal = 0};
    return p;
}

/* float64 softmax confidence of one logits row: argmax id (lowest on ties) and its probability. */
void kvs_decode_confidence(const float *l, int64_t V, int32_t *tok, double *conf) {
    int32_t best = kvs_decode_argmax(l, V);
    double mx = l[best], sum = 0.0;
    for (int64_t j = 0; j < V; j++) sum += exp((double)l[j] - mx);
    *tok = best;
    *conf = 1.0 / sum;
}
