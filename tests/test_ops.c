/* test_ops: every op of include/kvsieve/ops.h on one backend, compared with the float64
 * references in reference.c. The same code runs on every backend:
 *
 *   test_ops [--backend cpu|opencl|vulkan[:INDEX]] [--threads N] [--suite NAME] [--tcase NAME] [--list]
 *
 * --threads (or $KVS_TEST_THREADS) sets the CPU backend's worker threads (default: all cores), so
 * the serial and odd-thread-count paths are tested too.
 * The backend defaults to $KVS_TEST_BACKEND, else cpu. $KVS_TEST_SEED sets the base seed (printed).
 * Exit status: 0 all run cases passed; 1 any failure; 77 (meson: SKIP) when the backend is not
 * compiled in, has no device at that index, or every case of the run was reported unsupported by
 * the device. Cases the device reports KVS_ERR_UNSUPPORTED for are counted and listed, never passed;
 * KVS_TEST_STRICT=1 turns any such skip into a failure (for a backend that claims completeness).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

typedef Suite *(*suite_fn)(void);
/* Each suite with the ops whose kernel variants it sweeps (comma-separated op names). */
static const struct {
    const char *name;
    suite_fn fn;
    const char *ops;
} all_suites[] = {
    {"tensor", suite_tensor, ""},
    {"matmul", suite_matmul, "matmul"},
    {"matmul-quant", suite_matmul_quant, "matmul,embedding"},
    {"elementwise", suite_elementwise, "add,copy,rmsnorm,swiglu,softmax,log_mass"},
    {"embedding", suite_embedding, "embedding"},
    {"rope", suite_rope, "rope"},
    {"attention", suite_attention, "attention"},
    {"attention-kvq", suite_attention_kvq, "attention,scatter"},
    {"dwt", suite_dwt, "dwt,idwt"},
    {"topk", suite_topk, "topk,topk_global"},
    {"topp", suite_topp, "topp"},
    {"rows", suite_rows, "gather,scatter,compact"},
};
static const char *const all_ops[] = {"matmul", "add", "copy", "rmsnorm", "swiglu", "softmax", "embedding", "rope",
                                      "attention", "dwt", "idwt", "topk", "topk_global", "topp", "gather", "scatter",
                                      "compact", "log_mass"};
#define N_SUITES (sizeof all_suites / sizeof all_suites[0])

static void usage(void) {
    fprintf(stderr, "usage: test_ops [--backend cpu|opencl|vulkan[:INDEX]] [--threads N] [--suite NAME] [--tcase NAME]\n"
                    "                [--variant OP:VARIANT,...|auto] [--list]\n"
                    "suites:");
    for (size_t i = 0; i < N_SUITES; i++) fprintf(stderr, " %s", all_suites[i].name);
    fprintf(stderr, "\n");
}

static void mkdir_p(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0777);
            *p = '/';
        }
    }
    mkdir(buf, 0777);
}

/* 1 when op is one of the comma-separated names in list. */
static int op_in(const char *list, const char *op) {
    size_t n = strlen(op);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, op, n)) return 1;
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}

static int run_suite[64];        /* suite index of each variant run (run 0: every selected suite) */
static char run_name[64][64];    /* the variant name of each run */

/* Environment defaults for the backend under test; never overrides what the caller set. */
static void setup_env(kvs_backend b) {
    setenv("CK_DEFAULT_TIMEOUT", b == KVS_BACKEND_CPU ? "300" : "900", 0);
    if (b == KVS_BACKEND_VULKAN) {
        const char *icd = getenv("KVS_TEST_VK_DEFAULT_ICD");
        if (!getenv("VK_DRIVER_FILES") && !getenv("VK_ICD_FILENAMES") && icd && icd[0] && access(icd, R_OK) == 0) {
            setenv("VK_DRIVER_FILES", icd, 1);
            printf("# VK_DRIVER_FILES unset: using %s\n", icd);
        }
    }
    if (b == KVS_BACKEND_OPENCL) {
        const char *cache = getenv("POCL_CACHE_DIR");
        if (cache && cache[0]) mkdir_p(cache);
    }
}

/* Opens and closes the device in a child process, so no driver state exists in this process
 * before Check forks (OpenCL/Vulkan objects do not survive fork). Returns 0 (usable), 77 (no such
 * device), 1 (device exists but failed to open). */
