/* The masked-diffusion decode loop (LLaDA low-confidence remasking, Fast-dLLM threshold decoding,
 * LLaDA's early stop at EOS; Dream's shifted logits read at dlm_step). See generate.h for the method
 * and its sources.
 *
 * The loop, as DESIGN.md draws it:
 *
 *   for each block:                       dlm_block_begin   (LLaDA's per-step commit quota)
 *     while the block has masks:
 *       dlm_step:  plan -> forward -> feedback -> candidates ranked by confidence
 *       dlm_commit_count + dlm_commit      (threshold or quota rule)
 *       dlm_eos_stop                       (stop_eos: the rest is EOS)
 *     dlm_emit                             (out[], the token callback)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_internal.h"
#include "kvsieve/model.h"
#include "kvsieve/schedule.h"

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

/* One decode's state. */
typedef struct dlm {
    kvs_model *m;
    kvs_kv_cache *cache;
    kvs_dlm_schedule *sched, *own; /* own: the no-cache schedule when the caller gave none */
    const kvs_model_hparams *hp;
    kvs_dlm_params p;
    int64_t n_prompt, n;           /* prompt length, sequence length (prompt + gen_len) */
    int64_t spb;                   /* steps per block (fixed-count rule) */
    int32_t *tokens;               /* [n] the sequence (masks = mask_id) */
    uint8_t *masked;               /* [n] 1 = still masked */
    int32_t *decoded;              /* [n] positions committed by the last step (and candidate scratch) */
    int32_t *row_of;               /* [n] logits row of a position in the last step */
    int32_t *src_rows;             /* [n] shifted logits: the rows p-1 asked of the forward */
    int32_t *key_limit;            /* [n] block-causal: keys visible to each position (NULL otherwise) */
    int64_t *quota;                /* [spb] tokens committed at each step of the block */
    cand *cands;                   /* [n] the last step's candidates, most confident first */
    int64_t n_decoded, step;
    kvs_gen_stats st;
} dlm;

typedef struct dlm_block {
    int64_t start, end;            /* [start, end) */
    int index;
    int step_in_block;
    int64_t n_masked;              /* masks left in the block */
} dlm_block;

/* Validation of the arguments and the parameters (defaults filled in *p, steps per block in *spb). */
static kvs_status dlm_check(const char *op, const kvs_model *m, const kvs_kv_cache *cache, const int32_t *prompt,
                            int64_t n_prompt, const int32_t *out, const kvs_dlm_params *pp, kvs_dlm_params *p,
                            int64_t *spb) {
    if (!m || !cache || !out || (n_prompt > 0 && !prompt)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *p = pp ? *pp : kvs_dlm_params_default();
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    if (!kvs_arch_is_diffusion(hp->arch) || hp->mask_id < 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: model '%s' is not a masked-diffusion model with a mask id", op,
                         kvs_arch_name(hp->arch));
    if (n_prompt < 0 || p->gen_len < 1 || p->block_len < 1 || p->gen_len % p->block_len)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: gen_len %lld must be a positive multiple of block_len %lld", op,
                         (long long)p->gen_len, (long long)p->block_len);
    int64_t nb = p->gen_len / p->block_len;
    if (p->steps == 0) p->steps = p->gen_len;
    if (p->threshold < 0.0f || p->threshold > 1.0f)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: threshold %g outside [0, 1]", op, (double)p->threshold);
    if (p->threshold == 0.0f && (p->steps < nb || p->steps % nb))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: steps %lld must be a positive multiple of the block count %lld", op,
                         (long long)p->steps, (long long)nb);
    if (p->stop_eos && hp->eos_id < 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: stop_eos needs an EOS id, and the model has none", op);
    if (hp->logit_shift && n_prompt < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: model '%s' predicts position i from row i-1 (shifted logits) and "
                         "needs a prompt of at least one token", op, kvs_arch_name(hp->arch));
    *spb = p->steps / nb;
    const kvs_cache_params *cp = kvs_cache_get_params(cache);
    int64_t n = n_prompt + p->gen_len;
    if (cp->mode != KVS_CACHE_POSITIONAL) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: needs a POSITIONAL cache", op);
    if (p->block_causal) {
        const char *sn = kvs_dlm_schedule_name(p->schedule);
        if (strcmp(sn, "none") && strcmp(sn, "prefix"))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: schedule '%s' is not defined for block-causal decoding (use none, "
                             "or prefix, which is exact under block-causal attention)", op, sn);
    }
    if (n > cp->capacity)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: %lld tokens exceed the cache capacity %lld", op, (long long)n,
                         (long long)cp->capacity);
    unsigned need = kvs_dlm_schedule_cache_flags(p->schedule);
    if ((cp->flags & need) != need)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: schedule '%s' needs cache flags 0x%x", op,
                         kvs_dlm_schedule_name(p->schedule), need);
    return KVS_OK;
}

