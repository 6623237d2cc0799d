/* kvsieve eval --dlm: the diffusion-LM cache schedules against the no-cache baseline.
 * For every generation length and schedule: wall-time speedup (baseline seconds / schedule seconds,
 * summed over the prompts), compute fraction (rows computed / rows of the no-cache decode) and token
 * agreement (generated tokens equal to the baseline's, position by position) with the first position that
 * differs (the model cascades after it: see README). Then long-prompt rows
 * (prompts of --long-len tokens cut from a text file) with and without WaveFilter at the given
 * budgets. Text table, --json, and an SVG plot written by our own code (--plot). */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "dlm_cache_opts.h"
#include "eval_dlm.h"
#include "kvsieve/generate.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/schedule.h"
#include "kvsieve/tokenizer.h"
#include "opts_common.h"

#define PROG "kvsieve eval --dlm"
#define MAX_LIST 16
#define MAX_PROMPTS 64

typedef struct prompt {
    int32_t *ids;
    int64_t n;
} prompt;


typedef struct ctx {
    kvs_device *dev;
    kvs_model *m;
    kvs_model *shadow;      /* --fidelity: a second copy of the model for the no-cache shadow forward */
    int64_t block;
    float threshold;
    kvs_dtype types[2]; /* --cache-type-k/-v of the schedules' caches (the no-cache baseline keeps f32) */
    int rotate;         /* --kv-rotate, the schedules' caches too */
} ctx;

/* One decode; out[gen]. */
static kvs_status decode(ctx *c, const prompt *p, int64_t gen, kvs_dlm_schedule *sc, int32_t *out, kvs_gen_stats *st,
                         int64_t *fid) {
    kvs_cache_params cp = kvs_model_cache_params(c->m);
    cp.capacity = p->n + gen;
    cp.flags = kvs_dlm_schedule_cache_flags(sc);
    if (sc) {
        cp.type_k = c->types[0];
        cp.type_v = c->types[1];
        if (c->rotate) cp.flags |= KVS_CACHE_ROTATE;
    }
    kvs_kv_cache *cache = NULL;
    kvs_status cs = kvs_cache_create(&cache, c->dev, &cp);
    if (cs != KVS_OK) return cs;
    kvs_dlm_params dp = kvs_dlm_params_default();
    dp.gen_len = gen;
    dp.block_len = c->block < gen ? c->block : gen; /* shorter: one block (only when --block was not given) */
    dp.steps = gen;
    dp.threshold = c->threshold;
    dp.schedule = sc;
    kvs_status s;
    if (fid && sc && c->shadow) {
        /* step fidelity (kvs_dlm_schedule_fidelity): a no-cache shadow forward at every step */
        kvs_cache_params sp = kvs_model_cache_params(c->shadow);
        sp.capacity = cp.capacity;
        kvs_kv_cache *sc_cache = NULL;
        kvs_dlm_schedule *w = NULL;
        kvs_dlm_fidelity fr = {0};
        s = kvs_cache_create(&sc_cache, c->dev, &sp);
        if (s == KVS_OK) s = kvs_dlm_schedule_fidelity(&w, sc, c->shadow, sc_cache);
        dp.schedule = w;
        if (s == KVS_OK) s = kvs_generate_dlm(c->m, cache, p->ids, p->n, &dp, NULL, NULL, out, st);
        if (w) kvs_dlm_fidelity_get(w, &fr);
        kvs_dlm_schedule_destroy(&w); /* sc stays with the caller */
        kvs_cache_destroy(&sc_cache);
        fid[0] += fr.match;
        fid[1] += fr.total;
        if (s == KVS_OK) st->seconds -= fr.seconds;
    } else {
        s = kvs_generate_dlm(c->m, cache, p->ids, p->n, &dp, NULL, NULL, out, st);
    }
    kvs_cache_destroy(&cache);
    return s;
}

/* Splits s at commas in place: the item count, -1 for more than max items, -2 for an empty item
 * (never silently dropped or cut). */
static int split_list(char *s, char **out, int max) {
    int n = 0;
    for (char *t = s;;) {
        char *c = strchr(t, ',');
        if (c) *c = '\0';
        if (!*t) return -2;
        if (n == max) return -1;
        out[n++] = t;
        if (!c) break;
        t = c + 1;
    }
    return n;
}

