/* kvsieve generate: load a model and generate text — autoregressive for llama-family models,
 * masked diffusion (LLaDA-style) for llada models. Text streams to stdout as it is finalised
 * (AR: per token; diffusion: per block); stats go to stderr, or everything to stdout as one JSON
 * object with --json. */
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"
#include "dlm_cache_opts.h"
#include "gen_report.h"
#include "kvsieve/generate.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/schedule.h"
#include "kvsieve/tokenizer.h"
#include "opts_common.h"
#include "policy_opts.h"

#define PROG "kvsieve generate"

typedef struct gen_opts {
    const char *model, *prompt;
    device_opts dev;
    int64_t n;
    double temp, top_p, threshold;
    int64_t seed, block, steps;
    int json, no_stream;
    int compare;      /* diffusion: also decode without cache, report speedup and agreement */
    int stop_eos;     /* diffusion: LLaDA's early stop at EOS */
    int block_causal; /* diffusion: block diffusion (causal across blocks) */
    int stats;        /* --stats: the per-step breakdown of the wall time */
    int profile;      /* --profile: device work per op kind and per layer */
    int64_t ctx;      /* -c/--ctx-size: prompt + generated tokens must fit; 0 = the model's context */
    int rerotate;     /* --rerotate: RoPE positions within the cache, keys re-rotated after eviction */
    double think;     /* --think R: ThinK key-channel pruning ratio at each eviction */
    int speculative;  /* --speculative: QuantSpec self-speculative decoding on a qh8 cache */
    int64_t draft;    /* --draft N: tokens drafted per verify step (implies --speculative; default 3) */
    const char *draft_weights; /* --draft-weights T: the draft multiplies by a T copy of the weights */
} gen_opts;

typedef struct stream_ctx {
    const kvs_tokenizer *tok;
    int32_t prev;
    int print;           /* stream text to stdout */
    int progress;        /* live progress line on stderr */
    int64_t done, total;
} stream_ctx;

static int on_token(void *user, int32_t id) {
    stream_ctx *s = user;
    if (s->print) {
        char piece[256];
        size_t len = 0;
        if (kvs_tokenizer_token_to_piece(s->tok, s->prev, id, piece, sizeof piece, &len) == KVS_OK) {
            fwrite(piece, 1, len, stdout);
            fflush(stdout);
        }
    }
    s->prev = id;
    s->done++;
    if (s->progress && s->total > 0) {
        fprintf(stderr, "\r[%lld/%lld tokens]", (long long)s->done, (long long)s->total);
        if (s->done == s->total) fprintf(stderr, "\r%*s\r", 40, "");
        fflush(stderr);
    }
    return 0;
}

/* What streaming prints, as one malloc'd string: the prompt echoed from its tokens (after the BOS),
 * then each generated token's piece after the one before it (on_token's chain). NULL when out of memory. */
static char *echo_text(const kvs_tokenizer *tok, const int32_t *prompt, int64_t n_prompt, const int32_t *out, int64_t n_out) {
    size_t cap = 256, len = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    for (int64_t i = 1; i < n_prompt + n_out; i++) {
        const int32_t prev = i - 1 < n_prompt ? prompt[i - 1] : out[i - 1 - n_prompt], id = i < n_prompt ? prompt[i] : out[i - n_prompt];
        char piece[256];
        size_t pl = 0;
        if (kvs_tokenizer_token_to_piece(tok, prev, id, piece, sizeof piece, &pl) != KVS_OK) continue;
        if (len + pl + 1 > cap) {
            while (len + pl + 1 > cap) cap *= 2;
            char *g = realloc(t, cap);
            if (!g) {
                free(t);
                return NULL;
            }
            t = g;
        }
        memcpy(t + len, piece, pl);
        len += pl;
    }
    t[len] = '\0';
    return t;
}

static json_object *ids_json(const int32_t *ids, int64_t n) {
    json_object *a = json_object_new_array();
    for (int64_t i = 0; i < n; i++) json_object_array_add(a, json_object_new_int(ids[i]));
    return a;
}

