/* kvsieve CLI — shared helpers (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cli_fail(int code, const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cli_fail_file(int code, const char *prog, const char *path) {
    const char *err = kvs_last_error();
    if (path && !strstr(err, path)) return cli_fail(code, prog, "%s: %s", path, err);
    return cli_fail(code, prog, "%s", err);
}

int cli_parse_int(const char *s, int *out) {
    int64_t v;
    if (!s || cli_parse_int64(s, &v) != 0 || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_int64(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s) return -1;
    int64_t mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024, end++;
    else if (*end == 'M') mul = 1024 * 1024, end++;
    else if (*end == 'G') mul = (int64_t)1024 * 1024 * 1024, end++;
    if (*end != '\0') return -1;
    if (v > INT64_MAX / mul || v < INT64_MIN / mul) return -1;
    *out = (int64_t)v * mul;
    return 0;
}

int cli_parse_double(const char *s, double *out) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int cli_parse_double_list(const char *s, double *out, int max, int *n) {
    if (!s || !*s) return -1;
    *n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item || *n >= max) return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (cli_parse_double(item, &out[*n]) != 0) return -1;
        (*n)++;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static const cli_opt *find_long(const cli_spec *spec, const char *name, size_t len) {
    for (int i = 0; i < spec->n_opts; i++)
        if (strlen(spec->opts[i].name) == len && strncmp(spec->opts[i].name, name, len) == 0)
            return &spec->opts[i];
    return NULL;
}

static const cli_opt *find_short(const cli_spec *spec, char c) {
    for (int i = 0; i < spec->n_opts; i++)
        if (spec->opts[i].short_name && spec->opts[i].short_name == c) return &spec->opts[i];
    return NULL;
}

static int store(const cli_spec *spec, const cli_opt *o, const char *shown, const char *val) {
    int ok = 0;
    switch (o->kind) {
    case CLI_FLAG: *(int *)o->dest = 1; return 0;
    case CLI_INT: ok = cli_parse_int(val, (int *)o->dest) == 0; break;
    case CLI_INT64: ok = cli_parse_int64(val, (int64_t *)o->dest) == 0; break;
    case CLI_DOUBLE: ok = cli_parse_double(val, (double *)o->dest) == 0; break;
    case CLI_STRING: *(const char **)o->dest = val; return 0;
    }
    if (!ok) {
        const char *what = o->kind == CLI_DOUBLE ? "a number" : "an integer";
        cli_fail(CLI_EXIT_USAGE, spec->prog, "%s expects %s, got '%s'", shown, what, val);
        return -1;
    }
    return 0;
}

void cli_help(const cli_spec *spec) {
    printf("usage: %s %s\n", spec->prog, spec->usage ? spec->usage : "[options]");
    if (spec->summary) printf("\n%s\n", spec->summary);
    printf("\noptions:\n");
    for (int i = 0; i < spec->n_opts; i++) {
        const cli_opt *o = &spec->opts[i];
        char left[64];
        int n = 0;
        if (o->short_name) n = snprintf(left, sizeof left, "-%c, ", o->short_name);
        else n = snprintf(left, sizeof left, "    ");
        snprintf(left + n, sizeof left - (size_t)n, "--%s%s%s", o->name, o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        /* every flag states its default: the table's text, else "off" (a flag) / "none" */
        const char *h = o->help ? o->help : "";
        const char *dflt = strstr(h, "default") || strstr(h, "required") ? ""
                           : o->kind == CLI_FLAG ? " (default off)" : " (default: none)";
        printf("  %-26s %s%s\n", left, h, dflt);
    }
    printf("  %-26s %s\n", "-h, --help", "show this help and exit");
    if (spec->epilog) printf("\n%s\n", spec->epilog);
}

int cli_parse(const cli_spec *spec, int argc, char **argv, char **pos, int *n_pos) {
    int np = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == '\0') {
            if (np >= spec->max_pos)
                return cli_fail(CLI_EXIT_USAGE, spec->prog, "unexpected argument '%s' (see --help)", a);
            pos[np++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli_help(spec);
            return CLI_EXIT_OK;
        }
        const cli_opt *o = NULL;
        const char *inline_val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            o = find_long(spec, name, eq ? (size_t)(eq - name) : strlen(name));
            if (eq) inline_val = eq + 1;
        } else if (a[2] == '\0') {
            o = find_short(spec, a[1]);
        }
        if (!o) return cli_fail(CLI_EXIT_USAGE, spec->prog, "unknown option '%s' (see --help)", a);
        const char *val = NULL;
        if (o->kind == CLI_FLAG) {
            if (inline_val)
                return cli_fail(CLI_EXIT_USAGE, spec->prog, "option --%s takes no value", o->name);
        } else if (inline_val) {
            val = inline_val;
        } else {
            if (i + 1 >= argc)
                return cli_fail(CLI_EXIT_USAGE, spec->prog, "option %s needs a value (%s)", a,
                                o->metavar ? o->metavar : "VALUE");
            val = argv[++i];
            /* `--tasks --help`: the user asked for help, not for a file named --help (an inline
             * --tasks=--help still passes it as the value) */
            if (strcmp(val, "--help") == 0) {
                cli_help(spec);
                return CLI_EXIT_OK;
            }
        }
        if (store(spec, o, a, val) != 0) return CLI_EXIT_USAGE;
    }
    if (np < spec->min_pos)
        return cli_fail(CLI_EXIT_USAGE, spec->prog, "missing argument (usage: %s %s)", spec->prog,
                        spec->usage ? spec->usage : "");
    if (n_pos) *n_pos = np;
    return -1;
}

