/* kvsieve bench model: a random-weight model of a real shape (kvs_model_create_random; no download),
 * built in memory on one device, then in one run:
 *   prefill    one forward of --prompt tokens into an append cache (tokens/s);
 *   decode     --decode single-token forwards after it (tokens/s; the weight bytes read per second
 *              against the memcpy peak);
 *   dlm step   diffusion shapes (llada, dream): kvs_generate_dlm over one block (--prompt tokens +
 *              --gen masked, --steps steps) without a cache and with elastic (ms per step, compute
 *              fraction);
 *   gemv/gemm  each matrix role (q, k, v, o, gate, up, down, output) through kvs_matmul: one x row
 *              over every layer's matrix in turn (decode: bytes of W per second / memcpy peak), and
 *              --prompt rows against layer 0's matrix (prefill: 2 m k n flop per second / SGEMM peak);
 *              once per matmul variant in --variants, interleaved (side by side in one run).
 *   --speculative  instead of all the above: QuantSpec self-speculative decoding against plain decoding
 *              on a qh8 cache filled to --context rows (bench_spec.c): acceptance, tokens per verify
 *              step, tokens/s of each, the wall and CPU-time speedup, tokens compared.
 *   --context N    (without --speculative) instead of all the above: plain greedy decoding after N
 *              cached rows of the --cache-type-k/-v types (bench_context.c): the cache's bytes per
 *              token, the KV bytes a step reads, tokens/s (wall and CPU time), the attention share.
 * Peaks: bench_peaks.c (SGEMM through kvs_matmul; memcpy). Timing: median of --reps samples after a
 * warm-up (the forwards: one warm-up forward each); the GEMV/GEMM rows also report the process CPU
 * time per sweep (all threads), the figure that survives a loaded host. Units in the JSON keys. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "bench.h"
#include "cmds.h"
#include "opts_common.h"

/* Published configs (config.json of each Hugging Face repository); "tiny"/"tiny-dlm": made up, for
 * tests. Llama-3.2-1B's llama3 RoPE scaling is left out (kvsieve runs unscaled RoPE; the cost is
 * the same). */
typedef struct shape {
    const char *name, *source;
    kvs_model_hparams hp;
} shape;

#define HP_(arch_, L, d, h, kv, hd, ffn, voc, ctx, eps, theta, tied, bias, mask)                                    \
    {.arch = (arch_), .n_layers = (L), .dim = (d), .n_heads = (h), .n_kv_heads = (kv), .head_dim = (hd),            \
     .ffn_dim = (ffn), .vocab = (voc), .ctx_len = (ctx), .rms_eps = (eps), .rope_base = (theta), .rope_dim = (hd),  \
     .rope_mode = (arch_) == KVS_ARCH_LLAMA || (arch_) == KVS_ARCH_LLADA ? KVS_ROPE_ADJACENT : KVS_ROPE_NEOX,       \
     .bos_id = 1, .eos_id = 2, .mask_id = (mask), .tied_output = (tied), .qkv_bias = (bias)}

