"""Small statistics helpers: mean, median and spread of a list of numbers."""

from stats.mean import mean
from stats.median import median
from stats.spread import spread, variance

__all__ = ["mean", "median", "spread", "variance"]
