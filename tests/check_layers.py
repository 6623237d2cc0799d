#!/usr/bin/env python3
"""Fails on an include edge inside core/ (and among the public headers) that runs upward.

The rooms of core/ are ordered (issue 14): a file may include headers of its own room and of the
rooms below it, never of a room above. Order, lowest first:

  base (core/*.c|h: status, device, tensor, ops)  <  format  <  tokenizer  <  cache  <  model
  <  policy, schedule (same rank, but neither includes the other)  <  decode

Public headers (include/kvsieve/X.h) belong to the room that implements them (HEADER_ROOM below).
Checked edges: every #include "..." in core/**/*.c|h and in include/kvsieve/*.h.
Usage: check_layers.py SOURCE_ROOT   Exit 0: no upward edge; 1: prints each offending edge.
"""
import os
import re
import sys

RANK = {'base': 0, 'format': 1, 'tokenizer': 2, 'cache': 3, 'model': 4, 'policy': 5, 'schedule': 5, 'decode': 6}
HEADER_ROOM = {
    'version.h': 'base', 'export.h': 'base', 'status.h': 'base', 'device.h': 'base', 'tensor.h': 'base',
    'ops.h': 'base', 'kvsieve.h': 'decode',
    'gguf.h': 'format', 'model_file.h': 'format',
    'tokenizer.h': 'tokenizer',
    'cache.h': 'cache', 'latent.h': 'cache',
    'model.h': 'model',
    'policy.h': 'policy', 'learned.h': 'policy',
    'schedule.h': 'schedule',
    'generate.h': 'decode',
}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of_core(rel):
    """Room of a file given by its path relative to core/."""
    parts = rel.split('/')
    # core/quant/ (block formats of the quantized dtypes) is a folder of the base room
    return 'base' if len(parts) == 1 or parts[0] == 'quant' else parts[0]


def room_of_include(src_rel_core, inc):
    """Room of an included header, or None when it is not a kvsieve header (kvs_config.h, ...)."""
    if inc.startswith('kvsieve/'):
        return HEADER_ROOM.get(inc[len('kvsieve/'):], 'unknown:' + inc)
    first = inc.split('/')[0]
    if first == 'quant' and '/' in inc:
        return 'base'
    if first in RANK and '/' in inc:
        return first
    if inc == 'internal.h':
        return 'base'
    if src_rel_core is not None and '/' not in inc.replace('../', ''):
        # a header next to the source (or one folder up): the source's own room
        return room_of_core(os.path.normpath(os.path.join(os.path.dirname(src_rel_core), inc)))
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    bad = []
    checked = 0
    core = os.path.join(root, 'core')
    for d, _, files in os.walk(core):
        for f in sorted(files):
            if not f.endswith(('.c', '.h')):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, core)
            room = room_of_core(rel)
            if room not in RANK:
                bad.append('core/%s: unknown room %r (add it to RANK in %s)' % (rel, room, __file__))
                continue
            for inc in INC.findall(open(path, encoding='utf-8').read()):
                r = room_of_include(rel, inc)
                if r is None:
                    continue
                checked += 1
                if r not in RANK:
                    bad.append('core/%s: includes "%s" of no known room' % (rel, inc))
                elif RANK[r] > RANK[room] or (RANK[r] == RANK[room] and r != room):
                    bad.append('core/%s (%s) includes "%s" (%s): upward edge' % (rel, room, inc, r))
    inc_dir = os.path.join(root, 'include', 'kvsieve')
    for f in sorted(os.listdir(inc_dir)):
        if not f.endswith('.h'):
            continue
        room = HEADER_ROOM.get(f)
        if room is None:
            bad.append('include/kvsieve/%s: no room (add it to HEADER_ROOM in %s)' % (f, __file__))
            continue
        for inc in INC.findall(open(os.path.join(inc_dir, f), encoding='utf-8').read()):
            r = room_of_include(None, inc)
            if r is None:
                continue
            checked += 1
            if r not in RANK:
                bad.append('include/kvsieve/%s: includes "%s" of no known room' % (f, inc))
            elif f != 'kvsieve.h' and (RANK[r] > RANK[room] or (RANK[r] == RANK[room] and r != room)):
                bad.append('include/kvsieve/%s (%s) includes "%s" (%s): upward edge' % (f, room, inc, r))
    for b in bad:
        print(b)
    print('%d include edges checked, %d upward' % (checked, len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