static const shape shapes[] = {
    {"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B",
     HP_(KVS_ARCH_QWEN2, 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e-6f, 1e6f, 1, 1, -1)},
    {"llama-1b", "meta-llama/Llama-3.2-1B",
     HP_(KVS_ARCH_LLAMA, 16, 2048, 32, 8, 64, 8192, 128256, 131072, 1e-5f, 5e5f, 1, 0, -1)},
    {"llada-8b", "GSAI-ML/LLaDA-8B-Instruct",
     HP_(KVS_ARCH_LLADA, 32, 4096, 32, 32, 128, 12288, 126464, 4096, 1e-5f, 5e5f, 0, 0, 126336)},
    {"tiny", "made up (tests)", HP_(KVS_ARCH_LLAMA, 2, 256, 4, 2, 64, 512, 512, 512, 1e-5f, 1e4f, 0, 0, -1)},
    {"tiny-dlm", "made up (tests)", HP_(KVS_ARCH_LLADA, 2, 256, 4, 2, 64, 512, 512, 512, 1e-5f, 1e4f, 0, 0, 511)},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const char *const roles[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output"};
#define N_ROLES 8
#define MAX_VARIANTS 6

typedef struct mrow { /* one GEMV or GEMM measurement */
    const char *role, *variant;
    int gemm;
    kvs_dtype dt;
    int64_t m, k, n, layers;
    double bytes, flops, sec, cpu; /* per sweep: W bytes, flop, median wall and CPU seconds */
    kvs_status st;
} mrow;

typedef struct gemv_state {
    bench *b;
    const kvs_tensor *W[512];
    int nW;
    kvs_tensor *x, *y;
} gemv_state;

static kvs_status run_sweep(bench *b, void *p) {
    gemv_state *g = p;
    kvs_status s = KVS_OK;
    for (int i = 0; i < g->nW && s == KVS_OK; i++) s = kvs_matmul(b->dev, g->W[i], g->x, g->y, 0);
    return s;
}

static int parse_type(const char *s, kvs_dtype *out) {
    for (int t = 0; t < KVS_DTYPE_COUNT; t++) {
        if (t == KVS_I32) continue;
        const char *n = kvs_dtype_name((kvs_dtype)t);
        if (n && strcasecmp(n, s) == 0) return *out = (kvs_dtype)t, 1;
    }
    return 0;
}

/* The matrix types m was built with (layer 0's roles and the output, in role order, each once):
 * used[0..*n_used), at most N_ROLES. A requested K type on rows that are not whole 256-blocks takes
 * its fallback (kvs_quant_fallback), so the types used may differ from the one asked for. */
static void types_used(const kvs_model *m, kvs_dtype used[N_ROLES], int *n_used) {
    *n_used = 0;
    for (int r = 0; r < N_ROLES; r++) {
        char nm[64];
        snprintf(nm, sizeof nm, strcmp(roles[r], "output") ? "blk.0.%s" : "%s", roles[r]);
        const kvs_tensor *t = kvs_model_tensor(m, nm);
        if (!t) continue;
        const kvs_dtype dt = kvs_tensor_dtype(t);
        int seen = 0;
        for (int i = 0; i < *n_used; i++) seen |= used[i] == dt;
        if (!seen) used[(*n_used)++] = dt;
    }
}

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The whole sweep over the W list with n x rows: one warm-up sweep, then b->reps samples of enough
 * sweeps to last b->min_sample_s; *sec the median wall seconds per sweep, *cpu the median process
 * CPU seconds per sweep (all threads: on a loaded host the CPU time is what the kernels cost, the
 * wall time also counts the waits for a core). */
static kvs_status time_matmul(bench *b, const kvs_tensor **W, int nW, int64_t n, double *sec, double *cpu) {
    gemv_state g = {.b = b, .nW = nW};
    memcpy(g.W, W, sizeof(*W) * (size_t)nW);
    const int64_t k = kvs_tensor_ne(W[0], 0), m = kvs_tensor_ne(W[0], 1);
    kvs_status s = bench_new_tensor(b, &g.x, KVS_F32, k, n, 0, 0);
    if (s == KVS_OK) s = bench_new_tensor(b, &g.y, KVS_F32, m, n, 0, 0);
    double t0 = cli_now();
    if (s == KVS_OK) s = run_sweep(b, &g);
    if (s == KVS_OK) s = kvs_device_sync(b->dev);
    const double first = cli_now() - t0;
    int inner = first > 0 ? (int)(b->min_sample_s / first) + 1 : 1;
    if (inner > 1000) inner = 1000;
    double ws[MAX_REPS], cs[MAX_REPS];
    for (int r = 0; r < b->reps && s == KVS_OK; r++) {
        const double c0 = cli_cpu_now(), w0 = cli_now();
        for (int i = 0; i < inner && s == KVS_OK; i++) s = run_sweep(b, &g);
        if (s == KVS_OK) s = kvs_device_sync(b->dev);
        ws[r] = (cli_now() - w0) / inner;
        cs[r] = (cli_cpu_now() - c0) / inner;
    }
    if (s == KVS_OK) {
        qsort(ws, (size_t)b->reps, sizeof(double), cmp_dbl);
        qsort(cs, (size_t)b->reps, sizeof(double), cmp_dbl);
        *sec = ws[b->reps / 2];
        *cpu = cs[b->reps / 2];
    }
    kvs_tensor_destroy(&g.x);
    kvs_tensor_destroy(&g.y);
    return s;
}

typedef struct fwd_times {
    double prefill_s, decode_s; /* prefill of n_prompt tokens; n_decode single-token steps */
    kvs_status st;
} fwd_times;

/* Prefill then decode on an append cache (AR shapes; diffusion shapes too, bidirectional attention
 * over the appended rows costs the same). */
static fwd_times time_forward(kvs_model *m, const kvs_dtype kv[2], int64_t n_prompt, int64_t n_decode, uint64_t *rng) {
    fwd_times r = {0};
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.capacity = n_prompt + n_decode + 8;
    cp.mode = KVS_CACHE_APPEND;
    cp.type_k = kv[0], cp.type_v = kv[1];
    kvs_kv_cache *c = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n_prompt + n_decode));
    if (!tok) return r.st = KVS_ERR_OUT_OF_MEMORY, r;
    for (int64_t i = 0; i < n_prompt + n_decode; i++) tok[i] = (int32_t)(bench_rng_uniform(rng) * 0.5f * (float)(hp->vocab - 1) + 0.5f * (float)(hp->vocab - 1));
    r.st = kvs_cache_create(&c, kvs_model_device(m), &cp);
    kvs_step_result res;
    int32_t last = 0;
    /* warm-up: 8 tokens and one decode step (first-use allocations of the workspace) */
    if (r.st == KVS_OK) {
        int32_t lr = 0;
        kvs_step_plan p = {.tokens = tok, .n_tokens = n_prompt < 8 ? n_prompt : 8, .logit_rows = &lr, .n_logit_rows = 1};
        lr = (int32_t)p.n_tokens - 1;
        r.st = kvs_model_forward(m, c, &p, &res);
        kvs_step_plan d = {.tokens = tok, .n_tokens = 1, .logit_rows = &last, .n_logit_rows = 1};
        if (r.st == KVS_OK) r.st = kvs_model_forward(m, c, &d, &res);
        if (r.st == KVS_OK) r.st = kvs_cache_reset(c);
    }
    if (r.st == KVS_OK) {
        int32_t lr = (int32_t)n_prompt - 1;
        kvs_step_plan p = {.tokens = tok, .n_tokens = n_prompt, .logit_rows = &lr, .n_logit_rows = 1};
        double t0 = cli_now();
        r.st = kvs_model_forward(m, c, &p, &res);
        if (r.st == KVS_OK) r.st = kvs_device_sync(kvs_model_device(m));
        r.prefill_s = cli_now() - t0;
    }
    if (r.st == KVS_OK) {
        double t0 = cli_now();
        for (int64_t i = 0; i < n_decode && r.st == KVS_OK; i++) {
            kvs_step_plan d = {.tokens = tok + n_prompt + i, .n_tokens = 1, .logit_rows = &last, .n_logit_rows = 1};
            r.st = kvs_model_forward(m, c, &d, &res);
        }
        if (r.st == KVS_OK) r.st = kvs_device_sync(kvs_model_device(m));
        r.decode_s = cli_now() - t0;
    }
    kvs_cache_destroy(&c);
    free(tok);
    return r;
}

typedef struct dlm_times {
    double step_s[2], fraction[2]; /* [0] no cache, [1] elastic */
    int64_t steps[2];
    kvs_status st;
} dlm_times;

