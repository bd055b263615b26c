"""bench/budget.py: when the harness starts no new shape."""
import unittest

from bench.budget import stop_reason


class TestBudget(unittest.TestCase):
    def test_no_budget_never_stops(self):
        self.assertIsNone(stop_reason(1e9, 1e9, 0))

    def test_first_shape_starts_within_the_budget(self):
        self.assertIsNone(stop_reason(0.0, 0.0, 10))

    def test_spent(self):
        self.assertIn("spent", stop_reason(11.0, 0.0, 10))

    def test_left_less_than_the_longest_shape(self):
        r = stop_reason(317.0, 80.0, 358)
        self.assertIn("41 s of the 358 s", r)
        self.assertIn("longest shape so far (80 s)", r)

    def test_left_covers_the_longest_shape(self):
        self.assertIsNone(stop_reason(200.0, 80.0, 358))


if __name__ == "__main__":
    unittest.main()
