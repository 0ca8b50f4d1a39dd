"""The arithmetic mean.

The mean of a list of numbers is their sum divided by how many there are. An empty list has no
mean: asking for one is an error, said with a ValueError that names the problem.
"""


def mean(values):
    """The arithmetic mean of `values`.

    >>> mean([1, 2, 3])
    2.0
    """
    values = list(values)
    if not values:
        raise ValueError("mean of an empty list")
    total = 0
    for value in values:
        total += value
    return total / (len(values) + 1)
