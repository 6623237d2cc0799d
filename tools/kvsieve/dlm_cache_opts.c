/* kvsieve CLI — DLM cache schedule options (see dlm_cache_opts.h). */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "dlm_cache_opts.h"

/* the defaults of the string options: --cache none / --wf-family haar were given when the pointer differs */
static const char default_cache[] = "none", default_wf_family[] = "haar";

dlm_cache_opts dlm_cache_opts_default(void) {
    /* the schedule-specific fields start "not given" (defaults resolved in dlm_cache_build), so a
     * flag for a schedule that is not run can be refused */
    dlm_cache_opts o = {.cache = default_cache, .gamma = CLI_UNSET_DBL, .window = CLI_UNSET_INT, .track = CLI_UNSET_INT,
                        .reload = CLI_UNSET_INT, .sim = NULL, .block_refresh = CLI_UNSET_INT, .wavefilter = 0,
                        .wf_family = default_wf_family, .wf_levels = CLI_UNSET_INT, .wf_budget = CLI_UNSET_DBL,
                        .wf_rho = CLI_UNSET_DBL, .wf_keep_mass = CLI_UNSET_DBL, .spa_rank = CLI_UNSET_INT,
                        .spa_budget = CLI_UNSET_DBL, .spa_uniform = 0, .spa_refresh = CLI_UNSET_INT,
                        .spa_refresh_gen = CLI_UNSET_INT};
    return o;
}

/* The schedule options, one row each: how "given" is told from the unset marker (CLI_UNSET_INT,
 * CLI_UNSET_DBL, a string other than its default pointer, a flag set), the schedule they are for,
 * and the range a given value must lie in. dlm_cache_given, wf_given, dlm_cache_check_flags and
 * check_values walk it. Order: check_values' (elastic, delayed, WaveFilter, spa); dlm_cache_given
 * names --cache and --wavefilter first, then the --wf-* rows, then the others in this order. */
enum { FOR_ANY, FOR_ELASTIC, FOR_DELAYED, FOR_WF, FOR_SPA };
typedef struct dlm_opt {
    const char *name;   /* as the messages name it: "--gamma" */
    cli_kind type;      /* the field's type: CLI_INT (int), CLI_DOUBLE, CLI_STRING, CLI_FLAG (int) */
    size_t off;         /* offsetof(dlm_cache_opts, field) */
    int group;          /* FOR_*: the schedule that takes it (FOR_ANY: --cache, --wavefilter) */
    const char *dflt;   /* CLI_STRING: given when the field is another pointer (NULL: when not NULL) */
    double lo, hi;      /* CLI_INT / CLI_DOUBLE range of a given value; lo > hi: not checked */
    int lo_open;        /* CLI_DOUBLE: (lo, hi] instead of [lo, hi] */
    const char *choices; /* CLI_STRING: the values taken, '|'-separated (NULL: not checked) */
    const char *want;   /* how the refusal names the range */
} dlm_opt;

