"""How long a test waits on a server of its own (the daemon's exporter, a stand-in, a real
Prometheus) before calling it hung.

A guard against a hang, not a bound on speed: a shared 2-core machine that is busy elsewhere
(a real vLLM server on the other worker, a CPU hog beside the suite) can stall a thread for
seconds, and a 5- or 10-second read timeout then fails a test whose server was only slow
(a fuzz run on CI read nothing for 10 s from a page that takes 20 ms idle, 90 ms beside a
2-core hog). What a test measures in seconds it measures elsewhere (scripts/bench.py).
"""

HANG_S = 60.0

# promtool's unit tests: a few seconds on an idle machine, past 60 s (the promtool twins) and
# past 120 s (a site's whole generated suite) beside a CPU hog on both cores (issue 33)
PROMTOOL_HANG_S = 600.0
