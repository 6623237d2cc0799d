/* kvsieve — command-line tool: one executable, one subcommand per file (cmd_*.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

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
               "  OPENBLAS_NUM_THREADS    1 under a tight address-space limit (ulimit -v), where OpenBLAS's own\n"
               "                          threads can hang at exit\n");
}

/* A command's output that could not be written (a full disk, a closed pipe's reader gone, /dev/full)
 * is a failure: exit 1 with the reason, never 0 with the result lost. */
static int output_checked(int rc) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        const int e = errno;
        fprintf(stderr, "kvsieve: writing the output failed%s%s\n", e ? ": " : "", e ? strerror(e) : "");
        return rc == CLI_EXIT_OK ? CLI_EXIT_FAIL : rc;
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("kvsieve %s\nbackends built in:", kvs_version());
        for (int b = 0; b < KVS_BACKEND_COUNT; b++)
            if (kvs_backend_built((kvs_backend)b)) printf(" %s", kvs_backend_name((kvs_backend)b));
        printf("\n");
        return CLI_EXIT_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return output_checked(commands[i].run(argc - 1, argv + 1));
    return cli_fail(CLI_EXIT_USAGE, "kvsieve", "unknown command '%s' (kvsieve --help lists them)", name);
}
