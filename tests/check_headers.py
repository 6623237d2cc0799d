#!/usr/bin/env python3
"""Compiles every public header alone: check_headers.py INCLUDE_DIR WORK_DIR CC [CC_ARGS...]

For each include/kvsieve/*.h (globbed when the test runs, so headers added later are covered) it
writes a one-line .c file that includes only that header and compiles it with
-std=c11 -Wall -Wextra -Wpedantic -Werror. Exit 1 if any header fails, printing the compiler output."""
import glob
import os
import subprocess
import sys


def main():
    inc, work, cc = sys.argv[1], sys.argv[2], sys.argv[3:]
    headers = sorted(glob.glob(os.path.join(inc, "kvsieve", "*.h")))
    if not headers:
        print("no headers found under", inc)
        return 1
    os.makedirs(work, exist_ok=True)
    failed = 0
    for h in headers:
        name = os.path.basename(h)
        src = os.path.join(work, "hdr_" + name.replace(".", "_") + ".c")
        with open(src, "w") as f:
            # the header alone, then a use of nothing: it must be self-contained and warning-free
            f.write('#include "kvsieve/%s"\nint kvs_header_check_%s;\n' % (name, name.replace(".", "_")))
        cmd = cc + ["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-I", inc, "-c", src,
                    "-o", src + ".o"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        status = "ok" if r.returncode == 0 else "FAILED"
        print("%-12s %s" % (name, status))
        if r.returncode != 0:
            failed += 1
            print(" ".join(cmd))
            print(r.stdout)
    print("%d headers, %d failed" % (len(headers), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
