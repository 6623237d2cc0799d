/* kvsieve CLI — eviction flags (see policy_opts.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include <string.h>

#include "kvsieve/gguf.h"
#include "kvsieve/learned.h"
#include "policy_opts.h"

int policy_is_learned(const char *name) {
    kvs_learned_kind k;
    return name && (strcmp(name, "retention") == 0 || strcmp(name, "indexer") == 0 || strcmp(name, "rl") == 0) &&
           kvs_learned_kind_from_name(name, &k) == KVS_OK;
}

int policy_parse_modes(const char *prog, const policy_opts *po, const char *const *names, int n, float *threshold, float *floor) {
    *threshold = -INFINITY;
    *floor = -1.0f;
    int learned = 0, ada = 0;
    for (int i = 0; i < n; i++) {
        learned |= policy_is_learned(names[i]);
        ada |= names[i] && strcmp(names[i], "adakv") == 0;
    }
    double v;
    if (po->threshold) {
        if (cli_parse_double(po->threshold, &v) != 0 || !isfinite((float)v))
            return cli_fail(CLI_EXIT_USAGE, prog, "--learned-threshold '%s': want a finite score (the learned policy's score units)",
                            po->threshold);
        if (!learned)
            return cli_fail(CLI_EXIT_USAGE, prog, "--learned-threshold needs a learned policy (retention, indexer or rl)");
        *threshold = (float)v;
    }
    if (po->floor) {
        if (cli_parse_double(po->floor, &v) != 0 || !(v >= 0.0 && v <= 1.0))
            return cli_fail(CLI_EXIT_USAGE, prog, "--floor '%s': want a fraction in [0, 1] of a kv head's even share", po->floor);
        if (!learned && !ada)
            return cli_fail(CLI_EXIT_USAGE, prog, "--floor applies to adakv and the learned policies (retention, indexer, rl)");
        *floor = (float)v;
    }
    return CLI_EXIT_OK;
}

int policy_make_learned(const char *prog, const char *name, const char *files, const kvs_model_hparams *hp, float threshold,
                        float floor, kvs_policy **pol) {
    *pol = NULL;
    kvs_learned_kind kind;
    if (kvs_learned_kind_from_name(name, &kind) != KVS_OK) return cli_fail(CLI_EXIT_USAGE, prog, "%s", kvs_last_error());
    if (!files) return cli_fail(CLI_EXIT_USAGE, prog, "--policy %s needs --policy-file FILE.gguf (written by kvsieve train)", name);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", files);
    char *save = NULL, *chosen = NULL;
    int n = 0;
    for (char *f = strtok_r(buf, ",", &save); f; f = strtok_r(NULL, ",", &save), n++) {
        kvs_gguf *g = NULL;
        char k[32] = "";
        if (kvs_gguf_open(&g, f) != KVS_OK) return cli_fail(CLI_EXIT_USAGE, prog, "--policy-file: %s", kvs_last_error());
        int ok = kvs_gguf_get_string(g, "kvsieve.policy.kind", k, sizeof k) == KVS_OK;
        kvs_gguf_close(&g);
        if (!ok) return cli_fail(CLI_EXIT_USAGE, prog, "--policy-file %s: not a kvsieve policy file (no kvsieve.policy.kind)", f);
        if (strcmp(k, name) == 0 && !chosen) chosen = f;
        if (n == 0 && !strchr(files, ',') && !chosen) chosen = f; /* a single file: its kind is checked on load */
    }
    if (!chosen) return cli_fail(CLI_EXIT_USAGE, prog, "--policy-file: none of %s holds a '%s' policy", files, name);
    kvs_learned *lw = NULL;
    if (kvs_learned_load(&lw, chosen, hp, (int)kind) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--policy-file: %s", kvs_last_error());
    kvs_status s = kvs_learned_policy(pol, lw, threshold, floor > 0.0f ? floor : 0.0f, 64);
    kvs_learned_destroy(&lw);
    if (s != KVS_OK) return cli_fail(CLI_EXIT_FAIL, prog, "%s", kvs_last_error());
    return CLI_EXIT_OK;
}

