/* Step fidelity of a diffusion cache schedule: at every step, the no-cache forward of the same
 * decoding state on a shadow model, compared by argmax at the schedule's logit rows. Unlike
 * positional agreement with a no-cache decode it does not cascade after a first differing token.
 * See generate.h (kvs_dlm_schedule_fidelity). */
#include <stdlib.h>
#include <string.h>

#include "decode/decode_internal.h"
#include "kvsieve/model.h"
#include "kvsieve/schedule.h"

typedef struct fidelity {
    kvs_dlm_schedule *inner;   /* borrowed */
    kvs_dlm_schedule_ops ops;  /* the inner schedule's name and cache flags, our hooks */
    kvs_model *m;              /* shadow model, borrowed */
    kvs_kv_cache *c;           /* shadow cache, borrowed */
    const int32_t *rows;       /* the step's logit rows (the inner plan's, valid until its next call) */
    int64_t n_rows;
    int32_t *am;               /* [am_cap] argmax of the schedule's logits rows, then (shifted
                                * logits) the rows p-1 asked of the shadow; reused */
    int64_t am_cap;
    kvs_dlm_fidelity res;
} fidelity;

static kvs_status fid_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    fidelity *f = self;
    KVS_TRY(f->inner->ops->plan(f->inner->self, v, out));
    f->rows = out->plan.logit_rows;
    f->n_rows = out->plan.n_logit_rows;
    return KVS_OK;
}

static kvs_status fid_feedback(void *self, const kvs_dlm_view *v, const kvs_step_result *r) {
    fidelity *f = self;
    if (f->inner->ops->feedback) KVS_TRY(f->inner->ops->feedback(f->inner->self, v, r));
    if (2 * f->n_rows > f->am_cap) {
        int32_t *a = realloc(f->am, (size_t)(2 * f->n_rows) * sizeof *a);
        if (!a) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dlm_schedule_fidelity: out of host memory");
        f->am = a;
        f->am_cap = 2 * f->n_rows;
    }
    /* the schedule's argmaxes first (r->logits is the decode model's host buffer; a shadow forward on
     * the same model object would overwrite it) */
    for (int64_t i = 0; i < f->n_rows; i++) f->am[i] = kvs_decode_argmax(r->logits + i * r->vocab, r->vocab);
    kvs_step_plan plan = {.tokens = v->tokens, .n_tokens = v->n_tokens, .logit_rows = f->rows, .n_logit_rows = f->n_rows};
    if (v->logit_shift) { /* the decode read rows p-1 for positions p (Dream): so does the shadow */
        int32_t *src = f->am + f->n_rows;
        for (int64_t i = 0; i < f->n_rows; i++) src[i] = f->rows[i] - 1;
        plan.logit_rows = src;
    }
    kvs_step_result sr;
    double t0 = kvs_decode_now_s();
    kvs_status s = kvs_model_forward(f->m, f->c, &plan, &sr);
    if (s == KVS_OK)
        for (int64_t i = 0; i < f->n_rows; i++) {
            f->res.match += f->am[i] == kvs_decode_argmax(sr.logits + i * sr.vocab, sr.vocab);
            f->res.total++;
        }
    f->res.seconds += kvs_decode_now_s() - t0;
    return s;
}

static kvs_status fid_begin(void *self, int64_t n_tokens, int n_layers) {
    fidelity *f = self;
    KVS_TRY(kvs_cache_reset(f->c));
    return f->inner->ops->begin ? f->inner->ops->begin(f->inner->self, n_tokens, n_layers) : KVS_OK;
}

static void fid_stats(void *self, kvs_dlm_schedule_stats *out) {
    fidelity *f = self;
    kvs_dlm_schedule_get_stats(f->inner, out);
}

static void fid_destroy(void *self) {
    fidelity *f = self;
    if (f) free(f->am);
    free(f);
}

kvs_status kvs_dlm_schedule_fidelity(kvs_dlm_schedule **out, kvs_dlm_schedule *inner, kvs_model *shadow,
                                     kvs_kv_cache *shadow_cache) {
    const char *op = "kvs_dlm_schedule_fidelity";
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!inner || !shadow || !shadow_cache) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    if (kvs_cache_get_params(shadow_cache)->mode != KVS_CACHE_POSITIONAL)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: the shadow cache must be POSITIONAL", op);
    fidelity *f = calloc(1, sizeof *f);
    if (!f) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    f->inner = inner;
    f->m = shadow;
    f->c = shadow_cache;
    f->ops = (kvs_dlm_schedule_ops){.name = kvs_dlm_schedule_name(inner), .cache_flags = kvs_dlm_schedule_cache_flags(inner),
                                    .plan = fid_plan, .feedback = fid_feedback, .begin = fid_begin, .stats = fid_stats,
                                    .destroy = fid_destroy};
    kvs_status s = kvs_dlm_schedule_custom(out, &f->ops, f);
    if (s != KVS_OK) free(f);
    return s;
}

kvs_status kvs_dlm_fidelity_get(const kvs_dlm_schedule *s, kvs_dlm_fidelity *out) {
    if (!s || !out || s->ops->plan != fid_plan)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_fidelity_get: NULL argument or not a fidelity schedule");
    *out = ((const fidelity *)s->self)->res;
    return KVS_OK;
}
