/* kvsieve bench ops, shared by its files (not installed):
 *   cmd_bench.c     the command: options, device, header lines, peaks then the suite
 *   bench_time.c    inputs (deterministic random tensors, index lists), the timing rule, case rows
 *   bench_peaks.c   the peaks every ratio is measured against (GEMM, bandwidth)
 *   bench_cases.c   the op cases and the suite (which shapes, what each counts as work)
 *   bench_report.c  the table rows and the JSON report
 *   bench_model.c   kvsieve bench model (a random-weight model of a real shape)
 *   bench_spec.c    its --speculative mode: QuantSpec against plain decoding at a long context
 *   bench_context.c its --context mode (plain decoding after N cached rows) and the cache fill both use
 * Units, timing and budgets: cmd_bench.c's header. */
#ifndef KVS_CLI_BENCH_H
#define KVS_CLI_BENCH_H

#include <stdint.h>

#include "cli.h"

#define MAX_ROWS 80
#define MAX_REPS 101

typedef enum unit { UNIT_FLOPS, UNIT_BYTES } unit;

typedef enum row_status { ROW_OK, ROW_UNSUPPORTED, ROW_TOO_LARGE, ROW_SKIPPED, ROW_ERROR } row_status;

typedef struct row {
    char op[24];
    char shape[64];
    unit unit;
    double work;     /* flops or bytes per call */
    double sec;      /* median seconds per call (ROW_OK) */
    double best;     /* fastest sample, seconds per call (ROW_OK) */
    int samples;     /* timed samples behind sec; 0: only the warm-up call (includes first use) */
    row_status status;
    char msg[200];
    double side_bw;  /* > 0: GB/s of a memcpy timed side by side with the op (interleaved, best
                      * of the same rounds); the row's ratio is against it instead of the peak */
} row;

typedef struct peak {
    int valid;
    double rate;     /* GFLOP/s or GB/s */
    char what[64];   /* shape / size */
    char method[64];
} peak;

typedef struct bench {
    kvs_device *dev;
    const char *spec;
    int quick, json, reps, threads;
    double min_sample_s;
    double budget_s; /* per-case time budget, seconds */
    const char *filter;
    kvs_dtype kv_types[2]; /* --cache-type-k/-v: K and V of the attention cases (default f32) */
    uint64_t rng;
    peak gemm, bw;
    row rows[MAX_ROWS];
    int n_rows, n_errors;
    /* list_only: bench_run_suite runs nothing; every case's op name is collected in ops (each once)
     * and the cases --filter selects are counted in n_rows (checking a filter before the peaks) */
    int list_only, n_ops;
    char ops[32][16];
} bench;

/* Names of row_status values, for the table and the JSON report (bench_report.c). */
extern const char *const bench_row_status_names[];

/* ---- bench_time.c ---- */

/* A uniform value in [-1, 1) from the xorshift64* state *s (deterministic inputs for every run). */
float bench_rng_uniform(uint64_t *s);
/* Creates a tensor on b->dev and fills it with uniform [-1, 1) values (F32/F16) or zeros (others);
 * errors: those of kvs_tensor_new / kvs_tensor_upload, KVS_ERR_OUT_OF_MEMORY. */
kvs_status bench_new_tensor(bench *b, kvs_tensor **t, kvs_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2,
                            int64_t ne3);
/* I32 tensor [groups][n] with idx[g][i] = floor(i * range / n). */
kvs_status bench_new_index(bench *b, kvs_tensor **t, int64_t n, int64_t groups, int64_t range);

typedef kvs_status (*run_fn)(bench *b, void *state);
/* Warm-up, calibrate, samples: the median seconds per call of fn in *sec (the rule: cmd_bench.c). */
kvs_status bench_time_op(bench *b, run_fn fn, void *st, double *sec);
/* A new row for case "op shape", NULL when --filter leaves it out or the table is full. */
row *bench_new_row(bench *b, const char *op, const char *shape, unit u, double work);
/* Records the outcome of one case (s: the status of setup or timing) and prints its row. */
void bench_finish_row(bench *b, row *r, kvs_status s, double sec);
void bench_destroy_all(kvs_tensor **ts, int n);
const char *bench_unit_name(unit u);
double bench_row_rate(const row *r);               /* GFLOP/s or GB/s */
const peak *bench_row_peak(const bench *b, const row *r);

/* ---- bench_cases.c ---- */

typedef struct mm_state {
    kvs_tensor *W, *x, *y;
} mm_state;
kvs_status bench_run_mm(bench *b, void *p);
/* Every case of the suite (quick sizes with b->quick), table header first. */
void bench_run_suite(bench *b);

/* ---- bench_peaks.c ---- */

/* b->gemm: an n^3 f32 SGEMM through kvs_matmul (cblas_sgemm when the CPU backend lacks it). */
void bench_peak_gemm(bench *b, int64_t n);
/* b->bw: memcpy of `bytes` on the CPU (1 and all threads), a device copy on GPUs. */
void bench_peak_bandwidth(bench *b, size_t bytes);

/* Side-by-side bandwidth (the quantized-KV attention rows, issue 17): a memcpy of `bytes` with
 * `threads` threads (CPU; buffers allocated like the backend's, pages faulted in); NULL when out of
 * memory. bench_copy_run: seconds of one copy. */
typedef struct bench_copy bench_copy;
bench_copy *bench_copy_new(size_t bytes, int threads);
double bench_copy_run(bench *b, bench_copy *c);
size_t bench_copy_bytes(const bench_copy *c);
void bench_copy_free(bench_copy *c);

/* ---- bench_model.c ---- */

