/* Test harness for the op suites: one backend per process run (--backend cpu|opencl|vulkan), guarded
 * and poisoned device tensors, seeded RNG, comparison metrics, and the skip accounting for ops a
 * device reports KVS_ERR_UNSUPPORTED for.
 *
 * Every Check test calls t_begin() first (it opens the device inside the forked child: OpenCL and
 * Vulkan objects must never be created before Check forks) and t_end() last.
 *
 * Guarded tensors: each tensor a test creates is a view into a larger parent buffer with
 * T_GUARD_BYTES of poison on both sides. The whole parent is poisoned (a NaN bit pattern for float
 * dtypes) before the op runs; downloads verify that the guard bands came back byte-identical, so any
 * write outside a tensor fails the test. 256-byte guards keep view offsets aligned to what GPU APIs
 * require of buffer offsets (Vulkan minStorageBufferOffsetAlignment <= 256); unaligned views are
 * tested separately (test_ops_tensor.c).
 *
 * Cases: t_case("fmt", ...) names the case under test; every failure message starts with it and
 * with the base seed, so a failing case can be re-run exactly:
 *   KVS_TEST_SEED=<seed> test_ops --backend <b> --suite <s> --tcase <t>
 */
#ifndef KVS_TESTS_HARNESS_H
#define KVS_TESTS_HARNESS_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "kvsieve/kvsieve.h"

#define T_GUARD_BYTES 256

/* ---- global run configuration (set by main before the runner starts) ---- */
extern kvs_device_params t_params;   /* backend + device index under test */
extern uint64_t t_base_seed;         /* printed at start; KVS_TEST_SEED overrides */
extern char t_variant[256];          /* kernel variants t_begin forces ("op:variant,..."; "" = auto) */

/* ---- per-test lifetime ---- */
kvs_device *t_begin(const char *test_name); /* opens the device under test; seeds t_rng */
void t_seed(const char *test_name);         /* seeds the RNG only (tests without a device) */
void t_end(void);                           /* destroys every tensor made by t_new*, then the device */
void t_release(void);                       /* destroys the tensors and buffers, keeps the device */
/* A Check test running every case of the given tables on ONE device, one after another (the
 * per-case tests open a fresh device each): catches state that leaks between ops of different
 * shapes, dtypes or variants (scratch buffers, kernel/pipeline caches keyed too coarsely, pending
 * work). table: array of t_seq. */
