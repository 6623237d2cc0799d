/* Internals shared by the forward's sources (forward.c: the layer loop; forward_attention.c: a
 * layer's attention). Not installed. */
#ifndef KVS_MODEL_FORWARD_INTERNAL_H
#define KVS_MODEL_FORWARD_INTERNAL_H

#include <stdint.h>

#include "model/model_internal.h"
#include "kvsieve/cache.h"
#include "kvsieve/latent.h"

typedef struct fwd_ctx {
    kvs_model *m;
    kvs_kv_cache *c;
    const kvs_step_plan *plan;
    int32_t *pos_host;      /* [n_tokens] positions */
    int32_t *all_rows;      /* [n_tokens] identity */
    int32_t *tmp;           /* [max(n_tokens, H*n)] scratch */
    int64_t n_tok;
    const kvs_layer_plan *lp; /* the current layer's plan (NULL: all rows, no statistics) */
    const int32_t *rows;      /* the current layer's rows (token indices) */
    /* What the small device index buffers hold, so that layers with the same rows skip re-uploads
     * (each upload can cost a queue flush on GPU backends). */
    int32_t *pos_rows;        /* [n_tokens] copy of the rows whose positions ws.pos holds */
    int64_t pos_n;            /* 0: ws.pos holds nothing valid yet */
} fwd_ctx;

/* A view with ndim dims / up to three dims (ndim from the trailing sizes) over a workspace buffer,
 * in the next slot of the workspace's view arena (no allocation; the arena is emptied at every
 * layer). Errors: KVS_ERR_STATE (arena full: an internal error), those of kvs_tensor_view_into. */
kvs_status fwd_view_nd(kvs_model *m, kvs_tensor **out, kvs_tensor *t, int64_t off, int ndim, const int64_t *ne);
kvs_status fwd_view3(kvs_model *m, kvs_tensor **out, kvs_tensor *t, int64_t off, int64_t a, int64_t b, int64_t c);
/* Forgets an arena view (nothing to free). */
void fwd_view_done(kvs_tensor **v);
/* Replaces *t by a new named device tensor [c][b][a] of dt. Errors: kvs_tensor_new's. */
kvs_status fwd_grow_tensor(kvs_tensor **t, kvs_device *dev, kvs_dtype dt, int64_t a, int64_t b, int64_t c, const char *name);
/* Grows a host array *p of *cap elements of elem bytes to n. Errors: KVS_ERR_OUT_OF_MEMORY. */
kvs_status fwd_host_grow(void **p, int64_t *cap, int64_t n, size_t elem);
/* 1 when rows[0..n) strictly increase within [0, limit). */
int fwd_rows_valid(const int32_t *rows, int64_t n, int64_t limit);

/* Layer l's attention over rows [0, n) of ws.q into ws.att, with the statistics of lp into *st
 * (forward_attention.c). Errors: bad keep-sets (KVS_ERR_INVALID_ARGUMENT), the ops'. */
kvs_status fwd_layer_attention(fwd_ctx *f, int l, const kvs_layer_plan *lp, int64_t n, kvs_layer_stats *st);

#endif
