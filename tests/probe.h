/* Shared test-main helpers: the backend probe and the suite runner. OpenCL (PoCL) and Vulkan
 * drivers may start threads or take locks when first queried; a Check child forked after that can
 * deadlock. So the device count is read in a throw-away child process and the parent never touches
 * the driver. */
#ifndef KVS_TESTS_PROBE_H
#define KVS_TESTS_PROBE_H

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvsieve/kvsieve.h"

/* 1 if backend p->backend has a device p->index, else 0. */
static inline int kvs_test_backend_present(const kvs_device_params *p) {
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(kvs_device_count(p->backend, &n) == KVS_OK && n > p->index ? 0 : 1);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* The common start of a test main: parses `--backend B[:I]` into *p (other arguments are left to the
 * caller), skips when the backend has no such device, and, when `model` is not NULL, locates that
 * fixture (into path[cap] when path is not NULL) or skips. Returns -1 to go on, else the exit status:
 * 2 for a bad --backend, 77 for a skip (the reason printed). */
static inline int kvs_test_setup(int argc, char **argv, const char *prog, kvs_device_params *p, const char *model,
                                 char *path, size_t cap) {
    *p = kvs_device_params_default();
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--backend") == 0 && kvs_device_params_parse(argv[++i], p) != KVS_OK) {
            fprintf(stderr, "%s: %s\n", prog, kvs_last_error());
            return 2;
        }
    fflush(stdout);
    if (!kvs_test_backend_present(p)) {
        printf("SKIP: backend %s has no device %d\n", kvs_backend_name(p->backend), p->index);
        return 77;
    }
    char local[4096];
    if (model && kvs_model_locate(model, path ? path : local, path ? cap : sizeof local) != KVS_OK) {
        printf("SKIP: model fixture %s not found: %s\n", model, kvs_last_error());
        return 77;
    }
    return -1;
}

/* The directory holding the full fixture set (../shared/models next to the source tree, or
 * $KVSIEVE_MODELS): the GGUF v1, llama2.c, safetensors and vocab files that the repository's models/
 * does not bundle. Found through stories260K-f32.v1.gguf; writes the directory into dir[cap] and
 * returns 1, or returns 0 (a bare clone: the caller skips what needs them). */
static inline int kvs_test_full_fixtures(char *dir, size_t cap) {
    if (kvs_model_locate("stories260K-f32.v1.gguf", dir, cap) != KVS_OK) return 0;
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, cap, ".");
    else *slash = '\0';
    return 1;
}

/* The CPU attention's 8-bit kernels (backends/cpu/attention_q8.h: 8-bit query codes against a q8_0 /
 * q4_0 / q4_1 / qh8 K, 8-bit softmax weights against such a V) that variant spec ("op:variant,...",
 * KVS_VARIANT's syntax) runs on backend b: "avx512-vnni" or "avx2-q8" when it forces one of those
 * (or its -split); NULL when it forces another attention variant (avx512, avx2: the f32 query) or b
 * is not the CPU; with no attention entry (or attention:auto) the kernels the automatic choice takes
 * on this CPU (backends/cpu/cpu_kernels.h, kvs_cpu_att_q8: the VNNI ones where the CPU has
 * AVX512-VNNI, BW and VL, else the AVX2 ones where its ISA is AVX2, i.e. where it runs the variant
 * avx2 but not avx512; NULL on an AVX-512 CPU without VNNI and on aarch64), found by the variants a
 * CPU device of its own accepts (asked once per process). */
static inline const char *kvs_test_att_q8(kvs_backend b, const char *spec) {
    if (b != KVS_BACKEND_CPU) return NULL;
    if (spec && strstr(spec, "attention:avx512-vnni")) return "avx512-vnni";
    if (spec && strstr(spec, "attention:avx2-q8")) return "avx2-q8";
    if (spec && strstr(spec, "attention:") && !strstr(spec, "attention:auto")) return NULL;
    static int asked = 0;
    static const char *auto_q8 = NULL;
    if (!asked) {
        kvs_device_params p = kvs_device_params_default();
        p.n_threads = 1;
        kvs_device *dev = NULL;
        if (kvs_device_open(&dev, &p) == KVS_OK) {
            if (kvs_device_set_variants(dev, "attention:avx512-vnni") == KVS_OK)
                auto_q8 = "avx512-vnni";
            else if (kvs_device_set_variants(dev, "attention:avx512") != KVS_OK &&
                     kvs_device_set_variants(dev, "attention:avx2") == KVS_OK)
                auto_q8 = "avx2-q8";
            kvs_device_destroy(&dev);
        }
        kvs_clear_error();
        asked = 1;
    }
    return auto_q8;
}

/* Runs suite s (CK_NORMAL output) and returns the process status: 0 when every test passed. */
static inline int kvs_test_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#endif
