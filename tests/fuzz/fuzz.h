/* tests/fuzz: libFuzzer entry points for everything kvsieve reads from strangers, and their helpers.
 *
 * Each fuzz_*.c defines LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize). Built two ways
 * (meson option `fuzz`, see tests/fuzz/meson.build):
 *   libfuzzer: clang -fsanitize=fuzzer,address,undefined; run with tools/fuzz.sh
 *   replay:    any C compiler, linked with replay.c, which feeds every file of the committed corpora
 *              to the entry point once (meson test --suite fuzz; tools/test.sh runs it, also under
 *              ASan/UBSan in the sanitizer lane).
 * An entry point returns 0 for every input; a wrong result is reported with fuzz_fail(), which
 * prints and calls abort() so that libFuzzer (and the replay test) record a crash. */
#ifndef KVS_FUZZ_H
#define KVS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A private scratch directory of this process (created on first use under $TMPDIR or /dev/shm,
 * removed at exit). */
const char *fuzz_tmpdir(void);

/* Writes n bytes to fuzz_tmpdir()/name (replacing it) and returns its path (static buffer per
 * call site is NOT kept: copy it if needed). Aborts on an I/O error (a harness fault). */
const char *fuzz_write(const char *name, const void *data, size_t n);

/* Prints "fuzz: <message>" to stderr and aborts: a wrong result found by a target. */
void fuzz_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;

/* Little cursor over the input for targets that decode parameters from it. */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t n;
} fuzz_in;
/* Next byte (0 when exhausted), next 16-bit value, a value in [lo, hi]. */
uint8_t fuzz_u8(fuzz_in *in);
uint16_t fuzz_u16(fuzz_in *in);
int fuzz_range(fuzz_in *in, int lo, int hi);

#endif
