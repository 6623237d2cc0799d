/* kvsieve train — trains a learned KV eviction policy (retention gates, indexer, RL) on the train
 * split of a text and writes its weights to a GGUF side file (atomically: PATH.tmp, then rename).
 *
 * Split: the text is tokenized (no BOS); the first 90% of its tokens are the train split, the last
 * 10% the held-out split (KVS_LEARNED_TRAIN_FRACTION; `kvsieve eval --split held-out` evaluates on
 * exactly those). Training never reads the held-out tokens. Deterministic for a seed on one backend.
 * Output: one progress line per step on stderr (step, loss), a summary on stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "kvsieve/learned.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/tokenizer.h"
#include "opts_common.h"
#include "policy_opts.h"

static void progress(int64_t step, int64_t steps, double loss, void *user) {
    const double *t0 = user;
    fprintf(stderr, "kvsieve train: step %lld/%lld  loss %.6f  (%.1f s)\n", (long long)(step + 1), (long long)steps, loss,
            cli_now() - *t0);
}

static void validated(int64_t step, double kl, int best, void *user) {
    const double *t0 = user;
    fprintf(stderr, "kvsieve train: validation at step %lld: greedy KL %.6f%s  (%.1f s)\n", (long long)step, kl,
            best ? "  (best so far, kept)" : "", cli_now() - *t0);
}

int cmd_train(int argc, char **argv) {
    const char *prog = "kvsieve train";
    const char *model = NULL, *text = NULL, *kind_s = NULL, *out = NULL, *budget_s = NULL;
    int64_t steps = CLI_UNSET_I64, seed = 1, ctx = 128, samples = 4;
    device_opts dv = {.threads = 1}; /* the models trained here are tiny: one thread, no OpenMP contention */
    double lr = CLI_UNSET_DBL;
    const cli_opt opts[] = {
        {"kind", 0, CLI_STRING, &kind_s, "K", "retention, indexer or rl; required"},
        {"model", 'm', CLI_STRING, &model, "MODEL", "model file (path or name under KVSIEVE_MODELS); required"},
        {"text", 0, CLI_STRING, &text, "FILE", "training text (its first 90% of tokens are used); required"},
        {"budget", 0, CLI_STRING, &budget_s, "F[,F..]",
         "rl: fractions of the window kept during episodes, cycled step by step (default 0.1,0.25,0.5); "
         "retention and indexer learn from full-cache runs and do not use it"},
        {"out", 'o', CLI_STRING, &out, "POLICY.gguf", "side file to write; required"},
        {"steps", 0, CLI_INT64, &steps, "N", "optimiser steps, one window each (rl: 4 sampled episodes each; default: retention 150, indexer 150, rl 500)"},
        {"samples", 0, CLI_INT64, &samples, "K", "rl: sampled episodes per window, 2..64 (leave-one-out baseline; default 4)"},
        {"seed", 's', CLI_INT64, &seed, "S", "seed of the initial weights, window order and sampling (default 1)"},
        {"ctx", 0, CLI_INT64, &ctx, "N", "window length in tokens, BOS included (default 128)"},
        {"ctx-size", 'c', CLI_INT64, &ctx, "N", "llama.cpp's name of --ctx (default 128)"},
        {"lr", 0, CLI_DOUBLE, &lr, "X", "Adam learning rate (default 0.02; rl 0.001)"},
        DEVICE_BACKEND_OPT(dv),
        {"threads", 't', CLI_INT, &dv.threads, "N",
         "CPU threads (default 1: the steps are tiny and extra threads mostly wait on each other; 0 = all cores)"},
    };
    const cli_spec spec = {
        .prog = prog,
        .usage = "--kind retention|indexer|rl -m MODEL --text FILE --out POLICY.gguf [--budget F] [--steps N] [--seed S]",
        .summary = "Trains a learned KV eviction policy on the train split (first 90% of the tokens) of a text:\n"
                   "retention gates and the indexer regress the measured future attention of full-cache runs;\n"
                   "rl runs REINFORCE on -KL(full || evicted) with Gumbel top-k keep-sets. Writes a GGUF side\n"
                   "file for `kvsieve generate --policy KIND --policy-file FILE` and\n"
                   "`kvsieve eval --policies KIND,... --policy-file FILE`.",
        .opts = opts,
        .n_opts = (int)(sizeof opts / sizeof opts[0]),
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!kind_s || !model || !text || !out) return cli_fail(CLI_EXIT_USAGE, prog, "--kind, -m MODEL, --text FILE and --out FILE are required");
    kvs_learned_kind kind;
    if (kvs_learned_kind_from_name(kind_s, &kind) != KVS_OK) return cli_fail(CLI_EXIT_USAGE, prog, "--kind: %s", kvs_last_error());
    if (!budget_s) budget_s = kind == KVS_LEARNED_RL ? "0.1,0.25,0.5" : "0.25";
    double budgets[KVS_TRAIN_MAX_BUDGETS];
    int n_budgets = 0;
    if (cli_parse_double_list(budget_s, budgets, KVS_TRAIN_MAX_BUDGETS, &n_budgets) != 0)
        return cli_fail(CLI_EXIT_USAGE, prog, "--budget '%s': want 1 to %d comma-separated fractions in (0, 1)", budget_s,
                        KVS_TRAIN_MAX_BUDGETS);
    for (int i = 0; i < n_budgets; i++)
        if (!(budgets[i] > 0.0 && budgets[i] < 1.0))
            return cli_fail(CLI_EXIT_USAGE, prog, "--budget '%s': want fractions in (0, 1)", budget_s);
    if (steps == CLI_UNSET_I64) steps = kind == KVS_LEARNED_RL ? 500 : 150;
    if (steps < 1 || seed < 0 || ctx < 16) return cli_fail(CLI_EXIT_USAGE, prog, "--steps >= 1, --seed >= 0, --ctx >= 16");
    if (!isnan(lr) && !(lr > 0.0)) return cli_fail(CLI_EXIT_USAGE, prog, "--lr must be > 0");
    if (samples < 2 || samples > 64) return cli_fail(CLI_EXIT_USAGE, prog, "--samples %lld: want 2..64", (long long)samples);

    cli_model cm = {0};
    const char *path = cm.path;
    kvs_learned *lw = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    rc = cli_model_open_file(prog, model, &cm);
    if (rc == CLI_EXIT_OK) rc = cli_model_read_tokens(prog, &cm, text, &ids, &n_ids);
    if (rc == CLI_EXIT_OK) rc = cli_model_create(prog, &dv, &cm);
    if (rc != CLI_EXIT_OK) goto done;
    rc = CLI_EXIT_FAIL;
    kvs_model *m = cm.m;
    const kvs_model_hparams *hp = cm.hp;
    if (kvs_arch_is_diffusion(hp->arch)) {
        rc = cli_fail(CLI_EXIT_USAGE, prog, "%s: learned eviction needs an autoregressive model", path);
        goto done;
    }
    int64_t n_train = (int64_t)((double)n_ids * KVS_LEARNED_TRAIN_FRACTION);
    if (ctx > hp->ctx_len) {
        rc = cli_fail(CLI_EXIT_USAGE, prog, "--ctx %lld exceeds the model context %d", (long long)ctx, hp->ctx_len);
        goto done;
    }
    if (n_train < ctx) {
        rc = cli_fail(CLI_EXIT_USAGE, prog, "%s: %lld training tokens (the first %.0f%%), fewer than one window of --ctx %lld",
                      text, (long long)n_train, 100.0 * KVS_LEARNED_TRAIN_FRACTION, (long long)ctx);
        goto done;
    }
    if (cli_check_writable(prog, "--out", out) != CLI_EXIT_OK) {
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    if (kvs_learned_create(&lw, kind, hp, (uint64_t)seed) != KVS_OK) {
        rc = cli_fail(CLI_EXIT_FAIL, prog, "%s", kvs_last_error());
        goto done;
    }
    kvs_train_params tp = kvs_train_params_default();
    tp.steps = steps;
    tp.seed = (uint64_t)seed;
    tp.budget = budgets[0];
    tp.n_budgets = n_budgets;
    memcpy(tp.budgets, budgets, sizeof budgets);
    tp.ctx = ctx;
    if (tp.horizon >= ctx / 2) tp.horizon = ctx / 4; /* short windows: a shorter utility horizon */
    tp.lr = isnan(lr) ? 0.0f : (float)lr; /* 0: the kind's default */
    double t0 = cli_now(), loss = 0.0;
    tp.progress = progress;
    tp.validated = validated;
    tp.val_windows = kind == KVS_LEARNED_RL ? 8 : 0;
    tp.rl_samples = samples;
    tp.user = &t0;
    fprintf(stderr, "%s: %s on %s: %lld train tokens (of %lld; the last %lld held out), %lld steps of %lld tokens\n", prog, kind_s,
            text, (long long)n_train, (long long)n_ids, (long long)(n_ids - n_train), (long long)steps, (long long)ctx);
    if (kvs_learned_train(lw, m, ids, n_train, &tp, &loss) != KVS_OK) {
        rc = cli_fail(CLI_EXIT_FAIL, prog, "training: %s", kvs_last_error());
        goto done;
    }
    if (kvs_learned_save(lw, out) != KVS_OK) {
        rc = cli_fail(CLI_EXIT_FAIL, prog, "%s", kvs_last_error());
        goto done;
    }
    int64_t np = 0;
    kvs_learned_params(lw, &np);
    printf("%s: %s policy, %lld parameters, final loss %.6f (mean of the last steps), %.1f s -> %s\n", prog, kind_s, (long long)np,
           loss, cli_now() - t0, out);
    rc = CLI_EXIT_OK;
done:
    kvs_learned_destroy(&lw);
    cli_model_close(&cm);
    free(ids);
    return rc;
}
