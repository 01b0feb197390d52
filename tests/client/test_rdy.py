"""RdyController (nsq/client/rdy.py), sans-IO: RDY distribution and backoff.

Each rule of https://nsq.io/clients/building_client_libraries.html
("RDY State", "Backoff") as go-nsq's consumer.go applies it, with the
exact RDY commands expected, then a Hypothesis state machine checking the
invariants after every event of arbitrary sequences.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nsq.client.rdy import RdyController


def ctl(max_in_flight: int, seed: int = 1, **kw) -> RdyController:
    return RdyController(max_in_flight, rng=random.Random(seed), **kw)


def at_share(c: RdyController, keys, now: float = 0.0) -> None:
    """Add ``keys`` and deliver one message on each so they leave RDY 1."""
    for k in keys:
        c.add(k, None, now)
    for k in keys:
        c.message(k, now)


def rdys(c: RdyController) -> dict:
    return {k: s.rdy for k, s in c.conns.items()}


def backoff_at_level(c: RdyController, level: int, now: float = 0.0) -> None:
    """Fail ``level`` times, each after the previous wait expired."""
    for _ in range(level):
        c.result(False, now)
        c.backoff_expired(now)
    assert c.backoff_level == level


# -- starting and sharing --------------------------------------------------------


def test_negative_max_in_flight_rejected():
    with pytest.raises(ValueError):
        RdyController(-1)


def test_new_connection_starts_at_rdy_1_then_gets_max_in_flight_on_first_message():
    c = ctl(10)
    assert c.add("a", None, 0.0) == [("a", 1)]
    assert c.conns["a"].max_rdy == 2500  # nsqd did not say: assume 2500
    assert c.message("a", 0.1) == [("a", 10)]
    assert c.total_rdy == 10


def test_connections_share_max_in_flight():
    c = ctl(10)
    assert c.add("a", None, 0.0) == [("a", 1)]
    assert c.add("b", None, 0.0) == [("b", 1)]  # a at 1 is under the share of 5
    assert c.message("a", 0.1) == [("a", 5)]
    assert c.message("b", 0.1) == [("b", 5)]
    assert rdys(c) == {"a": 5, "b": 5}


def test_share_rounds_down():
    c = ctl(10)
    at_share(c, ["a", "b", "c"])
    assert rdys(c) == {"a": 3, "b": 3, "c": 3}


def test_new_connection_trims_the_others_to_the_new_share():
    c = ctl(10)
    at_share(c, ["a"])
    assert c.add("b", None, 1.0) == [("a", 5), ("b", 1)]
    assert c.total_rdy == 6


def test_removed_connection_share_goes_to_the_others():
    c = ctl(10)
    at_share(c, ["a", "b"])
    assert c.remove("b", 1.0) == [("a", 10)]
    assert c.remove("unknown", 1.0) == []


def test_nsqd_max_rdy_count_is_never_exceeded():
    c = ctl(100)
    assert c.add("a", 3, 0.0) == [("a", 1)]
    assert c.message("a", 0.0) == [("a", 3)]
    c2 = ctl(100)
    assert c2.add("a", 0, 0.0) == [("a", 1)]  # 0 / unknown: 2500
    assert c2.conns["a"].max_rdy == 2500


def test_more_connections_than_max_in_flight_leaves_the_extra_at_zero():
    c = ctl(2)
    assert c.add("a", None, 0.0) == [("a", 1)]
    assert c.add("b", None, 0.0) == [("b", 1)]
    assert c.add("c", None, 0.0) == []  # no room: sum stays <= max_in_flight
    assert rdys(c) == {"a": 1, "b": 1, "c": 0}
    # a message on a full share re-sends 1, never more
    assert c.message("a", 0.1) == [("a", 1)]
    assert c.total_rdy == 2


def test_message_on_unknown_or_paused_connection_sends_nothing():
    c = ctl(10)
    c.add("a", None, 0.0)
    assert c.message("zzz", 0.0) == []
    assert c.set_max_in_flight(0, 0.0) == [("a", 0)]
    assert c.message("a", 0.1) == []  # a message sent before RDY 0 arrived
    assert c.conns["a"].last_message == 0.1


# -- when RDY is re-sent ---------------------------------------------------------------


def test_rdy_resent_when_remaining_drops_under_25_percent():
    c = ctl(100)
    c.add("a", None, 0.0)
    assert c.message("a", 0.0) == [("a", 100)]
    sent_after = None
    for i in range(1, 101):
        out = c.message("a", float(i))
        if out:
            assert out == [("a", 100)]
            sent_after = i
            break
    # remaining 25 is not < 25 % of 100; remaining 24 is
    assert sent_after == 76
    assert c.conns["a"].remaining == 100


def test_rdy_resent_when_at_most_one_remains():
    c = ctl(4)
    c.add("a", None, 0.0)
    c.message("a", 0.0)  # RDY 4
    assert [c.message("a", 1.0), c.message("a", 1.0), c.message("a", 1.0)] == [[], [], [("a", 4)]]
    c2 = ctl(2)
    c2.add("a", None, 0.0)
    c2.message("a", 0.0)  # RDY 2
    assert c2.message("a", 1.0) == [("a", 2)]  # 1 left


# -- redistribution (connections outnumber max_in_flight) --------------------------


def test_tick_does_nothing_when_connections_do_not_outnumber_max_in_flight():
    c = ctl(2, low_rdy_idle_timeout=1.0)
    at_share(c, ["a", "b"])
    assert c.tick(100.0) == []
    assert rdys(c) == {"a": 1, "b": 1}


def test_tick_moves_rdy_from_idle_connection_to_a_random_one():
    c = ctl(1, low_rdy_idle_timeout=1.0)
    c.add("a", None, 0.0)
    c.add("b", None, 0.0)
    c.add("c", None, 0.0)
    assert rdys(c) == {"a": 1, "b": 0, "c": 0}
    assert c.tick(0.5) == []  # not idle yet
    assert c.message("a", 0.9) == [("a", 1)]
    assert c.tick(1.5) == []  # a had a message 0.6 s ago
    out = c.tick(2.0)  # a idle for 1.1 s
    assert out[0] == ("a", 0)
    assert len(out) == 2 and out[1][1] == 1 and out[1][0] in {"a", "b", "c"}
    assert c.total_rdy == 1


def test_tick_choice_is_random_and_reproducible():
    picks = set()
    for seed in range(30):
        results = []
        for _ in range(2):
            c = ctl(1, seed=seed, low_rdy_idle_timeout=1.0)
            for k in "abcd":
                c.add(k, None, 0.0)
            results.append(c.tick(5.0))
        assert results[0] == results[1]  # same seed, same choice
        picks.add(results[0][-1][0])
    assert picks == {"a", "b", "c", "d"}


def test_tick_eventually_finds_the_nsqd_with_messages():
    c = ctl(1, low_rdy_idle_timeout=1.0)
    for k in "abcde":
        c.add(k, None, 0.0)
    now = 0.0
    for _ in range(200):
        now += 1.5
        c.tick(now)
        if c.conns["e"].rdy:
            break
    assert c.conns["e"].rdy == 1
    # while e has messages it keeps its RDY through ticks
    for _ in range(10):
        now += 0.5
        assert c.message("e", now) == [("e", 1)]
        assert c.tick(now + 0.1) == []
    assert rdys(c) == {"a": 0, "b": 0, "c": 0, "d": 0, "e": 1}


# -- backoff ---------------------------------------------------------------------------


def test_failure_sends_rdy_0_everywhere_and_waits():
    c = ctl(10, backoff_multiplier=0.5, max_backoff=60.0)
    at_share(c, ["a", "b"])
    assert c.result(False, 1.0) == ([("a", 0), ("b", 0)], 1.0)  # 0.5 * 2**1
    assert c.backoff_level == 1 and c.in_backoff_wait and c.in_backoff()
    assert c.total_rdy == 0


def test_results_during_the_wait_are_ignored():
    c = ctl(10, backoff_multiplier=0.5)
    at_share(c, ["a", "b"])
    c.result(False, 1.0)
    assert c.result(False, 1.1) == ([], None)
    assert c.result(True, 1.2) == ([], None)
    assert c.backoff_level == 1 and c.in_backoff_wait
    # nor does anything else hand out RDY during the wait
    assert c.message("a", 1.3) == []
    assert c.tick(100.0) == []
    assert c.add("c", None, 1.4) == []
    assert c.remove("c", 1.5) == []
    assert c.set_max_in_flight(20, 1.6) == []
    assert c.total_rdy == 0


def test_expiry_tests_the_waters_with_rdy_1_on_one_connection():
    c = ctl(10)
    at_share(c, ["a", "b", "c"])
    c.result(False, 1.0)
    sends, wait = c.backoff_expired(3.0)
    assert wait is None
    assert len(sends) == 1 and sends[0][0] in {"a", "b", "c"} and sends[0][1] == 1
    assert not c.in_backoff_wait and c.backoff_level == 1
    assert c.total_rdy == 1
    # the message it brings does not grow RDY while backing off
    assert c.message(sends[0][0], 3.1) == []


def test_expiry_picks_connections_at_random():
    picked = set()
    for seed in range(30):
        c = ctl(10, seed=seed)
        at_share(c, ["a", "b", "c"])
        c.result(False, 1.0)
        picked.add(c.backoff_expired(3.0)[0][0][0])
    assert picked == {"a", "b", "c"}


def test_success_at_level_1_ends_backoff_and_restores_every_share():
    c = ctl(10)
    at_share(c, ["a", "b"])
    c.result(False, 1.0)
    (key, _), = c.backoff_expired(3.0)[0]
    c.message(key, 3.1)
    assert c.result(True, 3.2) == ([("a", 5), ("b", 5)], None)
    assert not c.in_backoff() and c.backoff_level == 0
    assert c.message("a", 3.3) == []  # back to normal: 4 of 5 left


def test_neutral_result_and_success_without_backoff_change_nothing():
    c = ctl(10)
    at_share(c, ["a"])
    assert c.result(None, 1.0) == ([], None)
    assert c.result(True, 1.0) == ([], None)
    assert c.backoff_level == 0 and not c.in_backoff()
    assert rdys(c) == {"a": 10}


def test_backoff_grows_exponentially_until_max():
    c = ctl(10, backoff_multiplier=1.0, max_backoff=8.0)
    at_share(c, ["a"])
    waits = []
    levels = []
    for i in range(5):
        sends, wait = c.result(False, float(i))
        waits.append(wait)
        levels.append(c.backoff_level)
        c.backoff_expired(float(i))
    assert waits == [2.0, 4.0, 8.0, 8.0, 8.0]
    # level 3 stays: 1 * 2**4 = 16 would exceed the max of 8
    assert levels == [1, 2, 3, 3, 3]


def test_backoff_wait_is_capped_at_max_backoff():
    c = ctl(10, backoff_multiplier=1.0, max_backoff=1.5)
    at_share(c, ["a"])
    assert c.result(False, 0.0) == ([("a", 0)], 1.5)
    assert c.backoff_duration(5) == 1.5


def test_success_that_does_not_end_backoff_starts_a_shorter_wait():
    c = ctl(10, backoff_multiplier=1.0, max_backoff=100.0)
    at_share(c, ["a", "b"])
    backoff_at_level(c, 2)
    assert c.total_rdy == 1
    (key,) = [k for k, s in c.conns.items() if s.rdy]
    assert c.result(True, 10.0) == ([(key, 0)], 2.0)  # level 1 wait, shorter than level 2's 4 s
    assert c.backoff_level == 1 and c.in_backoff_wait and c.total_rdy == 0
    c.backoff_expired(12.0)
    assert c.result(True, 12.1) == ([("a", 5), ("b", 5)], None)


def test_failure_after_testing_the_waters_deepens_backoff():
    c = ctl(10, backoff_multiplier=1.0)
    at_share(c, ["a"])
    c.result(False, 0.0)
    assert c.backoff_expired(2.0) == ([("a", 1)], None)
    assert c.result(False, 2.1) == ([("a", 0)], 4.0)
    assert c.backoff_level == 2


def test_expiry_without_connections_waits_again():
    c = ctl(10)
    at_share(c, ["a"])
    c.result(False, 0.0)
    c.remove("a", 0.5)
    assert c.backoff_expired(2.0) == ([], 1.0)
    assert c.in_backoff_wait
    assert c.add("b", None, 2.5) == []
    assert c.backoff_expired(3.0) == ([("b", 1)], None)


def test_connection_added_during_backoff_tests_the_waters_only_if_nobody_has_rdy():
    c = ctl(10)
    at_share(c, ["a"])
    c.result(False, 0.0)
    assert c.backoff_expired(2.0) == ([("a", 1)], None)
    assert c.remove("a", 3.0) == []  # the tester went away
    assert not c.in_backoff_wait and c.backoff_level == 1 and c.total_rdy == 0
    assert c.add("b", None, 3.5) == [("b", 1)]
    assert c.add("c", None, 3.6) == []  # b already tests the waters
    assert c.total_rdy == 1


def test_tick_during_backoff_moves_the_single_rdy_from_an_idle_connection():
    c = ctl(10, low_rdy_idle_timeout=1.0)
    at_share(c, ["a", "b"])
    c.result(False, 0.0)
    (key, _), = c.backoff_expired(2.0)[0]
    out = c.tick(10.0)  # the tester had no message for 10 s
    assert out[0] == (key, 0)
    assert len(out) == 2 and out[1][1] == 1
    assert c.total_rdy == 1


# -- max_in_flight changes and close ------------------------------------------------


def test_set_max_in_flight_pauses_and_resumes():
    c = ctl(10)
    at_share(c, ["a", "b"])
    assert c.set_max_in_flight(0, 1.0) == [("a", 0), ("b", 0)]
    assert c.set_max_in_flight(4, 2.0) == [("a", 2), ("b", 2)]
    assert c.set_max_in_flight(2, 3.0) == [("a", 1), ("b", 1)]


def test_lowering_max_in_flight_below_the_connection_count_keeps_the_sum_under_it():
    c = ctl(5)
    for k in "abcde":
        c.add(k, None, 0.0)
    for t, k in enumerate("cadbe"):
        c.message(k, float(t))
    assert rdys(c) == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}
    # c and a had their last message longest ago: they give their RDY up
    assert c.set_max_in_flight(3, 10.0) == [("c", 0), ("a", 0)]
    assert c.total_rdy == 3
    assert c.set_max_in_flight(0, 11.0) == [("b", 0), ("d", 0), ("e", 0)]


def test_close_zeroes_every_connection_and_stops_everything():
    c = ctl(10)
    at_share(c, ["a", "b"])
    assert c.close(1.0) == [("a", 0), ("b", 0)]
    assert c.add("c", None, 1.1) == []
    assert c.message("a", 1.2) == []
    assert c.result(False, 1.3) == ([], None)
    assert c.backoff_expired(1.4) == ([], None)
    assert c.tick(100.0) == []
    assert c.remove("c", 101.0) == []
    assert c.set_max_in_flight(20, 102.0) == []
    assert c.total_rdy == 0


# -- invariants over arbitrary event sequences --------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])


class RdyMachine(RuleBasedStateMachine):
    """Feeds events and replays every returned send on a model of what the
    nsqds see; checks the invariants after each step."""

    @initialize(mif=st.integers(0, 8), seed=st.integers(0, 2**16),
                mult=st.sampled_from([0.1, 1.0, 3.0]), max_backoff=st.sampled_from([0.5, 4.0, 120.0]),
                idle=st.sampled_from([0.5, 2.0, 10.0]))
    def init(self, mif, seed, mult, max_backoff, idle):
        self.c = RdyController(mif, backoff_multiplier=mult, max_backoff=max_backoff,
                               low_rdy_idle_timeout=idle, rng=random.Random(seed))
        self.now = 0.0
        self.seen: dict[str, int] = {}  # RDY as each nsqd last saw it
        self.max_rdy: dict[str, int] = {}

    def apply(self, sends):
        for key, count in sends:
            assert key in self.c.conns, f"RDY for a connection the controller does not have: {key}"
            assert count >= 0
            self.seen[key] = count

    @rule(dt=st.floats(0.0, 15.0))
    def advance(self, dt):
        self.now += dt

    @rule(key=KEYS, max_rdy=st.sampled_from([None, 1, 2, 3, 2500]))
    def add(self, key, max_rdy):
        if key in self.c.conns:
            return
        self.seen[key] = 0
        self.max_rdy[key] = max_rdy or 2500
        self.apply(self.c.add(key, max_rdy, self.now))

    @rule(key=KEYS)
    def remove(self, key):
        self.seen.pop(key, None)
        self.apply(self.c.remove(key, self.now))

    @rule(key=KEYS)
    def message(self, key):
        self.apply(self.c.message(key, self.now))

    @rule(success=st.sampled_from([True, False, None]))
    def result(self, success):
        sends, wait = self.c.result(success, self.now)
        self.apply(sends)
        if wait is not None:
            assert 0 < wait <= self.c.max_backoff
            assert self.c.in_backoff_wait

    @precondition(lambda self: self.c.in_backoff_wait)
    @rule()
    def backoff_expired(self):
        sends, wait = self.c.backoff_expired(self.now)
        self.apply(sends)
        assert len(sends) <= 1
        assert all(count == 1 for _, count in sends)

    @rule()
    def tick(self):
        self.apply(self.c.tick(self.now))

    @rule(mif=st.integers(0, 8))
    def set_max_in_flight(self, mif):
        self.apply(self.c.set_max_in_flight(mif, self.now))

    @rule()
    def close(self):
        self.apply(self.c.close(self.now))

    @invariant()
    def invariants(self):
        c = getattr(self, "c", None)
        if c is None:
            return
        assert set(self.seen) == set(c.conns)
        assert self.seen == {k: s.rdy for k, s in c.conns.items()}  # bookkeeping matches what was sent
        total = sum(self.seen.values())
        assert total <= c.max_in_flight
        for key, count in self.seen.items():
            assert 0 <= count <= self.max_rdy[key]
        if c.in_backoff_wait:
            assert total == 0
        if c.in_backoff():
            assert total <= 1
        if c.closing:
            assert total == 0


TestRdyMachine = RdyMachine.TestCase
TestRdyMachine.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_losing_the_connection_testing_the_waters_tests_on_another():
    """In backoff, after the wait, one connection holds RDY 1; if it closes,
    another gets RDY 1 at once instead of the consumer stalling until a tick."""
    r = ctl(10)
    for k in ("a", "b", "c"):
        r.add(k, 2500, 0.0)
    _, wait = r.result(False, 1.0)
    assert wait == 2.0 and r.total_rdy == 0
    sends, _ = r.backoff_expired(3.0)
    [(tester, one)] = sends
    assert one == 1
    sends = r.remove(tester, 3.5)
    assert len(sends) == 1 and sends[0][0] != tester and sends[0][1] == 1
    assert r.total_rdy == 1