int cmd_generate(int argc, char **argv) {
    /* CLI_UNSET: flags that apply to one kind of model only are refused on the other when given */
    gen_opts o = {.prompt = "", .dev = {.backend = "cpu"}, .n = CLI_UNSET_I64, .temp = CLI_UNSET_DBL, .top_p = CLI_UNSET_DBL,
                  .threshold = 0.0, .seed = CLI_UNSET_I64, .block = CLI_UNSET_I64, .steps = CLI_UNSET_I64,
                  .draft = CLI_UNSET_I64};
    policy_opts po = POLICY_OPTS_INIT;
    dlm_cache_opts co = dlm_cache_opts_default();
    cache_type_opts ct = {0};
    cli_opt opts[64] = {
        {"model", 'm', CLI_STRING, &o.model, "MODEL", "model file or directory (GGUF, safetensors dir, llama2.c .bin), required; "
                                                      "a bare name is looked up in $KVSIEVE_MODELS, models/, then ../shared/models"},
        {"prompt", 'p', CLI_STRING, &o.prompt, "TEXT", "prompt text (default: empty, BOS only)"},
        {"n", 'n', CLI_INT64, &o.n, "N", "tokens to generate (default: 256 autoregressive, 64 diffusion)"},
        DEVICE_OPTS(o.dev),
        CACHE_TYPE_OPTS(ct),
        KV_ROTATE_OPT(ct),
        {"temp", 0, CLI_DOUBLE, &o.temp, "T", "autoregressive sampling temperature; 0 = greedy (default 0)"},
        {"top-p", 0, CLI_DOUBLE, &o.top_p, "P", "nucleus sampling mass in (0, 1] (default 1 = off)"},
        {"seed", 's', CLI_INT64, &o.seed, "S", "sampler seed >= 0, or -1 for a random one (printed on stderr) (default 42)"},
        {"ctx-size", 'c', CLI_INT64, &o.ctx, "N", "context size: the prompt + N generated tokens must fit "
                                                  "(default 0 = the model's trained context)"},
        {"block", 0, CLI_INT64, &o.block, "B", "diffusion block length, divides N (default 32; N below 32: one block of N)"},
        {"steps", 0, CLI_INT64, &o.steps, "S", "diffusion denoising steps over all blocks, a multiple of the block count, "
                                              "at most N; not with --threshold (default: = N)"},
        {"diffusion-steps", 0, CLI_INT64, &o.steps, "S", "llama-diffusion-cli's name of --steps (default: = N)"},
        {"diffusion-block-length", 0, CLI_INT64, &o.block, "B", "llama-diffusion-cli's name of --block (default 32)"},
        {"threshold", 0, CLI_DOUBLE, &o.threshold, "E", "diffusion: Fast-dLLM parallel decoding threshold in [0, 1] "
                                                        "(default 0 = off: fixed steps)"},
        {"json", 0, CLI_FLAG, &o.json, NULL, "print one JSON object on stdout instead of streaming text (\"prompt\": the "
                                             "prompt as given, \"text\": the generated text alone)"},
        {"no-stream", 0, CLI_FLAG, &o.no_stream, NULL, "print the text once at the end (the prompt, then the generated text, "
                                                       "as streaming prints them)"},
        POLICY_OPTS(po),
        {"rerotate", 0, CLI_FLAG, &o.rerotate, NULL, "autoregressive: positions within the cache (StreamingLLM): after each "
                                                     "eviction the kept keys are re-rotated to positions 0..n-1 and a new token "
                                                     "takes the cache length; with --policy and a budget inside the model "
                                                     "context, -n may exceed the context"},
        {"think", 0, CLI_DOUBLE, &o.think, "R", "autoregressive, with --policy: ThinK (arXiv 2407.21018) prunes the "
                                                "fraction R in [0, 1) of key channels per kv head with the lowest query-key "
                                                "score at each eviction; the kept rows store the other channels alone "
                                                "(paper: 0.4; default 0 = off)"},
        {"speculative", 0, CLI_FLAG, &o.speculative, NULL, "autoregressive: QuantSpec self-speculative decoding: the model "
                                                           "drafts tokens reading the 4-bit view of a qh8 cache and verifies "
                                                           "them in one step over the 8-bit cache (cache types default to qh8); "
                                                           "also runs plain decoding (3 interleaved runs each, the fastest "
                                                           "counts) for the speedup and, greedy, the check that the tokens "
                                                           "are identical"},
        {"draft", 0, CLI_INT64, &o.draft, "N", "--speculative: tokens drafted per verify step, 1..15 (default 3)"},
        {"draft-weights", 0, CLI_STRING, &o.draft_weights, "T", "--speculative: the draft multiplies by a copy of the weights "
                                                               "quantized to T at load (q4_0, q4_1, iq4_nl, q8_0; implies "
                                                               "--speculative); the verify keeps the model's own (default: "
                                                               "the draft uses them too)"},
        {"compare", 0, CLI_FLAG, &o.compare, NULL, "diffusion: also decode without cache; report speedup and agreement. "
                                                   "Both decodes run once untimed first (kernel builds and compiles, "
                                                   "allocations), then each is timed warm: the speedup is wall time "
                                                   "without cache / with it"},
        {"stop-eos", 0, CLI_FLAG, &o.stop_eos, NULL, "diffusion: stop once every position before the first EOS is decoded; "
                                                     "the rest is EOS, not decoded (LLaDA)"},
        {"block-causal", 0, CLI_FLAG, &o.block_causal, NULL, "diffusion: block diffusion (BD3-LM, Fast-dLLM v2): the prompt "
                                                             "causal, each block bidirectional inside and causal across blocks; "
                                                             "finished blocks stay cached exactly (--cache none or prefix)"},
        {"stats", 0, CLI_FLAG, &o.stats, NULL, "print where a step's wall time goes: planning, forward, logits, "
                                               "confidence, commit (ms per step)"},
        {"profile", 0, CLI_FLAG, &o.profile, NULL, "time the device work per op kind and per layer (ms per step); "
                                                   "on GPU backends every op waits for its queue"},
    };
    int n_opts = 0;
    while (opts[n_opts].name) n_opts++;
    dlm_cache_cli_opts(&co, opts + n_opts);
    n_opts += DLM_CACHE_N_OPTS;
    /* --window is shared: the eviction policies' observation window (autoregressive) and Elastic-Cache's
     * query window (diffusion); keep the first entry of each name */
    for (int i = 0; i < n_opts; i++)
        for (int j = i + 1; j < n_opts; j++)
            if (strcmp(opts[i].name, opts[j].name) == 0) {
                memmove(&opts[j], &opts[j + 1], (size_t)(n_opts - j - 1) * sizeof opts[0]);
                n_opts--;
                j--;
            }
    const cli_spec spec = {
        .prog = PROG,
        .usage = "-m MODEL [-p PROMPT] [-n N] [-c N] [--backend B] [--temp T] [--top-p P] [--seed S] [--block B] "
                 "[--steps S] [--threshold E] [--json] [--policy NAME --budget F|N [--scope head|layer|global] "
                 "[--sink N] [--window N] [--rerotate] [--think R]] [--speculative [--draft N]] [--cache none|prefix|dual|delayed|elastic|d2cache|spa] [--gamma G] "
                 "[--window W] [--track K] [--reload R] [--wavefilter] [--wf-family F] [--wf-levels J] "
                 "[--wf-budget F] [--wf-keep-mass P] [--compare] [--stop-eos] [--block-causal] [--stats] [--profile]",
        .summary = "Generate text with an autoregressive (llama, qwen2, qwen3) or masked-diffusion (llada, dream) model.",
        .opts = opts,
        .n_opts = n_opts,
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.model) return cli_fail(CLI_EXIT_USAGE, PROG, "-m MODEL is required");
    if (o.ctx < 0) return cli_fail(CLI_EXIT_USAGE, PROG, "-c/--ctx-size must be >= 0 (0 = the model's context)");
    /* the first flag given that applies to one kind of model only, for the refusal on the other */
    const char *ar_flag = !isnan(o.temp) ? "--temp" : !isnan(o.top_p) ? "--top-p" : o.seed != CLI_UNSET_I64 ? "--seed" : NULL,
               *dlm_flag = o.block != CLI_UNSET_I64 ? "--block" : o.steps != CLI_UNSET_I64 ? "--steps" : NULL;
    if (isnan(o.temp)) o.temp = 0.0;
    if (isnan(o.top_p)) o.top_p = 1.0;
    if (o.seed == CLI_UNSET_I64) o.seed = 42;
    if (o.seed < -1) return cli_fail(CLI_EXIT_USAGE, PROG, "--seed %lld: want >= 0, or -1 for a random seed", (long long)o.seed);
    if (o.seed == -1) { /* llama.cpp's -1: a random seed, printed so that the run can be repeated */
        uint64_t r = 0;
        FILE *ur = fopen("/dev/urandom", "rb");
        if (!ur || fread(&r, sizeof r, 1, ur) != 1) r = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        if (ur) fclose(ur);
        o.seed = (int64_t)(r >> 1);
        if (o.seed == 0) o.seed = 1;
        fprintf(stderr, "%s: --seed -1: random seed %lld\n", PROG, (long long)o.seed);
    }
    const int block_given = o.block != CLI_UNSET_I64, steps_given = o.steps != CLI_UNSET_I64;
    if (o.block == CLI_UNSET_I64) o.block = 32;
    if (o.steps == CLI_UNSET_I64) o.steps = 0;
    /* each bad value named alone */
    if (!(o.temp >= 0)) return cli_fail(CLI_EXIT_USAGE, PROG, "--temp %g: want >= 0 (0 = greedy)", o.temp);
    if (!(o.top_p > 0 && o.top_p <= 1)) return cli_fail(CLI_EXIT_USAGE, PROG, "--top-p %g: want a mass in (0, 1]", o.top_p);
    if (!(o.threshold >= 0 && o.threshold <= 1)) return cli_fail(CLI_EXIT_USAGE, PROG, "--threshold %g: want [0, 1]", o.threshold);
    if (o.n != CLI_UNSET_I64 && o.n < 1) return cli_fail(CLI_EXIT_USAGE, PROG, "-n %lld: want >= 1", (long long)o.n);
    if (o.block < 1) return cli_fail(CLI_EXIT_USAGE, PROG, "--block %lld: want >= 1", (long long)o.block);
    if (o.steps < 0) return cli_fail(CLI_EXIT_USAGE, PROG, "--steps %lld: want >= 0 (0 = -n)", (long long)o.steps);

    if (o.draft != CLI_UNSET_I64 || o.draft_weights) o.speculative = 1;
    if (o.draft == CLI_UNSET_I64) o.draft = 3;
    kvs_dtype draft_wt = KVS_F32;
    if (o.draft_weights && cli_draft_weight_type(PROG, o.draft_weights, &draft_wt) != CLI_EXIT_OK) return CLI_EXIT_USAGE;
    if (o.speculative && (o.draft < 1 || o.draft > KVS_SPEC_MAX_DRAFT))
        return cli_fail(CLI_EXIT_USAGE, PROG, "--draft must be in 1..%d", KVS_SPEC_MAX_DRAFT);
    const int ct_given = ct.k || ct.v;
    if (o.speculative && !ct_given) ct.k = ct.v = "qh8"; /* QuantSpec's cache by default */
    kvs_dtype ctypes[2];
    rc = cli_cache_types(PROG, &ct, ctypes);
    if (rc != CLI_EXIT_OK) return rc;
    if (o.speculative && ctypes[0] != KVS_QH8 && ctypes[1] != KVS_QH8)
        return cli_fail(CLI_EXIT_USAGE, PROG, "--speculative drafts from the 4-bit view of a qh8 cache: give --cache-type-k "
                        "and/or --cache-type-v qh8 (or neither)");
    cli_model cm = {0};
    kvs_kv_cache *cache = NULL;
    kvs_policy *pol = NULL;
    int32_t *prompt = NULL, *out = NULL, *base_out = NULL;
    kvs_dlm_schedule *sched = NULL;
    kvs_gen_stats st_base;
    gen_profile prof = {0}, prof_base = {0};
    double cpu_s = 0, cpu_base_s = 0;
    int64_t agree = 0, base_n = 0, first_diff = -1;
    double spec_best_s = 0; /* --speculative: the fastest speculative run's wall time */
    int same = 0;
    memset(&st_base, 0, sizeof st_base);
    int exit_code = CLI_EXIT_FAIL;
    rc = cli_model_open(PROG, o.model, &o.dev, &cm);
    if (rc != CLI_EXIT_OK) {
        exit_code = rc;
        goto done;
    }
    kvs_model *m = cm.m;
    kvs_device *dev = cm.dev;
    const kvs_tokenizer *tok = cm.tok;
    const kvs_model_hparams *hp = cm.hp;
    int dlm = kvs_arch_is_diffusion(hp->arch);
    if (dlm && o.speculative) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--speculative/--draft are for autoregressive models; '%s' is a "
                                                   "masked-diffusion model", kvs_arch_name(hp->arch));
        goto done;
    }
    /* the qh8 cache --speculative chose is named as its choice, not as --cache-type flags never given */
    rc = cli_cache_types_fit(PROG, ctypes, hp, o.speculative && !ct_given ? "--speculative/--draft decode on a qh8" : NULL);
    if (rc != CLI_EXIT_OK) {
        exit_code = rc;
        goto done;
    }
    if (draft_wt != KVS_F32 && kvs_model_set_draft_weights(m, draft_wt) != KVS_OK) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "%s", kvs_last_error());
        goto done;
    }
    /* the --rerotate hints only where it can be taken: autoregressive, not --speculative, and keys the
     * library can re-rotate */
    const kvs_cache_params kp = cli_cache_key_params(&ct, ctypes);
    const int can_stream = !dlm && !o.speculative && kvs_cache_check_rerotate(&kp) == KVS_OK;
    if (o.ctx > hp->ctx_len)
        fprintf(stderr, "%s: note: -c %lld is above the model's trained context %d; the context stays %d (kvsieve "
                        "does not extend it%s)\n",
                PROG, (long long)o.ctx, hp->ctx_len, hp->ctx_len, can_stream ? "; --rerotate with a policy streams past it" : "");
    int64_t n_gen = o.n > 0 ? o.n : (dlm ? 64 : 256);
    if (dlm ? ar_flag != NULL : dlm_flag != NULL) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "%s applies to %s models; '%s' is %s", dlm ? ar_flag : dlm_flag,
                             dlm ? "autoregressive" : "diffusion", kvs_arch_name(hp->arch),
                             dlm ? "a diffusion model" : "autoregressive");
        goto done;
    }
    /* the context the default -n must fit: the model's, or -c/--ctx-size when smaller */
    const int64_t ctx_fit = o.ctx > 0 && o.ctx < hp->ctx_len ? o.ctx : hp->ctx_len;
    char ctx_what[64];
    if (ctx_fit < hp->ctx_len) snprintf(ctx_what, sizeof ctx_what, "--ctx-size %lld", (long long)ctx_fit);
    else snprintf(ctx_what, sizeof ctx_what, "model context %d", hp->ctx_len);
    if (o.n == CLI_UNSET_I64 && n_gen > ctx_fit) { /* the default does not fit: the context does */
        n_gen = dlm ? ctx_fit / o.block * o.block : ctx_fit;
        if (n_gen < 1) n_gen = 1;
        fprintf(stderr, "%s: -n not given: generating %lld tokens (the default %d exceeds the %s)\n", PROG,
                (long long)n_gen, dlm ? 64 : 256, ctx_what);
    }
    if (o.speculative && (dlm || po.policy || o.rerotate)) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--speculative applies to autoregressive models without --policy/--rerotate");
        goto done;
    }
    if (dlm && o.rerotate) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--rerotate applies to autoregressive models only");
        goto done;
    }
    /* --rerotate with eviction: positions stay inside the cache, so the sequence may pass the context */
    int stream = !dlm && o.rerotate && po.policy;
    const char *hint = !can_stream || stream ? "" : " (to stream past it: --policy streaming --budget N --rerotate)";
    if (n_gen > hp->ctx_len && !stream) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "-n %lld exceeds the model context %d%s", (long long)n_gen, hp->ctx_len, hint);
        goto done;
    }
    const char *dlm_only = co.cache && strcmp(co.cache, "none") != 0 ? "--cache" : co.wavefilter ? "--wavefilter"
                           : o.compare ? "--compare" : o.threshold > 0 ? "--threshold" : o.stop_eos ? "--stop-eos"
                           : o.block_causal ? "--block-causal" : dlm_cache_given(&co);
    if (!dlm && dlm_only) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "%s is for diffusion models; '%s' is autoregressive", dlm_only,
                             kvs_arch_name(hp->arch));
        goto done;
    }
    /* --window is the h2o/snapkv window on autoregressive models, --rerotate re-rotates what eviction
     * keeps: without --policy neither has anything to act on (a --window given as 0 too) */
    if (!dlm && !po.policy && (po.window != CLI_UNSET_I64 || o.rerotate)) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "%s needs --policy on autoregressive models ('%s')",
                             po.window != CLI_UNSET_I64 ? "--window" : "--rerotate", kvs_arch_name(hp->arch));
        goto done;
    }
    /* --block not given: a length below the default 32 is one block of that length (as eval --dlm
     * decodes its --gen lengths); a --block given is kept, and must divide -n (below) */
    if (dlm && !block_given && n_gen < o.block) o.block = n_gen;
    /* --steps is the fixed-count rule's: never silently ignored or cut */
    if (dlm && steps_given && o.threshold > 0) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--steps: --threshold %g commits by confidence until each block is done "
                             "(no step count); give one of them", o.threshold);
        goto done;
    }
    if (dlm && o.steps > n_gen) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--steps %lld exceeds -n %lld: a step commits at least one token, so the "
                             "decode takes at most %lld steps", (long long)o.steps, (long long)n_gen, (long long)n_gen);
        goto done;
    }
    if (dlm && o.threshold == 0 && o.steps > 0 && (o.steps % (n_gen / o.block ? n_gen / o.block : 1) || o.steps < n_gen / o.block)) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--steps %lld must be a positive multiple of the block count %lld",
                             (long long)o.steps, (long long)(n_gen / o.block));
        goto done;
    }
    if (dlm && n_gen % o.block) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "-n %lld must be a multiple of --block %lld", (long long)n_gen, (long long)o.block);
        goto done;
    }
    /* prompt tokens: BOS + text (the diffusion references encode "" as the dummy prefix alone) */
    unsigned flags = KVS_TOKENIZE_ADD_BOS | (dlm ? KVS_TOKENIZE_PREFIX_EMPTY : 0);
    int64_t n_prompt = 0;
    size_t plen = strlen(o.prompt);
    kvs_tokenizer_encode(tok, o.prompt, plen, flags, NULL, 0, &n_prompt);
    prompt = malloc((size_t)(n_prompt + 1) * sizeof *prompt);
    out = malloc((size_t)n_gen * sizeof *out);
    if (!prompt || !out) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
        goto done;
    }
    if (kvs_tokenizer_encode(tok, o.prompt, plen, flags, prompt, n_prompt + 1, &n_prompt) != KVS_OK) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "cannot tokenize the prompt: %s", kvs_last_error());
        goto done;
    }
    /* autoregressive: the last token generated is never fed back, so it needs no position */
    int64_t slots = n_prompt + n_gen - (dlm ? 0 : 1);
    if (o.n == CLI_UNSET_I64 && slots > ctx_fit && n_prompt < ctx_fit + (dlm ? 0 : 1)) {
        int64_t fit = ctx_fit - n_prompt + (dlm ? 0 : 1);
        if (dlm) fit = fit / o.block * o.block;
        if (fit >= 1) {
            fprintf(stderr, "%s: -n not given: generating %lld tokens after the %lld-token prompt (%s)\n", PROG,
                    (long long)fit, (long long)n_prompt, ctx_what);
            n_gen = fit;
            slots = n_prompt + n_gen - (dlm ? 0 : 1);
        }
    }
    if (o.ctx > 0 && slots > o.ctx && !stream) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "prompt (%lld tokens) + %lld%s exceeds --ctx-size %lld",
                             (long long)n_prompt, (long long)n_gen, dlm ? "" : " - 1 (the last token is not fed back)",
                             (long long)o.ctx);
        goto done;
    }
    if (slots > hp->ctx_len && !stream) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "prompt (%lld tokens) + %lld%s exceeds the model context %d%s",
                             (long long)n_prompt, (long long)n_gen, dlm ? "" : " - 1 (the last token is not fed back)",
                             hp->ctx_len, hint);
        goto done;
    }
    /* AR eviction (--policy): the cache is sized to the budget + buffer */
    kvs_ar_params ap = kvs_ar_params_default();
    po.hp = hp;
    rc = policy_opts_make(PROG, &po, &pol, &ap);
    if (rc != CLI_EXIT_OK) {
        exit_code = rc;
        goto done;
    }
    if (dlm && pol) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--policy applies to autoregressive models only");
        goto done;
    }
    /* a token budget above the context keeps everything: never silently a no-op */
    const int64_t btok = ap.budget_tokens > 0 ? ap.budget_tokens : ap.budget > 1.0 ? (int64_t)ap.budget : 0;
    if (pol && btok > ctx_fit) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "%s %lld: a token count above the %s (want a fraction in (0, 1] or at most "
                             "%lld tokens)", ap.budget_tokens > 0 ? "--budget-tokens" : "--budget", (long long)btok, ctx_what,
                             (long long)ctx_fit);
        goto done;
    }
    if (pol && kvs_policy_check_model(pol, m) != KVS_OK) { /* e.g. expected on a model with a q bias */
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--policy %s: %s", po.policy, kvs_last_error());
        goto done;
    }
    ap.max_new = n_gen;
    ap.rerotate = o.rerotate;
    if (!(o.think >= 0.0 && o.think < 1.0) || (o.think > 0.0 && (dlm || !pol))) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--think R needs R in [0, 1) and an eviction --policy (autoregressive models)");
        goto done;
    }
    if (o.think > 0.0 && kvs_think_check_cache(&kp) != KVS_OK) { /* refused before decoding, with the library's reason */
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--think: %s", kvs_last_error());
        goto done;
    }
    ap.think_ratio = o.think;
    if (o.think > 0.0 && (int)(hp->head_dim * o.think) == 0) /* floor(head_dim R) channels are pruned */
        fprintf(stderr, "%s: note: --think %g prunes floor(%d x %g) = 0 of the %d key channels: nothing is pruned (at least "
                        "%g prunes one)\n", PROG, o.think, hp->head_dim, o.think, hp->head_dim, 1.0 / hp->head_dim);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = dlm ? KVS_CACHE_POSITIONAL : KVS_CACHE_APPEND;
    cp.capacity = dlm ? n_prompt + n_gen : kvs_ar_capacity(m, n_prompt, &ap);
    if (cp.capacity < 0) { /* the evictor refuses the policy and budget (e.g. --sink/--window filling the budget) */
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "%s", kvs_last_error());
        goto done;
    }
    if (stream && slots > hp->ctx_len && cp.capacity > (o.ctx > 0 && o.ctx < hp->ctx_len ? o.ctx : hp->ctx_len)) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--rerotate past the context: the budget + buffer (%lld cache rows) must fit "
                             "the %s %lld", (long long)cp.capacity, o.ctx > 0 && o.ctx < hp->ctx_len ? "--ctx-size" : "model context",
                             (long long)(o.ctx > 0 && o.ctx < hp->ctx_len ? o.ctx : hp->ctx_len));
        goto done;
    }
    cp.type_k = ctypes[0];
    cp.type_v = ctypes[1];
    if (ct.rotate) cp.flags |= KVS_CACHE_ROTATE;
    if (stream && kvs_cache_check_rerotate(&cp) != KVS_OK) {
        exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "--rerotate: %s", kvs_last_error());
        goto done;
    }
    if (kvs_cache_create(&cache, dev, &cp) != KVS_OK) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "%s", kvs_last_error());
        goto done;
    }
    if (dlm) {
        /* the schedule before anything reaches stdout: a bad --cache / WaveFilter flag is a usage
         * error with nothing printed. --window is shared: the elastic query window here, the
         * h2o/snapkv window on AR models. Given (0 and negatives too) it is the elastic window, checked
         * as such (kept apart from CLI_UNSET_INT, saturated to the int range) */
        if (po.window != CLI_UNSET_I64)
            co.window = po.window > INT_MAX ? INT_MAX : po.window <= CLI_UNSET_INT ? CLI_UNSET_INT + 1 : (int)po.window;
        char *one[1] = {(char *)co.cache};
        rc = dlm_cache_check_flags(PROG, &co, one, 1, 0, co.wavefilter);
        if (rc == 0) rc = dlm_cache_check_model(PROG, &co, one, 1, hp);
        if (rc == 0) rc = dlm_cache_build(PROG, &co, NULL, 0, &sched);
        if (rc == 0 && o.block_causal && sched && strcmp(kvs_dlm_schedule_name(sched), "prefix") != 0)
            rc = cli_fail(CLI_EXIT_USAGE, PROG, "--block-causal decodes with --cache none or prefix (exact under block-causal "
                                                "attention), not '%s'", kvs_dlm_schedule_name(sched));
        if (rc) {
            exit_code = rc;
            goto done;
        }
    }
    stream_ctx sc = {.tok = tok, .prev = prompt[n_prompt - 1], .print = !o.json && !o.no_stream,
                     .progress = !o.json && isatty(STDERR_FILENO), .total = n_gen};
    if (sc.print) {
        /* echo the prompt the way it will continue */
        for (int64_t i = 1; i < n_prompt; i++) {
            char piece[256];
            size_t len = 0;
            if (kvs_tokenizer_token_to_piece(tok, prompt[i - 1], prompt[i], piece, sizeof piece, &len) == KVS_OK)
                fwrite(piece, 1, len, stdout);
        }
        fflush(stdout);
    }
    kvs_gen_stats st;
    int64_t n_out = 0;
    kvs_status s = KVS_OK;
    if (dlm) {
        kvs_dlm_params p = kvs_dlm_params_default();
        p.gen_len = n_gen;
        p.block_len = o.block;
        p.steps = o.steps ? o.steps : n_gen;
        p.threshold = (float)o.threshold;
        p.stop_eos = o.stop_eos;
        p.block_causal = o.block_causal;
        if (sched) {
            /* the cache needs the schedule's extras (elastic: layer inputs) */
            kvs_cache_destroy(&cache);
            cp.flags = kvs_dlm_schedule_cache_flags(sched) | (ct.rotate ? KVS_CACHE_ROTATE : 0u);
            if (kvs_cache_create(&cache, dev, &cp) != KVS_OK) {
                exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "%s", kvs_last_error());
                goto done;
            }
        }
        if (o.compare) {
            /* untimed warm-up: both decodes once in full, with the parameters of the timed runs, so
             * neither timed run pays the backend's first-use work for any shape it meets: program
             * builds, the compiles an OpenCL driver defers to a kernel's first launch (PoCL builds
             * a work-group function per kernel and local size at its first enqueue, which no
             * build timer sees), allocations. A warm-up of the first block alone left the later
             * blocks' shapes cold: 0.18x on PoCL with a cold kernel cache, 0.96x warm. */
            kvs_gen_stats ws;
            kvs_dlm_params w = p;
            for (int pass = 0; pass < 2 && s == KVS_OK; pass++) {
                w.schedule = pass ? NULL : sched;
                s = kvs_generate_dlm(m, cache, prompt, n_prompt, &w, NULL, NULL, out, &ws);
            }
        }
        p.schedule = sched;
        if (s == KVS_OK && o.profile) s = kvs_device_profile(dev, 1);
        cpu_s = cli_cpu_now();
        if (s == KVS_OK) s = kvs_generate_dlm(m, cache, prompt, n_prompt, &p, on_token, &sc, out, &st);
        cpu_s = cli_cpu_now() - cpu_s;
        gen_profile_capture(dev, &prof);
        n_out = n_gen;
        if (s == KVS_OK && o.compare) {
            base_out = malloc((size_t)n_gen * sizeof *base_out);
            p.schedule = NULL;
            if (o.profile) s = kvs_device_profile(dev, 1);
            cpu_base_s = cli_cpu_now();
            if (s == KVS_OK)
                s = base_out ? kvs_generate_dlm(m, cache, prompt, n_prompt, &p, NULL, NULL, base_out, &st_base) : KVS_ERR_OUT_OF_MEMORY;
            cpu_base_s = cli_cpu_now() - cpu_base_s;
            gen_profile_capture(dev, &prof_base);
            if (s == KVS_OK)
                for (int64_t i = 0; i < n_gen; i++) agree += out[i] == base_out[i];
        }
    } else {
        kvs_ar_params p = ap;
        p.max_new = n_gen;
        p.temperature = (float)o.temp;
        p.top_p = (float)o.top_p;
        p.seed = (uint64_t)o.seed;
        if (o.speculative) {
            /* plain and speculative decoding on the same cache type, interleaved, SPEC_REPEATS times
             * each (the fastest of each counts: the decodes of a small model are milliseconds, and
             * the first pays the warm-up); the text streams from the last speculative run */
            enum { SPEC_REPEATS = 3 };
            kvs_ar_params pb = p;
            base_out = malloc((size_t)n_gen * sizeof *base_out);
            if (!base_out) s = KVS_ERR_OUT_OF_MEMORY;
            p.draft = (int)o.draft;
            kvs_gen_stats sb;
            for (int rep = 0; rep < SPEC_REPEATS && s == KVS_OK; rep++) {
                double c0 = cli_cpu_now();
                s = kvs_generate_ar(m, cache, prompt, n_prompt, &pb, NULL, NULL, base_out, &base_n, &sb);
                double c1 = cli_cpu_now();
                if (s != KVS_OK) break;
                if (rep == 0 || sb.seconds < st_base.seconds) st_base = sb;
                if (rep == 0 || c1 - c0 < cpu_base_s) cpu_base_s = c1 - c0;
                const int last = rep == SPEC_REPEATS - 1;
                if (last && o.profile) s = kvs_device_profile(dev, 1);
                kvs_gen_stats ss;
                if (s == KVS_OK)
                    s = kvs_generate_ar(m, cache, prompt, n_prompt, &p, last ? on_token : NULL, last ? &sc : NULL, out, &n_out, &ss);
                double c2 = cli_cpu_now();
                if (s != KVS_OK) break;
                if (rep == 0 || c2 - c1 < cpu_s) cpu_s = c2 - c1;
                if (rep == 0 || ss.seconds < spec_best_s) spec_best_s = ss.seconds;
                st = ss;
            }
            if (s == KVS_OK) gen_profile_capture(dev, &prof);
        } else {
            if (o.profile) s = kvs_device_profile(dev, 1);
            cpu_s = cli_cpu_now();
            if (s == KVS_OK) s = kvs_generate_ar(m, cache, prompt, n_prompt, &p, on_token, &sc, out, &n_out, &st);
            cpu_s = cli_cpu_now() - cpu_s;
            gen_profile_capture(dev, &prof);
        }
        if (s == KVS_OK && o.speculative) {
            same = base_n == n_out;
            for (int64_t i = 0; i < n_out && i < base_n; i++)
                if (out[i] != base_out[i]) {
                    same = 0;
                    first_diff = i;
                    break;
                }
        }
    }
    if (s != KVS_OK) {
        if (sc.print) printf("\n");
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "%s: %s", kvs_status_str(s), kvs_last_error());
        goto done;
    }
    /* full text: prompt + generated, decoded once */
    int64_t n_all = n_prompt + n_out;
    int32_t *all = malloc((size_t)n_all * sizeof *all);
    size_t tlen = 0;
    char *text = NULL;
    if (all) {
        memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
        memcpy(all + n_prompt, out, (size_t)n_out * sizeof *all);
        /* generated text only: what streaming prints after the prompt's echo, byte for byte (a decode
         * of the generated ids alone drops the leading space of the first piece) */
        char *full = echo_text(tok, prompt, n_prompt, out, n_out), *head = echo_text(tok, prompt, n_prompt, NULL, 0);
        if (full && head) {
            size_t hl = strlen(head);
            tlen = strlen(full) - hl;
            text = malloc(tlen + 1);
            if (text) memcpy(text, full + hl, tlen + 1);
        }
        free(full);
        free(head);
    }
    int64_t rows_baseline = st.rows_baseline;
    if (o.json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "prompt", gen_json_text(o.prompt)); /* as given; "text" is the generated text alone */
        json_object_object_add(j, "text", gen_json_text(text));
        json_object_object_add(j, "tokens", ids_json(out, n_out));
        json_object_object_add(j, "prompt_tokens", ids_json(prompt, n_prompt));
        json_object *js = json_object_new_object();
        json_object_object_add(js, "tokens_per_s", json_object_new_double(st.tokens_per_s));
        json_object_object_add(js, "seconds", json_object_new_double(st.seconds));
        /* kernel builds on first use; "seconds_build" is the key's older name, kept as the README documented it */
        json_object_object_add(js, "build_seconds", json_object_new_double(st.seconds_build));
        json_object_object_add(js, "seconds_build", json_object_new_double(st.seconds_build));
        json_object_object_add(js, "cpu_seconds", json_object_new_double(cpu_s));
        json_object_object_add(js, "steps", json_object_new_int64(st.steps));
        json_object_object_add(js, "tokens_decoded", json_object_new_int64(st.tokens));
        if (dlm) json_object_object_add(js, "tokens_eos_filled", json_object_new_int64(st.tokens_eos_filled));
        json_object_object_add(js, "rows_computed", json_object_new_int64(st.rows_computed));
        json_object_object_add(js, "rows_baseline", json_object_new_int64(rows_baseline));
        json_object_object_add(js, "compute_fraction", json_object_new_double(st.compute_fraction));
        json_object_object_add(js, "cache_bytes_peak", json_object_new_int64(st.cache_bytes_peak));
        json_object_object_add(js, "cache_bytes_allocated", json_object_new_int64(st.cache_bytes_allocated));
        json_object_object_add(js, "device_bytes_peak", json_object_new_int64(kvs_device_bytes_peak(dev)));
        json_object_object_add(js, "cache_type_k", json_object_new_string(kvs_dtype_name(ctypes[0])));
        json_object_object_add(js, "cache_type_v", json_object_new_string(kvs_dtype_name(ctypes[1])));
        json_object_object_add(js, "kv_rotate", json_object_new_boolean(ct.rotate));
        if (pol) {
            json_object_object_add(js, "policy", json_object_new_string(kvs_policy_name(pol)));
            json_object_object_add(js, "budget", json_object_new_double(ap.budget));
            if (ap.budget_tokens > 0) json_object_object_add(js, "budget_tokens", json_object_new_int64(ap.budget_tokens));
            json_object_object_add(js, "scope", json_object_new_string(kvs_budget_scope_name(kvs_policy_effective_scope(pol, ap.scope))));
            if (o.think > 0) json_object_object_add(js, "think", json_object_new_double(o.think));
            json_object_object_add(js, "evictions", json_object_new_int64(st.evictions));
            json_object_object_add(js, "rerotate", json_object_new_boolean(o.rerotate));
            json_object_object_add(js, "rows_evicted", json_object_new_int64(st.rows_evicted));
        }
        json_object_object_add(js, "model_bytes", json_object_new_int64(kvs_model_weight_bytes(m)));
        json_object_object_add(js, "model_mapped_bytes", json_object_new_int64(kvs_model_mapped_bytes(m)));
        json_object_object_add(js, "load_seconds", json_object_new_double(cm.load_s));
        json_object_object_add(js, "backend", json_object_new_string(kvs_backend_name(kvs_device_backend(dev))));
        json_object_object_add(js, "breakdown_ms_per_step", gen_breakdown_json(&st));
        if (o.speculative) {
            json_object *sp = json_object_new_object();
            json_object_object_add(sp, "draft", json_object_new_int64(o.draft));
            json_object_object_add(sp, "draft_weights", json_object_new_string(draft_wt != KVS_F32 ? kvs_dtype_name(draft_wt) : "model"));
            json_object_object_add(sp, "draft_weight_bytes", json_object_new_int64(kvs_model_draft_weight_bytes(m)));
            json_object_object_add(sp, "verify_steps", json_object_new_int64(st.spec_verify_steps));
            json_object_object_add(sp, "drafted", json_object_new_int64(st.spec_drafted));
            json_object_object_add(sp, "accepted", json_object_new_int64(st.spec_accepted));
            json_object_object_add(sp, "acceptance_rate", json_object_new_double(
                st.spec_drafted ? (double)st.spec_accepted / (double)st.spec_drafted : 0.0));
            json_object_object_add(sp, "tokens_per_verify_step", json_object_new_double(
                st.spec_verify_steps ? (double)(st.spec_accepted + st.spec_verify_steps) / (double)st.spec_verify_steps : 0.0));
            json_object_object_add(sp, "seconds_draft", json_object_new_double(st.seconds_draft));
            json_object_object_add(sp, "plain_seconds", json_object_new_double(st_base.seconds));
            json_object_object_add(sp, "plain_cpu_seconds", json_object_new_double(cpu_base_s));
            json_object_object_add(sp, "seconds", json_object_new_double(spec_best_s));
            json_object_object_add(sp, "cpu_seconds", json_object_new_double(cpu_s));
            json_object_object_add(sp, "repeats", json_object_new_int(3));
            json_object_object_add(sp, "speedup", json_object_new_double(spec_best_s > 0 ? st_base.seconds / spec_best_s : 0));
            json_object_object_add(sp, "cpu_speedup", json_object_new_double(cpu_s > 0 ? cpu_base_s / cpu_s : 0));
            json_object_object_add(sp, "plain_tokens", ids_json(base_out, base_n));
            json_object_object_add(sp, "identical_to_plain", json_object_new_boolean(same));
            json_object_object_add(js, "speculative", sp);
        }
        if (o.profile) json_object_object_add(js, "profile", gen_profile_json(&prof));
        if (sched) {
            kvs_dlm_schedule_stats ss;
            kvs_dlm_schedule_get_stats(sched, &ss);
            json_object *rl = json_object_new_array(), *rf = json_object_new_array();
            for (int l = 0; l < ss.n_layers; l++) {
                json_object_array_add(rl, json_object_new_int64(ss.rows[l]));
                json_object_array_add(rf, json_object_new_int64(ss.refreshes[l]));
            }
            json_object_object_add(js, "cache", json_object_new_string(kvs_dlm_schedule_name(sched)));
            json_object_object_add(js, "rows_per_layer", rl);
            json_object_object_add(js, "refreshes_per_layer", rf);
            if (ss.context_rows > 0)
                json_object_object_add(js, "wf_kept_fraction", json_object_new_double((double)ss.kept_rows / (double)ss.context_rows));
        }
        if (base_out && dlm) {
            json_object_object_add(js, "baseline_seconds", json_object_new_double(st_base.seconds));
            json_object_object_add(js, "baseline_cpu_seconds", json_object_new_double(cpu_base_s));
            json_object_object_add(js, "speedup", json_object_new_double(st.seconds > 0 ? st_base.seconds / st.seconds : 0));
            json_object_object_add(js, "baseline_rows", json_object_new_int64(st_base.rows_computed));
            json_object_object_add(js, "agreement", json_object_new_double((double)agree / (double)n_gen));
            json_object_object_add(js, "baseline_breakdown_ms_per_step", gen_breakdown_json(&st_base));
            if (o.profile) json_object_object_add(js, "baseline_profile", gen_profile_json(&prof_base));
            json_object_object_add(j, "baseline_tokens", ids_json(base_out, n_gen));
        }
        json_object_object_add(j, "stats", js);
        printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(j);
    } else {
        if (o.no_stream) { /* what streaming prints: the prompt, then the generated text */
            char *echo = echo_text(tok, prompt, n_prompt, out, n_out);
            printf("%s", echo ? echo : text ? text : "");
            free(echo);
        }
        printf("\n");
        fflush(stdout);
        char mb[5][32]; /* model, mapped, cache peak, allocated, device peak: MiB, or KiB / bytes below 0.1 MiB */
        fprintf(stderr,
                "[%s on %s] %lld tokens in %.3f s (%.1f tokens/s), %lld %s\n"
                "rows computed %lld of %lld without cache (compute fraction %.3f)\n"
                "model %s (%s used in place from the file; loaded in %.3f s), cache peak %s (allocated %s; K %s, V %s), device peak %s\n",
                dlm ? "diffusion" : "autoregressive", kvs_device_get_info(dev)->name, (long long)n_out, st.seconds,
                st.tokens_per_s, (long long)st.steps, dlm ? "denoising steps" : "forward steps",
                (long long)st.rows_computed, (long long)rows_baseline, st.compute_fraction,
                gen_bytes_str(mb[0], sizeof mb[0], kvs_model_weight_bytes(m)), gen_bytes_str(mb[1], sizeof mb[1], kvs_model_mapped_bytes(m)),
                cm.load_s, gen_bytes_str(mb[2], sizeof mb[2], st.cache_bytes_peak),
                gen_bytes_str(mb[3], sizeof mb[3], st.cache_bytes_allocated), kvs_dtype_name(ctypes[0]), kvs_dtype_name(ctypes[1]),
                gen_bytes_str(mb[4], sizeof mb[4], kvs_device_bytes_peak(dev)));
        if (st.seconds_build > 0.0005)
            fprintf(stderr, "kernel builds on first use: %.3f s of the %.3f s (not counted in tokens/s; the next run of "
                            "these shapes in this process reuses them)\n", st.seconds_build, st.seconds);
        if (dlm && st.tokens_eos_filled > 0)
            fprintf(stderr, "stop at EOS: %lld tokens decoded, %lld set to EOS without decoding\n", (long long)st.tokens,
                    (long long)st.tokens_eos_filled);
        if (pol)
        {
            char bud[48];
            if (ap.budget_tokens > 0) snprintf(bud, sizeof bud, "%lld tokens", (long long)ap.budget_tokens);
            else snprintf(bud, sizeof bud, "%g", ap.budget);
            char think[96] = "";
            if (o.think > 0)
                snprintf(think, sizeof think, "; ThinK: %g of the key channels per kv head pruned at each eviction", o.think);
            fprintf(stderr, "eviction: %s, budget %s, scope %s: %lld evictions, %lld K/V rows evicted%s%s\n", kvs_policy_name(pol),
                    bud, kvs_budget_scope_name(kvs_policy_effective_scope(pol, ap.scope)), (long long)st.evictions,
                    (long long)st.rows_evicted, o.rerotate ? "; keys re-rotated to positions within the cache" : "", think);
        }
        if (sched) {
            kvs_dlm_schedule_stats ss;
            kvs_dlm_schedule_get_stats(sched, &ss);
            fprintf(stderr, "cache %s: rows per layer", kvs_dlm_schedule_name(sched));
            for (int l = 0; l < ss.n_layers; l++) fprintf(stderr, " %lld", (long long)ss.rows[l]);
            fprintf(stderr, "; refreshes per layer");
            for (int l = 0; l < ss.n_layers; l++)
                fprintf(stderr, " %lld", (long long)ss.refreshes[l]);
            if (ss.context_rows > 0)
                fprintf(stderr, "; WaveFilter kept %.3f of the context", (double)ss.kept_rows / (double)ss.context_rows);
            fprintf(stderr, "\n");
        }
        if (base_out && dlm)
            fprintf(stderr, "no cache: %.3f s, %lld rows; speedup %.2fx, compute fraction %.3f, token agreement %lld/%lld\n",
                    st_base.seconds, (long long)st_base.rows_computed, st.seconds > 0 ? st_base.seconds / st.seconds : 0.0,
                    (double)st.rows_computed / (double)(st_base.rows_computed ? st_base.rows_computed : 1),
                    (long long)agree, (long long)n_gen);
        if (o.speculative) {
            const int64_t vs = st.spec_verify_steps;
            fprintf(stderr,
                    "speculative (QuantSpec, draft %lld from the 4-bit view%s%s): %lld verify steps, acceptance %.3f (%lld of %lld "
                    "drafted), %.2f tokens per verify step, draft forwards %.3f s\n"
                    "fastest of 3 interleaved runs: plain decoding (same cache) %.4f s (CPU %.4f s), speculative %.4f s "
                    "(CPU %.4f s): speedup %.2fx wall, %.2fx CPU time; %s\n",
                    (long long)o.draft, draft_wt != KVS_F32 ? " and weights " : "", draft_wt != KVS_F32 ? kvs_dtype_name(draft_wt) : "",
                    (long long)vs, st.spec_drafted ? (double)st.spec_accepted / (double)st.spec_drafted : 0.0,
                    (long long)st.spec_accepted, (long long)st.spec_drafted,
                    vs ? (double)(st.spec_accepted + vs) / (double)vs : 0.0, st.seconds_draft, st_base.seconds, cpu_base_s,
                    spec_best_s, cpu_s, spec_best_s > 0 ? st_base.seconds / spec_best_s : 0.0, cpu_s > 0 ? cpu_base_s / cpu_s : 0.0,
                    same ? "tokens identical to plain decoding"
                         : o.temp > 0 ? "tokens differ from plain decoding (sampling: the same distribution, other draws)"
                                      : "TOKENS DIFFER from plain greedy decoding");
            if (!same && o.temp <= 0 && first_diff >= 0) fprintf(stderr, "first difference at generated token %lld\n", (long long)first_diff);
        }
        char lab[96];
        snprintf(lab, sizeof lab, dlm ? "[cache %s]" : "[%s]", dlm ? kvs_dlm_schedule_name(sched) : "autoregressive");
        if (o.stats) gen_print_breakdown(stderr, lab, &st);
        if (o.stats) fprintf(stderr, "%s CPU time %.3f s (wall %.3f s)\n", lab, cpu_s, st.seconds);
        if (o.stats && base_out && dlm) gen_print_breakdown(stderr, "[no cache]", &st_base);
        if (o.stats && base_out && dlm) fprintf(stderr, "[no cache] CPU time %.3f s (wall %.3f s); CPU-time speedup %.2fx\n", cpu_base_s,
                                         st_base.seconds, cpu_s > 0 ? cpu_base_s / cpu_s : 0.0);
        if (o.profile) gen_print_profile(stderr, lab, &prof, st.steps, hp->n_layers);
        if (o.profile && base_out && dlm) gen_print_profile(stderr, "[no cache]", &prof_base, st_base.steps, hp->n_layers);
    }
    free(all);
    free(text);
    exit_code = CLI_EXIT_OK;
done:
    gen_profile_free(&prof);
    gen_profile_free(&prof_base);
    free(prompt);
    free(out);
    free(base_out);
    kvs_dlm_schedule_destroy(&sched);
    kvs_cache_destroy(&cache);
    kvs_policy_destroy(&pol);
    cli_model_close(&cm);
    return exit_code;
}
