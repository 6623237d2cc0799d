/* kvsieve eval — fidelity of KV eviction policies on real text, teacher-forced.
 *
 * The text is tokenized and cut into windows of ctx tokens (BOS + ctx-1 text tokens, positions
 * 0..ctx-1). Each window is decoded token by token (one forward per token, logits of the new row)
 * once with the full cache and once per (policy, budget) with the evictor in the loop; a budget is a
 * fraction of ctx or a token count per kv head. For every prediction (positions 0..ctx-2, predicting
 * the next text token) the cell accumulates:
 *   KL(full || evicted) of the next-token distributions (float64 softmax), top-1 agreement of the two,
 *   the evicted model's negative log-likelihood of the true token (perplexity = exp(mean NLL)), and
 *   the recall probes: tokens of later mentions of a name introduced in the window's first quarter
 *   (a capitalised word that occurs at least once not at a sentence start, "I" excluded); a probe
 *   counts where the full cache ranks the true token among its top RECALL_TOPK (5) and scores where
 *   the evicted cache does too.
 * Cache bytes: the peak of kvs_cache_bytes_used over a window (K/V rows in use, budget + buffer).
 * Output: an aligned table (stdout), optionally JSON (--json, json-c) and an SVG plot (--plot) of
 * top-1 agreement and KL against the budget, one line per policy.
 * Budget 1.0 never evicts, and its numbers equal the full cache's exactly (KL 0).
 * --needle (ours, after the passkey-retrieval tests of Mohtashami & Jaggi 2023, arXiv 2305.16300): three
 * more windows, each the filler text of the first window with NEEDLE_TEXT inserted at 10%, 50% or 90%
 * of its depth and ending in NEEDLE_Q NEEDLE_A; per cell the mean log-probability of NEEDLE_A's tokens
 * (teacher-forced) at each depth, printed as its own table (JSON: needle_logprob). A model that cannot
 * retrieve the passkey still scores how much of the full cache's log-probability an eviction keeps.
 * One window's measurement: eval_window.c. */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"
#include "eval.h"
#include "kvsieve/generate.h"
#include "kvsieve/learned.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/policy.h"
#include "kvsieve/tokenizer.h"
#include "opts_common.h"
#include "policy_opts.h"
#include "svg_plot.h"

#define MAX_POL 16
#define MAX_BUD 16

/* ---- the command ---------------------------------------------------------------------------- */

/* Splits s at commas in place: the item count, -1 for more than max items, -2 for an empty item
 * ("0.5,,0.25", a leading or trailing comma): never silently dropped. */