static int probe_device(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        int count = 0;
        kvs_status s = kvs_device_count(t_params.backend, &count);
        if (s != KVS_OK) {
            printf("# %s: cannot enumerate devices: %s\n", kvs_backend_name(t_params.backend), kvs_last_error());
            fflush(stdout);
            _exit(77);
        }
        if (t_params.index >= count) {
            printf("# %s: no device %d (%d found)\n", kvs_backend_name(t_params.backend), t_params.index, count);
            fflush(stdout);
            _exit(77);
        }
        kvs_device *dev = NULL;
        s = kvs_device_open(&dev, &t_params);
        if (s != KVS_OK) {
            printf("# %s device %d failed to open: %s: %s\n", kvs_backend_name(t_params.backend), t_params.index,
                   kvs_status_name(s), kvs_last_error());
            fflush(stdout);
            _exit(1);
        }
        const kvs_device_info *info = kvs_device_get_info(dev);
        const kvs_caps *c = kvs_device_caps(dev);
        printf("# device: %s:%d %s (%s; %s)\n# caps: fp16_storage=%d fp16_arith=%d bf16_storage=%d subgroup=%d "
               "shared_mem=%lld max_wg=%d max_buffer=%lld\n",
               kvs_backend_name(info->backend), info->index, info->name, info->vendor, info->driver, c->fp16_storage,
               c->fp16_arith, c->bf16_storage, c->subgroup_size, (long long)c->shared_mem_bytes,
               c->max_workgroup_size, (long long)c->max_buffer_bytes);
        /* the variants this device can run (the sweep) and those it cannot (reported as skipped) */
        t_counters *tc = t_counters_get();
        for (size_t o = 0; o < sizeof all_ops / sizeof all_ops[0]; o++)
            for (int i = 0; i < kvs_device_variant_count(dev, all_ops[o]); i++) {
                char spec[128], line[400];
                snprintf(spec, sizeof spec, "%s:%s", all_ops[o], kvs_device_variant_name(dev, all_ops[o], i));
                kvs_status vs = kvs_device_set_variants(dev, spec);
                char *list = vs == KVS_OK ? tc->variants : tc->variants_unusable;
                size_t cap = vs == KVS_OK ? sizeof tc->variants : sizeof tc->variants_unusable;
                if (vs == KVS_OK) snprintf(line, sizeof line, "%s\n", spec);
                else snprintf(line, sizeof line, "%s: %s\n", spec, kvs_last_error());
                if (strlen(list) + strlen(line) < cap) strcat(list, line);
            }
        fflush(stdout);
        kvs_device_destroy(&dev);
        _exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st)) return 1;
    return WEXITSTATUS(st);
}

