/* kvsieve CLI — eviction flags (see policy_opts.h). */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "policy_opts.h"

int policy_parse_budget(const char *s, double *out) {
    double b;
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
    kvs_budget_scope scope = KVS_SCOPE_HEAD;
    if (po->scope && kvs_budget_scope_from_name(po->scope, &scope) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--scope: %s", kvs_last_error());
    if (po->buffer < 0) return cli_fail(CLI_EXIT_USAGE, prog, "--buffer must be >= 0");
    if (!po->policy) {
        if (po->budget || po->scope) return cli_fail(CLI_EXIT_USAGE, prog, "--budget/--scope need --policy");
        return CLI_EXIT_OK;
    }
    kvs_policy_params pp = kvs_policy_params_default();
    if (po->sink >= 0) pp.n_sink = po->sink;
    if (po->window < 0) return cli_fail(CLI_EXIT_USAGE, prog, "--window must be >= 0");
    pp.window = po->window;
    if (kvs_policy_create(pol, po->policy, &pp) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--policy: %s", kvs_last_error());
    p->policy = *pol;
    p->budget = budget;
    p->scope = scope;
    p->evict_buffer = po->buffer;
    return CLI_EXIT_OK;
}
