/* kvsieve CLI — DLM cache schedule options shared by `generate` and `eval --dlm`:
 * --cache none|prefix|dual|delayed|elastic, --gamma, --window, --track, --elastic-sim,
 * --elastic-block-refresh, --reload, --wavefilter,
 * --wf-family, --wf-levels, --wf-budget, --wf-rho, --wf-keep-mass, --spa-rank, --spa-budget, --spa-uniform,
 * --spa-refresh, --spa-refresh-gen (see include/kvsieve/schedule.h). */
#ifndef KVS_TOOLS_DLM_CACHE_OPTS_H
#define KVS_TOOLS_DLM_CACHE_OPTS_H

#include "cli.h"
#include "kvsieve/schedule.h"

typedef struct dlm_cache_opts {
    const char *cache;      /* default "none" (given: a pointer other than the default's) */
    double gamma;           /* elastic drift threshold, default 0.9 */
    int window, track;      /* elastic window 16, tracked tokens 1 */
    int reload;             /* delayed full refresh interval, default 4 */
    const char *sim;        /* elastic similarity: rows | heads, default rows */
    int block_refresh;      /* elastic: full step at every block start (1, default) or only the first (0) */
    int wavefilter;         /* 1: wrap the schedule in WaveFilter */
    const char *wf_family;  /* haar | db2 | db4, default haar */
    int wf_levels;          /* default 3 (CLI_UNSET_INT: not given) */
    double wf_budget;       /* kept fraction, default 0.5 (CLI_UNSET_DBL: not given) */
    double wf_rho;          /* skim share, default 0.5 (CLI_UNSET_DBL: not given) */
    double wf_keep_mass;    /* PSA-style top-p keep-sets (kvs_wavefilter_params.keep_mass); default 0 = off */
    int spa_rank;           /* SPA-Cache (kvs_spa_params): proxy rank, 0 = automatic */
    double spa_budget;      /* peak per-layer recompute share, default 0.25 */
    int spa_uniform;        /* 1: every layer gets the budget */
    int spa_refresh, spa_refresh_gen; /* full / generation-row refresh intervals, default 50 / 7 */
} dlm_cache_opts;

/* Defaults as documented on each field. */
dlm_cache_opts dlm_cache_opts_default(void);

/* The option table entries (DLM_CACHE_N_OPTS of them) bound to o, written into opts[0..DLM_CACHE_N_OPTS). */
#define DLM_CACHE_N_OPTS 18
void dlm_cache_cli_opts(dlm_cache_opts *o, cli_opt *opts);

/* Builds the schedule (NULL for "none" without WaveFilter). 0 on success; on failure prints one line
 * "PROG: ..." and returns CLI_EXIT_USAGE. `cache` overrides o->cache when not NULL; budget > 0
 * overrides o->wf_budget and turns WaveFilter on. */
int dlm_cache_build(const char *prog, const dlm_cache_opts *o, const char *cache, double budget, kvs_dlm_schedule **out);

/* The first diffusion-schedule option given (--cache other than none, --wavefilter, --wf-*, --gamma,
 * --window, --track, --elastic-sim, --elastic-block-refresh, --reload, --spa-*), or NULL: `generate`
 * refuses them on autoregressive models. */
const char *dlm_cache_given(const dlm_cache_opts *o);

/* Refuses (CLI_EXIT_USAGE, one line) what the command would not use, for `generate` (table 0: the
 * schedule of --cache, WaveFilter with --wavefilter) and `eval --dlm` (table 1: the schedules of
 * --caches, WaveFilter at each --budgets value): with table, --cache, --wavefilter and --wf-budget;
 * without wf_runs (no WaveFilter decode), any --wf-* option; then schedule-specific flags when no listed cache takes them:
 * --gamma/--window/--track/--elastic-sim/--elastic-block-refresh without elastic, --reload without
 * delayed, --spa-* without spa (the first given flag named alone); then a value out of its range,
 * named alone with the range (--gamma 2: want [0, 1]; --wf-levels, --wf-budget, ...). 0 when fine. */
int dlm_cache_check_flags(const char *prog, const dlm_cache_opts *o, char *const *caches, int n, int table, int wf_runs);

/* Refuses (CLI_EXIT_USAGE, one line naming the valid range or the reason) what the loaded model
 * rules out for the listed caches before anything runs: --spa-rank above min(dim,
 * n_kv_heads*head_dim) (the singular values the value projection has; kvs_model_spa_proxy), and
 * d2cache on a model with shifted logits (Dream: hparams.logit_shift).
 * 0 when fine. */
int dlm_cache_check_model(const char *prog, const dlm_cache_opts *o, char *const *caches, int n,
                          const kvs_model_hparams *hp);

#endif
