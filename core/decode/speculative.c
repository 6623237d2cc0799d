/* QuantSpec self-speculative decoding (Tiwari et al. 2025, "QuantSpec: Self-Speculative Decoding with
 * Hierarchical Quantized KV Cache"): the draft is the target model itself reading only the 4-bit
 * view (upper nibbles) of a hierarchical qh8 cache; one multi-row forward over the 8-bit cache
 * verifies the drafted tokens. Acceptance: greedy prefix match, or speculative sampling (Leviathan
 * et al. 2023, alg. 1). Contract: generate.h (kvs_ar_params.draft, kvs_spec_accept). Entered from
 * kvs_generate_ar (prefill, first token, then the rounds) and kvs_generate_ar_continue (the rounds
 * from a cache the caller filled: kvsieve bench model --speculative at long contexts).
 *
 * One round, with the cache holding target rows for positions [0, L) and the last token t0 (at
 * position L) not yet forwarded:
 *   draft:  for i = 0 .. N-1: forward t_i at L + i reading the 4-bit view (kv_draft) -> q_i,
 *           t_{i+1} = sample(q_i)                        (writes draft rows L .. L+N-1)
 *   undo:   kvs_cache_truncate(L)                        (draft rows gone, bit-exactly)
 *   verify: forward t_0 .. t_N at L .. L+N over the 8-bit cache, logits of every row -> p_0 .. p_N
 *   accept: t_1 .. t_k, the longest prefix accepted (greedy: t_i == argmax p_{i-1}; sampling:
 *           kvs_spec_accept(p_{i-1}, q_{i-1}, t_i)), then one more token from the target (argmax
 *           p_k; the residual sample of the rejection; or a sample of p_N when all were accepted)
 *   commit: kvs_cache_truncate(L + k + 1): rows of t_0 .. t_k stay (the verify wrote them with the
 *           target's values), the rows of rejected drafts go.
 * N = min(draft, tokens still to produce - 1), so no row past plain decoding's last is written and
 * the cache capacity kvs_ar_capacity asks for suffices; N = 0 is a plain target step. */
#include <stdlib.h>
#include <string.h>

#include "decode/decode_internal.h"
#include "kvsieve/cache.h"
#include "kvsieve/model.h"

int kvs_spec_accept(const double *p, const double *q, int64_t V, int32_t x, double u, double u2, int32_t *out) {
    if (out) *out = -1;
    if (!p || !q || !out || V < 1 || x < 0 || x >= V || !(q[x] > 0.0)) return -1;
    if (u * q[x] < p[x]) { /* u < p(x)/q(x) without dividing */
        *out = x;
        return 1;
    }
    double mass = 0.0;
    for (int64_t i = 0; i < V; i++) mass += p[i] > q[i] ? p[i] - q[i] : 0.0;
    const int resid = mass > 0.0;
    if (!resid)
        for (int64_t i = 0; i < V; i++) mass += p[i];
    double r = u2 * mass, cdf = 0.0;
    int32_t last = -1;
    for (int64_t i = 0; i < V; i++) {
        const double w = resid ? (p[i] > q[i] ? p[i] - q[i] : 0.0) : p[i];
        if (w <= 0.0) continue;
        last = (int32_t)i;
        cdf += w;
        if (r < cdf) break;
    }
    *out = last < 0 ? x : last;
    return 0;
}

/* A draw from prob[0..V) by inverse CDF with a uniform u (the last token of positive mass when
 * rounding leaves u past the total). */
static int32_t draw(const double *prob, int64_t V, double u) {
    double cdf = 0.0;
    int32_t last = 0;
    for (int64_t i = 0; i < V; i++) {
        if (prob[i] <= 0.0) continue;
        last = (int32_t)i;
        cdf += prob[i];
        if (u < cdf) return (int32_t)i;
    }
    return last;
}

typedef struct spec_run {
    kvs_model *m;
    kvs_kv_cache *c;
    const kvs_ar_params *p;
    int64_t V;
    uint64_t rng;
    void *scratch;      /* V * 16 bytes for kvs_decode_dist */
    kvs_gen_stats st;
} spec_run;

/* One forward of n tokens at positions pos0.., the logits of its last n_logits rows copied to logits
 * [n_logits][V] (the prefill asks for its last row only, as plain decoding does: the same products). */
