/* Helpers shared by the fuzz targets (see fuzz.h). */
#include "fuzz.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[512];
static char g_path[640];

static void rm_tmpdir(void) {
    if (!g_dir[0]) return;
    char cmd[700];
    /* only files this process wrote live there (flat directory) */
    static const char *names[] = {"model.bin", "model.gguf", "config.json", "model.safetensors", "tok.bin",
                                  "policy.gguf", "tasks.txt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/%s", g_dir, names[i]);
        unlink(cmd);
    }
    rmdir(g_dir);
}

const char *fuzz_tmpdir(void) {
    if (g_dir[0]) return g_dir;
    const char *base = getenv("TMPDIR");
    struct stat st;
    if (!base || !base[0]) base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/kvsieve-fuzz.XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "fuzz: cannot create a scratch directory in %s: %s\n", base, strerror(errno));
        abort();
    }
    atexit(rm_tmpdir);
    return g_dir;
}

const char *fuzz_write(const char *name, const void *data, size_t n) {
    snprintf(g_path, sizeof g_path, "%s/%s", fuzz_tmpdir(), name);
    int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", g_path, strerror(errno));
        abort();
    }
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fprintf(stderr, "fuzz: cannot write %s: %s\n", g_path, strerror(errno));
            abort();
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
    return g_path;
}

void fuzz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

uint8_t fuzz_u8(fuzz_in *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

uint16_t fuzz_u16(fuzz_in *in) {
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

int fuzz_range(fuzz_in *in, int lo, int hi) {
    if (hi <= lo) return lo;
    unsigned span = (unsigned)(hi - lo) + 1u;
    return lo + (int)(fuzz_u16(in) % span);
}