static void dlm_free(dlm *d) {
    kvs_dlm_schedule_destroy(&d->own);
    free(d->tokens), free(d->masked), free(d->decoded), free(d->row_of), free(d->src_rows), free(d->quota), free(d->cands);
    free(d->key_limit);
}

/* The state of a decode of prompt + gen_len masks; starts the schedule. */
static kvs_status dlm_begin(dlm *d, const char *op, kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt,
                            int64_t n_prompt, const kvs_dlm_params *p, int64_t spb) {
    memset(d, 0, sizeof *d);
    d->m = m, d->cache = cache, d->hp = kvs_model_get_hparams(m), d->p = *p;
    d->n_prompt = n_prompt, d->n = n_prompt + p->gen_len, d->spb = spb;
    d->sched = p->schedule;
    if (!d->sched) {
        KVS_TRY(kvs_dlm_schedule_none(&d->own));
        d->sched = d->own;
    }
    size_t n = (size_t)d->n;
    d->tokens = malloc(n * sizeof *d->tokens);
    d->masked = calloc(n, 1);
    d->decoded = malloc(n * sizeof *d->decoded);
    d->row_of = malloc(n * sizeof *d->row_of);
    d->src_rows = malloc(n * sizeof *d->src_rows);
    d->quota = malloc((size_t)(spb > 0 ? spb : 1) * sizeof *d->quota);
    d->cands = malloc(n * sizeof *d->cands);
    if (!d->tokens || !d->masked || !d->decoded || !d->row_of || !d->src_rows || !d->quota || !d->cands)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int64_t i = 0; i < d->n; i++) {
        d->tokens[i] = i < n_prompt ? prompt[i] : d->hp->mask_id;
        d->masked[i] = i >= n_prompt;
    }
    if (p->block_causal) { /* the prompt causal; block b of the answer sees keys up to its end */
        d->key_limit = malloc(n * sizeof *d->key_limit);
        if (!d->key_limit) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        for (int64_t i = 0; i < d->n; i++)
            d->key_limit[i] = (int32_t)(i < n_prompt ? i + 1
                                                     : n_prompt + ((i - n_prompt) / p->block_len + 1) * p->block_len);
    }
    const kvs_dlm_schedule_ops *so = d->sched->ops;
    return so->begin ? so->begin(d->sched->self, d->n, d->hp->n_layers) : KVS_OK;
}

/* Block b and its commit quota: m masks over s steps commit m / s each, one more in the first
 * m % s steps (LLaDA's get_num_transfer_tokens). */
static dlm_block dlm_block_begin(dlm *d, int64_t b) {
    dlm_block blk = {.start = d->n_prompt + b * d->p.block_len, .index = (int)b};
    blk.end = blk.start + d->p.block_len;
    for (int64_t i = blk.start; i < blk.end; i++) blk.n_masked += d->masked[i];
    for (int64_t i = 0; i < d->spb; i++) d->quota[i] = blk.n_masked / d->spb + (i < blk.n_masked % d->spb ? 1 : 0);
    return blk;
}

/* Confidences of the step's candidates into d->cands[0..*nc), most confident first (lowest position
 * on ties). Candidates: the schedule's, else the block's masked positions; each must be a masked
 * position of the block with a logits row. */
static kvs_status dlm_rank(dlm *d, const char *op, const dlm_block *blk, const kvs_dlm_step *ds, const float *logits,
                           int64_t *nc) {
    const kvs_step_plan *plan = &ds->plan;
    for (int64_t i = 0; i < plan->n_logit_rows; i++) d->row_of[plan->logit_rows[i]] = (int32_t)i;
    const int32_t *cpos = ds->candidates;
    int64_t ncand = ds->candidates ? ds->n_candidates : 0;
    if (!cpos) {
        for (int64_t i = blk->start; i < blk->end; i++)
            if (d->masked[i]) d->decoded[ncand++] = (int32_t)i; /* decoded[] reused as scratch */
        cpos = d->decoded;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < ncand; i++) {
        int32_t pos = cpos[i];
        int found = 0;
        for (int64_t j = 0; j < plan->n_logit_rows && !found; j++) found = plan->logit_rows[j] == pos;
        if (pos < blk->start || pos >= blk->end || !d->masked[pos] || !found)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                             "%s: schedule '%s' proposed candidate %d that is not a masked position of the block with logits",
                             op, kvs_dlm_schedule_name(d->sched), pos);
        d->cands[k].pos = pos;
        kvs_decode_confidence(logits + (int64_t)d->row_of[pos] * d->hp->vocab, d->hp->vocab, &d->cands[k].tok, &d->cands[k].conf);
        k++;
    }
    if (k == 0) return kvs_error(KVS_ERR_STATE, "%s: schedule '%s' proposed no candidates", op, kvs_dlm_schedule_name(d->sched));
    qsort(d->cands, (size_t)k, sizeof *d->cands, cmp_cand);
    *nc = k;
    return KVS_OK;
}

