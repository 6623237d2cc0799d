/* kvsieve eval: the teacher-forced measurement of one window (shared by its files, not installed):
 *   cmd_eval.c      options, model and text, the cells (policy x budget), the report (table, JSON, SVG)
 *   eval_window.c   one window decoded token by token with or without an evictor, the per-cell sums
 *                   (KL, top-1, NLL, recall probes, cache bytes), and the recall probes of a window
 * The metrics: cmd_eval.c's header. */
#ifndef KVS_CLI_EVAL_H
#define KVS_CLI_EVAL_H

#include <stdint.h>

#include "kvsieve/cache.h"
#include "kvsieve/model.h"
#include "kvsieve/policy.h"
#include "kvsieve/tokenizer.h"

#define RECALL_TOPK 5 /* a name token counts as predicted when it is among the model's top 5 */

/* --needle: the passkey sits at these depths of the window (10%, 50%, 90% of the filler text). */
#define EVAL_NEEDLE_DEPTHS 3

typedef struct cell {
    const char *policy;     /* NULL: full cache */
    double budget;
    int64_t kept;           /* budget in tokens per kv head */
    double kl_sum, nll_sum;
    int64_t n, agree;
    int64_t recall_probes, recall_hits;
    int64_t bytes_peak, bytes_alloc, evictions;
    double seconds;
    double needle_lp[EVAL_NEEDLE_DEPTHS]; /* --needle: summed log-probabilities of the passkey's tokens */
    int64_t needle_n[EVAL_NEEDLE_DEPTHS]; /*           and their count, per depth */
} cell;

typedef struct eval_ctx {
    const char *prog;
    kvs_device *dev;
    kvs_model *m;
    const kvs_model_hparams *hp;
    int64_t ctx;
    kvs_layer_plan *lp;
    double *full_lp;        /* [ctx-1][V] full-cache log-probabilities */
    int32_t *full_top;      /* [ctx-1] */
    double *lp_buf;         /* [V] */
    uint8_t *probe;         /* [ctx] 1: token t is a recall probe (predicted at t-1) */
    int rerotate;           /* --rerotate: evicted runs assign RoPE positions within the cache */
    double think;           /* --think R: ThinK key-channel pruning at each eviction */
    const uint8_t *needle;  /* [ctx] NULL: a normal window; else a needle window: 1 marks the passkey's
                             * answer tokens, whose log-probabilities go to cell needle_lp[needle_depth]
                             * (nothing else is counted) */
    int needle_depth;
} eval_ctx;


/* Decodes window tok[0..e->ctx) token by token into cache (reset first), with evictor ev (NULL:
 * none), adding its predictions to cell c. full = 1: the full-cache reference run, which stores
 * e->full_lp / e->full_top for the runs after it. Errors: the library's, from the forward and evictor. */
kvs_status eval_run_window(eval_ctx *e, kvs_kv_cache *cache, kvs_evictor *ev, const int32_t *tok, cell *c, int full);

/* Marks probe[t] (t < N) for every token of a later mention of a name introduced in the window's
 * first quarter; returns the number of marked tokens (0 also when out of memory). */
int eval_mark_probes(const kvs_tokenizer *tk, const int32_t *tok, int64_t N, uint8_t *probe);

#endif