static int tokenize(const kvs_tokenizer *tok, const char *text, size_t len, prompt *p) {
    int64_t n = 0;
    unsigned flags = KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_PREFIX_EMPTY;
    kvs_tokenizer_encode(tok, text, len, flags, NULL, 0, &n);
    p->ids = malloc((size_t)(n + 1) * sizeof *p->ids);
    if (!p->ids || kvs_tokenizer_encode(tok, text, len, flags, p->ids, n + 1, &p->n) != KVS_OK) return -1;
    return 0;
}

/* Runs every variant on every prompt at gen; fills a[0..nv). Returns 0 or an exit code. */
static int run_table(ctx *c, const dlm_cache_opts *co, char **caches, int nc, const double *budgets, int nb,
                     const prompt *ps, int np, int64_t gen, int ctx_len, agg *a, int *na) {
    int32_t *base = malloc((size_t)gen * sizeof *base), *got = malloc((size_t)gen * sizeof *got);
    if (!base || !got) {
        free(base);
        free(got);
        return cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
    }
    int first = *na;
    /* variants: cache x (no WaveFilter, budgets...); spa takes no WaveFilter (its proxy-delta steps
     * read no keep-set: kvs_dlm_schedule_wavefilter refuses it), so its rows are the cache alone */
    for (int ci = 0; ci < nc; ci++)
        for (int bi = -1; bi < nb; bi++) {
            if (bi >= 0 && strcmp(caches[ci], "spa") == 0) continue;
            agg *g = &a[(*na)++];
            memset(g, 0, sizeof *g);
            snprintf(g->name, sizeof g->name, "%s%s", caches[ci],
                     bi < 0 ? "" : !isnan(co->wf_keep_mass) && co->wf_keep_mass > 0 ? "+wavefilter-mass" : "+wavefilter");
            g->gen = gen;
            g->budget = bi >= 0 ? budgets[bi] : 0;
            g->cache = ci;
        }
    int rc = 0;
    for (int pi = 0; pi < np && rc == 0; pi++) {
        if (ps[pi].n + gen > ctx_len) continue;
        kvs_gen_stats st0, st;
        if (decode(c, &ps[pi], gen, NULL, base, &st0, NULL) != KVS_OK) {
            rc = cli_fail(CLI_EXIT_FAIL, PROG, "none, gen %lld: %s", (long long)gen, kvs_last_error());
            break;
        }
        for (int vi = first; vi < *na && rc == 0; vi++) {
            agg *g = &a[vi];
            int ci = g->cache;
            kvs_dlm_schedule *sc = NULL;
            rc = dlm_cache_build(PROG, co, caches[ci], g->budget, &sc);
            if (rc) break;
            int64_t fid[2] = {0, 0};
            kvs_status s = decode(c, &ps[pi], gen, sc, got, &st, fid);
            g->fid_match += fid[0];
            g->fid_total += fid[1];
            kvs_dlm_schedule_stats ss;
            memset(&ss, 0, sizeof ss);
            if (sc) kvs_dlm_schedule_get_stats(sc, &ss);
            kvs_dlm_schedule_destroy(&sc);
            if (s != KVS_OK) {
                rc = cli_fail(CLI_EXIT_FAIL, PROG, "%s, gen %lld: %s", g->name, (long long)gen, kvs_last_error());
                break;
            }
            g->prompts++;
            g->sec += st.seconds;
            g->sec_base += st0.seconds;
            g->rows += st.rows_computed;
            g->rows_base += st0.rows_computed;
            g->kept += ss.kept_rows;
            g->context += ss.context_rows;
            int64_t fd = gen;
            for (int64_t i = 0; i < gen; i++) {
                g->agree += got[i] == base[i];
                if (fd == gen && got[i] != base[i]) fd = i;
            }
            g->first_div += fd;
            g->total += gen;
        }
    }
    free(base);
    free(got);
    return rc;
}