static kvs_status spec_forward(spec_run *r, const int32_t *toks, int64_t n, int64_t n_logits, int32_t pos0, int draft,
                               int32_t *rows, int32_t *posv, float *logits) {
    for (int64_t i = 0; i < n; i++) {
        rows[i] = (int32_t)(n - n_logits + i);
        posv[i] = pos0 + (int32_t)i;
    }
    kvs_step_plan plan = {.tokens = toks, .n_tokens = n, .positions = posv, .logit_rows = rows, .n_logit_rows = n_logits,
                          .kv_draft = draft};
    kvs_step_result res;
    double t0 = kvs_decode_now_s();
    KVS_TRY(kvs_model_forward(r->m, r->c, &plan, &res));
    double t1 = kvs_decode_now_s();
    /* the cache peak after every forward, the prefill's included (as plain decoding records it) */
    const int64_t used = kvs_cache_bytes_used(r->c);
    if (used > r->st.cache_bytes_peak) r->st.cache_bytes_peak = used;
    memcpy(logits, res.logits, (size_t)(n_logits * r->V) * sizeof *logits);
    r->st.seconds_forward += t1 - t0 - res.seconds_logits;
    r->st.seconds_logits += res.seconds_logits;
    if (draft) r->st.seconds_draft += t1 - t0;
    r->st.rows_computed += res.rows_computed;
    r->st.steps++;
    return KVS_OK;
}

/* The next token from one logits row: argmax (greedy) or a sample of the sampler's distribution
 * (written to prob when not NULL). */
static int32_t spec_pick(spec_run *r, const float *logits, double *prob) {
    if (r->p->temperature <= 0.0f) return kvs_decode_argmax(logits, r->V);
    kvs_decode_dist(logits, r->V, r->p->temperature, r->p->top_p, prob, r->scratch);
    return draw(prob, r->V, (double)kvs_decode_rng_f32(&r->rng));
}

/* The rounds after the first token: the cache holds target rows for positions [0, L), tok (already
 * emitted as out[n - 1] by the prefill, or given by the caller of kvs_generate_ar_continue, then
 * n = 0) is not yet forwarded; emits until max_new tokens are in out, a stop token or the callback
 * stops it. Buffers: lq [D][V], lp [D+1][V], q [D][V], pv [V], toks [D+1], rows / posv [>= D+1]. */
typedef struct spec_bufs {
    float *lq, *lp;
    double *q, *pv;
    int32_t *toks, *rows, *posv;
} spec_bufs;

static kvs_status spec_rounds(spec_run *r, const spec_bufs *b, int64_t L, int32_t tok, int64_t n, int stop,
                              kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out) {
    const kvs_ar_params *p = r->p;
    const kvs_model_hparams *hp = kvs_model_get_hparams(r->m);
    const int64_t V = r->V, D = p->draft;
    float *lq = b->lq, *lp = b->lp;
    double *q = b->q, *pv = b->pv;
    int32_t *toks = b->toks, *rows = b->rows, *posv = b->posv;
    kvs_kv_cache *cache = r->c;
    kvs_status s = KVS_OK;
    while (s == KVS_OK && !stop && n < p->max_new) {
        const int64_t N = D < p->max_new - n - 1 ? D : p->max_new - n - 1;
        toks[0] = tok;
        /* draft: N single-row steps over the 4-bit view */
        for (int64_t i = 0; i < N && s == KVS_OK; i++) {
            s = spec_forward(r, toks + i, 1, 1, (int32_t)(L + i), 1, rows, posv, lq + i * V);
            if (s == KVS_OK) toks[i + 1] = spec_pick(r, lq + i * V, q + i * V);
        }
        if (s == KVS_OK && N > 0) s = kvs_cache_truncate(cache, L);
        /* verify: one forward of N + 1 rows over the 8-bit cache */
        if (s == KVS_OK) s = spec_forward(r, toks, N + 1, N + 1, (int32_t)L, 0, rows, posv, lp);
        if (s != KVS_OK) break;
        r->st.spec_verify_steps += N > 0;
        r->st.spec_drafted += N;
        int64_t k = 0;
        int32_t next = -1;
        for (; k < N; k++) {
            const float *row = lp + k * V;
            if (p->temperature <= 0.0f) {
                const int32_t best = kvs_decode_argmax(row, V);
                if (toks[k + 1] != best) {
                    next = best;
                    break;
                }
            } else {
                kvs_decode_dist(row, V, p->temperature, p->top_p, pv, r->scratch);
                const double u = (double)kvs_decode_rng_f32(&r->rng), u2 = (double)kvs_decode_rng_f32(&r->rng);
                if (kvs_spec_accept(pv, q + k * V, V, toks[k + 1], u, u2, &next) != 1) break;
                next = -1;
            }
        }
        r->st.spec_accepted += k;
        if (next < 0) next = spec_pick(r, lp + k * V, pv); /* every draft accepted, or greedy mismatch */
        /* emit t_1 .. t_k, then next, one at a time as the plain loop would */
        for (int64_t i = 1; i <= k + 1 && !stop && n < p->max_new; i++) {
            const int32_t t = i <= k ? toks[i] : next;
            if ((p->stop_at_bos && t == hp->bos_id) || (p->stop_at_eos && t == hp->eos_id)) {
                stop = 1;
                break;
            }
            out[n++] = t;
            stop = cb && cb(user, t);
        }
        /* keep the rows of t_0 .. t_k (target values), drop those of rejected drafts */
        s = kvs_cache_truncate(cache, L + k + 1);
        L += k + 1;
        tok = next;
    }
    *n_out = n;
    return s;
}