/* One denoising step: the schedule's plan -> the forward -> the schedule's feedback -> the
 * candidates ranked by confidence (d->cands[0..*nc)). */
static kvs_status dlm_step(dlm *d, const char *op, const dlm_block *blk, int64_t *nc) {
    const kvs_model_hparams *hp = d->hp;
    /* block-causal: nothing after the block's end can reach it, so the step runs only [0, end) */
    int64_t n_vis = d->p.block_causal ? blk->end : d->n;
    kvs_dlm_view v = {.tokens = d->tokens, .n_tokens = n_vis, .prompt_len = d->n_prompt, .mask_id = hp->mask_id,
                      .masked = d->masked, .block_start = blk->start, .block_end = blk->end, .block = blk->index,
                      .step_in_block = blk->step_in_block, .step = d->step, .decoded_prev = d->decoded,
                      .n_decoded_prev = d->n_decoded, .n_layers = hp->n_layers,
                      .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads, .logit_shift = hp->logit_shift,
                      .block_causal = d->p.block_causal};
    kvs_dlm_step ds;
    memset(&ds, 0, sizeof ds);
    double t0 = kvs_now_s();
    KVS_TRY(d->sched->ops->plan(d->sched->self, &v, &ds));
    ds.plan.tokens = d->tokens;
    ds.plan.n_tokens = n_vis;
    ds.plan.positions = NULL;
    ds.plan.key_limit = d->key_limit;
    kvs_step_result r;
    /* shifted logits (Dream): position p's prediction is row p-1's output; the plan keeps naming
     * positions (dlm_rank maps them), the forward is asked for the rows before them */
    const int32_t *logit_pos = ds.plan.logit_rows;
    if (hp->logit_shift) {
        if (ds.plan.n_logit_rows > n_vis || (ds.plan.n_logit_rows > 0 && !logit_pos))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: schedule '%s' gave bad logit rows", op, kvs_dlm_schedule_name(d->sched));
        for (int64_t i = 0; i < ds.plan.n_logit_rows; i++) {
            if (logit_pos[i] < 1 || logit_pos[i] >= n_vis)
                return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: schedule '%s' asked for the logits of position %d, which "
                                 "has no row before it (shifted logits)", op, kvs_dlm_schedule_name(d->sched), logit_pos[i]);
            d->src_rows[i] = logit_pos[i] - 1;
        }
        ds.plan.logit_rows = d->src_rows;
    }
    double t1 = kvs_now_s();
    d->st.seconds_plan += t1 - t0;
    kvs_status fs = kvs_model_forward(d->m, d->cache, &ds.plan, &r);
    ds.plan.logit_rows = logit_pos;
    if (fs == KVS_ERR_INVALID_ARGUMENT && hp->logit_shift) { /* say why a row was missing */
        char why[512];
        snprintf(why, sizeof why, "%s", kvs_last_error());
        return kvs_error(fs, "%s: schedule '%s': %s (shifted logits: a plan must compute the row before each logit "
                         "position, see kvs_dlm_view.logit_shift)", op, kvs_dlm_schedule_name(d->sched), why);
    }
    KVS_TRY(fs);
    double t2 = kvs_now_s();
    d->st.seconds_forward += t2 - t1 - r.seconds_logits;
    d->st.seconds_logits += r.seconds_logits;
    d->st.rows_computed += r.rows_computed;
    d->st.rows_baseline += n_vis * hp->n_layers; /* the no-cache step of the same decoding mode */
    int64_t used = kvs_cache_bytes_used(d->cache);
    if (used > d->st.cache_bytes_peak) d->st.cache_bytes_peak = used;
    if (d->sched->ops->feedback) KVS_TRY(d->sched->ops->feedback(d->sched->self, &v, &r));
    double t3 = kvs_now_s();
    d->st.seconds_plan += t3 - t2;
    kvs_status s = dlm_rank(d, op, blk, &ds, r.logits, nc);
    d->st.seconds_confidence += kvs_now_s() - t3;
    return s;
}

