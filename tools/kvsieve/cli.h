/* kvsieve CLI — the small helpers every subcommand shares: option parsing, help text, device
 * opening, timing.
 *
 * Model files are found with kvs_model_locate() (CLI path, else $KVSIEVE_MODELS, else the
 * repository's models/, else ../shared/models next to the source tree).
 *
 * A subcommand is one function `int cmd_NAME(int argc, char **argv)` in its own cmd_NAME.c, listed
 * in cmds.h and in the table in main.c. argv[0] is the subcommand's name. It returns the process
 * exit status: 0 success, 1 a failure while running, 2 bad usage (unknown flag, bad value, a file
 * or backend that cannot be used), after printing one line "kvsieve NAME: ..." to stderr.
 *
 * Option parsing (cli_parse): a table of cli_opt describes the flags; "--name VALUE",
 * "--name=VALUE" and "-x VALUE" are accepted, "--" ends options, "--help"/"-h" prints the help
 * generated from the table. Anything not starting with '-' is a positional argument.
 */
#ifndef KVS_TOOLS_CLI_H
#define KVS_TOOLS_CLI_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvsieve/kvsieve.h"

/* "Not given" markers for option defaults: no value a user can type parses to these (numbers are
 * range-checked, doubles must be finite), so a default never hides a bad value such as -n -1. */
#define CLI_UNSET_INT INT32_MIN
#define CLI_UNSET_I64 INT64_MIN
#define CLI_UNSET_DBL NAN

/* Exit statuses shared by all subcommands. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

typedef enum cli_kind {
    CLI_FLAG,   /* no value; dest is int*, set to 1 */
    CLI_INT,    /* dest is int* */
    CLI_INT64,  /* dest is int64_t*; accepts k/M/G suffixes (x1024) */
    CLI_DOUBLE, /* dest is double* */
    CLI_STRING  /* dest is const char** (points into argv) */
} cli_kind;

typedef struct cli_opt {
    const char *name;    /* long name without dashes: "backend" */
    char short_name;     /* 'b', or 0 for none */
    cli_kind kind;
    void *dest;
    const char *metavar; /* shown in help: "B[:I]"; NULL for flags */
    const char *help;    /* one line; state the default */
} cli_opt;

typedef struct cli_spec {
    const char *prog;        /* "kvsieve bench ops" */
    const char *usage;       /* argument synopsis after prog: "[--json] [--backend B[:I]]" */
    const char *summary;     /* one or two lines of what the command does */
    const cli_opt *opts;
    int n_opts;
    int min_pos, max_pos;    /* allowed positional argument counts */
    const char *epilog;      /* optional text printed after the options (NULL: none) */
} cli_spec;

/* Parses argv[1..argc-1] against spec. Positional arguments are stored in pos[0..*n_pos-1]
 * (pos has room for spec->max_pos entries; may be NULL when max_pos is 0).
 * Returns -1 when the caller should continue, CLI_EXIT_OK after printing --help, or
 * CLI_EXIT_USAGE after printing a one-line error to stderr. */
int cli_parse(const cli_spec *spec, int argc, char **argv, char **pos, int *n_pos);

/* Prints "PROG: PATH: <kvs_last_error()>" (without PATH when the library's message names it
 * already) and returns code: for failures to open or load a model file. */
int cli_fail_file(int code, const char *prog, const char *path);

/* Prints the generated help for spec to stdout. */
void cli_help(const cli_spec *spec);

/* Prints "PROG: message\n" to stderr and returns code (for `return cli_fail(...)`). */
int cli_fail(int code, const char *prog, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Value parsers (strict: the whole string must parse). Return 0 on success, -1 otherwise. */
int cli_parse_int(const char *s, int *out);
int cli_parse_int64(const char *s, int64_t *out);  /* k/M/G suffixes multiply by 1024^1..3 */
int cli_parse_double(const char *s, double *out);
/* Comma-separated doubles "0.1,0.25,0.5" into out[0..max-1]; *n = count. -1 on a bad item or
 * more than max items. */
int cli_parse_double_list(const char *s, double *out, int max, int *n);

/* Opens the device named by spec ("cpu", "opencl:1", "vulkan"; NULL = "cpu") with n_threads
 * (0 = default). On failure prints one line naming the device and the library's message and
 * returns CLI_EXIT_USAGE for a backend that is not built or a device that does not exist, else
 * CLI_EXIT_FAIL. Returns CLI_EXIT_OK and sets *out on success. */
int cli_open_device(const char *prog, const char *spec, int n_threads, kvs_device **out);

/* Monotonic wall-clock seconds. */
double cli_now(void);
/* CPU time of the whole process (all threads), s: CLOCK_PROCESS_CPUTIME_ID; on a loaded machine it
 * tracks what the wall time would be unloaded. */
double cli_cpu_now(void);

/* Opens path (given by option FLAG) for reading if it is a regular file (fstat). CLI_EXIT_OK and
 * *out, or CLI_EXIT_USAGE after one line "PROG: FLAG PATH: is a directory, not a file" (or cannot
 * open: errno text; not a regular file). Every file a subcommand reads goes through this. */
int cli_open_regular(const char *prog, const char *flag, const char *path, FILE **out);

/* Reads the whole file at path (given by option FLAG) into a malloc'd buffer, NUL-terminated;
 * *len excludes the NUL. CLI_EXIT_OK, or CLI_EXIT_USAGE after one line "PROG: cannot open/read
 * FLAG PATH" (missing, unreadable, a directory). */
int cli_read_file(const char *prog, const char *flag, const char *path, char **buf, size_t *len);

/* Checks before a long run that `path` can be written (not a directory, nor any other existing
 * non-regular file: FIFO, device, symbolic link; its folder writable; a
 * file that did not exist is not left behind). CLI_EXIT_OK, or CLI_EXIT_USAGE after one line
 * "PROG: FLAG PATH: reason". */
int cli_check_writable(const char *prog, const char *flag, const char *path);

/* An output file built in memory and written to its path in one go, so that a write error (a full
 * disk: ENOSPC, a size limit: EFBIG) is reported with the errno of the write that failed: open
 * with cli_out_open (a memory stream, open_memstream), write *o->f with stdio, then cli_out_close,
 * which writes the bytes to path (created or truncated, mode 0666 & ~umask) and closes it.
 * cli_out_close returns 0 or the errno of the first failure (ENOMEM for the memory stream); a file
 * whose write failed is removed (a partial output is never left behind). */
typedef struct cli_out {
    FILE *f;
    char *buf;
    size_t len;
} cli_out;
int cli_out_open(cli_out *o);
int cli_out_close(cli_out *o, const char *path);
/* Writes len bytes of data to the file descriptor fd (retrying short writes and EINTR): 0 or the
 * errno of the write that failed. */
int cli_write_all(int fd, const void *data, size_t len);

#endif
