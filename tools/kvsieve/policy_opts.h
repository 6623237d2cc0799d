/* kvsieve CLI — the eviction flags shared by `generate` and `eval`:
 *   --policy NAME --budget F|N | --budget-tokens N [--scope head|layer|global] [--sink N] [--window N] [--buffer N]
 *   [--learned-threshold T] [--floor A]
 * POLICY_OPTS(po) expands to the cli_opt rows; policy_opts_make() turns the parsed values into a
 * kvs_policy and the kvs_ar_params fields. */
#ifndef KVS_TOOLS_POLICY_OPTS_H
#define KVS_TOOLS_POLICY_OPTS_H

#include <stdint.h>

#include "kvsieve/generate.h"
#include "kvsieve/policy.h"
#include "kvsieve/tokenizer.h"

typedef struct policy_opts {
    const char *policy;   /* NULL: no eviction */
    const char *budget;   /* "0.25" (fraction of the planned length) or "64" (tokens per kv head) */
    const char *scope;    /* "head" (default), "layer", "global" */
    int sink;             /* streaming sinks (CLI_UNSET_INT: default 4) */
    int64_t window;       /* h2o / snapkv window (0: the policy's default; CLI_UNSET_I64: not given, also 0) */
    int64_t buffer;       /* tokens above the budget before eviction (CLI_UNSET_I64: automatic) */
    const char *policy_file; /* learned policies (retention, indexer, rl): GGUF side file(s),
                              * comma-separated; the file whose kind matches the policy is used */
    const kvs_model_hparams *hp; /* set by the caller before policy_opts_make: the model's shape */
    const char *threshold;   /* learned policies: threshold mode (--learned-threshold T), NULL: off */
    const char *floor;       /* adakv and learned policies: per-head floor fraction (--floor A) */
    int64_t budget_tokens;   /* --budget-tokens N: N tokens per kv head (CLI_UNSET_I64: --budget applies) */
} policy_opts;

#define POLICY_OPTS_INIT {NULL, NULL, NULL, CLI_UNSET_INT, CLI_UNSET_I64, CLI_UNSET_I64, NULL, NULL, NULL, NULL, CLI_UNSET_I64}

/* The rows of --learned-threshold and --floor (also in POLICY_OPTS). */
#define POLICY_MODE_OPTS(po)                                                                                       \
    {"learned-threshold", 0, CLI_STRING, &(po).threshold, "T",                                                    \
     "learned policies: threshold mode: whenever eviction runs, every token scoring below T goes, the budget "     \
     "caps the rest (T in the policy's score units: retention/indexer predict log(1e-4 + future attention), "     \
     "e.g. -4.6 = 1%; default: off)"},                                                                             \
    {"floor", 0, CLI_STRING, &(po).floor, "A",                                                                     \
     "floor mode: each kv head keeps at least A x its even share, A in [0, 1] (adakv's alpha, default 0.2; "       \
     "learned policies: default 0 = no floor)"}

#define POLICY_OPTS(po)                                                                                            \
    {"policy", 0, CLI_STRING, &(po).policy, "NAME",                                                                \
     "KV eviction policy: streaming, h2o, snapkv, tova, knorm, pyramidkv, adakv, keydiff, lagkv, critical[:base], " \
     "expected, prefixkv, cascade, clusterkv, or a learned one: retention, indexer, rl (with --policy-file); "   \
     "<name>@t: threshold mode, <name>@mass<p>: mass mode (default: none)"},                                                           \
    {"policy-file", 0, CLI_STRING, &(po).policy_file, "F.gguf[,..]",                                               \
     "learned policies: weights written by `kvsieve train` (comma-separated, matched by kind)"},                  \
    {"budget", 0, CLI_STRING, &(po).budget, "F|N",                                                                 \
     "cache budget: fraction (0,1] of the sequence, or tokens per kv head (default 1.0)"},                         \
    {"budget-tokens", 0, CLI_INT64, &(po).budget_tokens, "N",                                                      \
     "cache budget as a token count per kv head, N >= 1 (--budget 1 means 100%; this is how to keep 1 token)"},    \
    {"scope", 0, CLI_STRING, &(po).scope, "S", "budget scope: head, layer (pooled over heads), global (default head)"}, \
    {"sink", 0, CLI_INT, &(po).sink, "N", "streaming (also lagkv, expected, clusterkv, cascade): sink tokens always kept, below the budget in rows (default 4)"},                       \
    {"window", 0, CLI_INT64, &(po).window, "N", "h2o recent / snapkv observation window, kept, below the budget in rows (default or 0: policy's); with --cache elastic: masked positions queried per step (default 16)"},     \
    {"buffer", 0, CLI_INT64, &(po).buffer, "N", "tokens above the budget before evicting, >= 1 (default: budget/8 clamped to 1..128; as large as the sequence: never evicts)"}, \
    POLICY_MODE_OPTS(po)

/* 1 when name is a learned policy kind (retention, indexer, rl). */
int policy_is_learned(const char *name);

/* Parses --learned-threshold and --floor for the policies names[0..n): *threshold (-INFINITY when
 * unset) and *floor (-1 when unset). Refuses (CLI_EXIT_USAGE, one line on stderr) a value that is
 * not a finite number / a fraction in [0, 1], and a flag that none of the policies takes
 * (threshold: the learned ones; floor: adakv and the learned ones). CLI_EXIT_OK otherwise. */
int policy_parse_modes(const char *prog, const policy_opts *po, const char *const *names, int n, float *threshold, float *floor);

/* Creates the learned policy `name` from the file among files (comma-separated) whose kind is
 * name, checked against the model shape hp, in threshold mode (threshold > -INFINITY) and floor
 * mode (floor > 0). Prints "prog: ..." and returns CLI_EXIT_USAGE on a missing, malformed or
 * mismatched file; CLI_EXIT_OK otherwise. */
int policy_make_learned(const char *prog, const char *name, const char *files, const kvs_model_hparams *hp, float threshold,
                        float floor, kvs_policy **pol);

/* Parses a budget string: a fraction in (0, 1], a whole count > 1, or "Nt" (N >= 1 tokens, so "1t" is one
 * token: stored as -N). 0 on success, -1 otherwise. */
int policy_parse_budget(const char *s, double *out);

/* Creates the policy named in po (NULL *pol when po->policy is NULL) and fills p's eviction fields.
 * Prints "prog: ..." and returns CLI_EXIT_USAGE on a bad value; CLI_EXIT_OK otherwise. */
int policy_opts_make(const char *prog, const policy_opts *po, kvs_policy **pol, kvs_ar_params *p);

#endif
