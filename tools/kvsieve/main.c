/* kvsieve — command-line tool: one executable, one subcommand per file (cmd_*.c). */
#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L /* setenv, execv */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

/* `kvsieve eval --dlm ...` evaluates diffusion cache schedules, `kvsieve eval ...` eviction policies. */
static int cmd_eval_any(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--dlm") == 0) return cmd_eval_dlm(argc, argv);
    return cmd_eval(argc, argv);
}

/* Subcommands in the order `kvsieve --help` lists them. */
static const command commands[] = {
    {"generate", cmd_generate, "generate text (autoregressive or masked diffusion) with a model"},
    {"devices", cmd_devices, "list backends and devices with their capabilities"},
    {"bench", cmd_bench, "time the ops (bench ops) or a random-weight model of a real shape (bench model) "
                         "against this machine's measured peaks"},
    {"eval", cmd_eval_any, "evaluate caches: eviction policies on a text (KL, top-1, perplexity, recall); "
                           "--dlm: diffusion cache schedules vs no cache (speedup, agreement)"},
    {"train", cmd_train, "train a learned KV eviction policy (retention, indexer, rl) into a GGUF side file"},
};

#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: kvsieve COMMAND [options]   (kvsieve COMMAND --help for its options)\n\n");
    fprintf(f, "kvsieve %s: KV-cache compression and diffusion-LLM caching on CPU, OpenCL and Vulkan.\n\n",
            kvs_version());
    fprintf(f, "commands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nenvironment:\n"
               "  KVSIEVE_MODELS          model directory searched first (then models/ and ../shared/models\n"
               "                          next to the source tree)\n"
               "  KVS_VULKAN_VALIDATION   1: run Vulkan with the validation layer, messages become errors\n"
               "  VK_DRIVER_FILES         pick a Vulkan driver (e.g. lavapipe's lvp_icd.x86_64.json)\n"
               "  POCL_CACHE_DIR          writable kernel cache directory for PoCL (OpenCL on CPU)\n"
               "  KVS_VARIANT             force kernel variants, e.g. attention:avx512-vnni,matmul:portable (an\n"
               "                          op named once; see `kvsieve devices` and README \"Picking a backend\")\n"
               "  OMP_WAIT_POLICY         idle OpenMP threads: passive (the default kvsieve sets when neither it\n"
               "                          nor GOMP_SPINCOUNT is set: threads sleep, right on a shared machine)\n"
               "                          or active (spin: lowest latency on cores kept for kvsieve)\n"
               "  OPENBLAS_NUM_THREADS    1 under a tight address-space limit (ulimit -v), where OpenBLAS's own\n"
               "                          threads can hang at exit\n");
}

/* The errno of the first write to standard output that failed (0: none). stdio keeps only a sticky
 * error flag, and a write that fails inside a printf or a mid-run fflush has its errno overwritten
 * long before the exit: standard output is therefore a stream (fopencookie, glibc) whose write
 * function records it. Elsewhere the plain stdout and the errno at the final flush. */
static int out_errno;

#ifdef __GLIBC__
static ssize_t out_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    const int e = cli_write_all(STDOUT_FILENO, buf, n);
    if (e) {
        if (!out_errno) out_errno = e;
        errno = e;
        return 0; /* fopencookie: 0 is the error */
    }
    return (ssize_t)n;
}

static void stdout_recording(void) {
    cookie_io_functions_t io = {.write = out_write};
    FILE *f = fopencookie(NULL, "w", io);
    if (!f) return;
    /* as the C library's stdout: line-buffered on a terminal, fully buffered otherwise */
    if (setvbuf(f, NULL, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ) != 0 || fflush(stdout) != 0) {
        fclose(f);
        return;
    }
    stdout = f;
}
#else
static void stdout_recording(void) {}
#endif

/* A command's output that could not be written (a full disk, a closed pipe's reader gone, /dev/full)
 * is a failure: exit 1 with one line naming standard output, the file behind it where /proc tells
 * (/proc/self/fd/1), and the reason (strerror of the failed write), never 0 with the result lost. */
static int output_checked(int rc) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        const int e = out_errno ? out_errno : errno;
        char target[512] = "";
        const ssize_t n = readlink("/proc/self/fd/1", target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        fprintf(stderr, "kvsieve: cannot write the output to standard output%s%s%s: %s\n", n > 0 ? " (" : "",
                target, n > 0 ? ")" : "", e ? strerror(e) : "write error");
        return rc == CLI_EXIT_OK ? CLI_EXIT_FAIL : rc;
    }
    return rc;
}

/* OpenMP's idle threads spin by default, and libgomp reads OMP_WAIT_POLICY when it loads, before
 * main: on a machine whose cores are busy with other work a spinning team made a 64-token
 * stories260K-llada decode take 16.6 s instead of 0.13-0.19 s (Intel Xeon, 2 cores, load 3). Unless
 * the user chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT set), the tool runs itself again once
 * with OMP_WAIT_POLICY=passive; if that exec fails it goes on with the default. */
static void omp_passive_by_default(char **argv) {
#ifdef __linux__
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
#else
    (void)argv;
#endif
}

int main(int argc, char **argv) {
    omp_passive_by_default(argv);
    stdout_recording();
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return output_checked(CLI_EXIT_OK);
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("kvsieve %s\nbackends built in:", kvs_version());
        for (int b = 0; b < KVS_BACKEND_COUNT; b++)
            if (kvs_backend_built((kvs_backend)b)) printf(" %s", kvs_backend_name((kvs_backend)b));
        printf("\n");
        return output_checked(CLI_EXIT_OK);
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return output_checked(commands[i].run(argc - 1, argv + 1));
    return cli_fail(CLI_EXIT_USAGE, "kvsieve", "unknown command '%s' (kvsieve --help lists them)", name);
}
