# Nothing of @improv/extfn: numpy np.hypot over 10^6 rows (x, y and out, 8 MB
# each) right after S seconds idle, on memory of three kinds in turn: shared
# (an anonymous MAP_SHARED map, as /dev/shm), private 4 KiB pages
# (MADV_NOHUGEPAGE), private 2 MiB pages (MADV_HUGEPAGE). Prints min / median
# / max over ROUNDS rounds, and the median of a second call right after.
# Run: /usr/bin/python3 bench/peers/machine/idle-pages.py [S=2] [ROUNDS=8]
import ctypes
import mmap
import statistics
import sys
import time

import numpy as np

N = 1_000_000
HUGE = 2 << 20
KINDS = ['shared', '4 KiB', '2 MiB']


def arrays(kind):
    span = -(-N * 8 // HUGE) * HUGE
    flags = (mmap.MAP_SHARED if kind == 'shared' else mmap.MAP_PRIVATE) | mmap.MAP_ANONYMOUS
    m = mmap.mmap(-1, 3 * span + HUGE, flags=flags)
    start = (-ctypes.addressof(ctypes.c_char.from_buffer(m))) % HUGE
    if kind != 'shared':
        m.madvise(mmap.MADV_HUGEPAGE if kind == '2 MiB' else mmap.MADV_NOHUGEPAGE, start, 3 * span)
    x, y, out = (np.frombuffer(m, dtype=np.float64, count=N, offset=start + k * span) for k in range(3))
    x[:] = np.arange(N) * 0.5
    y[:] = np.arange(N) * 0.25
    out[:] = 0
    return m, x, y, out


def timed(kind):
    _, x, y, out = sets[kind]
    t0 = time.perf_counter()
    np.hypot(x, y, out=out)
    return (time.perf_counter() - t0) * 1e3


idle = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
sets = {kind: arrays(kind) for kind in KINDS}
for kind in KINDS:
    for _ in range(5):
        timed(kind)
after = {kind: [] for kind in KINDS}
again = {kind: [] for kind in KINDS}
for r in range(rounds):
    for kind in KINDS[r % 3:] + KINDS[:r % 3]:
        time.sleep(idle)
        after[kind].append(timed(kind))
        again[kind].append(timed(kind))
for kind in KINDS:
    v = sorted(after[kind])
    print('%-6s after %.1f s idle: min %.1f, median %.1f, max %.1f ms; right after: median %.1f ms'
          % (kind, idle, v[0], statistics.median(v), v[-1], statistics.median(again[kind])))