typedef struct t_seq {
    void (*run)(int i);
    int count;
} t_seq;
#define T_SEQUENCE_TEST(name, table)                                                                \
    START_TEST(name) {                                                                              \
        t_begin(#name);                                                                             \
        for (size_t s_ = 0; s_ < sizeof(table) / sizeof((table)[0]); s_++)                          \
            for (int i_ = 0; i_ < (table)[s_].count; i_++) {                                        \
                (table)[s_].run(i_);                                                                \
                t_release();                                                                        \
            }                                                                                       \
        t_end();                                                                                    \
    }                                                                                               \
    END_TEST
kvs_device *t_dev(void);
kvs_backend t_backend(void);

/* ---- cases and skips ---- */
/* Names the current case (printf-style). Closes the previous case as run (if not skipped). */
void t_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *t_case_str(void);
/* Support query, then the op (as test-backend-ops asks ggml's supports_op before running a case):
 * t_op(call) evaluates the op call twice: first with the device in query mode
 * (kvs_device_set_query: validation and the backend's supports(), nothing runs); if the device
 * reports KVS_ERR_UNSUPPORTED the case is recorded as skipped (printed with the device's reason),
 * never passed, and t_op returns 1 without running it. Otherwise the call runs for real and must
 * return KVS_OK (an unsupported error now fails the test: supports() accepted the call); returns 0.
 * t_query(call) is the first half alone: 1 (skipped) or 0 (supported; the caller runs the call).
 * The call's arguments must be free of side effects. Usage: if (t_op(kvs_matmul(...))) return; */
#define t_query(call) (t_query_begin(), t_query_end(call))
#define t_op(call) (t_query(call) ? 1 : t_run_end(call))
void t_query_begin(void);     /* puts the device in query mode */
int t_query_end(kvs_status s); /* leaves query mode; 1 and the skip recorded when s is unsupported */
int t_run_end(kvs_status s);   /* asserts s == KVS_OK, returns 0 */
/* Asserts s == want, and (for errors) that kvs_last_error() is non-empty. */
void t_expect(kvs_status s, kvs_status want, const char *what);

/* Shared (cross-fork) counters, read by main after the runner finishes. */
typedef struct t_counters {
    long cases_run;
    long cases_skipped;
    char skipped[4096]; /* first skipped case names + reasons, '\n'-separated */
    char variants[4096]; /* the device's usable variants, "op:variant\n" each (test_ops' probe) */
    char variants_unusable[2048]; /* "op:variant: reason\n" each */
} t_counters;
t_counters *t_counters_get(void);
void t_counters_init(void);

#define T_FAIL(...) ck_abort_msg(__VA_ARGS__)
/* Assertion whose message starts with the case string and the seed. Check is called only when cond
 * fails: a passing ck_assert_msg records its location with a write() to Check's message file, and the
 * element-wise checks pass millions of times (a tenth of an op suite's time went to those writes). */
#define T_ASSERT(cond, fmt, ...)                                                                    \
    do {                                                                                            \
        if (!(cond))                                                                                \
            ck_abort_msg("Assertion '%s' failed: [%s] seed=%llu: " fmt, #cond, t_case_str(),        \
                         (unsigned long long)t_base_seed, ##__VA_ARGS__);                           \
    } while (0)

/* ---- RNG: xoshiro256** seeded by splitmix64(base seed ^ hash(test name)) ---- */
uint64_t t_rand_u64(void);
double t_rand_uniform(double lo, double hi); /* [lo, hi) */
double t_rand_normal(void);
int64_t t_rand_int(int64_t lo, int64_t hi);  /* [lo, hi] inclusive */
void t_fill_uniform(float *x, int64_t n, double lo, double hi);
void t_fill_normal(float *x, int64_t n, double sigma);
void t_shuffle_i32(int32_t *a, int64_t n);

/* ---- guarded device tensors ---- */
typedef struct tt {
    kvs_tensor *t;       /* the view under test */
    kvs_tensor *parent;  /* guard | t | guard */
    kvs_dtype dtype;
    int64_t nel;
    size_t nbytes;       /* bytes of t */
    size_t guard;        /* guard bytes on each side */
    unsigned char *shadow; /* host copy of the parent as last written by the test (guards + t) */
} tt;

/* Creates a guarded tensor of shape ne[0..ndim-1] (ne[0] fastest) and poisons all of it. */
tt *t_new(kvs_dtype dtype, int ndim, const int64_t *ne);
tt *t_new1(kvs_dtype dtype, int64_t ne0);
tt *t_new2(kvs_dtype dtype, int64_t ne0, int64_t ne1);
tt *t_new3(kvs_dtype dtype, int64_t ne0, int64_t ne1, int64_t ne2);
/* A plain (unguarded) tensor; for Q8_0 weights and when a test needs the exact shape object. */
kvs_tensor *t_plain(kvs_dtype dtype, int ndim, const int64_t *ne);

/* Writes raw bytes (nbytes of the tensor) into t and into its shadow. */
void t_upload(tt *t, const void *src);
void t_upload_f32(tt *t, const float *src);   /* t must be F32 */
void t_upload_i32(tt *t, const int32_t *src); /* t must be I32 */
/* Converts f32 values to t's float dtype (F32/F16/BF16) with the reference rounding and uploads. */
void t_upload_as(tt *t, const float *src);
/* Re-poisons the tensor (and its shadow). */
void t_poison(tt *t);
/* Downloads the whole parent, asserts both guard bands are byte-identical to what was written,
 * and copies the tensor bytes into dst (may be NULL). */
void t_download(tt *t, void *dst);
/* Downloads and asserts the tensor's bytes are unchanged since the last upload (inputs an op must
 * not modify). */
void t_assert_unchanged(tt *t, const char *what);
/* Download as doubles (decoding F16/BF16/F32; I32 as integers). */
void t_download_f64(tt *t, double *dst);

/* The poison bit patterns (NaN for float dtypes). */
uint32_t t_poison_word(kvs_dtype dt);

/* ---- comparisons ---- */
/* Compares out against ref element-wise:
 *  - non-finite positions must agree exactly in class (NaN, +inf, -inf), checked separately;
 *  - over the finite positions, normalised MSE = sum (out-ref)^2 / sum ref^2 must be <= tol
 *    (test-backend-ops metric); when sum ref^2 == 0 the plain sum of squares is compared with tol.
 * Fails with the case string, the worst element (index, out, ref) and the nmse. Returns the nmse. */
double t_check_nmse(const char *what, const float *out, const double *ref, int64_t n, double tol);
/* |out - ref| <= atol + rtol*|ref| per element (non-finite classes must agree). */
void t_check_close(const char *what, const float *out, const double *ref, int64_t n, double atol, double rtol);
/* Bit-exact float equality (any NaN matches any NaN). */
void t_check_exact_f32(const char *what, const float *out, const float *ref, int64_t n);
void t_check_exact_i32(const char *what, const int32_t *out, const int32_t *ref, int64_t n);
void t_check_bytes(const char *what, const void *out, const void *ref, size_t n);

/* ---- misc ---- */
void *t_alloc(size_t nbytes); /* calloc that fails the test on OOM; freed by t_end */
double t_f64(float f);

#endif