static dlm_times time_dlm(kvs_model *m, const kvs_dtype kv[2], int64_t n_prompt, int64_t gen, int64_t steps,
                          uint64_t *rng) {
    dlm_times r = {0};
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n_prompt + gen));
    if (!tok) return r.st = KVS_ERR_OUT_OF_MEMORY, r;
    for (int64_t i = 0; i < n_prompt; i++) {
        tok[i] = (int32_t)(bench_rng_uniform(rng) * 0.5f * (float)(hp->vocab - 1) + 0.5f * (float)(hp->vocab - 1));
        if (tok[i] == hp->mask_id) tok[i] = 0;
    }
    for (int which = 0; which < 2 && r.st == KVS_OK; which++) {
        kvs_cache_params cp = kvs_model_cache_params(m);
        cp.capacity = n_prompt + gen;
        cp.mode = KVS_CACHE_POSITIONAL;
        cp.type_k = kv[0], cp.type_v = kv[1];
        cp.flags = which ? KVS_CACHE_KEEP_X : 0;
        kvs_kv_cache *c = NULL;
        kvs_dlm_schedule *sch = NULL;
        r.st = kvs_cache_create(&c, kvs_model_device(m), &cp);
        if (r.st == KVS_OK && which) r.st = kvs_dlm_schedule_elastic(&sch, NULL);
        kvs_dlm_params dp = kvs_dlm_params_default();
        dp.gen_len = gen, dp.block_len = gen, dp.steps = steps, dp.schedule = sch;
        kvs_gen_stats gs = {0};
        if (r.st == KVS_OK) r.st = kvs_generate_dlm(m, c, tok, n_prompt, &dp, NULL, NULL, tok + n_prompt, &gs);
        if (r.st == KVS_OK) {
            r.steps[which] = gs.steps;
            r.step_s[which] = gs.steps ? gs.seconds / (double)gs.steps : 0;
            r.fraction[which] = gs.compute_fraction;
        }
        kvs_dlm_schedule_destroy(&sch);
        kvs_cache_destroy(&c);
    }
    free(tok);
    return r;
}