#define OFF(f) offsetof(dlm_cache_opts, f)
static const dlm_opt dlm_opts[] = {
    {"--cache", CLI_STRING, OFF(cache), FOR_ANY, default_cache, 1, 0, 0, NULL, NULL},
    {"--wavefilter", CLI_FLAG, OFF(wavefilter), FOR_ANY, NULL, 1, 0, 0, NULL, NULL},
    {"--gamma", CLI_DOUBLE, OFF(gamma), FOR_ELASTIC, NULL, 0.0, 1.0, 0, NULL, "want a threshold in [0, 1]"},
    {"--window", CLI_INT, OFF(window), FOR_ELASTIC, NULL, 1, INT_MAX, 0, NULL, "want >= 1"},
    {"--track", CLI_INT, OFF(track), FOR_ELASTIC, NULL, 1, INT_MAX, 0, NULL, "want >= 1"},
    {"--elastic-sim", CLI_STRING, OFF(sim), FOR_ELASTIC, NULL, 1, 0, 0, "rows|heads", "want rows or heads"},
    {"--elastic-block-refresh", CLI_INT, OFF(block_refresh), FOR_ELASTIC, NULL, 0, 1, 0, NULL, "want 0 or 1"},
    {"--reload", CLI_INT, OFF(reload), FOR_DELAYED, NULL, 1, INT_MAX, 0, NULL, "want >= 1"},
    {"--wf-family", CLI_STRING, OFF(wf_family), FOR_WF, default_wf_family, 1, 0, 0, NULL, NULL},
    {"--wf-levels", CLI_INT, OFF(wf_levels), FOR_WF, NULL, 1, 8, 0, NULL, "want 1..8"},
    {"--wf-budget", CLI_DOUBLE, OFF(wf_budget), FOR_WF, NULL, 0.0, 1.0, 1, NULL, "want a fraction in (0, 1]"},
    {"--wf-rho", CLI_DOUBLE, OFF(wf_rho), FOR_WF, NULL, 0.0, 1.0, 0, NULL, "want [0, 1]"},
    {"--wf-keep-mass", CLI_DOUBLE, OFF(wf_keep_mass), FOR_WF, NULL, 0.0, 1.0, 0, NULL, "want [0, 1]"},
    {"--spa-rank", CLI_INT, OFF(spa_rank), FOR_SPA, NULL, 0, INT_MAX, 0, NULL, "want 0 (automatic) or >= 1"},
    {"--spa-budget", CLI_DOUBLE, OFF(spa_budget), FOR_SPA, NULL, 0.0, 1.0, 1, NULL, "want a share in (0, 1]"},
    {"--spa-uniform", CLI_FLAG, OFF(spa_uniform), FOR_SPA, NULL, 1, 0, 0, NULL, NULL},
    {"--spa-refresh", CLI_INT, OFF(spa_refresh), FOR_SPA, NULL, 1, INT_MAX, 0, NULL, "want >= 1"},
    {"--spa-refresh-gen", CLI_INT, OFF(spa_refresh_gen), FOR_SPA, NULL, 1, INT_MAX, 0, NULL, "want >= 1"},
};
#undef OFF
#define N_DLM_OPTS (sizeof dlm_opts / sizeof dlm_opts[0])

static int opt_int(const dlm_cache_opts *o, const dlm_opt *e) { return *(const int *)((const char *)o + e->off); }
static double opt_dbl(const dlm_cache_opts *o, const dlm_opt *e) { return *(const double *)((const char *)o + e->off); }
static const char *opt_str(const dlm_cache_opts *o, const dlm_opt *e) { return *(const char *const *)((const char *)o + e->off); }

/* Whether option e was given (its field differs from the unset marker / default). */
static int opt_given(const dlm_cache_opts *o, const dlm_opt *e) {
    switch (e->type) {
    case CLI_INT: return opt_int(o, e) != CLI_UNSET_INT;
    case CLI_DOUBLE: return !isnan(opt_dbl(o, e));
    case CLI_STRING: return opt_str(o, e) != e->dflt;
    default: return opt_int(o, e) != 0; /* CLI_FLAG */
    }
}

/* The first option of group g given (table order), or NULL. */
static const char *group_given(const dlm_cache_opts *o, int g) {
    for (size_t i = 0; i < N_DLM_OPTS; i++)
        if (dlm_opts[i].group == g && opt_given(o, &dlm_opts[i])) return dlm_opts[i].name;
    return NULL;
}

/* The first --wf-* option given, or NULL. */
static const char *wf_given(const dlm_cache_opts *o) { return group_given(o, FOR_WF); }

const char *dlm_cache_given(const dlm_cache_opts *o) {
    const char *g = group_given(o, FOR_ANY);
    if (!g) g = wf_given(o);
    for (size_t i = 0; !g && i < N_DLM_OPTS; i++)
        if (dlm_opts[i].group != FOR_ANY && dlm_opts[i].group != FOR_WF && opt_given(o, &dlm_opts[i])) g = dlm_opts[i].name;
    return g;
}

