"""Variance and spread.

The variance of a list of numbers is the mean of the squared distances from their mean (the
population variance). The spread is the largest number minus the smallest one.
"""

from stats.mean import mean


def variance(values):
    """The population variance of `values`.

    >>> variance([1, 2, 3, 4])
    1.25
    """
    values = list(values)
    centre = mean(values)
    return mean([(value - centre) ** 2 for value in values])


def spread(values):
    """The largest value minus the smallest.

    >>> spread([4, 9, 1])
    8
    """
    values = list(values)
    if not values:
        raise ValueError("spread of an empty list")
    return min(values) - max(values)
