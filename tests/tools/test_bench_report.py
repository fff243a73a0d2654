#!/usr/bin/env python3
"""tools/bench_report.py's time_backends: every backend is checked against the first one's output,
runs one untimed window, then `repeats` timed windows in turns whose first backend moves by one
each round; it reports the median of the timed windows (window_ms and torch replaced by fakes:
no GPU)."""

import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import bench_report  # noqa: E402


class Out:
    """What a backend's first call returns: compared with the first backend's by value."""

    def __init__(self, value):
        self.value = value

    def float(self):
        return self

    def __sub__(self, other):
        return Out(self.value - other.value)

    def abs(self):
        return self

    def max(self):
        return self

    def item(self):
        return abs(self.value)


class FakeTorch:
    class cuda:  # noqa: N801 (torch's name)
        @staticmethod
        def synchronize():
            pass


class Backends:
    """Makers of named steps, and window_ms's stand-in: it logs which backend each window ran
    and returns that backend's next per-call time from `times`."""

    def __init__(self, times, values=None):
        self.times = times
        self.values = values or {}
        self.log = []

    def makers(self):
        def maker(name):
            def make(*point):
                step = lambda: None  # noqa: E731
                step.backend = name
                return step, Out(self.values.get(name, 1.0))
            return make
        return {name: maker(name) for name in self.times}

    def window_ms(self, torch, step, ms):
        name = step.backend
        k = sum(1 for n in self.log if n == name)
        self.log.append(name)
        return self.times[name][k]


def run(backends, repeats):
    with mock.patch.object(bench_report, "window_ms", backends.window_ms):
        return bench_report.time_backends(FakeTorch, backends.makers(), (), "p", 10.0, repeats)


class TimeBackends(unittest.TestCase):
    def test_untimed_window_then_rotating_turns(self):
        b = Backends({n: [1.0] * 4 for n in ("a", "b", "c")})
        run(b, 3)
        # One untimed window each, then the rounds a b c, b c a, c a b.
        self.assertEqual(b.log, ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"])

    def test_the_untimed_window_is_left_out_of_the_median(self):
        # The untimed window is the slowest; the median of the three after it differs from the
        # median of the first three.
        b = Backends({"a": [9.0, 2.0, 3.0, 1.0], "b": [9.0, 5.0, 6.0, 4.0]})
        medians = run(b, 3)
        self.assertEqual(medians, {"a": 2.0, "b": 5.0})

    def test_a_backend_that_differs_is_not_timed(self):
        b = Backends({"a": [1.0] * 3, "b": [1.0] * 3}, values={"b": 2.0})
        medians = run(b, 2)
        self.assertEqual(set(medians), {"a"})
        self.assertNotIn("b", b.log)


if __name__ == "__main__":
    unittest.main()