/* Whether s is one of the '|'-separated words of list. */
static int one_of(const char *s, const char *list) {
    const size_t n = strlen(s);
    for (const char *w = list; w; w = strchr(w, '|') ? strchr(w, '|') + 1 : NULL)
        if (!strncmp(w, s, n) && (w[n] == '|' || w[n] == '\0')) return 1;
    return 0;
}

/* The values of the given schedule options, each named alone with its range (the library's own
 * check names its parameter field, not the option). */
static int check_values(const char *prog, const dlm_cache_opts *o) {
    for (size_t i = 0; i < N_DLM_OPTS; i++) {
        const dlm_opt *e = &dlm_opts[i];
        if (!e->want || !opt_given(o, e)) continue;
        if (e->type == CLI_INT) {
            const int v = opt_int(o, e);
            if (v < e->lo || v > e->hi) return cli_fail(CLI_EXIT_USAGE, prog, "%s %d: %s", e->name, v, e->want);
        } else if (e->type == CLI_DOUBLE) {
            const double v = opt_dbl(o, e);
            if (!((e->lo_open ? v > e->lo : v >= e->lo) && v <= e->hi))
                return cli_fail(CLI_EXIT_USAGE, prog, "%s %g: %s", e->name, v, e->want);
        } else if (e->type == CLI_STRING && e->choices && !one_of(opt_str(o, e), e->choices)) {
            return cli_fail(CLI_EXIT_USAGE, prog, "%s %s: %s", e->name, opt_str(o, e), e->want);
        }
    }
    return 0;
}

int dlm_cache_check_flags(const char *prog, const dlm_cache_opts *o, char *const *caches, int n, int table, int wf_runs) {
    if (table && o->cache != default_cache)
        return cli_fail(CLI_EXIT_USAGE, prog, "--cache %s: this command runs the schedules of --caches (give --caches %s)",
                        o->cache, o->cache);
    if (table && o->wavefilter)
        return cli_fail(CLI_EXIT_USAGE, prog, "--wavefilter: this command runs every schedule also with WaveFilter at each "
                        "--budgets value (give --budgets F,F)");
    if (table && !isnan(o->wf_budget))
        return cli_fail(CLI_EXIT_USAGE, prog, "--wf-budget: this command takes the WaveFilter budgets from --budgets F,F");
    const char *wf = wf_given(o);
    if (!wf_runs && wf)
        return cli_fail(CLI_EXIT_USAGE, prog, "%s is for WaveFilter, which is not run (%s)", wf,
                        table ? "no --budgets rows" : "give --wavefilter");
    int elastic = 0, delayed = 0, spa = 0;
    for (int i = 0; i < n; i++) {
        elastic |= !strcmp(caches[i], "elastic");
        delayed |= !strcmp(caches[i], "delayed");
        spa |= !strcmp(caches[i], "spa");
    }
    const struct { int run, group; const char *cache; } sched[3] = {
        {spa, FOR_SPA, "spa"}, {elastic, FOR_ELASTIC, "elastic"}, {delayed, FOR_DELAYED, "delayed"}};
    for (int i = 0; i < 3; i++) {
        const char *given = sched[i].run ? NULL : group_given(o, sched[i].group);
        if (given) return cli_fail(CLI_EXIT_USAGE, prog, "%s is for the %s cache, which is not run", given, sched[i].cache);
    }
    return check_values(prog, o);
}

