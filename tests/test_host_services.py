"""Issue 23, class 6: the tests are independent of the host's services. Hosts that run this
project often run Debian's ``prometheus`` and ``prometheus-alertmanager`` services on their
default ports (9090; 9093 and the cluster port 9094): the tests' own Prometheus and Alertmanager
(tests/promstack.py builds every command line that starts either) must run beside them.

The host's services are stood in for by listening sockets on those ports (a test must neither
start nor stop the host's own services); a port something else already holds counts as held.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import requests

from tests import promstack
from tests.hang import HANG_S

HOST_PORTS = (9090, 9093, 9094)


@contextmanager
def _held(port: int) -> Iterator[None]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("0.0.0.0", port))
        s.listen(1)
    except OSError as e:
        s.close()
        assert e.errno == errno.EADDRINUSE, e
        yield  # already held by something on this host: as good
        return
    try:
        yield
    finally:
        s.close()


def test_the_tests_prometheus_and_alertmanager_run_beside_the_hosts_own(tmp_path: Path) -> None:
    with ExitStack() as stack:
        for port in HOST_PORTS:
            stack.enter_context(_held(port))
        (tmp_path / "p").mkdir()
        (tmp_path / "a").mkdir()
        with promstack.prometheus(tmp_path / "p", {}) as (url, _):
            assert not url.endswith(":9090")
            r = requests.get(f"{url}/api/v1/status/flags", timeout=HANG_S).json()["data"]
            assert r["config.file"].startswith(str(tmp_path))
            assert r["storage.tsdb.path"].startswith(str(tmp_path))
            assert promstack.query(url, "vector(1)")[0]["value"][1] == "1"
            am_cfg = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}
            with promstack.alertmanager(tmp_path / "a", am_cfg) as (hostport, _):
                assert hostport.rsplit(":", 1)[1] not in {str(p) for p in HOST_PORTS}
                status = requests.get(f"http://{hostport}/api/v2/status", timeout=HANG_S).json()
                assert status["cluster"]["status"] == "disabled"