int policy_parse_budget(const char *s, double *out) {
    double b;
    size_t len = s ? strlen(s) : 0;
    if (len >= 2 && len < 32 && s[len - 1] == 't') { /* "Nt": N tokens */
        char num[32];
        int64_t n;
        memcpy(num, s, len - 1);
        num[len - 1] = '\0';
        if (cli_parse_int64(num, &n) != 0 || n < 1) return -1;
        *out = -(double)n;
        return 0;
    }
    if (!s || cli_parse_double(s, &b) != 0 || !(b > 0.0)) return -1;
    if (b > 1.0 && b != (double)(int64_t)b) return -1;
    *out = b;
    return 0;
}

int policy_opts_make(const char *prog, const policy_opts *po, kvs_policy **pol, kvs_ar_params *p) {
    *pol = NULL;
    double budget = 1.0;
    if (po->budget && policy_parse_budget(po->budget, &budget) != 0)
        return cli_fail(CLI_EXIT_USAGE, prog, "--budget '%s': want a fraction in (0, 1] or a whole token count", po->budget);
    int64_t btok = budget < 0 ? (int64_t)-budget : 0;
    if (budget < 0) budget = 1.0;
    if (po->budget_tokens != CLI_UNSET_I64) {
        if (po->budget_tokens < 1) return cli_fail(CLI_EXIT_USAGE, prog, "--budget-tokens must be >= 1");
        if (po->budget) return cli_fail(CLI_EXIT_USAGE, prog, "give --budget or --budget-tokens, not both");
        btok = po->budget_tokens;
    }
    kvs_budget_scope scope = KVS_SCOPE_HEAD;
    if (po->scope && kvs_budget_scope_from_name(po->scope, &scope) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--scope: %s", kvs_last_error());
    if (po->buffer != CLI_UNSET_I64 && po->buffer < 1) return cli_fail(CLI_EXIT_USAGE, prog, "--buffer must be >= 1");
    if (po->sink != CLI_UNSET_INT && po->sink < 0) return cli_fail(CLI_EXIT_USAGE, prog, "--sink must be >= 0");
    if (!po->policy) {
        /* the flags given, named (not every flag that would need it) */
        const struct { int on; const char *name; } f[] = {
            {po->budget != NULL, "--budget"}, {po->budget_tokens != CLI_UNSET_I64, "--budget-tokens"},
            {po->scope != NULL, "--scope"}, {po->threshold != NULL, "--learned-threshold"}, {po->floor != NULL, "--floor"},
            {po->sink != CLI_UNSET_INT, "--sink"}, {po->buffer != CLI_UNSET_I64, "--buffer"}};
        char given[160] = "";
        int ng = 0;
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            if (f[i].on) {
                size_t l = strlen(given);
                snprintf(given + l, sizeof given - l, "%s%s", ng ? ", " : "", f[i].name);
                ng++;
            }
        if (ng) return cli_fail(CLI_EXIT_USAGE, prog, "%s need%s --policy", given, ng == 1 ? "s" : "");
        return CLI_EXIT_OK;
    }
    kvs_policy_params pp = kvs_policy_params_default();
    if (po->sink != CLI_UNSET_INT) pp.n_sink = po->sink;
    if (po->window != CLI_UNSET_I64 && po->window < 0) return cli_fail(CLI_EXIT_USAGE, prog, "--window must be >= 0");
    pp.window = po->window != CLI_UNSET_I64 ? po->window : 0;
    float thr, fl;
    int rc = policy_parse_modes(prog, po, &po->policy, 1, &thr, &fl);
    if (rc != CLI_EXIT_OK) return rc;
    if (fl >= 0.0f) pp.alpha = fl;
    if (!policy_is_learned(po->policy) && po->policy_file)
        return cli_fail(CLI_EXIT_USAGE, prog, "--policy-file is for the learned policies (retention, indexer, rl), not '%s'",
                        po->policy);
    if (policy_is_learned(po->policy)) {
        rc = policy_make_learned(prog, po->policy, po->policy_file, po->hp, thr, fl, pol);
        if (rc != CLI_EXIT_OK) return rc;
    } else if (kvs_policy_create(pol, po->policy, &pp) != KVS_OK) {
        return cli_fail(CLI_EXIT_USAGE, prog, "--policy: %s", kvs_last_error());
    }
    p->policy = *pol;
    p->budget = budget;
    p->budget_tokens = btok;
    p->scope = scope;
    p->evict_buffer = po->buffer == CLI_UNSET_I64 ? 0 : po->buffer; /* 0: automatic */
    return CLI_EXIT_OK;
}