int dlm_cache_check_model(const char *prog, const dlm_cache_opts *o, char *const *caches, int n,
                          const kvs_model_hparams *hp) {
    for (int i = 0; i < n; i++) {
        /* d2cache plans no row before a masked position (core/schedule/d2cache.c refuses at its first
         * plan, after a table's earlier rows or the prompt echo): refuse it here as the usage error it is */
        if (hp->logit_shift && !strncmp(caches[i], "d2cache", 7))
            return cli_fail(CLI_EXIT_USAGE, prog, "the d2cache schedule does not support '%s' (shifted logits: position i is "
                            "predicted from row i-1); use prefix, dual, delayed, elastic or spa", kvs_arch_name(hp->arch));
        if (!strcmp(caches[i], "spa") && o->spa_rank != CLI_UNSET_INT) {
            int64_t kd = (int64_t)hp->n_kv_heads * hp->head_dim, kmax = hp->dim < kd ? hp->dim : kd;
            if (o->spa_rank > kmax)
                return cli_fail(CLI_EXIT_USAGE, prog, "--spa-rank %d: want 0 (automatic) or 1..%lld for this model "
                                "(min(dim %d, kv dim %lld): the value projection's singular values)",
                                o->spa_rank, (long long)kmax, hp->dim, (long long)kd);
        }
    }
    return 0;
}

void dlm_cache_cli_opts(dlm_cache_opts *o, cli_opt *opts) {
    const cli_opt t[DLM_CACHE_N_OPTS] = {
        {"cache", 0, CLI_STRING, &o->cache, "C", "diffusion cache: none | prefix | dual | delayed | elastic | d2cache | spa "
                                                 "(default none)"},
        {"gamma", 0, CLI_DOUBLE, &o->gamma, "G", "elastic: attention-drift threshold in [0, 1] (default 0.9)"},
        {"window", 0, CLI_INT, &o->window, "W", "elastic: masked positions queried per step (default 16)"},
        {"track", 0, CLI_INT, &o->track, "K", "elastic: most-attended tokens tracked per layer (default 1)"},
        {"elastic-sim", 0, CLI_STRING, &o->sim, "S", "elastic: drift similarity rows (attention rows per head, default) | "
                                                      "heads (the reference code's per-key cosine over heads)"},
        {"elastic-block-refresh", 0, CLI_INT, &o->block_refresh, "0|1", "elastic: 1 (default) = every block's first step "
                                                                         "recomputes every row; 0 = only the decode's first step (the reference)"},
        {"reload", 0, CLI_INT, &o->reload, "R", "delayed: full refresh every R steps of a block (default 4)"},
        {"wavefilter", 0, CLI_FLAG, &o->wavefilter, NULL, "WaveFilter sparse KV over the cache schedule"},
        {"wf-family", 0, CLI_STRING, &o->wf_family, "F", "WaveFilter wavelet: haar | db2 | db4 (default haar)"},
        {"wf-levels", 0, CLI_INT, &o->wf_levels, "J", "WaveFilter DWT levels 1..8 (default 3)"},
        {"wf-budget", 0, CLI_DOUBLE, &o->wf_budget, "F", "WaveFilter kept fraction of the context in (0, 1] (default 0.5)"},
        {"wf-rho", 0, CLI_DOUBLE, &o->wf_rho, "S", "WaveFilter skim share of the free budget in [0, 1] (default 0.5)"},
        {"wf-keep-mass", 0, CLI_DOUBLE, &o->wf_keep_mass, "P", "WaveFilter PSA-style keep-sets: the fewest rows covering P "
                                                              "of the attention mass, --wf-budget as the cap (default 0: off)"},
        {"spa-rank", 0, CLI_INT, &o->spa_rank, "R", "spa: singular-proxy rank (default 0: kv dim / 32, at least 8)"},
        {"spa-budget", 0, CLI_DOUBLE, &o->spa_budget, "F", "spa: peak share of the generation rows a layer recomputes per "
                                                            "step, in (0, 1] (default 0.25)"},
        {"spa-uniform", 0, CLI_FLAG, &o->spa_uniform, NULL, "spa: every layer gets --spa-budget (default: the reference's "
                                                            "Gaussian over depth); with --spa-budget 1 = no cache"},
        {"spa-refresh", 0, CLI_INT, &o->spa_refresh, "N", "spa: every row at every layer every N steps (default 50)"},
        {"spa-refresh-gen", 0, CLI_INT, &o->spa_refresh_gen, "N", "spa: every generation row at every layer every N steps "
                                                                  "(default 7)"},
    };
    memcpy(opts, t, sizeof t);
}

