/* kvsieve bench ops: times the ops on one device and prints each rate next to the machine's own
 * measured peak on that device, as a ratio.
 *
 * Peaks (measured first, on the chosen device):
 *   compute   one large SGEMM through kvs_matmul (CPU: OpenBLAS), GFLOP/s = 2 m n k / s;
 *   bandwidth CPU: memcpy of a large buffer (single- and multi-threaded, the better one);
 *             GPU backends: kvs_copy f32 -> f32 of a large tensor (kvs_gather if copy is
 *             unsupported); GB/s = (bytes read + bytes written) / s.
 * Rates: compute-bound ops in GFLOP/s (attention: 4 n_q n_kv d n_heads, halved when causal);
 * memory-bound ops in GB/s counting each input read once and each output written once.
 * Timing: one warm-up call (first-use kernel compiles), then `reps` samples of `inner` calls each
 * (inner chosen so a sample lasts at least a few ms), kvs_device_sync before each stop; the median
 * sample is reported. A per-case time budget (--max-seconds) bounds slow devices: fewer samples
 * when calls are long, the warm-up call alone when it exceeds three budgets (marked), and the
 * larger attention sizes of a series are skipped once a smaller one exceeded it. Ops a device does not implement show "unsupported"; the bench still succeeds.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cmds.h"
#include "opts_common.h"

static int bench_ops(int argc, char **argv) {
    bench b = {.rng = 0x9e3779b97f4a7c15ull, .budget_s = CLI_UNSET_DBL};
    int reps = CLI_UNSET_INT;
    cache_type_opts ct = {0};
    const cli_opt opts[] = {
        {"backend", 'b', CLI_STRING, &b.spec, "B[:I]", "device to run on: cpu, opencl, vulkan, with index (default cpu)"},
        {"json", 0, CLI_FLAG, &b.json, NULL, "print one JSON object on stdout instead of the table"},
        {"quick", 'q', CLI_FLAG, &b.quick, NULL, "small sizes: finishes in seconds"},
        {"filter", 'f', CLI_STRING, &b.filter, "TEXT", "only cases whose \"op shape\" contains TEXT (peaks still run)"},
        {"reps", 'r', CLI_INT, &reps, "N", "timed samples per case, median reported (default 5)"},
        {"threads", 't', CLI_INT, &b.threads, "N", "CPU worker threads (default: all online cores)"},
        {"max-seconds", 0, CLI_DOUBLE, &b.budget_s, "S", "time budget per case, bounds slow devices (default 10; quick 2)"},
        CACHE_TYPE_OPTS(ct),
    };
    const cli_spec spec = {
        .prog = "kvsieve bench ops",
        .usage = "[--backend B[:I]] [--json] [--quick] [--filter TEXT]",
        .summary = "Measures this device's peaks (a large SGEMM through kvs_matmul; a large memcpy on the\n"
                   "CPU or a device copy on a GPU), then times matmul, attention, dwt, top-k and\n"
                   "gather/scatter/compact and prints each as GFLOP/s or GB/s with its ratio to the peak.",
        .opts = opts,
        .n_opts = (int)(sizeof opts / sizeof opts[0]),
        .epilog = "Attention counts 4*n_q*n_kv*d*heads flops (half when causal); memory-bound ops count\n"
                  "each input read once and each output written once. Ops the device does not implement\n"
                  "are listed as \"unsupported\".",
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (reps != CLI_UNSET_INT && (reps < 1 || reps > MAX_REPS))
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--reps must be in 1..%d", MAX_REPS);
    if (b.threads < 0) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--threads must be >= 1");
    rc = cli_cache_types(spec.prog, &ct, b.kv_types);
    if (rc != CLI_EXIT_OK) return rc;
    if (!isnan(b.budget_s) && !(b.budget_s > 0)) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--max-seconds must be > 0");
    if (isnan(b.budget_s)) b.budget_s = b.quick ? 2.0 : 10.0;
    b.reps = reps != CLI_UNSET_INT ? reps : 5;
    b.min_sample_s = b.quick ? 2e-3 : 5e-3;
    rc = cli_open_device(spec.prog, b.spec, b.threads, &b.dev);
    if (rc != CLI_EXIT_OK) return rc;
    if (b.filter && *b.filter) {
        /* a filter that selects no case is refused before the peaks take their seconds */
        const int json = b.json;
        b.list_only = 1, b.json = 1;
        bench_run_suite(&b);
        b.list_only = 0, b.json = json;
        if (b.n_rows == 0) {
            char ops[512] = "";
            for (int i = 0; i < b.n_ops; i++)
                snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s%s", i ? ", " : "", b.ops[i]);
            kvs_device_destroy(&b.dev);
            return cli_fail(CLI_EXIT_USAGE, spec.prog, "--filter '%s' matches no case%s (a case is \"op shape\", e.g. "
                            "\"gemv m=4096 k=4096 n=1 W q4_0\"; ops: %s)", b.filter, b.quick ? " of --quick" : "", ops);
        }
        b.n_rows = 0;
    }

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
        printf("kvsieve %s bench ops on %s:%d  %s", kvs_version(), kvs_backend_name(info->backend), info->index,
               info->name);
        if (caps->n_threads) printf("  (%d thread%s)", caps->n_threads, caps->n_threads == 1 ? "" : "s");
        printf("\n%s%s", date, b.quick ? "  --quick" : "");
        if (load >= 0) printf("  load average %.2f%s", load, load > 0.5 ? " (other work running: figures may be low)" : "");
        printf("\n");
        fflush(stdout);
    }
    /* peaks: more samples than the cases, since every ratio depends on them */
    int case_reps = b.reps;
    b.reps = b.reps > 9 ? b.reps : 9;
    bench_peak_gemm(&b, b.quick ? 512 : 2048);
    bench_peak_bandwidth(&b, (size_t)(b.quick ? 64 : 256) << 20);
    b.reps = case_reps;
    if (!b.json) {
        if (b.gemm.valid) printf("peak compute   %8.1f GFLOP/s  %s (%s)\n", b.gemm.rate, b.gemm.what, b.gemm.method);
        else printf("peak compute        -            %s\n", b.gemm.method);
        if (b.bw.valid) printf("peak bandwidth %8.1f GB/s     copy %s (%s)\n", b.bw.rate, b.bw.what, b.bw.method);
        else printf("peak bandwidth      -            %s\n", b.bw.method);
        fflush(stdout);
    }
    bench_run_suite(&b);
    if (b.json) bench_print_json(&b, date, load);
    kvs_device_destroy(&b.dev);
    if (b.n_errors) {
        fprintf(stderr, "kvsieve bench ops: %d case%s failed\n", b.n_errors, b.n_errors == 1 ? "" : "s");
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

int cmd_bench(int argc, char **argv) {
    static const char *const usage = "usage: kvsieve bench ops|model [options]   (kvsieve bench ops --help)\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        printf("\nsuites:\n  ops     time the kvsieve ops against this device's measured peaks\n"
               "  model   a random-weight model of a real shape: prefill, decode, diffusion step, GEMV/GEMM\n");
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "ops") == 0) return bench_ops(argc - 1, argv + 1);
    if (strcmp(argv[1], "model") == 0) return bench_model(argc - 1, argv + 1);
    return cli_fail(CLI_EXIT_USAGE, "kvsieve bench", "unknown suite '%s' (expected: ops, model)", argv[1]);
}