static kvs_status spec_alloc(spec_run *r, spec_bufs *b, int64_t nrow) {
    const int64_t V = r->V, D = r->p->draft;
    b->lq = malloc((size_t)(D * V) * sizeof *b->lq);
    b->lp = malloc((size_t)((D + 1) * V) * sizeof *b->lp);
    b->q = malloc((size_t)(D * V) * sizeof *b->q);
    b->pv = malloc((size_t)V * sizeof *b->pv);
    b->toks = malloc((size_t)(D + 1) * sizeof *b->toks);
    b->rows = malloc((size_t)nrow * sizeof *b->rows);
    b->posv = malloc((size_t)nrow * sizeof *b->posv);
    r->scratch = malloc((size_t)V * 16);
    if (!b->lq || !b->lp || !b->q || !b->pv || !b->toks || !b->rows || !b->posv || !r->scratch)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_generate_ar: out of host memory (speculative buffers)");
    return KVS_OK;
}

static void spec_free(spec_run *r, spec_bufs *b) {
    free(b->lq); free(b->lp); free(b->q); free(b->pv); free(b->toks); free(b->rows); free(b->posv); free(r->scratch);
}

kvs_status kvs_generate_ar_spec(kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt, int64_t n_prompt,
                                const kvs_ar_params *p, kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out,
                                kvs_gen_stats *stats) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    const int64_t V = hp->vocab, D = p->draft;
    spec_run r = {.m = m, .c = cache, .p = p, .V = V, .rng = p->seed ? p->seed : 0x9E3779B97F4A7C15ull};
    spec_bufs b;
    kvs_status s = spec_alloc(&r, &b, D + 1 > n_prompt ? D + 1 : n_prompt);
    if (s == KVS_OK) s = kvs_cache_reset(cache);
    double t0 = kvs_decode_now_s(), b0 = kvs_device_build_seconds(kvs_model_device(m));
    /* prefill: the prompt into the 8-bit cache, the last row's logits (into lp's first row) */
    if (s == KVS_OK) s = spec_forward(&r, prompt, n_prompt, 1, 0, 0, b.rows, b.posv, b.lp);
    if (s == KVS_OK) r.st.rows_baseline += r.st.rows_computed;
    int64_t n = 0;
    int32_t tok = 0;
    int stop = 0;
    if (s == KVS_OK && p->max_new > 0) {
        tok = spec_pick(&r, b.lp, b.pv);
        if ((p->stop_at_bos && tok == hp->bos_id) || (p->stop_at_eos && tok == hp->eos_id)) stop = 1;
        else {
            out[n++] = tok;
            stop = cb && cb(user, tok);
        }
    }
    if (s == KVS_OK) s = spec_rounds(&r, &b, n_prompt, tok, n, stop, cb, user, out, &n);
    /* the baseline counts what plain decoding without a cache would run (as kvs_generate_ar): the
     * prompt, then pos + 1 rows per layer for every later token */
    for (int64_t i = 1; i < n; i++) r.st.rows_baseline += (n_prompt + i) * hp->n_layers;
    *n_out = n;
    r.st.tokens = n;
    kvs_decode_stats_finish(&r.st, t0, b0, m, cache);
    if (stats) *stats = r.st;
    spec_free(&r, &b);
    return s;
}

kvs_status kvs_generate_ar_spec_continue(kvs_model *m, kvs_kv_cache *cache, int64_t L, int32_t tok, const kvs_ar_params *p,
                                         kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out, kvs_gen_stats *stats) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    const int64_t V = hp->vocab, D = p->draft;
    spec_run r = {.m = m, .c = cache, .p = p, .V = V, .rng = p->seed ? p->seed : 0x9E3779B97F4A7C15ull};
    spec_bufs b;
    int64_t n = 0;
    double t0 = kvs_decode_now_s(), b0 = kvs_device_build_seconds(kvs_model_device(m));
    kvs_status s = spec_alloc(&r, &b, D + 1);
    if (s == KVS_OK) s = spec_rounds(&r, &b, L, tok, 0, 0, cb, user, out, &n);
    /* plain decoding without a cache: every forwarded token (tok, out[0 .. n-2]) recomputes its prefix */
    for (int64_t i = 0; i < n; i++) r.st.rows_baseline += (L + i + 1) * hp->n_layers;
    *n_out = n;
    r.st.tokens = n;
    kvs_decode_stats_finish(&r.st, t0, b0, m, cache);
    if (stats) *stats = r.st;
    spec_free(&r, &b);
    return s;
}