int main(int argc, char **argv) {
    const char *spec = getenv("KVS_TEST_BACKEND");
    const char *suite = NULL, *tcase = NULL, *variant = NULL, *threads = getenv("KVS_TEST_THREADS");
    int list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--suite") && i + 1 < argc) suite = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = argv[++i];
        else if (!strcmp(argv[i], "--tcase") && i + 1 < argc) tcase = argv[++i];
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc) variant = argv[++i];
        else if (!strcmp(argv[i], "--list")) list = 1;
        else {
            usage();
            return 2;
        }
    }
    if (!spec || !spec[0]) spec = "cpu";
    t_params = kvs_device_params_default();
    if (kvs_device_params_parse(spec, &t_params) != KVS_OK) {
        fprintf(stderr, "test_ops: %s\n", kvs_last_error());
        usage();
        return 2;
    }
    if (threads && threads[0]) t_params.n_threads = atoi(threads);
    if (suite) {
        size_t i;
        for (i = 0; i < N_SUITES; i++)
            if (!strcmp(all_suites[i].name, suite)) break;
        if (i == N_SUITES) {
            fprintf(stderr, "test_ops: unknown suite '%s'\n", suite);
            usage();
            return 2;
        }
    }
    if (list) {
        for (size_t i = 0; i < N_SUITES; i++) printf("%s\n", all_suites[i].name);
        return 0;
    }
    const char *seed = getenv("KVS_TEST_SEED");
    if (seed && seed[0]) t_base_seed = strtoull(seed, NULL, 0);
    printf("# kvsieve %s test_ops backend=%s:%d threads=%d suite=%s seed=%llu (KVS_TEST_SEED=%llu reproduces)\n",
           kvs_version(), kvs_backend_name(t_params.backend), t_params.index, t_params.n_threads,
           suite ? suite : "all", (unsigned long long)t_base_seed, (unsigned long long)t_base_seed);

    if (!kvs_backend_built(t_params.backend)) {
        printf("# SKIP: backend '%s' is not compiled into this build\n", kvs_backend_name(t_params.backend));
        return 77;
    }
    setup_env(t_params.backend);
    t_counters_init();
    int probe = probe_device();
    if (probe == 77) {
        printf("# SKIP: no %s device %d on this machine\n", kvs_backend_name(t_params.backend), t_params.index);
        return 77;
    }
    if (probe != 0) {
        printf("# FAIL: the %s device exists but cannot be opened\n", kvs_backend_name(t_params.backend));
        return 1;
    }

    t_counters *c = t_counters_get();
    /* The runs: automatic variant choice first, then (checkasm-style) every variant the device can
     * run of each swept op, every case against the same float64 references. Variants of the
     * suite's ops with the same name run together ("topk:avx512,topk_global:avx512"). --variant
     * runs one spec only (to reproduce a failure). */
    char runs[64][256];
    int n_runs = 0;
    if (variant) {
        snprintf(runs[n_runs++], sizeof runs[0], "%s", strcmp(variant, "auto") ? variant : "");
    } else {
        runs[n_runs++][0] = '\0';
        for (size_t i = 0; i < N_SUITES; i++) {
            if (suite && strcmp(all_suites[i].name, suite)) continue;
            for (const char *l = c->variants; *l; l = strchr(l, '\n') + 1) {
                char op[64], name[64];
                if (sscanf(l, "%63[^:]:%63[^\n]", op, name) != 2) break;
                if (!op_in(all_suites[i].ops, op)) continue;
                /* a run of this suite with this variant name exists: add the op to it */
                int r;
                for (r = 1; r < n_runs; r++)
                    if (run_suite[r] == (int)i && !strcmp(run_name[r], name)) break;
                if (r == n_runs) {
                    if (n_runs == 64) break;
                    runs[r][0] = '\0';
                    run_suite[r] = (int)i;
                    snprintf(run_name[r], sizeof run_name[r], "%s", name);
                    n_runs++;
                }
                size_t used = strlen(runs[r]);
                snprintf(runs[r] + used, sizeof runs[r] - used, "%s%s:%s", used ? "," : "", op, name);
            }
        }
    }
    /* KVS_TEST_SWEEP_SKIP=suite[,suite]: those suites run the automatic choice only (the emulated and
     * sanitizer lanes of tools/test.sh, where a full sweep of the large suites costs tens of minutes;
     * the native lane sweeps everything) */
    const char *skip = getenv("KVS_TEST_SWEEP_SKIP");
    if (skip && suite && !variant && n_runs > 1) {
        size_t ls = strlen(suite);
        for (const char *p = strstr(skip, suite); p; p = strstr(p + 1, suite))
            if ((p == skip || p[-1] == ',') && (p[ls] == '\0' || p[ls] == ',')) {
                printf("# KVS_TEST_SWEEP_SKIP: suite %s runs the automatic variant choice only (%d variant runs left out)\n",
                       suite, n_runs - 1);
                n_runs = 1;
                break;
            }
    }
    if (c->variants_unusable[0]) printf("# variants this device cannot run (skipped, not passed):\n%s", c->variants_unusable);
    int failed = 0, ran = 0;
    for (int r = 0; r < n_runs; r++) {
        memcpy(t_variant, runs[r], sizeof t_variant);
        SRunner *sr = NULL;
        for (size_t i = 0; i < N_SUITES; i++) {
            if (suite && strcmp(all_suites[i].name, suite)) continue;
            if (r > 0 && !variant && run_suite[r] != (int)i) continue;
            if (!sr) sr = srunner_create(all_suites[i].fn());
            else srunner_add_suite(sr, all_suites[i].fn());
        }
        long before = c->cases_run;
        printf("# run %d/%d: variants %s\n", r + 1, n_runs, runs[r][0] ? runs[r] : "auto");
        fflush(stdout);
        srunner_run(sr, NULL, tcase, CK_NORMAL);
        failed += srunner_ntests_failed(sr);
        ran += srunner_ntests_run(sr);
        srunner_free(sr);
        printf("# run %d/%d: variants %s: %ld cases passed\n", r + 1, n_runs, runs[r][0] ? runs[r] : "auto",
               c->cases_run - before);
    }

    printf("# %s: %d Check tests, %d failed; %ld cases passed, %ld cases skipped as unsupported\n",
           kvs_backend_name(t_params.backend), ran, failed, c->cases_run, c->cases_skipped);
    if (c->cases_skipped) printf("# skipped cases:\n%s", c->skipped);
    if (failed) return 1;
    const char *strict = getenv("KVS_TEST_STRICT");
    if (c->cases_skipped && strict && strict[0] == '1') {
        printf("# FAIL: KVS_TEST_STRICT=1 and %ld cases were unsupported\n", c->cases_skipped);
        return 1;
    }
    if (c->cases_run == 0 && c->cases_skipped > 0) {
        printf("# SKIP: every case was unsupported on this device\n");
        return 77;
    }
    return 0;
}
