/* Plain-C driver for the fuzz targets without libFuzzer (meson -Dfuzz=replay): every argument is a
 * file, or a directory whose regular files (not recursive) are replayed in name order, each passed
 * once to LLVMFuzzerTestOneInput. Prints how many inputs ran; exits 1 when an argument cannot be
 * read or holds no input, 0 otherwise (a failing input aborts inside the target, as under
 * libFuzzer). Usage: fuzz_gguf-replay tests/data/fuzz/corpus/gguf [more files or dirs] */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#if defined(__GNUC__)
__attribute__((weak))
#endif
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        fprintf(stderr, "replay: %s is not a regular file\n", path);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fclose(f);
        free(buf);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    long ran = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            bad = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) == 0) ran++;
            else bad = 1;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "replay: cannot open directory %s: %s\n", argv[i], strerror(errno));
            bad = 1;
            continue;
        }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **nn = realloc(names, cap * sizeof *nn);
                if (!nn) abort();
                names = nn;
            }
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            if (!names[n]) abort();
            snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp_str);
        size_t here = 0;
        for (size_t j = 0; j < n; j++) {
            if (stat(names[j], &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(names[j]) == 0) ran++, here++;
                else bad = 1;
            }
            free(names[j]);
        }
        free(names);
        if (here == 0) {
            fprintf(stderr, "replay: %s holds no input\n", argv[i]);
            bad = 1;
        }
    }
    printf("replay: %ld inputs ran without a failure\n", ran);
    return bad ? 1 : 0;
}