int cli_open_device(const char *prog, const char *spec, int n_threads, kvs_device **out) {
    *out = NULL;
    kvs_device_params p = kvs_device_params_default();
    if (!spec) spec = "cpu";
    if (kvs_device_params_parse(spec, &p) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "--backend: %s", kvs_last_error());
    p.n_threads = n_threads;
    if (n_threads < 0 || n_threads > KVS_MAX_THREADS)
        return cli_fail(CLI_EXIT_USAGE, prog, "--threads %d: want 0 (all online cores) .. %d", n_threads, KVS_MAX_THREADS);
    /* more threads than cores: allowed (a user may mean it), but each OpenMP region then waits for
     * descheduled threads; say so */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (p.backend == KVS_BACKEND_CPU && online > 0 && n_threads > online)
        fprintf(stderr, "%s: note: --threads %d is more than this machine's %ld online cores (slower, not faster)\n",
                prog, n_threads, online);
    kvs_status s = kvs_device_open(out, &p);
    if (s != KVS_OK) {
        /* what the user asked for does not exist here (a backend, a device, a KVS_VARIANT the device
         * cannot run): a usage error, as a missing device */
        int code = (s == KVS_ERR_BACKEND_NOT_BUILT || s == KVS_ERR_NO_DEVICE || s == KVS_ERR_INVALID_ARGUMENT ||
                    s == KVS_ERR_UNSUPPORTED)
                       ? CLI_EXIT_USAGE
                       : CLI_EXIT_FAIL;
        return cli_fail(code, prog, "cannot open device '%s': %s (%s)", spec, kvs_last_error(),
                        kvs_status_name(s));
    }
    return CLI_EXIT_OK;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cli_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_check_writable(const char *prog, const char *flag, const char *path) {
    struct stat sb;
    int existed = lstat(path, &sb) == 0;
    if (existed && S_ISDIR(sb.st_mode)) return cli_fail(CLI_EXIT_USAGE, prog, "%s %s: is a directory", flag, path);
    /* a FIFO would block the open, and the outputs are replaced by a rename: a device node or a
     * symbolic link there would be replaced by a file */
    if (existed && S_ISLNK(sb.st_mode))
        return cli_fail(CLI_EXIT_USAGE, prog, "%s %s: is a symbolic link: outputs are written to a new file renamed over "
                        "the path, which would replace the link, not write its target; give the target's path", flag, path);
    if (existed && !S_ISREG(sb.st_mode))
        return cli_fail(CLI_EXIT_USAGE, prog, "%s %s: not a regular file (a FIFO or device); give a file path",
                        flag, path);
    FILE *f = fopen(path, "ab");
    if (!f) return cli_fail(CLI_EXIT_USAGE, prog, "%s %s: cannot write: %s", flag, path, strerror(errno));
    fclose(f);
    if (!existed) remove(path);
    return CLI_EXIT_OK;
}

int cli_write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        const ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno ? errno : EIO;
        }
        if (w == 0) return EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int cli_out_open(cli_out *o) {
    o->buf = NULL;
    o->len = 0;
    o->f = open_memstream(&o->buf, &o->len);
    return o->f ? 0 : (errno ? errno : ENOMEM);
}

int cli_out_close(cli_out *o, const char *path) {
    int e = 0;
    if (!o->f) return ENOMEM;
    if (ferror(o->f)) e = ENOMEM;
    if (fclose(o->f) != 0 && !e) e = errno ? errno : ENOMEM;
    o->f = NULL;
    if (!e) {
        const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) {
            e = errno;
        } else {
            e = cli_write_all(fd, o->buf, o->len);
            if (close(fd) != 0 && !e) e = errno; /* NFS and some file systems report ENOSPC here */
            if (e) remove(path); /* no truncated file left behind */
        }
    }
    free(o->buf);
    o->buf = NULL;
    o->len = 0;
    return e;
}

int cli_open_regular(const char *prog, const char *flag, const char *path, FILE **out) {
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO without a writer must not hang (no effect on regular files) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return cli_fail(CLI_EXIT_USAGE, prog, "cannot open %s %s: %s", flag, path, strerror(errno));
    /* only regular files: ftell on a directory gives LONG_MAX (a 2^63-byte malloc), fgets fails */
    struct stat sb;
    FILE *f = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || !(f = fdopen(fd, "rb"))) {
        int dir = S_ISDIR(sb.st_mode);
        if (f) fclose(f); else close(fd);
        return cli_fail(CLI_EXIT_USAGE, prog, "%s %s: %s", flag, path, dir ? "is a directory, not a file" : "not a regular file");
    }
    *out = f;
    return CLI_EXIT_OK;
}

int cli_read_file(const char *prog, const char *flag, const char *path, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f;
    int rc = cli_open_regular(prog, flag, path, &f);
    if (rc != CLI_EXIT_OK) return rc;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *b = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return cli_fail(CLI_EXIT_USAGE, prog, "cannot read %s %s (not a readable file)", flag, path);
    }
    fclose(f);
    b[n] = '\0';
    *buf = b;
    *len = (size_t)n;
    return CLI_EXIT_OK;
}