/* kvsieve bench model (argv[0] = "model"): exit code as the other subcommands. */
int bench_model(int argc, char **argv);

/* ---- bench_spec.c ---- */

typedef struct bench_spec_opts {
    int64_t context;      /* rows in the cache before decoding (positions 0 .. context-1), >= 1 */
    int64_t decode;       /* tokens generated per run, >= 1 */
    int draft;            /* tokens drafted per verify step, 1..KVS_SPEC_MAX_DRAFT */
    int reps;             /* interleaved repetitions of (plain, speculative), >= 1 */
    int fill_prefill;     /* 1: fill by a prefill of random tokens; 0: random K/V rows written directly */
    kvs_dtype draft_weights; /* the model's draft weight copies (kvs_model_set_draft_weights); KVS_F32: none */
    int32_t *tokens_out;  /* optional [decode]: the speculative tokens of the last run */
    int32_t *plain_out;   /* optional [decode]: the plain tokens of the last run */
} bench_spec_opts;

typedef struct bench_spec_result {
    double fill_s;                  /* wall seconds of filling the cache */
    double plain_s, plain_cpu_s;    /* fastest wall / process-CPU seconds of a plain run */
    double spec_s, spec_cpu_s;      /* the same for a speculative run */
    double draft_s;                 /* wall seconds of the draft forwards in the last speculative run */
    int64_t plain_tokens, spec_tokens;
    int64_t distinct_tokens;        /* distinct ids among the plain tokens (1: a random model stuck on one) */
    int64_t verify_steps, drafted, accepted; /* the last speculative run (every run decodes the same) */
    int identical;                  /* 1: every speculative run gave the plain run's tokens */
    int64_t first_diff;             /* first differing index, -1 when identical */
    int64_t kv_bytes_per_token[2];  /* KV bytes per context token one step reads: [0] 8-bit, [1] the draft */
    int64_t weight_bytes;           /* bytes of every weight tensor */
    int64_t draft_weight_bytes;     /* bytes of the draft's weight copies (0: the draft reads the weights) */
} bench_spec_result;

/* The measurement of bench_spec.c's header on model m with cache types kv (one of them qh8 for
 * draft > 0). Errors: the cache's, the fill's, kvs_generate_ar_continue's, KVS_ERR_OUT_OF_MEMORY. */
kvs_status bench_spec_measure(kvs_model *m, const kvs_dtype kv[2], const bench_spec_opts *o, uint64_t *rng,
                              bench_spec_result *r);

/* Prints the result as text lines (s: bench_spec_measure's status: its message on an error). */
void bench_spec_print(const bench_spec_result *r, const bench_spec_opts *o, kvs_status s);
/* The result as a JSON object (keys with their units; "ok": false and the options only on an error). */
struct json_object;
struct json_object *bench_spec_json(const bench_spec_result *r, const bench_spec_opts *o, kvs_status s);

/* ---- bench_context.c ---- */

/* Fills cache c (of m's shape, capacity >= n) with rows for positions 0 .. n-1: prefill 1, a prefill
 * of random token ids 3 .. vocab-1 in forwards of 256 rows; prefill 0, random K/V values uniform in
 * [-1, 1) (keys as if after RoPE) written by kvs_cache_write_rows, 256 rows per layer at a time, no
 * forward. rng: bench_rng_uniform's state, advanced. Ends with a device sync.
 * Errors: KVS_ERR_OUT_OF_MEMORY, the forward's, kvs_cache_write_rows's. */
kvs_status bench_fill_cache(kvs_model *m, kvs_kv_cache *c, int64_t n, int prefill, uint64_t *rng);

typedef struct bench_context_opts {
    int64_t context;  /* rows in the cache before decoding (positions 0 .. context-1), >= 1 */
    int64_t decode;   /* tokens generated per run, >= 1 */
    int reps;         /* timed runs, >= 1; the fastest is kept */
    int fill_prefill; /* 1: fill by a prefill of random tokens; 0: random K/V rows written directly */
} bench_context_opts;

typedef struct bench_context_result {
    double fill_s;                   /* wall seconds of filling the cache */
    double seconds, cpu_seconds;     /* fastest wall / fastest process-CPU seconds of a run */
    int64_t tokens;                  /* tokens a run generated (= decode) */
    double attention_share;          /* "attention" op seconds / wall seconds of one profiled run; -1: unknown */
    double profiled_seconds;         /* wall seconds of that run (slower than the timed ones by the profile) */
    int64_t kv_bytes_per_token;      /* cache bytes per token: K and V rows of every layer and kv head */
    int64_t kv_read_bytes_per_token; /* bytes per cached token one decode step's attention reads */
    int64_t weight_bytes;            /* bytes of every weight tensor */
} bench_context_result;

/* The measurement of bench_context.c's header on model m (autoregressive) with cache types kv.
 * Errors: the cache's, the fill's, kvs_generate_ar_continue's, KVS_ERR_OUT_OF_MEMORY. */
kvs_status bench_context_measure(kvs_model *m, const kvs_dtype kv[2], const bench_context_opts *o, uint64_t *rng,
                                 bench_context_result *r);
/* Prints the result as text lines (s: bench_context_measure's status: its message on an error). */
void bench_context_print(const bench_context_result *r, const bench_context_opts *o, kvs_status s);
/* The result as a JSON object (keys with their units; "ok": false and the options only on an error). */
struct json_object *bench_context_json(const bench_context_result *r, const bench_context_opts *o, kvs_status s);

/* ---- bench_report.c ---- */

void bench_print_row(const bench *b, const row *r); /* nothing with --json */
void bench_print_json(const bench *b, const char *date, double load);

#endif
