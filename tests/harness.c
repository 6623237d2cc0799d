/* Test harness: see harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "reference.h"

kvs_device_params t_params;
uint64_t t_base_seed = 20251129;
char t_variant[256];

/* ---- shared counters (MAP_SHARED so forked Check children can update them) ---- */

static t_counters *g_counters;

void t_counters_init(void) {
    void *p = mmap(NULL, sizeof(t_counters), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        static t_counters fallback;
        p = &fallback;
    }
    memset(p, 0, sizeof(t_counters));
    g_counters = p;
}

t_counters *t_counters_get(void) { return g_counters; }

/* ---- per-test state ---- */

/* Check's ck_assert* write their location to Check's message file even when they pass; these run
 * for every tensor of every case, so they call Check only on failure. */
#define H_ASSERT_MSG(cond, ...)                                                                     \
    do {                                                                                            \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                     \
    } while (0)
#define H_ASSERT(cond) H_ASSERT_MSG(cond, "Assertion '%s' failed", #cond)

#define T_MAX_TENSORS 256
#define T_MAX_ALLOCS 256

static kvs_device *g_dev;
static tt *g_tensors[T_MAX_TENSORS];
static int g_ntensors;
static kvs_tensor *g_plain[T_MAX_TENSORS];
static int g_nplain;
static void *g_allocs[T_MAX_ALLOCS];
static int g_nallocs;
static char g_case[1024];
static int g_case_open, g_case_skipped;
static uint64_t g_rng[4];

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t s) {
    for (int i = 0; i < 4; i++) g_rng[i] = splitmix64(&s);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t t_rand_u64(void) {
    uint64_t *s = g_rng;
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

double t_rand_uniform(double lo, double hi) {
    return lo + (hi - lo) * ((double)(t_rand_u64() >> 11) * 0x1.0p-53);
}

double t_rand_normal(void) {
    double u1 = t_rand_uniform(0, 1), u2 = t_rand_uniform(0, 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

int64_t t_rand_int(int64_t lo, int64_t hi) {
    return lo + (int64_t)(t_rand_u64() % (uint64_t)(hi - lo + 1));
}

void t_fill_uniform(float *x, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)t_rand_uniform(lo, hi);
}

void t_fill_normal(float *x, int64_t n, double sigma) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(sigma * t_rand_normal());
}

void t_shuffle_i32(int32_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = t_rand_int(0, i);
        int32_t tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
    }
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void t_seed(const char *test_name) { rng_seed(t_base_seed ^ hash_str(test_name)); }

kvs_device *t_begin(const char *test_name) {
    g_ntensors = g_nplain = g_nallocs = 0;
    g_case_open = g_case_skipped = 0;
    snprintf(g_case, sizeof g_case, "%s%s%s %s", kvs_backend_name(t_params.backend), t_variant[0] ? " " : "",
             t_variant, test_name);
    rng_seed(t_base_seed ^ hash_str(test_name));
    kvs_status s = kvs_device_open(&g_dev, &t_params);
    H_ASSERT_MSG(s == KVS_OK, "%s: cannot open %s device %d: %s (%s)", test_name,
                  kvs_backend_name(t_params.backend), t_params.index, kvs_status_str(s), kvs_last_error());
    s = kvs_device_set_variants(g_dev, t_variant);
    H_ASSERT_MSG(s == KVS_OK, "%s: cannot force variants '%s': %s (%s)", test_name, t_variant, kvs_status_str(s),
                  kvs_last_error());
    return g_dev;
}

static void case_close(void) {
    if (g_case_open && !g_case_skipped && g_counters) __sync_fetch_and_add(&g_counters->cases_run, 1);
    g_case_open = 0;
    g_case_skipped = 0;
}

void t_end(void) {
    t_release();
    kvs_device_destroy(&g_dev);
}

void t_release(void) {
    case_close();
    for (int i = g_ntensors - 1; i >= 0; i--) {
        kvs_tensor_destroy(&g_tensors[i]->t);
        kvs_tensor_destroy(&g_tensors[i]->parent);
        free(g_tensors[i]->shadow);
        free(g_tensors[i]);
    }
    for (int i = g_nplain - 1; i >= 0; i--) kvs_tensor_destroy(&g_plain[i]);
    for (int i = 0; i < g_nallocs; i++) free(g_allocs[i]);
    g_ntensors = g_nplain = g_nallocs = 0;
}

kvs_device *t_dev(void) { return g_dev; }
kvs_backend t_backend(void) { return t_params.backend; }

void t_case(const char *fmt, ...) {
    case_close();
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(g_case, sizeof g_case, "%s%s%s %s", kvs_backend_name(t_params.backend), t_variant[0] ? " " : "",
             t_variant, buf);
    g_case_open = 1;
}

const char *t_case_str(void) { return g_case; }

void t_query_begin(void) {
    H_ASSERT_MSG(kvs_device_set_query(g_dev, 1) == KVS_OK, "kvs_device_set_query: %s", kvs_last_error());
}

int t_run_end(kvs_status s) {
    T_ASSERT(s == KVS_OK, "op failed: %s (%s): %s%s", kvs_status_name(s), kvs_status_str(s), kvs_last_error(),
             s == KVS_ERR_UNSUPPORTED ? " (after the support query accepted the call)" : "");
    return 0;
}

int t_query_end(kvs_status s) {
    H_ASSERT_MSG(kvs_device_set_query(g_dev, 0) == KVS_OK, "kvs_device_set_query: %s", kvs_last_error());
    if (s == KVS_ERR_UNSUPPORTED) {
        if (!g_case_skipped && g_counters) {
            __sync_fetch_and_add(&g_counters->cases_skipped, 1);
            char line[1700];
            snprintf(line, sizeof line, "  SKIP (unsupported) %s: %s\n", g_case, kvs_last_error());
            /* Best effort append; concurrent writers cannot happen (Check runs tests one by one). */
            size_t used = strlen(g_counters->skipped);
            if (used + strlen(line) + 1 < sizeof g_counters->skipped)
                memcpy(g_counters->skipped + used, line, strlen(line) + 1);
        }
        fprintf(stderr, "SKIP (unsupported) %s: %s\n", g_case, kvs_last_error());
        g_case_skipped = 1;
        return 1;
    }
    T_ASSERT(s == KVS_OK, "support query failed: %s (%s): %s", kvs_status_name(s), kvs_status_str(s),
             kvs_last_error());
    return 0;
}

void t_expect(kvs_status s, kvs_status want, const char *what) {
    T_ASSERT(s == want, "%s: got %s (%s), want %s", what, kvs_status_name(s), kvs_last_error(),
             kvs_status_name(want));
    if (want != KVS_OK) T_ASSERT(kvs_last_error()[0] != '\0', "%s: %s but kvs_last_error() is empty", what,
                                 kvs_status_name(s));
}

void *t_alloc(size_t nbytes) {
    void *p = calloc(1, nbytes ? nbytes : 1);
    H_ASSERT_MSG(p != NULL, "out of host memory (%zu bytes)", nbytes);
    if (g_nallocs < T_MAX_ALLOCS) g_allocs[g_nallocs++] = p;
    return p;
}

double t_f64(float f) { return (double)f; }

/* ---- tensors ---- */

uint32_t t_poison_word(kvs_dtype dt) {
    switch (dt) {
    case KVS_F16: return 0x7e6d7e6du;  /* f16 NaN pairs */
    case KVS_BF16: return 0x7fc57fc5u; /* bf16 NaN pairs */
    default: return 0x7fc1deadu;       /* f32 NaN; as i32 2143411885 (no valid index) */
    }
}

static void poison_bytes(unsigned char *p, size_t n, kvs_dtype dt) {
    uint32_t w = t_poison_word(dt);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(w >> (8 * (i % 4)));
}

tt *t_new(kvs_dtype dtype, int ndim, const int64_t *ne) {
    H_ASSERT_MSG(g_ntensors < T_MAX_TENSORS, "too many test tensors");
    int64_t nel = 1;
    for (int i = 0; i < ndim; i++) nel *= ne[i];
    size_t nbytes = kvs_dtype_bytes(dtype, nel);
    H_ASSERT_MSG(nbytes > 0, "t_new: bad dtype/size");
    /* block types: whole blocks of guard, at least T_GUARD_BYTES */
    const int blk = kvs_dtype_block(dtype);
    size_t esz = kvs_dtype_bytes(dtype, blk);
    size_t guard_el = (size_t)blk * ((T_GUARD_BYTES + esz - 1) / esz);
    size_t guard = kvs_dtype_bytes(dtype, (int64_t)guard_el);
    tt *t = calloc(1, sizeof *t);
    H_ASSERT(t != NULL);
    int64_t pne = nel + 2 * (int64_t)guard_el;
    kvs_status s = kvs_tensor_create(&t->parent, g_dev, dtype, 1, &pne);
    H_ASSERT_MSG(s == KVS_OK, "[%s] tensor create (%lld elements %s): %s", g_case, (long long)pne,
                  kvs_dtype_name(dtype), kvs_last_error());
    s = kvs_tensor_view(&t->t, t->parent, (int64_t)guard_el, ndim, ne);
    H_ASSERT_MSG(s == KVS_OK, "[%s] tensor view: %s", g_case, kvs_last_error());
    t->dtype = dtype;
    t->nel = nel;
    t->nbytes = nbytes;
    t->guard = guard;
    t->shadow = malloc(nbytes + 2 * guard);
    H_ASSERT(t->shadow != NULL);
    g_tensors[g_ntensors++] = t;
    poison_bytes(t->shadow, nbytes + 2 * guard, dtype);
    s = kvs_tensor_upload(t->parent, t->shadow, 0, nbytes + 2 * guard);
    H_ASSERT_MSG(s == KVS_OK, "[%s] upload poison: %s", g_case, kvs_last_error());
    return t;
}

tt *t_new1(kvs_dtype dtype, int64_t ne0) { return t_new(dtype, 1, &ne0); }
tt *t_new2(kvs_dtype dtype, int64_t ne0, int64_t ne1) {
    int64_t ne[2] = {ne0, ne1};
    return t_new(dtype, 2, ne);
}
tt *t_new3(kvs_dtype dtype, int64_t ne0, int64_t ne1, int64_t ne2) {
    int64_t ne[3] = {ne0, ne1, ne2};
    return t_new(dtype, 3, ne);
}

kvs_tensor *t_plain(kvs_dtype dtype, int ndim, const int64_t *ne) {
    H_ASSERT_MSG(g_nplain < T_MAX_TENSORS, "too many test tensors");
    kvs_tensor *t = NULL;
    kvs_status s = kvs_tensor_create(&t, g_dev, dtype, ndim, ne);
    H_ASSERT_MSG(s == KVS_OK, "[%s] tensor create: %s", g_case, kvs_last_error());
    g_plain[g_nplain++] = t;
    return t;
}

void t_upload(tt *t, const void *src) {
    memcpy(t->shadow + t->guard, src, t->nbytes);
    kvs_status s = kvs_tensor_upload(t->t, src, 0, t->nbytes);
    H_ASSERT_MSG(s == KVS_OK, "[%s] upload: %s", g_case, kvs_last_error());
}

void t_upload_f32(tt *t, const float *src) {
    H_ASSERT(t->dtype == KVS_F32);
    t_upload(t, src);
}

void t_upload_i32(tt *t, const int32_t *src) {
    H_ASSERT(t->dtype == KVS_I32);
    t_upload(t, src);
}

void t_upload_as(tt *t, const float *src) {
    if (t->dtype == KVS_F32) {
        t_upload(t, src);
        return;
    }
    H_ASSERT(t->dtype == KVS_F16 || t->dtype == KVS_BF16);
    uint16_t *h = malloc((size_t)t->nel * 2 + 2);
    H_ASSERT(h != NULL);
    for (int64_t i = 0; i < t->nel; i++)
        h[i] = t->dtype == KVS_F16 ? ref_f16_bits(src[i]) : ref_bf16_bits(src[i]);
    t_upload(t, h);
    free(h);
}

void t_poison(tt *t) {
    poison_bytes(t->shadow + t->guard, t->nbytes, t->dtype);
    kvs_status s = kvs_tensor_upload(t->t, t->shadow + t->guard, 0, t->nbytes);
    H_ASSERT_MSG(s == KVS_OK, "[%s] poison: %s", g_case, kvs_last_error());
}

static unsigned char *download_parent(tt *t) {
    size_t total = t->nbytes + 2 * t->guard;
    unsigned char *buf = malloc(total);
    H_ASSERT(buf != NULL);
    kvs_status s = kvs_tensor_download(t->parent, buf, 0, total);
    H_ASSERT_MSG(s == KVS_OK, "[%s] download: %s", g_case, kvs_last_error());
    for (size_t i = 0; i < t->guard; i++) {
        if (buf[i] != t->shadow[i]) {
            size_t at = i;
            free(buf);
            ck_abort_msg("[%s] seed=%llu: write before the tensor start (guard byte -%zu changed)", g_case,
                         (unsigned long long)t_base_seed, t->guard - at);
        }
        size_t j = t->guard + t->nbytes + i;
        if (buf[j] != t->shadow[j]) {
            free(buf);
            ck_abort_msg("[%s] seed=%llu: write past the tensor end (guard byte +%zu changed)", g_case,
                         (unsigned long long)t_base_seed, i);
        }
    }
    return buf;
}

void t_download(tt *t, void *dst) {
    unsigned char *buf = download_parent(t);
    if (dst) memcpy(dst, buf + t->guard, t->nbytes);
    free(buf);
}

void t_assert_unchanged(tt *t, const char *what) {
    unsigned char *buf = download_parent(t);
    size_t bad = (size_t)-1;
    for (size_t i = 0; i < t->nbytes; i++)
        if (buf[t->guard + i] != t->shadow[t->guard + i]) {
            bad = i;
            break;
        }
    free(buf);
    T_ASSERT(bad == (size_t)-1, "input %s was modified by the op (byte %zu)", what, bad);
}

void t_download_f64(tt *t, double *dst) {
    unsigned char *buf = malloc(t->nbytes);
    H_ASSERT(buf != NULL);
    t_download(t, buf);
    for (int64_t i = 0; i < t->nel; i++) {
        switch (t->dtype) {
        case KVS_F32: dst[i] = ((float *)buf)[i]; break;
        case KVS_F16: dst[i] = ref_f16_to_f64(((uint16_t *)buf)[i]); break;
        case KVS_BF16: dst[i] = ref_bf16_to_f64(((uint16_t *)buf)[i]); break;
        case KVS_I32: dst[i] = ((int32_t *)buf)[i]; break;
        default: ck_abort_msg("t_download_f64: dtype");
        }
    }
    free(buf);
}

/* ---- comparisons ---- */

static int fclass(double x) { return isnan(x) ? 1 : isinf(x) ? (x > 0 ? 2 : 3) : 0; }
static const char *fclass_name(int c) {
    static const char *n[] = {"finite", "NaN", "+inf", "-inf"};
    return n[c];
}

static void check_classes(const char *what, const float *out, const double *ref, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        int co = fclass(out[i]), cr = fclass(ref[i]);
        T_ASSERT(co == cr, "%s[%lld]: got %s (%.9g), reference is %s (%.9g)", what, (long long)i, fclass_name(co),
                 (double)out[i], fclass_name(cr), ref[i]);
    }
}

double t_check_nmse(const char *what, const float *out, const double *ref, int64_t n, double tol) {
    check_classes(what, out, ref, n);
    double num = 0, den = 0, worst = -1;
    int64_t wi = -1;
    for (int64_t i = 0; i < n; i++) {
        if (fclass(ref[i])) continue;
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        if (fabs(d) > worst) {
            worst = fabs(d);
            wi = i;
        }
    }
    double nmse = den > 0 ? num / den : num;
    T_ASSERT(nmse <= tol, "%s: nmse %.3e > %.1e over %lld values; worst [%lld] got %.9g want %.9g", what, nmse, tol,
             (long long)n, (long long)wi, wi >= 0 ? (double)out[wi] : 0.0, wi >= 0 ? ref[wi] : 0.0);
    return nmse;
}

void t_check_close(const char *what, const float *out, const double *ref, int64_t n, double atol, double rtol) {
    check_classes(what, out, ref, n);
    for (int64_t i = 0; i < n; i++) {
        if (fclass(ref[i])) continue;
        double d = fabs((double)out[i] - ref[i]);
        T_ASSERT(d <= atol + rtol * fabs(ref[i]), "%s[%lld]: got %.9g want %.9g (|diff| %.3e > %.1e + %.1e*|ref|)",
                 what, (long long)i, (double)out[i], ref[i], d, atol, rtol);
    }
}

void t_check_exact_f32(const char *what, const float *out, const float *ref, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i]) && isnan(out[i])) continue;
        uint32_t a, b;
        memcpy(&a, &out[i], 4);
        memcpy(&b, &ref[i], 4);
        T_ASSERT(a == b, "%s[%lld]: got %.9g (0x%08x), want %.9g (0x%08x) exactly", what, (long long)i,
                 (double)out[i], a, (double)ref[i], b);
    }
}

void t_check_exact_i32(const char *what, const int32_t *out, const int32_t *ref, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        T_ASSERT(out[i] == ref[i], "%s[%lld]: got %d, want %d", what, (long long)i, out[i], ref[i]);
}

void t_check_bytes(const char *what, const void *out, const void *ref, size_t n) {
    const unsigned char *a = out, *b = ref;
    for (size_t i = 0; i < n; i++)
        T_ASSERT(a[i] == b[i], "%s: byte %zu differs (got 0x%02x, want 0x%02x)", what, i, a[i], b[i]);
}
