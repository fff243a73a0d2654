#!/usr/bin/env python3
"""tools/profile_serving.py's points: d:batch:sq:context:page read in order, malformed ones
refused by name before anything touches a GPU."""

import os
import subprocess
import sys
import unittest

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_TOOL = os.path.join(_ROOT, "tools", "profile_serving.py")
sys.path.insert(0, os.path.join(_ROOT, "tools"))
import profile_serving  # noqa: E402


class Points(unittest.TestCase):
    def test_points_are_read_in_order(self):
        self.assertEqual(profile_serving.parse_points("128:4:512:8192:1,64:1:1:100:0,"),
                         [(128, 4, 512, 8192, 1), (64, 1, 1, 100, 0)])

    def test_malformed_points_are_refused_by_name(self):
        for bad in ("128:4:512:8192", "128:4:512:8192:1:2", "a:1:1:1:1", "0:1:1:1:0",
                    "128:4:0:8192:1", "128:-4:512:8192:1"):
            with self.assertRaises(ValueError) as e:
                profile_serving.parse_points(bad)
            self.assertIn(f"'{bad}'", str(e.exception))
        with self.assertRaises(ValueError):
            profile_serving.parse_points("")

    def test_the_command_line_refuses_them_without_a_gpu(self):
        r = subprocess.run([sys.executable, _TOOL, "128:4:512"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("'128:4:512'", r.stderr)


if __name__ == "__main__":
    unittest.main()