int bench_model(int argc, char **argv) {
    bench b = {.rng = 0x9e3779b97f4a7c15ull, .budget_s = 30.0};
    const char *shape_arg = NULL, *type_arg = "q4_k", *variants_arg = NULL;
    int reps = 3;
    int64_t n_prompt = CLI_UNSET_I64, n_decode = CLI_UNSET_I64, gen = CLI_UNSET_I64, steps = CLI_UNSET_I64;
    int64_t seed = 1;
    int no_dlm = 0, no_ops = 0, n_layers = 0, speculative = 0;
    int64_t draft = CLI_UNSET_I64, context = CLI_UNSET_I64;
    const char *fill_arg = NULL, *draft_weights = NULL;
    cache_type_opts ct = {0};
    const cli_opt opts[] = {
        {"shape", 's', CLI_STRING, &shape_arg, "NAME|FILE",
         "qwen2.5-0.5b, llama-1b, llada-8b, tiny, tiny-dlm; or a model file whose hparams give the shape"},
        {"type", 0, CLI_STRING, &type_arg, "T", "matrix type: f32, f16, bf16, q8_0, q4_0, ..., q4_k, q6_k, iq4_xs (default q4_k)"},
        {"backend", 'b', CLI_STRING, &b.spec, "B[:I]", "device to run on: cpu, opencl, vulkan, with index (default cpu)"},
        {"threads", 't', CLI_INT, &b.threads, "N", "CPU worker threads (default: all online cores)"},
        {"json", 0, CLI_FLAG, &b.json, NULL, "print one JSON object on stdout instead of the table"},
        {"prompt", 'p', CLI_INT64, &n_prompt, "N", "prefill tokens, also the GEMM rows (default 64; tiny shapes 16)"},
        {"decode", 'n', CLI_INT64, &n_decode, "N", "decode steps timed after the prefill (default 16; tiny 8); --context: tokens per run (same\n"
         "default); --speculative: tokens per run (default 32)"},
        {"gen", 0, CLI_INT64, &gen, "N", "diffusion shapes: masked positions, one block (default 32)"},
        {"steps", 0, CLI_INT64, &steps, "N", "diffusion shapes: denoising steps over them (default 8)"},
        {"layers", 0, CLI_INT, &n_layers, "N",
         "build only the first N layers of the shape (1..its layers; default 0: all): per-layer rates and a step's ratios at a\n"
         "real width without the whole model's memory"},
        {"no-dlm", 0, CLI_FLAG, &no_dlm, NULL, "skip the diffusion step rows"},
        {"no-ops", 0, CLI_FLAG, &no_ops, NULL, "skip the GEMV/GEMM rows"},
        {"variants", 0, CLI_STRING, &variants_arg, "LIST",
         "matmul variants the GEMV/GEMM rows run under, side by side (e.g. auto,avx512,avx512-vnni; default auto)"},
        {"reps", 'r', CLI_INT, &reps, "N", "timed samples per GEMV/GEMM row, median reported (default 3); --speculative: interleaved runs of each, the\n"
                                            "fastest reported (default 3); --context: runs, the fastest reported (default 3)"},
        {"seed", 0, CLI_INT64, &seed, "N", "weight seed (default 1)"},
        {"speculative", 0, CLI_FLAG, &speculative, NULL,
         "measure only QuantSpec self-speculative decoding against plain decoding (greedy, same qh8 cache, --reps\n"
         "interleaved runs of --decode tokens after --context cached rows; default 3 runs of 32 tokens)"},
        {"draft", 0, CLI_INT64, &draft, "N", "--speculative: tokens drafted per verify step, 1..15 (default 3; implies --speculative)"},
        {"draft-weights", 0, CLI_STRING, &draft_weights, "T",
         "--speculative: the draft multiplies by a copy of the weights quantized to T at build (q4_0, q4_1, iq4_nl, q8_0;\n"
         "implies --speculative); the verify keeps the --type weights (default: the draft uses them too)"},
        {"context", 'c', CLI_INT64, &context, "N", "--speculative: rows in the cache before decoding (default 1024, or the shape's context less --decode\n"
         "when that is smaller). Without --speculative: measure only plain greedy decoding of --decode tokens after N\n"
         "cached rows of the --cache-type-k/-v types (cache bytes per token, KV bytes a step reads, tokens/s, attention\n"
         "share); no prefill, GEMV/GEMM or diffusion rows"},
        {"fill", 0, CLI_STRING, &fill_arg, "HOW",
         "--context/--speculative: how the context gets into the cache: random (default: random K/V rows written directly,\n"
         "no forward) or prefill (a prefill of random tokens, 256 per forward; slow at long contexts)"},
        CACHE_TYPE_OPTS(ct),
    };
    const cli_spec spec = {
        .prog = "kvsieve bench model",
        .usage = "--shape NAME|FILE [--type T] [--backend B] [--json] [--cache-type-k/-v T] [--context N [--fill random|prefill]]\n"
                 "       [--speculative [--draft N] [--context N] [--fill random|prefill]]",
        .summary = "Builds a random-weight model of a real shape in memory (no download) and measures\n"
                   "prefill and decode tokens/s, a diffusion step with and without elastic (diffusion\n"
                   "shapes), and each matrix's GEMV/GEMM rate against this device's measured peaks;\n"
                   "with --context N, decode tokens/s after N cached rows of the KV cache type instead.",
        .opts = opts,
        .n_opts = (int)(sizeof opts / sizeof opts[0]),
        .epilog = "Matrices whose rows are not whole blocks of T take llama-quantize's fallback type\n"
                  "(q4_k -> q5_0, ...), listed per row. Timings are wall-clock: state the load with them.",
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!shape_arg) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--shape is required (one of qwen2.5-0.5b, llama-1b, llada-8b, tiny, tiny-dlm, or a model file)");
    kvs_dtype type;
    if (!parse_type(type_arg, &type)) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--type: unknown weight type '%s'", type_arg);
    if (reps < 1 || reps > MAX_REPS) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--reps must be in 1..%d", MAX_REPS);
    if (b.threads < 0) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--threads must be >= 1");
    if (draft != CLI_UNSET_I64 || draft_weights) speculative = 1;
    kvs_dtype draft_wt = KVS_F32;
    if (draft_weights && cli_draft_weight_type(spec.prog, draft_weights, &draft_wt) != CLI_EXIT_OK) return CLI_EXIT_USAGE;
    if (draft == CLI_UNSET_I64) draft = 3;
    /* --context without --speculative: plain decoding after that many cached rows, only */
    const int ctx_mode = !speculative && context != CLI_UNSET_I64;
    if (!speculative && !ctx_mode && fill_arg)
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--fill belongs to --context or --speculative");
    int fill_prefill = 0;
    if (fill_arg && strcmp(fill_arg, "prefill") == 0) fill_prefill = 1;
    else if (fill_arg && strcmp(fill_arg, "random") != 0)
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--fill: '%s' is neither random nor prefill", fill_arg);
    if (context != CLI_UNSET_I64 && context < 1) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--context must be >= 1");
    if (ctx_mode) {
        const char *inert = n_prompt != CLI_UNSET_I64 ? "--prompt" : variants_arg ? "--variants" : gen != CLI_UNSET_I64 ? "--gen"
                            : steps != CLI_UNSET_I64 ? "--steps" : no_dlm ? "--no-dlm" : no_ops ? "--no-ops" : NULL;
        if (inert)
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "%s does not apply to --context (it decodes from --context cached rows "
                            "and runs no prefill, GEMV/GEMM or diffusion rows)", inert);
    }
    if (speculative) {
        if (draft < 1 || draft > KVS_SPEC_MAX_DRAFT)
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "--draft must be in 1..%d", KVS_SPEC_MAX_DRAFT);
        if (n_decode != CLI_UNSET_I64 && n_decode < 2)
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "--speculative needs --decode >= 2 (got %lld): with fewer than "
                            "two tokens to decode there is nothing to draft", (long long)n_decode);
        const char *inert = n_prompt != CLI_UNSET_I64 ? "--prompt" : variants_arg ? "--variants" : gen != CLI_UNSET_I64 ? "--gen"
                            : steps != CLI_UNSET_I64 ? "--steps" : no_dlm ? "--no-dlm" : no_ops ? "--no-ops" : NULL;
        if (inert)
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "%s does not apply to --speculative (it decodes from --context cached rows "
                            "and runs no GEMV/GEMM or diffusion rows; KVS_VARIANT forces kernels)", inert);
        if (!ct.k && !ct.v) ct.k = ct.v = "qh8"; /* QuantSpec's cache by default */
    }
    rc = cli_cache_types(spec.prog, &ct, b.kv_types);
    if (rc != CLI_EXIT_OK) return rc;
    if (speculative && b.kv_types[0] != KVS_QH8 && b.kv_types[1] != KVS_QH8)
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--speculative drafts from the 4-bit view of a qh8 cache: give --cache-type-k "
                        "and/or --cache-type-v qh8 (or neither)");

    shape sh = {0};
    for (int i = 0; i < N_SHAPES; i++)
        if (strcasecmp(shapes[i].name, shape_arg) == 0) sh = shapes[i];
    if (!sh.name) {
        kvs_model_file *mf = NULL;
        static char path[4096];
        if (kvs_model_locate(shape_arg, path, sizeof path) != KVS_OK) snprintf(path, sizeof path, "%s", shape_arg);
        if (kvs_model_file_open(&mf, path, NULL) != KVS_OK)
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "--shape '%s' is no known shape and no readable model file: %s",
                            shape_arg, kvs_last_error());
        sh.name = shape_arg, sh.source = "model file";
        sh.hp = *kvs_model_file_hparams(mf);
        kvs_model_file_close(&mf);
    }
    if (n_layers) {
        if (n_layers < 1 || n_layers > sh.hp.n_layers)
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "--layers must be 0 (all) or in 1..%d (the shape's layers)", sh.hp.n_layers);
        sh.hp.n_layers = n_layers;
    }
    const int tiny = strncmp(sh.name, "tiny", 4) == 0;
    if (n_prompt == CLI_UNSET_I64) n_prompt = tiny ? 16 : 64;
    if (n_decode == CLI_UNSET_I64) n_decode = speculative ? 32 : tiny ? 8 : 16;
    if (gen == CLI_UNSET_I64) gen = 32;
    if (steps == CLI_UNSET_I64) steps = 8;
    if (n_prompt < 1) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--prompt %lld: want >= 1", (long long)n_prompt);
    if (n_decode < 1) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--decode %lld: want >= 1", (long long)n_decode);
    if (gen < 1) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--gen %lld: want >= 1", (long long)gen);
    if (steps < 1 || steps > gen)
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--steps %lld: want 1..%lld (--gen)", (long long)steps, (long long)gen);
    const int context_given = context != CLI_UNSET_I64;
    if (speculative && context == CLI_UNSET_I64) /* 1024, or what the shape's context leaves beside --decode */
        context = sh.hp.ctx_len > 0 && sh.hp.ctx_len - n_decode < 1024 ? (sh.hp.ctx_len - n_decode > 0 ? sh.hp.ctx_len - n_decode : 1)
                                                                        : 1024;
    if (!speculative && !ctx_mode && sh.hp.ctx_len > 0 && n_prompt + n_decode > sh.hp.ctx_len)
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--prompt + --decode exceed the shape's context %d", sh.hp.ctx_len);
    if (ctx_mode && kvs_arch_is_diffusion(sh.hp.arch))
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--context decodes autoregressively; '%s' is a masked-diffusion model "
                        "(its decode rows: drop --context)", sh.name);
    if (ctx_mode && sh.hp.ctx_len > 0 && context + n_decode > sh.hp.ctx_len)
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--context %lld + --decode %lld exceed the shape's context %d",
                        (long long)context, (long long)n_decode, sh.hp.ctx_len);
    if (speculative && kvs_arch_is_diffusion(sh.hp.arch))
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--speculative is for autoregressive shapes; '%s' is a masked-diffusion "
                        "model", sh.name);
    if (speculative && sh.hp.ctx_len > 0 && context + n_decode > sh.hp.ctx_len) {
        if (context_given)
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "--context %lld + --decode %lld exceed the shape's context %d",
                            (long long)context, (long long)n_decode, sh.hp.ctx_len);
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--decode %lld leaves no room for a cached context in the shape's context %d",
                        (long long)n_decode, sh.hp.ctx_len);
    }
    if (speculative || ctx_mode) no_dlm = no_ops = 1;
    rc = cli_cache_types_fit(spec.prog, b.kv_types, &sh.hp, NULL);
    if (rc != CLI_EXIT_OK) return rc;
    const int dlm = kvs_arch_is_diffusion(sh.hp.arch) && !no_dlm;

    char vlist[256] = "auto";
    if (variants_arg) snprintf(vlist, sizeof vlist, "%s", variants_arg);
    const char *vars[MAX_VARIANTS];
    int n_vars = 0;
    for (char *tokp = strtok(vlist, ","); tokp; tokp = strtok(NULL, ",")) {
        if (n_vars == MAX_VARIANTS) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--variants: at most %d", MAX_VARIANTS);
        vars[n_vars++] = tokp;
    }
    if (!n_vars) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--variants: empty list");

    rc = cli_open_device(spec.prog, b.spec, b.threads, &b.dev);
    if (rc != CLI_EXIT_OK) return rc;
    for (int v = 0; v < n_vars; v++) {
        char vs[64];
        snprintf(vs, sizeof vs, "matmul:%s", vars[v]);
        if (kvs_device_set_variants(b.dev, vs) != KVS_OK) {
            rc = cli_fail(CLI_EXIT_USAGE, spec.prog, "--variants: %s", kvs_last_error());
            kvs_device_destroy(&b.dev);
            return rc;
        }
    }
    kvs_device_set_variants(b.dev, "matmul:auto");

    double load = -1;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1) load = -1;
        fclose(lf);
    }
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    const kvs_device_info *info = kvs_device_get_info(b.dev);
    const kvs_caps *caps = kvs_device_caps(b.dev);
    if (!b.json) {
        printf("kvsieve %s bench model on %s:%d  %s", kvs_version(), kvs_backend_name(info->backend), info->index, info->name);
        if (caps->n_threads) printf("  (%d thread%s)", caps->n_threads, caps->n_threads == 1 ? "" : "s");
        printf("\n%s", date);
        if (load >= 0) printf("  load average %.2f", load);
        printf("\n");
        fflush(stdout);
    }
    b.reps = 5;
    b.min_sample_s = tiny ? 1e-3 : 5e-3;
    if (!speculative && !ctx_mode) { /* the speculative and context rows are decodes, no peak needed */
        bench_peak_gemm(&b, tiny ? 256 : 1024);
        bench_peak_bandwidth(&b, (size_t)(tiny ? 32 : 256) << 20);
    }
    b.reps = reps;
    if (!b.json) {
        if (b.gemm.valid) printf("peak compute   %8.1f GFLOP/s  %s\n", b.gemm.rate, b.gemm.what);
        if (b.bw.valid) printf("peak bandwidth %8.1f GB/s     copy %s\n", b.bw.rate, b.bw.what);
        fflush(stdout);
    }

    const kvs_model_hparams *hp = &sh.hp;
    kvs_model *m = NULL;
    double t0 = cli_now();
    kvs_status st = kvs_model_create_random(&m, b.dev, hp, type, (uint64_t)seed);
    const double build_s = cli_now() - t0;
    if (st != KVS_OK) {
        rc = cli_fail(st == KVS_ERR_UNSUPPORTED || st == KVS_ERR_DTYPE ? CLI_EXIT_USAGE : CLI_EXIT_FAIL, spec.prog,
                      "%s", kvs_last_error());
        kvs_device_destroy(&b.dev);
        return rc;
    }
    double draft_build_s = 0;
    if (draft_wt != KVS_F32) {
        t0 = cli_now();
        st = kvs_model_set_draft_weights(m, draft_wt);
        draft_build_s = cli_now() - t0;
        if (st != KVS_OK) {
            rc = cli_fail(CLI_EXIT_FAIL, spec.prog, "%s", kvs_last_error());
            kvs_model_destroy(&m);
            kvs_device_destroy(&b.dev);
            return rc;
        }
    }
    const double wbytes = (double)kvs_model_weight_bytes(m);
    /* KV cache bytes per token (issue 17's memory per token): K and V rows of every layer and kv head */
    const int64_t kv_tok = (int64_t)hp->n_layers * hp->n_kv_heads *
                           (int64_t)(kvs_dtype_bytes(b.kv_types[0], hp->head_dim) + kvs_dtype_bytes(b.kv_types[1], hp->head_dim));
    double n_params = (double)hp->vocab * hp->dim * (hp->tied_output ? 1 : 2);
    n_params += (double)hp->n_layers * ((double)hp->dim * hp->head_dim * (2.0 * hp->n_heads + 2.0 * hp->n_kv_heads) +
                                        3.0 * hp->dim * hp->ffn_dim);
    kvs_dtype used[N_ROLES];
    int n_used = 0;
    types_used(m, used, &n_used);
    if (!b.json) {
        printf("shape %s (%s): %s, %d layers, dim %d, heads %d/%d x %d, ffn %d, vocab %d, %.3gM parameters\n", sh.name,
               sh.source, kvs_arch_name(hp->arch), hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads, hp->head_dim,
               hp->ffn_dim, hp->vocab, n_params * 1e-6);
        /* the types the matrices have, not only the one asked for (q4_k on rows of 896 is q5_0) */
        char wl[128] = "";
        for (int i = 0; i < n_used; i++)
            snprintf(wl + strlen(wl), sizeof wl - strlen(wl), "%s%s", i ? " + " : "", kvs_dtype_name(used[i]));
        if (n_used != 1 || used[0] != type)
            snprintf(wl + strlen(wl), sizeof wl - strlen(wl), " (--type %s; rows not whole %s blocks fall back)",
                     kvs_dtype_name(type), kvs_dtype_name(type));
        printf("weights %s: %.1f MiB, built in %.2f s; KV cache %s/%s: %.1f KiB per token\n", n_used ? wl : kvs_dtype_name(type),
               wbytes / 1048576.0, build_s, kvs_dtype_name(b.kv_types[0]), kvs_dtype_name(b.kv_types[1]),
               (double)kv_tok / 1024.0);
        if (draft_wt != KVS_F32)
            printf("draft weights %s: %.1f MiB of copies, quantized in %.2f s\n", kvs_dtype_name(draft_wt),
                   (double)kvs_model_draft_weight_bytes(m) / 1048576.0, draft_build_s);
        fflush(stdout);
    }

    /* --speculative: only the comparison of bench_spec.c */
    bench_spec_result sr = {0};
    kvs_status sst = KVS_OK;
    if (speculative) {
        bench_spec_opts so = {.context = context, .decode = n_decode, .draft = (int)draft, .reps = reps, .fill_prefill = fill_prefill,
                              .draft_weights = draft_wt};
        sst = bench_spec_measure(m, b.kv_types, &so, &b.rng, &sr);
        if (sst != KVS_OK || !sr.identical) b.n_errors++;
        if (!b.json) bench_spec_print(&sr, &so, sst);
    }

    /* --context: only the decode after the cached rows (bench_context.c) */
    const bench_context_opts co = {.context = context, .decode = n_decode, .reps = reps, .fill_prefill = fill_prefill};
    bench_context_result cr = {0};
    kvs_status cst = KVS_OK;
    if (ctx_mode) {
        cst = bench_context_measure(m, b.kv_types, &co, &b.rng, &cr);
        if (cst != KVS_OK) b.n_errors++;
        if (!b.json) bench_context_print(&cr, &co, cst);
    }

    /* forwards */
    fwd_times ft = {0};
    if (!speculative && !ctx_mode) ft = time_forward(m, b.kv_types, n_prompt, n_decode, &b.rng);
    if (ft.st != KVS_OK) b.n_errors++;
    const double pre_tps = ft.st == KVS_OK && ft.prefill_s > 0 ? (double)n_prompt / ft.prefill_s : 0;
    const double dec_tps = ft.st == KVS_OK && ft.decode_s > 0 ? (double)n_decode / ft.decode_s : 0;
    const double dec_gbs = dec_tps * wbytes * 1e-9;
    if (!b.json) {
        if (speculative || ctx_mode) { /* printed above */
        } else if (ft.st != KVS_OK) printf("forward        error: %s\n", kvs_last_error());
        else {
            printf("prefill        %6lld tokens  %10.2f tokens/s  (%.3f s)\n", (long long)n_prompt, pre_tps, ft.prefill_s);
            printf("decode         %6lld tokens  %10.2f tokens/s  (%.1f ms/token; weights %.1f GB/s = %.2f of memcpy)\n",
                   (long long)n_decode, dec_tps, 1e3 / dec_tps, dec_gbs, b.bw.valid ? dec_gbs / b.bw.rate : 0.0);
        }
        fflush(stdout);
    }
    dlm_times dt = {0};
    if (dlm) {
        dt = time_dlm(m, b.kv_types, n_prompt, gen, steps, &b.rng);
        if (dt.st != KVS_OK) b.n_errors++;
        if (!b.json) {
            if (dt.st != KVS_OK) printf("dlm step       error: %s\n", kvs_last_error());
            else {
                printf("dlm step none    %8.2f ms/step  (%lld rows, %lld steps)\n", dt.step_s[0] * 1e3,
                       (long long)(n_prompt + gen), (long long)dt.steps[0]);
                printf("dlm step elastic %8.2f ms/step  (compute fraction %.3f, %.2fx faster)\n", dt.step_s[1] * 1e3,
                       dt.fraction[1], dt.step_s[1] > 0 ? dt.step_s[0] / dt.step_s[1] : 0.0);
            }
            fflush(stdout);
        }
    }

    /* GEMV / GEMM rows per role, variants interleaved */
    mrow rows[N_ROLES * 2 * MAX_VARIANTS];
    int n_rows = 0;
    if (!no_ops) {
        if (!b.json) {
            printf("%-6s %-12s %-14s %-7s %-16s %9s %14s %7s %9s %14s\n", "kind", "matrix", "variant", "type", "m x k (x n)",
                   "ms", "rate", "/ peak", "cpu ms", "per cpu-s");
            fflush(stdout);
        }
        for (int r = 0; r < N_ROLES; r++) {
            const kvs_tensor *W[512] = {NULL};
            int nW = 0;
            char nm[64];
            if (strcmp(roles[r], "output") == 0) {
                W[nW++] = kvs_model_tensor(m, "output");
            } else {
                for (int l = 0; l < hp->n_layers && l < 512; l++) {
                    snprintf(nm, sizeof nm, "blk.%d.%s", l, roles[r]);
                    W[nW++] = kvs_model_tensor(m, nm);
                }
            }
            if (!W[0]) continue;
            const int64_t k = kvs_tensor_ne(W[0], 0), mm = kvs_tensor_ne(W[0], 1);
            for (int gemm = 0; gemm < 2; gemm++) {
                for (int v = 0; v < n_vars; v++) {
                    char vs[64];
                    snprintf(vs, sizeof vs, "matmul:%s", vars[v]);
                    kvs_device_set_variants(b.dev, vs);
                    mrow *x = &rows[n_rows++];
                    *x = (mrow){.role = roles[r], .variant = vars[v], .gemm = gemm, .dt = kvs_tensor_dtype(W[0]),
                                .m = mm, .k = k, .n = gemm ? n_prompt : 1, .layers = gemm ? 1 : nW};
                    x->bytes = (double)kvs_tensor_nbytes(W[0]) * (double)x->layers;
                    x->flops = 2.0 * (double)mm * (double)k * (double)x->n;
                    x->st = time_matmul(&b, W, (int)x->layers, x->n, &x->sec, &x->cpu);
                    if (x->st != KVS_OK) b.n_errors++;
                    if (!b.json) {
                        char dims[40];
                        snprintf(dims, sizeof dims, gemm ? "%lldx%lldx%lld" : "%lldx%lld x%lld", (long long)mm,
                                 (long long)k, (long long)(gemm ? x->n : x->layers));
                        if (x->st != KVS_OK) {
                            printf("%-6s %-12s %-14s %-7s %-16s error: %s\n", gemm ? "gemm" : "gemv", roles[r], vars[v],
                                   kvs_dtype_name(x->dt), dims, kvs_last_error());
                        } else {
                            const double rate = gemm ? x->flops / x->sec * 1e-9 : x->bytes / x->sec * 1e-9;
                            const peak *pk = gemm ? &b.gemm : &b.bw;
                            const double crate = (gemm ? x->flops : x->bytes) / x->cpu * 1e-9;
                            printf("%-6s %-12s %-14s %-7s %-16s %9.3f %9.1f %-4s %7.2f %9.3f %9.1f %-4s\n",
                                   gemm ? "gemm" : "gemv", roles[r], vars[v], kvs_dtype_name(x->dt), dims, x->sec * 1e3,
                                   rate, gemm ? "GF/s" : "GB/s", pk->valid ? rate / pk->rate : 0.0, x->cpu * 1e3, crate,
                                   gemm ? "GF/s" : "GB/s");
                        }
                        fflush(stdout);
                    }
                }
            }
        }
        kvs_device_set_variants(b.dev, "matmul:auto");
    }

    if (b.json) {
        json_object *js = json_object_new_object();
        json_object_object_add(js, "kvsieve", json_object_new_string(kvs_version()));
        json_object_object_add(js, "backend", json_object_new_string(kvs_backend_name(info->backend)));
        json_object_object_add(js, "device", json_object_new_string(info->name));
        json_object_object_add(js, "threads", json_object_new_int(caps->n_threads));
        json_object_object_add(js, "date", json_object_new_string(date));
        json_object_object_add(js, "load_average", json_object_new_double(load));
        json_object *pk = json_object_new_object();
        json_object_object_add(pk, "gflops", b.gemm.valid ? json_object_new_double(b.gemm.rate) : NULL);
        json_object_object_add(pk, "gbs", b.bw.valid ? json_object_new_double(b.bw.rate) : NULL);
        json_object_object_add(js, "peaks", pk);
        json_object *sj = json_object_new_object();
        json_object_object_add(sj, "name", json_object_new_string(sh.name));
        json_object_object_add(sj, "arch", json_object_new_string(kvs_arch_name(hp->arch)));
        json_object_object_add(sj, "n_layers", json_object_new_int(hp->n_layers));
        json_object_object_add(sj, "dim", json_object_new_int(hp->dim));
        json_object_object_add(sj, "n_heads", json_object_new_int(hp->n_heads));
        json_object_object_add(sj, "n_kv_heads", json_object_new_int(hp->n_kv_heads));
        json_object_object_add(sj, "head_dim", json_object_new_int(hp->head_dim));
        json_object_object_add(sj, "ffn_dim", json_object_new_int(hp->ffn_dim));
        json_object_object_add(sj, "vocab", json_object_new_int(hp->vocab));
        json_object_object_add(sj, "parameters", json_object_new_double(n_params));
        json_object_object_add(js, "shape", sj);
        json_object_object_add(js, "type", json_object_new_string(kvs_dtype_name(type)));
        json_object *tu = json_object_new_array();
        for (int i = 0; i < n_used; i++) json_object_array_add(tu, json_object_new_string(kvs_dtype_name(used[i])));
        json_object_object_add(js, "types_used", tu);
        json_object_object_add(js, "cache_type_k", json_object_new_string(kvs_dtype_name(b.kv_types[0])));
        json_object_object_add(js, "cache_type_v", json_object_new_string(kvs_dtype_name(b.kv_types[1])));
        json_object_object_add(js, "model_bytes", json_object_new_int64((int64_t)wbytes));
        json_object_object_add(js, "kv_bytes_per_token", json_object_new_int64(kv_tok));
        /* the random weights' build; "build_seconds" is the kernel builds, as in generate's stats */
        json_object_object_add(js, "weights_build_seconds", json_object_new_double(build_s));
        json_object_object_add(js, "build_seconds", json_object_new_double(kvs_device_build_seconds(b.dev)));
        if (speculative) {
            bench_spec_opts so = {.context = context, .decode = n_decode, .draft = (int)draft, .reps = reps, .fill_prefill = fill_prefill,
                                  .draft_weights = draft_wt};
            json_object_object_add(js, "speculative", bench_spec_json(&sr, &so, sst));
        }
        if (ctx_mode) json_object_object_add(js, "context_decode", bench_context_json(&cr, &co, cst));
        json_object *fj = speculative || ctx_mode ? NULL : json_object_new_object();
        if (fj) {
            json_object_object_add(fj, "ok", json_object_new_boolean(ft.st == KVS_OK));
            json_object_object_add(fj, "prompt_tokens", json_object_new_int64(n_prompt));
            json_object_object_add(fj, "prefill_seconds", json_object_new_double(ft.prefill_s));
            json_object_object_add(fj, "prefill_tokens_per_s", json_object_new_double(pre_tps));
            json_object_object_add(fj, "decode_tokens", json_object_new_int64(n_decode));
            json_object_object_add(fj, "decode_seconds", json_object_new_double(ft.decode_s));
            json_object_object_add(fj, "decode_tokens_per_s", json_object_new_double(dec_tps));
            json_object_object_add(fj, "decode_weight_gbs", json_object_new_double(dec_gbs));
            json_object_object_add(js, "forward", fj);
        }
        if (dlm) {
            json_object *dj = json_object_new_object();
            json_object_object_add(dj, "ok", json_object_new_boolean(dt.st == KVS_OK));
            json_object_object_add(dj, "rows", json_object_new_int64(n_prompt + gen));
            json_object_object_add(dj, "none_step_seconds", json_object_new_double(dt.step_s[0]));
            json_object_object_add(dj, "none_steps", json_object_new_int64(dt.steps[0]));
            json_object_object_add(dj, "elastic_step_seconds", json_object_new_double(dt.step_s[1]));
            json_object_object_add(dj, "elastic_steps", json_object_new_int64(dt.steps[1]));
            json_object_object_add(dj, "elastic_compute_fraction", json_object_new_double(dt.fraction[1]));
            json_object_object_add(js, "dlm_step", dj);
        }
        json_object *rj = json_object_new_array();
        for (int i = 0; i < n_rows; i++) {
            const mrow *x = &rows[i];
            json_object *o = json_object_new_object();
            json_object_object_add(o, "kind", json_object_new_string(x->gemm ? "gemm" : "gemv"));
            json_object_object_add(o, "matrix", json_object_new_string(x->role));
            json_object_object_add(o, "variant", json_object_new_string(x->variant));
            json_object_object_add(o, "type", json_object_new_string(kvs_dtype_name(x->dt)));
            json_object_object_add(o, "m", json_object_new_int64(x->m));
            json_object_object_add(o, "k", json_object_new_int64(x->k));
            json_object_object_add(o, "n", json_object_new_int64(x->n));
            json_object_object_add(o, "layers", json_object_new_int64(x->layers));
            json_object_object_add(o, "ok", json_object_new_boolean(x->st == KVS_OK));
            if (x->st == KVS_OK) {
                const double rate = x->gemm ? x->flops / x->sec * 1e-9 : x->bytes / x->sec * 1e-9;
                const peak *p = x->gemm ? &b.gemm : &b.bw;
                json_object_object_add(o, "seconds", json_object_new_double(x->sec));
                json_object_object_add(o, "cpu_seconds", json_object_new_double(x->cpu));
                json_object_object_add(o, x->gemm ? "gflops" : "gbs", json_object_new_double(rate));
                json_object_object_add(o, "of_peak", p->valid ? json_object_new_double(rate / p->rate) : NULL);
            }
            json_object_array_add(rj, o);
        }
        json_object_object_add(js, "matmul", rj);
        json_object_object_add(js, "errors", json_object_new_int(b.n_errors));
        printf("%s\n", json_object_to_json_string_ext(js, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(js);
    }
    kvs_model_destroy(&m);
    kvs_device_destroy(&b.dev);
    if (b.n_errors) {
        fprintf(stderr, "kvsieve bench model: %d measurement%s failed\n", b.n_errors, b.n_errors == 1 ? "" : "s");
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}
