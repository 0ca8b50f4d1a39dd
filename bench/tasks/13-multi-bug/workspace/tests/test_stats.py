import unittest

from stats import mean, median, spread, variance


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3]), 2.0)

    def test_mean_one(self):
        self.assertEqual(mean([5]), 5.0)

    def test_mean_empty(self):
        with self.assertRaises(ValueError):
            mean([])


class MedianTest(unittest.TestCase):
    def test_odd(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            median([])


class SpreadTest(unittest.TestCase):
    def test_spread(self):
        self.assertEqual(spread([4, 9, 1]), 8)

    def test_variance(self):
        self.assertEqual(variance([1, 2, 3, 4]), 1.25)

    def test_spread_one(self):
        self.assertEqual(spread([7]), 0)