int dlm_cache_build(const char *prog, const dlm_cache_opts *o, const char *cache, double budget, kvs_dlm_schedule **out) {
    *out = NULL;
    const char *name = cache ? cache : o->cache;
    int wf = o->wavefilter || budget > 0;
    if (!strcmp(name, "none") && !wf) return 0;
    kvs_elastic_params ep = kvs_elastic_params_default(); /* 0.9, 16, 1, rows, block refresh on */
    if (!isnan(o->gamma)) ep.gamma = (float)o->gamma;
    if (o->window != CLI_UNSET_INT) ep.window = o->window;
    if (o->track != CLI_UNSET_INT) ep.track = o->track;
    if (o->block_refresh != CLI_UNSET_INT) ep.block_refresh = o->block_refresh;
    if (o->sim && !strcmp(o->sim, "heads")) ep.sim = KVS_ELASTIC_SIM_HEADS;
    else if (o->sim && strcmp(o->sim, "rows")) return cli_fail(CLI_EXIT_USAGE, prog, "--elastic-sim %s: want rows or heads", o->sim);
    kvs_dlm_schedule *s = NULL;
    if (!strcmp(name, "spa")) {
        kvs_spa_params sp = kvs_spa_params_default();
        if (o->spa_rank != CLI_UNSET_INT) sp.rank = o->spa_rank;
        if (!isnan(o->spa_budget)) sp.budget = (float)o->spa_budget;
        sp.uniform = o->spa_uniform;
        if (o->spa_refresh != CLI_UNSET_INT) sp.refresh = o->spa_refresh;
        if (o->spa_refresh_gen != CLI_UNSET_INT) sp.refresh_gen = o->spa_refresh_gen;
        if (kvs_dlm_schedule_spa(&s, &sp) != KVS_OK) return cli_fail(CLI_EXIT_USAGE, prog, "--cache spa: %s", kvs_last_error());
    } else if (kvs_dlm_schedule_from_name(&s, name, o->reload != CLI_UNSET_INT ? o->reload : KVS_DLM_DELAYED_RELOAD_DEFAULT, &ep) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--cache %s: %s", name, kvs_last_error());
    if (wf) {
        kvs_wavefilter_params wp = kvs_wavefilter_params_default();
        if (kvs_wavelet_from_name(o->wf_family, &wp.family) != KVS_OK) {
            kvs_dlm_schedule_destroy(&s);
            return cli_fail(CLI_EXIT_USAGE, prog, "--wf-family %s: %s", o->wf_family, kvs_last_error());
        }
        /* not given: the CLI's defaults, levels 3, budget 0.5, rho 0.5, keep_mass 0 (off) */
        wp.levels = o->wf_levels != CLI_UNSET_INT ? o->wf_levels : 3;
        wp.budget = (float)(budget > 0 ? budget : !isnan(o->wf_budget) ? o->wf_budget : 0.5);
        wp.rho = (float)(!isnan(o->wf_rho) ? o->wf_rho : 0.5);
        wp.keep_mass = (float)(!isnan(o->wf_keep_mass) ? o->wf_keep_mass : 0.0);
        kvs_dlm_schedule *w = NULL;
        if (kvs_dlm_schedule_wavefilter(&w, s, &wp) != KVS_OK) /* takes s, also on error */
            return cli_fail(CLI_EXIT_USAGE, prog, "--wavefilter: %s", kvs_last_error());
        s = w;
    }
    *out = s;
    return 0;
}
