"""A rig-only sampling profiler for the processes of a probed run (validation/suite.py, ``_probe``).

Python imports this module at start-up when its folder is on PYTHONPATH; it does nothing unless
SUITE_PROBE_DIR is set. Each process (and each child forked from one) waits for the file
``probe-on`` in that folder, then samples every thread's Python stack every 10 ms for
SUITE_PROBE_S seconds (25) and writes ``probe-stacks-<pid>-<name>.txt``: one line per thread
and stack, ``thread;outermost;...;innermost COUNT``. A thread in C code without the GIL (a CUDA
synchronisation, a socket poll) shows the Python call that entered it. Needs no ptrace, which the
GPU machine's container may not allow.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

_DIR = os.environ.get("SUITE_PROBE_DIR")


def _frame(code: object) -> str:
    name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "?")
    path = getattr(code, "co_filename", "?")
    return f"{name} ({'/'.join(path.split('/')[-2:])}:{getattr(code, 'co_firstlineno', 0)})"


def _sample(folder: str) -> None:
    on = os.path.join(folder, "probe-on")
    while not os.path.exists(on):
        time.sleep(0.5)
    end = time.monotonic() + float(os.environ.get("SUITE_PROBE_S", "25"))
    me = threading.get_ident()
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    n = 0
    while time.monotonic() < end:
        names = {t.ident: t.name for t in threading.enumerate()}
        for tid, f in sys._current_frames().items():
            if tid == me:
                continue
            stack = []
            while f is not None:
                stack.append(_frame(f.f_code))
                f = f.f_back
            counts[(names.get(tid, str(tid)), ";".join(reversed(stack)))] += 1
        n += 1
        time.sleep(0.01)
    try:
        comm = open(f"/proc/{os.getpid()}/comm").read().strip()
    except OSError:
        comm = "?"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in comm)
    with open(os.path.join(folder, f"probe-stacks-{os.getpid()}-{safe}.txt"), "w") as out:
        out.write(f"# samples {n} argv {sys.argv[:4]}\n")
        for (thread, stack), c in counts.most_common():
            out.write(f"{thread};{stack} {c}\n")


def _start() -> None:
    if _DIR:
        threading.Thread(target=_sample, args=(_DIR,), daemon=True, name="suite-probe").start()


_start()
if _DIR:
    os.register_at_fork(after_in_child=_start)