int cmd_eval_dlm(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strcmp(argv[i], "--tasks") || !strncmp(argv[i], "--tasks=", 8)) return cmd_eval_dlm_tasks(argc, argv);
    const char *model = "stories260K-llada-f32.gguf", *prompts_path = NULL, *gens_s = "64,128,256,448",
               *caches_s = "none,prefix,dual,delayed,elastic", *plot = NULL,
               *long_text = NULL, *budgets_s = "0.25,0.5";
    int64_t block = CLI_UNSET_I64, long_len = 320, long_gen = 128;
    int long_n = 3, json = 0, dlm_flag = 0, fidelity = 0;
    device_opts dv = {.backend = "cpu"};
    double threshold = 0.9;
    dlm_cache_opts co = dlm_cache_opts_default();
    cache_type_opts ct = {0};
    cli_opt opts[48] = {
        {"dlm", 0, CLI_FLAG, &dlm_flag, NULL, "evaluate the diffusion-LM cache schedules (this command)"},
        {"model", 'm', CLI_STRING, &model, "MODEL", "masked-diffusion model (default stories260K-llada-f32.gguf)"},
        {"prompts", 0, CLI_STRING, &prompts_path, "FILE", "prompts, one per line (required)"},
        {"gen", 0, CLI_STRING, &gens_s, "N,N,..", "generation lengths (default 64,128,256,448; prompt + gen must fit the context)"},
        {"caches", 0, CLI_STRING, &caches_s, "C,C,..", "schedules (default none,prefix,dual,delayed,elastic)"},
        {"block", 0, CLI_INT64, &block, "B", "block length, divides each --gen length (default 32; a length below 32 is "
                                             "one block of that length, as generate -n)"},
        {"diffusion-block-length", 0, CLI_INT64, &block, "B", "llama-diffusion-cli's name of --block (default 32)"},
        {"threshold", 0, CLI_DOUBLE, &threshold, "E", "parallel decoding threshold (default 0.9; 0 = one token per step)"},
        {"long-text", 0, CLI_STRING, &long_text, "FILE", "text the long prompts are cut from (default: tinystories-sample.txt, looked up like a model, then in ../text beside the model; long prompts are skipped when none is found)"},
        {"long-prompts", 0, CLI_INT, &long_n, "N", "long prompts (default 3; 0 = no long-prompt rows)"},
        {"long-len", 0, CLI_INT64, &long_len, "T", "tokens per long prompt (default 320)"},
        {"long-gen", 0, CLI_INT64, &long_gen, "N", "generated tokens for the long prompts (default 128)"},
        {"budgets", 0, CLI_STRING, &budgets_s, "F,F", "WaveFilter budgets for the long-prompt rows (default 0.25,0.5)"},
        DEVICE_OPTS(dv),
        CACHE_TYPE_OPTS(ct),
        KV_ROTATE_OPT(ct),
        {"json", 0, CLI_FLAG, &json, NULL, "print one JSON object instead of the tables"},
        {"plot", 0, CLI_STRING, &plot, "F.svg", "write an SVG plot of speedup, compute fraction and agreement"},
        {"fidelity", 0, CLI_FLAG, &fidelity, NULL, "also measure step fidelity: argmax agreement with a no-cache forward of "
                                                   "the same state at every step (twice the time)"},
    };
    int n_opts = 0;
    while (opts[n_opts].name) n_opts++;
    dlm_cache_cli_opts(&co, opts + n_opts);
    n_opts += DLM_CACHE_N_OPTS;
    const cli_spec spec = {
        .prog = PROG,
        .usage = "-m MODEL --prompts FILE [--gen 64,128,256,448] [--caches ...] [--json] [--plot F.svg]",
        .summary = "Speedup, compute fraction and token agreement of the diffusion cache schedules against the\n"
                   "no-cache decode, per schedule and generation length, plus long-prompt rows with WaveFilter.",
        .opts = opts,
        .n_opts = n_opts,
        .epilog = "The schedule options (--gamma, --window, --track, --reload, --spa-*) apply to every run of their\n"
                  "schedule, --wf-* (but --wf-budget) to the WaveFilter rows; generate's --cache, --wavefilter and\n"
                  "--wf-budget are refused here (give --caches and --budgets).\n"
                  "Task accuracy instead: kvsieve eval --dlm --tasks FILE (see its --help).",
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!dlm_flag)
        return cli_fail(CLI_EXIT_USAGE, "kvsieve eval", "--dlm is required (the diffusion cache evaluation is the one built)");
    if (!prompts_path) return cli_fail(CLI_EXIT_USAGE, PROG, "--prompts FILE is required");
    kvs_dtype ctypes[2];
    rc = cli_cache_types(PROG, &ct, ctypes);
    if (rc != CLI_EXIT_OK) return rc;
    if (ctypes[0] != KVS_F32 || ctypes[1] != KVS_F32)
        fprintf(stderr, "%s: cache types K %s, V %s in the schedules' caches (the no-cache baseline keeps f32)\n", PROG,
                kvs_dtype_name(ctypes[0]), kvs_dtype_name(ctypes[1]));
    const int block_given = block != CLI_UNSET_I64;
    if (!block_given) block = 32;
    if (block < 1) return cli_fail(CLI_EXIT_USAGE, PROG, "--block %lld: want >= 1", (long long)block);
    if (!(threshold >= 0 && threshold <= 1)) return cli_fail(CLI_EXIT_USAGE, PROG, "--threshold %g: want [0, 1]", threshold);
    if (long_n < 0 || long_n > MAX_PROMPTS)
        return cli_fail(CLI_EXIT_USAGE, PROG, "--long-prompts %d: want 0..%d", long_n, MAX_PROMPTS);
    if (long_len < 2) return cli_fail(CLI_EXIT_USAGE, PROG, "--long-len %lld: want >= 2", (long long)long_len);
    if (long_gen < 1) return cli_fail(CLI_EXIT_USAGE, PROG, "--long-gen %lld: want >= 1", (long long)long_gen);
    char gbuf[256], cbuf[256];
    snprintf(gbuf, sizeof gbuf, "%s", gens_s);
    snprintf(cbuf, sizeof cbuf, "%s", caches_s);
    char *gl[MAX_LIST], *caches[MAX_LIST];
    int ng = split_list(gbuf, gl, MAX_LIST), nc = split_list(cbuf, caches, MAX_LIST);
    if (ng < 0 || nc < 0)
        return cli_fail(CLI_EXIT_USAGE, PROG, "%s: %s", ng < 0 ? "--gen" : "--caches",
                        (ng < 0 ? ng : nc) == -2 ? "an empty item in the comma-separated list" : "too many items");
    int64_t gens[MAX_LIST];
    for (int i = 0; i < ng; i++)
        if (cli_parse_int64(gl[i], &gens[i]) || gens[i] < 1 || (block_given ? gens[i] % block != 0 : gens[i] > block && gens[i] % block != 0))
            return cli_fail(CLI_EXIT_USAGE, PROG, "--gen: bad length '%s' (want a multiple of --block %lld%s)", gl[i],
                            (long long)block, block_given ? "" : ", or a length below it: one block");
    if (ng == 0 || nc == 0) return cli_fail(CLI_EXIT_USAGE, PROG, "--gen and --caches need at least one item");
    for (int i = 0; i < nc; i++) {
        kvs_dlm_schedule *t = NULL;
        if (kvs_dlm_schedule_from_name(&t, caches[i], co.reload != CLI_UNSET_INT ? co.reload : KVS_DLM_DELAYED_RELOAD_DEFAULT, NULL) != KVS_OK)
            return cli_fail(CLI_EXIT_USAGE, PROG, "--caches: %s", kvs_last_error());
        kvs_dlm_schedule_destroy(&t);
    }
    if (plot && cli_check_writable(PROG, "--plot", plot) != CLI_EXIT_OK) return CLI_EXIT_USAGE;
    double budgets[MAX_LIST];
    int nb = 0;
    if (cli_parse_double_list(budgets_s, budgets, MAX_LIST, &nb))
        return cli_fail(CLI_EXIT_USAGE, PROG, "--budgets: bad list '%s'", budgets_s);
    for (int i = 0; i < nb; i++)
        if (!(budgets[i] > 0 && budgets[i] <= 1)) return cli_fail(CLI_EXIT_USAGE, PROG, "--budgets: %g outside (0, 1]", budgets[i]);
    /* WaveFilter runs in the long-prompt rows, at each budget */
    if (dlm_cache_check_flags(PROG, &co, caches, nc, 1, long_n > 0 && nb > 0) != 0) return CLI_EXIT_USAGE;

    /* model, tokenizer, device */
    cli_model cm = {0};
    ctx c = {.block = block, .threshold = (float)threshold, .types = {ctypes[0], ctypes[1]}, .rotate = ct.rotate};
    prompt ps[MAX_PROMPTS], lp[MAX_PROMPTS];
    int np = 0, nlp = 0;
    agg *a = calloc((size_t)(ng + 1) * (size_t)nc * (size_t)(nb + 1), sizeof *a);
    int na = 0, nla = 0, exit_code = CLI_EXIT_FAIL;
    agg *la = NULL;
    char *text = NULL;
    if (!a) return cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
    rc = cli_model_open(PROG, model, &dv, &cm);
    if (rc == CLI_EXIT_OK) rc = cli_model_require_dlm(PROG, model, &cm);
    if (rc == CLI_EXIT_OK) rc = cli_cache_types_fit(PROG, ctypes, cm.hp, NULL);
    if (rc == CLI_EXIT_OK) rc = dlm_cache_check_model(PROG, &co, caches, nc, cm.hp);
    if (rc != CLI_EXIT_OK) {
        exit_code = rc;
        goto done;
    }
    c.dev = cm.dev;
    c.m = cm.m;
    const kvs_tokenizer *tok = cm.tok;
    const kvs_model_hparams *hp = cm.hp;
    const char *path = cm.path;
    /* --fidelity: a second copy of the weights for the no-cache shadow forward */
    if (fidelity && kvs_model_create(&c.shadow, c.dev, cm.mf, NULL) != KVS_OK) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "%s", kvs_last_error());
        goto done;
    }
    /* prompts */
    FILE *pf = NULL;
    if (cli_open_regular(PROG, "--prompts", prompts_path, &pf) != CLI_EXIT_OK) {
        exit_code = CLI_EXIT_USAGE;
        goto done;
    }
    char line[4096];
    while (np < MAX_PROMPTS && fgets(line, sizeof line, pf)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = '\0';
        if (len == 0 || line[0] == '#') continue;
        if (tokenize(tok, line, len, &ps[np])) {
            fclose(pf);
            exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "cannot tokenize prompt '%s': %s", line, kvs_last_error());
            goto done;
        }
        np++;
    }
    fclose(pf);
    if (np == 0) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--prompts %s has no prompt", prompts_path);
        goto done;
    }
    /* the default long text: looked up like a model, else ../text beside the model; absent (a clone
     * without ../shared), the long prompts are skipped with a note, the short ones still run */
    static char tp[4200];
    if (long_n > 0 && nb >= 0 && !long_text) {
        if (kvs_model_locate("tinystories-sample.txt", tp, sizeof tp) != KVS_OK) {
            char mp[4096];
            snprintf(mp, sizeof mp, "%.4000s", path);
            char *slash = strrchr(mp, '/');
            if (slash) *slash = '\0';
            snprintf(tp, sizeof tp, "%s/../text/tinystories-sample.txt", mp);
        }
        long_text = tp;
        FILE *probe = fopen(tp, "rb");
        if (!probe) {
            fprintf(stderr, "%s: no tinystories-sample.txt found ($KVSIEVE_MODELS, models/, ../shared/text): the %d long "
                            "prompts are skipped (give a text with --long-text FILE)\n", PROG, long_n);
            long_n = 0;
        } else {
            fclose(probe);
        }
    }
    /* long prompts: slices spread over the text, cut to long_len tokens */
    if (long_n > 0 && nb >= 0) {
        size_t tsz = 0;
        exit_code = cli_read_file(PROG, "--long-text", long_text, &text, &tsz);
        if (exit_code != CLI_EXIT_OK) goto done;
        exit_code = CLI_EXIT_FAIL;
        size_t chunk = (size_t)long_len * 8;
        for (int i = 0; i < long_n && tsz > chunk; i++) {
            size_t off = (size_t)((double)(tsz - chunk) * (i + 0.5) / long_n);
            while (off > 0 && text[off - 1] != '\n') off--; /* start at a line */
            if (tokenize(tok, text + off, chunk, &lp[nlp])) {
                exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "cannot tokenize the long text: %s", kvs_last_error());
                goto done;
            }
            if (lp[nlp].n > long_len) lp[nlp].n = long_len;
            nlp++;
        }
        if (long_len + long_gen > hp->ctx_len) {
            exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--long-len %lld + --long-gen %lld exceed the model context %d",
                                 (long long)long_len, (long long)long_gen, hp->ctx_len);
            goto done;
        }
    }
    if (long_n > 0 && nlp == 0) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--long-len %lld: the long text is too short for one such prompt",
                             (long long)long_len);
        goto done;
    }
    for (int gi = 0; gi < ng; gi++) {
        int fits = 0;
        for (int pi = 0; pi < np; pi++) fits |= ps[pi].n + gens[gi] <= hp->ctx_len;
        if (!fits) {
            exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--gen %lld: no prompt + %lld tokens fits the model context %d",
                                 (long long)gens[gi], (long long)gens[gi], hp->ctx_len);
            goto done;
        }
    }
    for (int gi = 0; gi < ng; gi++) {
        rc = run_table(&c, &co, caches, nc, NULL, 0, ps, np, gens[gi], hp->ctx_len, a, &na);
        if (rc) {
            exit_code = rc;
            goto done;
        }
        if (!json) fprintf(stderr, "[eval --dlm] gen %lld done\n", (long long)gens[gi]);
    }
    if (nlp > 0) {
        la = calloc((size_t)nc * (size_t)(nb + 1), sizeof *la);
        if (!la) {
            exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
            goto done;
        }
        rc = run_table(&c, &co, caches, nc, budgets, nb, lp, nlp, long_gen, hp->ctx_len, la, &nla);
        if (rc) {
            exit_code = rc;
            goto done;
        }
    }
    if (json) {
        json_object *j = json_object_new_object(), *rows = json_object_new_array(), *lrows = json_object_new_array();
        json_object_object_add(j, "model", json_object_new_string(model));
        json_object_object_add(j, "backend", json_object_new_string(kvs_backend_name(kvs_device_backend(c.dev))));
        json_object_object_add(j, "block", json_object_new_int64(block));
        json_object_object_add(j, "threshold", json_object_new_double(threshold));
        json_object_object_add(j, "prompts", json_object_new_int(np));
        for (int i = 0; i < na; i++) json_object_array_add(rows, eval_dlm_agg_json(&a[i]));
        for (int i = 0; i < nla; i++) json_object_array_add(lrows, eval_dlm_agg_json(&la[i]));
        json_object_object_add(j, "rows", rows);
        json_object_object_add(j, "long_prompt_tokens", json_object_new_int64(long_len));
        json_object_object_add(j, "long_rows", lrows);
        printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(j);
    } else {
        int short_gen = 0;
        for (int gi = 0; gi < ng; gi++) short_gen |= gens[gi] < block;
        printf("%s on %s: %d prompts, block %lld%s, threshold %.2f; speedup = no-cache seconds / schedule seconds,\n"
               "compute = rows computed / no-cache rows, agreement = tokens equal to the no-cache decode,\n"
               "1st diff = mean position of the first token that differs (gen: none)%s\n\n",
               model, kvs_device_get_info(c.dev)->name, np, (long long)block,
               short_gen ? " (a shorter gen: one block of its length)" : "", threshold,
               fidelity ? ",\nfidelity = steps' argmax equal to a no-cache forward of the same state" : "");
        printf("%-22s %5s %7s %9s %9s %10s %9s%s\n", "schedule", "gen", "prompts", "speedup", "compute", "agreement",
               "1st diff", fidelity ? "  fidelity" : "");
        for (int i = 0; i < na; i++) eval_dlm_agg_print(&a[i], 0, fidelity);
        if (nla > 0) {
            printf("\nlong prompts: %d x %lld tokens from the text, gen %lld (kept = WaveFilter's kept context share)\n",
                   nlp, (long long)long_len, (long long)long_gen);
            printf("%-22s %5s %7s %9s %9s %10s %9s %7s%s\n", "schedule", "gen", "prompts", "speedup", "compute",
                   "agreement", "1st diff", "kept", fidelity ? "  fidelity" : "");
            for (int i = 0; i < nla; i++) {
                char nm[128];
                agg t = la[i];
                if (t.budget > 0) {
                    snprintf(nm, sizeof nm, "%.80s@%.2f", t.name, t.budget);
                    snprintf(t.name, sizeof t.name, "%.90s", nm);
                }
                eval_dlm_agg_print(&t, 1, fidelity);
            }
        }
    }
    const int perr = plot ? eval_dlm_write_svg(plot, a, na, gens, ng, model) : 0;
    if (perr) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "cannot write --plot %s: %s", plot, strerror(perr));
        goto done;
    }
    exit_code = CLI_EXIT_OK;
done:
    for (int i = 0; i < np; i++) free(ps[i].ids);
    for (int i = 0; i < nlp; i++) free(lp[i].ids);
    free(a);
    free(la);
    free(text);
    kvs_model_destroy(&c.shadow);
    cli_model_close(&cm);
    return exit_code;
}