static int split_list(char *s, const char **out, int max) {
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

/* A budget as given: a fraction with the digits it needs (0.001 stays 0.001, not 0.00), a token
 * count, or "Nt" for --budgets Nt (stored as -N). */
#define NEEDLE_TEXT "The pass key is 71432. Remember it. 71432 is the pass key."
#define NEEDLE_Q "What is the pass key? The pass key is"
#define NEEDLE_A "71432"
static const double needle_depth[EVAL_NEEDLE_DEPTHS] = {0.1, 0.5, 0.9};

/* Builds needle window d into win[0..ctx) from BOS, the filler ids[0..), the needle, the question and
 * the answer; mark[t] = 1 for the answer's tokens. Returns 0, or -1 when the pieces do not fit. */
static int needle_window(const kvs_tokenizer *tk, int32_t bos, const int32_t *ids, int64_t n_ids, int64_t ctx, int d,
                         int32_t *win, uint8_t *mark) {
    int32_t nd[64], q[64], a[16];
    int64_t nn = 0, nq = 0, na = 0;
    if (kvs_tokenizer_encode(tk, NEEDLE_TEXT, strlen(NEEDLE_TEXT), 0, nd, 64, &nn) != KVS_OK ||
        kvs_tokenizer_encode(tk, NEEDLE_Q, strlen(NEEDLE_Q), 0, q, 64, &nq) != KVS_OK ||
        kvs_tokenizer_encode(tk, NEEDLE_A, strlen(NEEDLE_A), 0, a, 16, &na) != KVS_OK)
        return -1;
    int64_t F = ctx - 1 - nn - nq - na;
    if (F < 1 || F > n_ids) return -1;
    int64_t at = (int64_t)llround(needle_depth[d] * (double)F), t = 0;
    memset(mark, 0, (size_t)ctx);
    win[t++] = bos;
    for (int64_t i = 0; i < at; i++) win[t++] = ids[i];
    for (int64_t i = 0; i < nn; i++) win[t++] = nd[i];
    for (int64_t i = at; i < F; i++) win[t++] = ids[i];
    for (int64_t i = 0; i < nq; i++) win[t++] = q[i];
    for (int64_t i = 0; i < na; i++) mark[t] = 1, win[t++] = a[i];
    return t == ctx ? 0 : -1;
}

static void fmt_budget(char *buf, size_t n, double b) {
    if (b < 0) snprintf(buf, n, "%lldt", (long long)-b);
    else if (b <= 1.0) snprintf(buf, n, "%.4g", b);
    else snprintf(buf, n, "%lld", (long long)b);
}

int cmd_eval(int argc, char **argv) {
    const char *prog = "kvsieve eval";
    const char *model = NULL, *text = NULL, *policies = "streaming,h2o,snapkv,tova,knorm,pyramidkv,adakv";
    const char *budgets = "0.1,0.25,0.5", *plot = NULL, *split = "all";
    int64_t ctx = CLI_UNSET_I64, windows = 8;
    int json = 0, needle = 0;
    device_opts dv = {0};
    policy_opts po = POLICY_OPTS_INIT;
    eval_ctx e;
    memset(&e, 0, sizeof e);
    cache_type_opts ct = {0};
    const cli_opt opts[] = {
        {"model", 'm', CLI_STRING, &model, "MODEL", "model file (path or name under KVSIEVE_MODELS); required"},
        {"text", 0, CLI_STRING, &text, "FILE", "text to evaluate on; required"},
        {"policies", 0, CLI_STRING, &policies, "a,b,c", "policies to compare, <policy>@t for threshold eviction, <policy>@mass<p> for the mass mode (PSA top-p) (default: the seven classic ones)"},
        {"budgets", 0, CLI_STRING, &budgets, "F,F,..", "budgets: fractions of ctx, token counts, or Nt = N tokens (1t: one token) (default 0.1,0.25,0.5)"},
        {"ctx", 0, CLI_INT64, &ctx, "N", "window length in tokens, BOS included (default 256, or the model's context when smaller)"},
        {"ctx-size", 'c', CLI_INT64, &ctx, "N", "llama.cpp's name of --ctx (same default)"},
        {"windows", 0, CLI_INT64, &windows, "N", "windows evaluated from the start of the text (default 8; 0 = all)"},
        {"scope", 0, CLI_STRING, &po.scope, "S", "budget scope: head, layer, global (default head)"},
        {"policy-file", 0, CLI_STRING, &po.policy_file, "F.gguf[,..]",
         "weights of the learned policies (retention, indexer, rl) in --policies, from kvsieve train"},
        {"split", 0, CLI_STRING, &split, "S",
         "all (default), train (first 90% of the tokens) or held-out (the last 10%, never trained on)"},
        {"sink", 0, CLI_INT, &po.sink, "N", "streaming (also lagkv, expected, clusterkv, cascade): sink tokens always kept, below the budget in rows (default 4)"},
        {"window", 0, CLI_INT64, &po.window, "N", "h2o recent / snapkv observation window, kept, below the budget in rows (default: policy's)"},
        {"buffer", 0, CLI_INT64, &po.buffer, "N", "tokens above the budget before evicting, >= 1 (default: budget/8 clamped to 1..128; as large as the sequence: never evicts)"},
        POLICY_MODE_OPTS(po),
        {"rerotate", 0, CLI_FLAG, &e.rerotate, NULL, "evicted runs use positions within the cache: after each eviction the "
                                                     "kept keys are re-rotated to 0..n-1 (StreamingLLM; kvs_ar_params.rerotate)"},
        {"think", 0, CLI_DOUBLE, &e.think, "R", "ThinK (arXiv 2407.21018): every policy cell also prunes the fraction R in "
                                                "[0, 1) of key channels per kv head with the lowest query-key score at each "
                                                "eviction, the kept rows storing the other channels alone (paper: 0.4; "
                                                "default 0 = off)"},
        {"needle", 0, CLI_FLAG, &needle, NULL, "also a passkey placed at 10/50/90% depth of the first window: the mean "
                                               "log-probability of its tokens after the question, per policy and budget"},
        {"json", 0, CLI_FLAG, &json, NULL, "print one JSON object instead of the table"},
        {"plot", 0, CLI_STRING, &plot, "FILE.svg", "write an SVG plot: top-1 agreement and KL vs budget per policy"},
        CACHE_TYPE_OPTS(ct),
        KV_ROTATE_OPT(ct),
        DEVICE_OPTS(dv),
    };
    const cli_spec spec = {
        .prog = prog,
        .usage = "-m MODEL --text FILE [--policies a,b,c] [--budgets 0.1,0.25,0.5] [--ctx N] [--rerotate] [--think R] [--cache-type-k T] [--cache-type-v T] [--needle] [--json] [--plot FILE.svg]",
        .summary = "Teacher-forced fidelity of KV eviction: each window of the text is decoded token by token\n"
                   "with the full cache and with every policy and budget; per cell the mean next-token\n"
                   "KL(full || evicted), top-1 agreement, perplexity and its change, peak cache bytes and the\n"
                   "recall of names introduced early in the window. --cache-type-k/-v store the policies'\n"
                   "caches in those types, plus a row 'no-evict' (the quantized cache alone); the reference\n"
                   "'full' row keeps an f32 cache.\n"
                   "Diffusion-model caches have their own evaluation: kvsieve eval --dlm --help.",
        .opts = opts,
        .n_opts = (int)(sizeof opts / sizeof opts[0]),
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!model || !text) return cli_fail(CLI_EXIT_USAGE, prog, "-m MODEL and --text FILE are required");
    if (ctx != CLI_UNSET_I64 && ctx < 8) return cli_fail(CLI_EXIT_USAGE, prog, "--ctx %lld: at least 8", (long long)ctx);
    if (windows < 0) return cli_fail(CLI_EXIT_USAGE, prog, "--windows must be >= 0");
    if (!(e.think >= 0.0 && e.think < 1.0)) return cli_fail(CLI_EXIT_USAGE, prog, "--think must be in [0, 1)");
    kvs_dtype ctypes[2];
    rc = cli_cache_types(prog, &ct, ctypes);
    if (rc != CLI_EXIT_OK) return rc;
    /* an extra cell: the typed (or rotated) cache, no eviction */
    const int kvq = ctypes[0] != KVS_F32 || ctypes[1] != KVS_F32 || ct.rotate;
    const kvs_cache_params kp = cli_cache_key_params(&ct, ctypes);
    if (e.rerotate && kvs_cache_check_rerotate(&kp) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--rerotate: %s", kvs_last_error());
    if (e.think > 0.0 && kvs_think_check_cache(&kp) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--think: %s", kvs_last_error());

    /* lists */
    char pol_buf[512], bud_buf[512];
    snprintf(pol_buf, sizeof pol_buf, "%s", policies);
    snprintf(bud_buf, sizeof bud_buf, "%s", budgets);
    const char *pnames[MAX_POL], *bstr[MAX_BUD];
    int np = split_list(pol_buf, pnames, MAX_POL), nb = split_list(bud_buf, bstr, MAX_BUD);
    if (np == -2) return cli_fail(CLI_EXIT_USAGE, prog, "--policies '%s': an empty item (want comma-separated names)", policies);
    if (nb == -2) return cli_fail(CLI_EXIT_USAGE, prog, "--budgets '%s': an empty item (want comma-separated budgets)", budgets);
    if (np < 1) return cli_fail(CLI_EXIT_USAGE, prog, "--policies: want 1 to %d comma-separated items", MAX_POL);
    if (nb < 1) return cli_fail(CLI_EXIT_USAGE, prog, "--budgets: want 1 to %d comma-separated items", MAX_BUD);
    double bud[MAX_BUD];
    for (int i = 0; i < nb; i++)
        if (policy_parse_budget(bstr[i], &bud[i]) != 0)
            return cli_fail(CLI_EXIT_USAGE, prog, "--budgets: '%s' is neither a fraction in (0, 1], a token count nor Nt (N tokens)",
                            bstr[i]);
    kvs_budget_scope scope = KVS_SCOPE_HEAD;
    if (po.scope && kvs_budget_scope_from_name(po.scope, &scope) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--scope: %s", kvs_last_error());
    kvs_policy *pols[MAX_POL] = {0};
    kvs_policy_params pp = kvs_policy_params_default();
    if (po.sink != CLI_UNSET_INT && po.sink < 0) return cli_fail(CLI_EXIT_USAGE, prog, "--sink must be >= 0");
    if (po.sink != CLI_UNSET_INT) pp.n_sink = po.sink;
    if (po.window != CLI_UNSET_I64 && po.window < 0) return cli_fail(CLI_EXIT_USAGE, prog, "--window must be >= 0");
    if (po.buffer != CLI_UNSET_I64 && po.buffer < 1) return cli_fail(CLI_EXIT_USAGE, prog, "--buffer must be >= 1");
    pp.window = po.window != CLI_UNSET_I64 ? po.window : 0;
    if (strcmp(split, "all") != 0 && strcmp(split, "train") != 0 && strcmp(split, "held-out") != 0)
        return cli_fail(CLI_EXIT_USAGE, prog, "--split '%s': all, train or held-out", split);
    if (plot && cli_check_writable(prog, "--plot", plot) != CLI_EXIT_OK) return CLI_EXIT_USAGE;
    if (po.policy_file) {
        int any_learned = 0;
        for (int i = 0; i < np; i++) any_learned |= policy_is_learned(pnames[i]);
        if (!any_learned)
            return cli_fail(CLI_EXIT_USAGE, prog, "--policy-file is for learned policies (retention, indexer, rl), "
                            "none of which is in --policies");
    }
    float thr, fl;
    rc = policy_parse_modes(prog, &po, pnames, np, &thr, &fl);
    if (rc != CLI_EXIT_OK) return rc;
    if (fl >= 0.0f) pp.alpha = fl;
    for (int i = 0; i < np; i++)
        if (!policy_is_learned(pnames[i]) && kvs_policy_create(&pols[i], pnames[i], &pp) != KVS_OK) {
            rc = cli_fail(CLI_EXIT_USAGE, prog, "--policies: %s", kvs_last_error());
            for (int j = 0; j < i; j++) kvs_policy_destroy(&pols[j]);
            return rc;
        }

    /* model, tokenizer, text */
    cli_model cm = {0};
    const char *path = cm.path;
    e.prog = prog;
    cell *cells = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    kvs_kv_cache *full_cache = NULL;
    rc = cli_model_open_file(prog, model, &cm);
    if (rc == CLI_EXIT_OK) rc = cli_model_read_tokens(prog, &cm, text, &ids, &n_ids);
    if (rc == CLI_EXIT_OK) rc = cli_model_create(prog, &dv, &cm);
    if (rc != CLI_EXIT_OK) goto done;
    rc = CLI_EXIT_FAIL;
    e.dev = cm.dev;
    e.m = cm.m;
    e.hp = cm.hp;
    if (kvs_arch_is_diffusion(e.hp->arch)) { /* teacher-forced next-token perplexity means nothing there */
        rc = cli_fail(CLI_EXIT_USAGE, prog, "%s is a diffusion model (%s): eviction is evaluated on autoregressive models; "
                      "for the diffusion caches use `kvsieve eval --dlm`", path, kvs_arch_name(e.hp->arch));
        goto done;
    }
    if (e.think > 0.0 && (int)(e.hp->head_dim * e.think) == 0) /* floor(head_dim R) channels are pruned */
        fprintf(stderr, "%s: note: --think %g prunes floor(%d x %g) = 0 of the %d key channels: nothing is pruned (at least "
                        "%g prunes one)\n", prog, e.think, e.hp->head_dim, e.think, e.hp->head_dim, 1.0 / e.hp->head_dim);
    rc = cli_cache_types_fit(prog, ctypes, e.hp, NULL);
    if (rc != CLI_EXIT_OK) goto done;
    rc = CLI_EXIT_FAIL;
    for (int i = 0; i < np; i++)
        if (policy_is_learned(pnames[i])) {
            rc = policy_make_learned(prog, pnames[i], po.policy_file, e.hp, thr, fl, &pols[i]);
            if (rc != CLI_EXIT_OK) goto done;
            rc = CLI_EXIT_FAIL;
        }
    if (strcmp(split, "all") != 0) { /* the split of kvsieve train */
        int64_t n_train = (int64_t)((double)n_ids * KVS_LEARNED_TRAIN_FRACTION);
        if (strcmp(split, "held-out") == 0) memmove(ids, ids + n_train, (size_t)(n_ids - n_train) * sizeof *ids), n_ids -= n_train;
        else n_ids = n_train;
    }
    if (ctx == CLI_UNSET_I64) {
        ctx = 256;
        if (e.hp->ctx_len > 0 && e.hp->ctx_len < ctx) {
            ctx = e.hp->ctx_len;
            fprintf(stderr, "%s: --ctx not given: using the model's context %lld (the default 256 exceeds it)\n", prog,
                    (long long)ctx);
        }
        if (ctx < 8) {
            rc = cli_fail(CLI_EXIT_USAGE, prog, "the model's context %d is below the 8 tokens a window needs", e.hp->ctx_len);
            goto done;
        }
    }
    if (e.hp->ctx_len > 0 && ctx > e.hp->ctx_len) {
        rc = cli_fail(CLI_EXIT_USAGE, prog, "--ctx %lld exceeds the model's context %d", (long long)ctx, e.hp->ctx_len);
        goto done;
    }
    e.ctx = ctx;
    for (int j = 0; j < nb; j++) /* a token budget above the window keeps everything: never silently a no-op */
        if (bud[j] > (double)ctx || -bud[j] > (double)ctx) {
            rc = cli_fail(CLI_EXIT_USAGE, prog, "--budgets: '%s' is above the window of --ctx %lld tokens (want a fraction in "
                          "(0, 1] or at most %lld tokens)", bstr[j], (long long)ctx, (long long)ctx);
            goto done;
        }
    int64_t max_windows = n_ids / (ctx - 1);
    if (windows == 0 || windows > max_windows) windows = max_windows;
    if (windows < 1) {
        rc = cli_fail(CLI_EXIT_USAGE, prog, "%s has %lld tokens: not one window of %lld", text, (long long)n_ids, (long long)ctx);
        goto done;
    }
    int64_t V = e.hp->vocab;
    e.lp = calloc((size_t)e.hp->n_layers, sizeof *e.lp);
    e.full_lp = malloc((size_t)(ctx - 1) * V * sizeof *e.full_lp);
    e.full_top = malloc((size_t)ctx * sizeof *e.full_top);
    e.lp_buf = malloc((size_t)V * sizeof *e.lp_buf);
    e.probe = malloc((size_t)ctx);
    int ncell = 1 + np * nb + kvq;
    cells = calloc((size_t)ncell, sizeof *cells);
    int32_t *win = malloc((size_t)ctx * sizeof *win);
    if (!e.lp || !e.full_lp || !e.full_top || !e.lp_buf || !e.probe || !cells || !win) {
        free(win);
        rc = cli_fail(CLI_EXIT_FAIL, prog, "out of memory");
        goto done;
    }
    if (needle && needle_window(cm.tok, 1, ids, n_ids, ctx, 0, win, e.probe) != 0) {
        free(win);
        rc = cli_fail(CLI_EXIT_USAGE, prog, "--needle: the passkey, question and answer do not fit a window of %lld tokens",
                      (long long)ctx);
        goto done;
    }
    kvs_cache_params cp = kvs_model_cache_params(e.m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = ctx;
    if (kvs_cache_create(&full_cache, e.dev, &cp) != KVS_OK) {
        free(win);
        rc = cli_fail(CLI_EXIT_FAIL, prog, "cache: %s", kvs_last_error());
        goto done;
    }
    cells[0].policy = NULL;
    cells[0].budget = 1.0;
    cells[0].kept = ctx;
    kvs_cache_params cpt = cp; /* the policies' caches (and no-evict) in the chosen types */
    cpt.type_k = ctypes[0];
    cpt.type_v = ctypes[1];
    if (ct.rotate) cpt.flags |= KVS_CACHE_ROTATE;
    /* one evictor and one cache per (policy, budget), sized to budget + buffer */
    kvs_evictor **evs = calloc((size_t)ncell, sizeof *evs);
    kvs_kv_cache **caches = calloc((size_t)ncell, sizeof *caches);
    kvs_status s = evs && caches ? KVS_OK : KVS_ERR_OUT_OF_MEMORY;
    int bad_usage = 0; /* a policy/budget pair the evictor refuses (e.g. sinks filling the budget): exit 2 */
    for (int i = 0; i < np && s == KVS_OK; i++)
        for (int j = 0; j < nb && s == KVS_OK; j++) {
            cell *c = &cells[1 + i * nb + j];
            c->policy = pnames[i];
            c->budget = bud[j];
            kvs_evict_params ep = kvs_evict_params_default();
            ep.policy = pols[i];
            kvs_policy_set_model(pols[i], e.m); /* critical / expected read the model's weights */
            s = kvs_policy_check_model(pols[i], e.m);
            if (s != KVS_OK) break;
            ep.budget = bud[j] < 0 ? 1.0 : bud[j];
            ep.budget_tokens = bud[j] < 0 ? (int64_t)-bud[j] : 0; /* "Nt" */
            ep.scope = scope;
            ep.rerotate = e.rerotate;
            ep.think_ratio = e.think;
            ep.buffer = po.buffer == CLI_UNSET_I64 ? 0 : po.buffer; /* 0: automatic */
            s = kvs_evictor_create(&evs[1 + i * nb + j], &ep, e.hp, ctx);
            if (s != KVS_OK) {
                bad_usage = s == KVS_ERR_INVALID_ARGUMENT;
                break;
            }
            c->kept = kvs_evictor_budget(evs[1 + i * nb + j], 0);
            int64_t sum = 0;
            for (int l = 0; l < e.hp->n_layers; l++) sum += kvs_evictor_budget(evs[1 + i * nb + j], l);
            c->kept = (sum + e.hp->n_layers / 2) / e.hp->n_layers;
            kvs_cache_params cpi = cpt;
            cpi.capacity = kvs_evictor_capacity(evs[1 + i * nb + j], 1);
            s = kvs_cache_create(&caches[1 + i * nb + j], e.dev, &cpi);
        }
    if (kvq && s == KVS_OK) {
        cell *c = &cells[ncell - 1];
        c->policy = "no-evict";
        c->budget = 1.0;
        c->kept = ctx;
        s = kvs_cache_create(&caches[ncell - 1], e.dev, &cpt);
    }
    int64_t total_probes = 0;
    const int tty = isatty(fileno(stderr)); /* progress lines only where a person watches */
    for (int64_t w = 0; w < windows && s == KVS_OK; w++) {
        win[0] = e.hp->bos_id >= 0 ? e.hp->bos_id : 1;
        memcpy(win + 1, ids + w * (ctx - 1), (size_t)(ctx - 1) * sizeof *win);
        total_probes += eval_mark_probes(cm.tok, win, ctx, e.probe);
        s = eval_run_window(&e, full_cache, NULL, win, &cells[0], 1);
        for (int k = 1; k < ncell && s == KVS_OK; k++) s = eval_run_window(&e, caches[k], evs[k], win, &cells[k], 0);
        if (!json && tty) fprintf(stderr, "\r%s: window %lld/%lld", prog, (long long)(w + 1), (long long)windows);
    }
    if (!json && tty) fprintf(stderr, "\n");
    uint8_t *mark = needle ? calloc((size_t)ctx, 1) : NULL;
    if (needle && !mark) s = KVS_ERR_OUT_OF_MEMORY;
    for (int d = 0; needle && d < EVAL_NEEDLE_DEPTHS && s == KVS_OK; d++) {
        if (needle_window(cm.tok, e.hp->bos_id >= 0 ? e.hp->bos_id : 1, ids, n_ids, ctx, d, win, mark) != 0) {
            s = KVS_ERR_INVALID_ARGUMENT; /* checked before the windows ran: not reached */
            break;
        }
        e.needle = mark;
        e.needle_depth = d;
        s = eval_run_window(&e, full_cache, NULL, win, &cells[0], 1);
        for (int k = 1; k < ncell && s == KVS_OK; k++) s = eval_run_window(&e, caches[k], evs[k], win, &cells[k], 0);
        e.needle = NULL;
    }
    free(mark);
    for (int k = 0; k < ncell; k++) {
        if (evs) kvs_evictor_destroy(&evs[k]);
        if (caches) kvs_cache_destroy(&caches[k]);
    }
    free(evs);
    free(caches);
    free(win);
    if (s != KVS_OK) {
        rc = cli_fail(bad_usage ? CLI_EXIT_USAGE : CLI_EXIT_FAIL, prog, "%s", kvs_last_error());
        goto done;
    }

    /* report */
    double ppl_full = exp(cells[0].nll_sum / (double)cells[0].n);
    if (json) {
        json_object *root = json_object_new_object(), *jc = json_object_new_array();
        json_object_object_add(root, "model", json_object_new_string(path));
        json_object_object_add(root, "text", json_object_new_string(text));
        json_object_object_add(root, "ctx", json_object_new_int64(ctx));
        json_object_object_add(root, "windows", json_object_new_int64(windows));
        json_object_object_add(root, "split", json_object_new_string(split));
        json_object_object_add(root, "predictions", json_object_new_int64(cells[0].n));
        json_object_object_add(root, "scope", json_object_new_string(kvs_budget_scope_name(scope)));
        json_object_object_add(root, "rerotate", json_object_new_boolean(e.rerotate));
        json_object_object_add(root, "think_ratio", json_object_new_double(e.think));
        json_object_object_add(root, "cache_type_k", json_object_new_string(kvs_dtype_name(ctypes[0])));
        json_object_object_add(root, "cache_type_v", json_object_new_string(kvs_dtype_name(ctypes[1])));
        json_object_object_add(root, "kv_rotate", json_object_new_boolean(ct.rotate));
        json_object_object_add(root, "recall_mentions", json_object_new_int64(total_probes));
        json_object_object_add(root, "learned_threshold", thr > -INFINITY ? json_object_new_double(thr) : NULL);
        json_object_object_add(root, "floor", fl >= 0.0f ? json_object_new_double(fl) : NULL);
        for (int k = 0; k < ncell; k++) {
            cell *c = &cells[k];
            json_object *o = json_object_new_object();
            json_object_object_add(o, "policy", json_object_new_string(c->policy ? c->policy : "full"));
            /* "Nt" budgets as the fraction of ctx they keep */
            json_object_object_add(o, "budget", json_object_new_double(c->budget < 0 ? -c->budget / (double)ctx : c->budget));
            json_object_object_add(o, "budget_tokens", json_object_new_int64(c->kept));
            json_object_object_add(o, "kl", json_object_new_double(c->kl_sum / (double)c->n));
            json_object_object_add(o, "top1_agreement", json_object_new_double((double)c->agree / (double)c->n));
            double ppl = exp(c->nll_sum / (double)c->n);
            json_object_object_add(o, "perplexity", json_object_new_double(ppl));
            json_object_object_add(o, "perplexity_delta", json_object_new_double(ppl - ppl_full));
            json_object_object_add(o, "cache_bytes_peak", json_object_new_int64(c->bytes_peak));
            json_object_object_add(o, "cache_bytes_allocated", json_object_new_int64(c->bytes_alloc));
            json_object_object_add(o, "recall", c->recall_probes ? json_object_new_double((double)c->recall_hits / (double)c->recall_probes)
                                                                  : NULL);
            json_object_object_add(o, "recall_probes", json_object_new_int64(c->recall_probes));
            json_object_object_add(o, "evictions", json_object_new_int64(c->evictions));
            json_object_object_add(o, "seconds", json_object_new_double(c->seconds));
            if (needle) {
                json_object *nl = json_object_new_array();
                for (int d = 0; d < EVAL_NEEDLE_DEPTHS; d++)
                    json_object_array_add(nl, json_object_new_double(c->needle_lp[d] / (double)c->needle_n[d]));
                json_object_object_add(o, "needle_logprob", nl);
            }
            json_object_array_add(jc, o);
        }
        json_object_object_add(root, "cells", jc);
        printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
        json_object_put(root);
    } else {
        printf("kvsieve eval: %s, %s (split %s): %lld windows x %lld tokens (%lld predictions), scope %s%s\n", path, text, split,
               (long long)windows, (long long)ctx, (long long)cells[0].n, kvs_budget_scope_name(scope),
               e.rerotate ? ", keys re-rotated after eviction" : "");
        if (e.think > 0.0) printf("ThinK: %g of the key channels of each kv head pruned at each eviction (not stored)\n", e.think);
        if (thr > -INFINITY || fl >= 0.0f) {
            if (thr > -INFINITY) printf("threshold mode: learned policies evict every token scoring below %g", (double)thr);
            if (fl >= 0.0f) printf("%sfloor: each kv head keeps at least %g x its share", thr > -INFINITY ? "; " : "", (double)fl);
            printf("\n");
        }
        if (kvq)
            printf("cache types: K %s, V %s%s in the policy rows and no-evict (the full reference keeps f32)\n",
                   kvs_dtype_name(ctypes[0]), kvs_dtype_name(ctypes[1]), ct.rotate ? ", keys rotated" : "");
        printf("recall: %lld later-mention tokens of early names; probes = those the full cache ranks in its top %d\n",
               (long long)total_probes, RECALL_TOPK);
        printf("%-10s %6s %6s %12s %7s %8s %8s %10s %14s %6s\n", "policy", "budget", "tokens", "KL(full||ev)", "top1%", "ppl",
               "d_ppl", "cache KiB", "recall", "evict");
        for (int k = 0; k < ncell; k++) {
            cell *c = &cells[k];
            char b[32], rec[48];
            fmt_budget(b, sizeof b, c->budget);
            if (c->recall_probes)
                snprintf(rec, sizeof rec, "%.1f%% (%lld)", 100.0 * (double)c->recall_hits / (double)c->recall_probes,
                         (long long)c->recall_probes);
            else
                snprintf(rec, sizeof rec, "-");
            double ppl = exp(c->nll_sum / (double)c->n);
            printf("%-10s %6s %6lld %12.5f %7.2f %8.3f %+8.3f %10.1f %14s %6lld\n", c->policy ? c->policy : "full", b,
                   (long long)c->kept, c->kl_sum / (double)c->n, 100.0 * (double)c->agree / (double)c->n, ppl, ppl - ppl_full,
                   (double)c->bytes_peak / 1024.0, rec, (long long)c->evictions);
        }
        if (needle) {
            printf("needle: \"%s\" at 10/50/90%% depth of the first window's text, then \"%s\": mean log-probability "
                   "of the answer's tokens (\"%s\")\n", NEEDLE_TEXT, NEEDLE_Q, NEEDLE_A);
            printf("%-10s %6s %9s %9s %9s\n", "policy", "budget", "lp@10%", "lp@50%", "lp@90%");
            for (int k = 0; k < ncell; k++) {
                cell *c = &cells[k];
                char b[32];
                fmt_budget(b, sizeof b, c->budget);
                printf("%-10s %6s", c->policy ? c->policy : "full", b);
                for (int d = 0; d < EVAL_NEEDLE_DEPTHS; d++) printf(" %9.3f", c->needle_lp[d] / (double)c->needle_n[d]);
                printf("\n");
            }
        }
    }
    if (plot) {
        double *x = malloc((size_t)nb * sizeof *x), *ya = malloc((size_t)np * nb * sizeof *ya),
               *yk = malloc((size_t)np * nb * sizeof *yk), *yn = malloc((size_t)np * nb * sizeof *yn);
        for (int j = 0; j < nb && x; j++) x[j] = fabs(bud[j]) <= 1.0 && bud[j] > 0 ? bud[j] : fabs(bud[j]) / (double)ctx;
        for (int i = 0; i < np && ya && yk; i++)
            for (int j = 0; j < nb; j++) {
                cell *c = &cells[1 + i * nb + j];
                ya[i * nb + j] = 100.0 * (double)c->agree / (double)c->n;
                yk[i * nb + j] = c->kl_sum / (double)c->n;
                double lp = 0.0; /* --needle: the passkey's log-probability, mean over the depths */
                for (int d = 0; d < EVAL_NEEDLE_DEPTHS; d++) lp += c->needle_lp[d] / (double)c->needle_n[d];
                if (yn) yn[i * nb + j] = lp / EVAL_NEEDLE_DEPTHS;
            }
        char title[4400];
        const char *slash = strrchr(path, '/');
        snprintf(title, sizeof title, "KV eviction fidelity vs budget: %s, ctx %lld, %lld windows, scope %s",
                 slash ? slash + 1 : path, (long long)ctx, (long long)windows, kvs_budget_scope_name(scope));
        svg_panel panels[3] = {
            {.title = "top-1 agreement with the full cache", .xlabel = "budget (fraction of ctx)", .ylabel = "top-1 agreement (%)",
             .n_series = np, .n_points = nb, .x = x, .y = ya, .y_from_zero = 0},
            {.title = "mean KL(full || evicted)", .xlabel = "budget (fraction of ctx)", .ylabel = "KL (nats, log scale)",
             .n_series = np, .n_points = nb, .x = x, .y = yk, .y_log = 1},
            {.title = "passkey log-probability (mean of 10/50/90% depth)", .xlabel = "budget (fraction of ctx)",
             .ylabel = "log-probability per answer token (nats)", .n_series = np, .n_points = nb, .x = x, .y = yn},
        };
        cli_out svg;
        int perr = x && ya && yk && yn ? cli_out_open(&svg) : ENOMEM;
        if (!perr) {
            (void)svg_write_plot(svg.f, title, pnames, panels, needle ? 3 : 2); /* errors: cli_out_close */
            perr = cli_out_close(&svg, plot);
        }
        free(x), free(ya), free(yk), free(yn);
        if (perr) {
            rc = cli_fail(CLI_EXIT_FAIL, prog, "cannot write plot %s: %s", plot, strerror(perr));
            goto done;
        }
        if (!json) printf("plot written to %s\n", plot);
    }
    rc = CLI_EXIT_OK;
done:
    for (int i = 0; i < np; i++) kvs_policy_destroy(&pols[i]);
    kvs_cache_destroy(&full_cache);
    cli_model_close(&cm);
    free(e.lp); free(e.full_lp); free(e.full_top); free(e.lp_buf); free(e.probe);
    free(cells); free(ids);
    return rc;
}
