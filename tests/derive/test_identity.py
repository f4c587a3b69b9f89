"""advisor/identity.py: telling a restart from a load balancer that alternates replicas (pure)."""

from __future__ import annotations

from advisor.derive.identity import Identity, ServerTracker, of_page

A = Identity(100.0, "m", "blocks=1")
B = Identity(200.0, "m", "blocks=1")
C = Identity(300.0, "m", "blocks=2")


def feed(tr: ServerTracker, seq: list[Identity | None]) -> list[bool]:
    return [tr.observe(x, float(i)) for i, x in enumerate(seq)]


def test_restarts_move_forward_and_are_followed() -> None:
    tr = ServerTracker()
    assert feed(tr, [A, A, B, B, C]) == [True] * 5
    assert not tr.several and tr.current == C and tr.switched_at == 4.0


def test_going_back_in_start_time_is_another_server() -> None:
    tr = ServerTracker()
    assert feed(tr, [B, A]) == [True, False]
    assert tr.several and tr.current == B


def test_coming_back_to_an_identity_seen_before_is_another_server() -> None:
    tr = ServerTracker()
    assert feed(tr, [A, B, A, B]) == [True, True, False, True]
    assert tr.several and tr.current == B and tr.switched_at == 1.0
    assert not tr.settled()


def test_several_clears_once_one_server_answers_alone() -> None:
    tr = ServerTracker(settle=3)
    feed(tr, [A, B, A])
    assert tr.several
    assert feed(tr, [A, A, A])[-1] is True  # only A now (B scaled away): follow A
    assert not tr.several and tr.current == A


def test_pages_without_identity_are_fed_and_change_nothing() -> None:
    tr = ServerTracker()
    assert feed(tr, [None, A, None, A]) == [True] * 4
    assert tr.settled()
    assert feed(tr, [B, None]) == [True, True]  # a restart, then pages without a start time
    assert not tr.settled()
    assert feed(tr, [None]) == [True]
    assert tr.settled()  # they count as the followed server's: the ledger is not held forever


def test_identity_of_a_page() -> None:
    page = (
        "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.79599261254e+09\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="3072"} 1.0\n'
        'vllm:num_requests_running{engine="0",model_name="llama"} 0.0\n'
    )
    ident = of_page(page)
    assert ident == Identity(1.79599261254e09, "llama", 'block_size="16",num_gpu_blocks="3072"')
    assert of_page("vllm:num_requests_running 0\n") is None
    assert of_page("process_start_time_seconds " + "9" * 5000 + "\n") is None  # not a start time


def test_counters_going_back_and_forth_between_two_lines_are_two_engines_not_a_restart() -> None:
    """F25: pages without a start time. Two engines taking turns (busy, or idle at two values):
    named after two returns onto the line left the page before; the followed engine's pages
    are fed, the other's not. A restart (down once, then rising past the old value) is not."""
    for a, b in (
        ([100.0 * i for i in range(1, 9)], [5000.0 + 50 * i for i in range(1, 9)]),
        ([7.0] * 8, [9.0] * 8),
    ):
        tr = ServerTracker()
        seen = [
            tr.observe(None, float(i), v)
            for i, v in enumerate(x for pair in zip(a, b, strict=True) for x in pair)
        ]
        assert tr.several and tr.reason.startswith("two engines behind one URL")
        assert seen[-4:] in ([True, False, True, False], [False, True, False, True])
    tr = ServerTracker()
    for i, v in enumerate([100.0, 200.0, 300.0, 5.0, 60.0, 150.0, 250.0, 350.0, 450.0, 600.0]):
        assert tr.observe(None, float(i), v) is True
    assert not tr.several


def test_a_dip_on_one_page_now_and_then_is_not_two_engines() -> None:
    """*(guard)* F25: a counter read low on one page (a bad reading), twice, 20 pages apart:
    each is one return, never two engines."""
    tr = ServerTracker()
    values = [100.0 * i for i in range(1, 41)]
    values[10] /= 2
    values[30] /= 2
    assert all(tr.observe(None, float(i), v) for i, v in enumerate(values))
    assert not tr.several