/* The commit rule: how many of the nc ranked candidates this step commits. Threshold (Fast-dLLM):
 * every candidate with confidence >= threshold, at least one; else the block's quota for this step
 * (one when the steps ran out), at most nc. */
static int64_t dlm_commit_count(const dlm *d, const dlm_block *blk, int64_t nc) {
    int64_t k;
    if (d->p.threshold > 0.0f) {
        k = 0;
        while (k < nc && d->cands[k].conf >= (double)d->p.threshold) k++;
        return k ? k : 1;
    }
    k = blk->step_in_block < d->spb ? d->quota[blk->step_in_block] : 1;
    if (k < 1) k = 1;
    return k > nc ? nc : k;
}

/* Commits the k most confident candidates. */
static void dlm_commit(dlm *d, dlm_block *blk, int64_t k) {
    d->n_decoded = 0;
    for (int64_t i = 0; i < k; i++) {
        d->tokens[d->cands[i].pos] = d->cands[i].tok;
        d->masked[d->cands[i].pos] = 0;
        d->decoded[d->n_decoded++] = d->cands[i].pos;
    }
    blk->n_masked -= k;
    d->st.tokens += k;
    d->step++;
    blk->step_in_block++;
}

/* LLaDA's early stop at EOS: once every generated position before the first committed EOS is
 * decoded, every position after it is set to EOS (the masked ones without decoding, counted in
 * st.tokens_eos_filled). Returns 1 when the decode is complete. */
static int dlm_eos_stop(dlm *d) {
    int32_t eos = d->hp->eos_id;
    int64_t e = -1;
    for (int64_t i = d->n_prompt; i < d->n && e < 0; i++) {
        if (d->masked[i]) return 0;
        if (d->tokens[i] == eos) e = i;
    }
    if (e < 0) return 0;
    for (int64_t i = e + 1; i < d->n; i++) {
        d->st.tokens_eos_filled += d->masked[i];
        d->masked[i] = 0;
        d->tokens[i] = eos;
    }
    return 1;
}

/* Copies the finished positions [*emitted, end) of the generated part to out[] and hands them to the
 * callback (until it asks to stop). Returns 1 when the callback asked to stop. */
static int dlm_emit(const dlm *d, int64_t end, kvs_token_cb cb, void *user, int32_t *out, int64_t *emitted) {
    int stop = 0;
    for (int64_t i = d->n_prompt + *emitted; i < end; i++) {
        out[i - d->n_prompt] = d->tokens[i];
        if (cb && !stop) stop = cb(user, d->tokens[i]);
    }
    *emitted = end - d->n_prompt;
    return stop;
}

kvs_status kvs_generate_dlm(kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt, int64_t n_prompt,
                            const kvs_dlm_params *pp, kvs_token_cb cb, void *user, int32_t *out, kvs_gen_stats *stats) {
    const char *op = "kvs_generate_dlm";
    kvs_dlm_params p;
    int64_t spb = 0;
    KVS_TRY(dlm_check(op, m, cache, prompt, n_prompt, out, pp, &p, &spb));
    KVS_TRY(kvs_cache_reset(cache));
    dlm d;
    kvs_status s = dlm_begin(&d, op, m, cache, prompt, n_prompt, &p, spb);
    double t0 = kvs_decode_now_s(), b0 = kvs_device_build_seconds(kvs_model_device(m));
    int64_t emitted = 0;
    int stop = 0;
    for (int64_t b = 0; b < p.gen_len / p.block_len && s == KVS_OK && !stop; b++) {
        dlm_block blk = dlm_block_begin(&d, b);
        int eos = 0;
        while (blk.n_masked > 0 && s == KVS_OK && !eos) {
            int64_t nc = 0;
            s = dlm_step(&d, op, &blk, &nc);
            double tc = kvs_now_s();
            if (s == KVS_OK) dlm_commit(&d, &blk, dlm_commit_count(&d, &blk, nc));
            if (s == KVS_OK && p.stop_eos) eos = dlm_eos_stop(&d);
            d.st.seconds_commit += kvs_now_s() - tc;
        }
        double te = kvs_now_s();
        if (s == KVS_OK) stop = dlm_emit(&d, eos ? d.n : blk.end, cb, user, out, &emitted) || eos;
        d.st.seconds_commit += kvs_now_s() - te;
    }
    /* stopped by the callback: the positions never decoded stay mask_id */
    if (s == KVS_OK)
        for (int64_t i = emitted; i < p.gen_len; i++) out[i] = d.tokens[n_prompt + i];
    d.st.steps = d.step;
    kvs_decode_stats_finish(&d.st, t0, b0, m, cache);
    if (stats) *stats = d.st;
    dlm_free(&d);
    return s;
}
