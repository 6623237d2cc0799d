/* kvsieve eval: one window decoded token by token with and without eviction, and the recall
 * probes (eval.h; the metrics: cmd_eval.c's header). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "eval.h"

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        kvs_status try_s_ = (expr);                                                                \
        if (try_s_ != KVS_OK) return try_s_;                                                       \
    } while (0)

/* float64 log-softmax of logits[V] into out; returns the argmax (lowest id on ties). */
static int32_t log_softmax(const float *l, int64_t V, double *out) {
    int32_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (l[i] > l[best]) best = (int32_t)i;
    double mx = l[best], s = 0.0;
    for (int64_t i = 0; i < V; i++) s += exp((double)l[i] - mx);
    double lse = mx + log(s);
    for (int64_t i = 0; i < V; i++) out[i] = (double)l[i] - lse;
    return best;
}

/* 1 when token id is among the k most likely of lp[V] (ties: lower ids first). */
static int in_topk(const double *lp, int64_t V, int32_t id, int k) {
    int better = 0;
    for (int64_t i = 0; i < V && better < k; i++)
        if (lp[i] > lp[id] || (lp[i] == lp[id] && i < id)) better++;
    return better < k;
}

kvs_status eval_run_window(eval_ctx *e, kvs_kv_cache *cache, kvs_evictor *ev, const int32_t *tok, cell *c, int full) {
    int64_t V = e->hp->vocab, N = e->ctx;
    TRY(kvs_cache_reset(cache));
    if (ev) TRY(kvs_evictor_begin(ev, cache));
    int64_t peak = 0;
    double t0 = cli_now();
    for (int64_t t = 0; t + 1 < N; t++) {
        int32_t zero = 0, pos = (int32_t)t;
        kvs_step_plan plan = {.tokens = tok + t, .n_tokens = 1, .positions = &pos, .logit_rows = &zero, .n_logit_rows = 1,
                              .rope_in_cache = ev && e->rerotate};
        if (ev) {
            int any = 0;
            TRY(kvs_evictor_plan(ev, 1, e->lp, &any));
            plan.layers = any ? e->lp : NULL;
        }
        kvs_step_result r;
        TRY(kvs_model_forward(e->m, cache, &plan, &r));
        int64_t used = kvs_cache_bytes_used(cache);
        if (used > peak) peak = used;
        if (ev) TRY(kvs_evictor_update(ev, cache, &r));
        double *lp = full ? e->full_lp + t * V : e->lp_buf;
        int32_t top = log_softmax(r.logits, V, lp);
        int32_t next = tok[t + 1];
        if (e->needle) { /* a needle window: only the passkey's log-probability counts */
            if (e->needle[t + 1]) {
                c->needle_lp[e->needle_depth] += lp[next];
                c->needle_n[e->needle_depth]++;
            }
            continue;
        }
        if (full) e->full_top[t] = top;
        const double *fl = e->full_lp + t * V;
        double kl = 0.0;
        if (!full)
            for (int64_t i = 0; i < V; i++) kl += exp(fl[i]) * (fl[i] - lp[i]);
        c->kl_sum += kl > 0 ? kl : 0.0; /* rounding can give -1e-17 */
        c->agree += top == e->full_top[t];
        c->nll_sum += -lp[next];
        c->n++;
        if (e->probe[t + 1] && in_topk(fl, V, next, RECALL_TOPK)) {
            c->recall_probes++;
            c->recall_hits += in_topk(lp, V, next, RECALL_TOPK);
        }
    }
    if (e->needle) return KVS_OK;
    c->seconds += cli_now() - t0;
    if (peak > c->bytes_peak) c->bytes_peak = peak;
    int64_t alloc = kvs_cache_bytes_allocated(cache);
    if (alloc > c->bytes_alloc) c->bytes_alloc = alloc;
    if (ev) c->evictions += kvs_evictor_get_stats(ev).evictions;
    return KVS_OK;
}

/* ---- names for the recall score ------------------------------------------------------------- */

static const char SP[] = "\xe2\x96\x81"; /* U+2581, the tokenizer's space */

static int starts_word_upper(const char *s) { return strncmp(s, SP, 3) == 0 && s[3] >= 'A' && s[3] <= 'Z'; }
static int continues_word(const char *s) { return s[0] >= 'a' && s[0] <= 'z'; }
static int ends_sentence(const char *s) {
    size_t n = strlen(s);
    if (n == 0) return 1;
    if (strcmp(s, "<0x0A>") == 0) return 1;
    char c = s[n - 1];
    return c == '.' || c == '!' || c == '?' || c == '"' || c == ':';
}

/* Marks probe[t] for every token of a later mention of a name introduced in the first quarter. */
int eval_mark_probes(const kvs_tokenizer *tk, const int32_t *tok, int64_t N, uint8_t *probe) {
    memset(probe, 0, (size_t)N);
    typedef struct word { int64_t at, len; char text[64]; int initial; } word;
    word *w = malloc((size_t)N * sizeof *w);
    if (!w) return 0;
    int64_t nw = 0;
    for (int64_t t = 1; t < N; t++) {
        const char *s = kvs_tokenizer_token_text(tk, tok[t], NULL);
        if (!s || !starts_word_upper(s)) continue;
        word *x = &w[nw];
        x->at = t;
        x->len = 1;
        snprintf(x->text, sizeof x->text, "%s", s + 3);
        while (t + x->len < N) {
            const char *c = kvs_tokenizer_token_text(tk, tok[t + x->len], NULL);
            if (!c || !continues_word(c) || strlen(x->text) + strlen(c) >= sizeof x->text) break;
            strcat(x->text, c);
            x->len++;
        }
        const char *prev = kvs_tokenizer_token_text(tk, tok[t - 1], NULL);
        x->initial = t == 1 || !prev || ends_sentence(prev);
        if (strcmp(x->text, "I") != 0) nw++;
    }
    int marks = 0;
    for (int64_t i = 0; i < nw; i++) {
        /* first occurrence of this word? */
        int first = 1, named = !w[i].initial;
        for (int64_t j = 0; j < i && first; j++) first = strcmp(w[j].text, w[i].text) != 0;
        if (!first || w[i].at >= N / 4) continue;
        for (int64_t j = i + 1; j < nw && !named; j++) named = !w[j].initial && strcmp(w[j].text, w[i].text) == 0;
        if (!named) continue;
        for (int64_t j = i + 1; j < nw; j++)
            if (strcmp(w[j].text, w[i].text) == 0)
                for (int64_t k = 0; k < w[j].len; k++) {
                    probe[w[j].at + k] = 1;
                    marks++;
                }
    }
    free(w);
    return marks;
}

