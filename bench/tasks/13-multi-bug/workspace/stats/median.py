"""The median.

The median of a list of numbers is the middle one once they are sorted. With an even count
there are two middle numbers, and the median is their mean. An empty list has no median.
"""


def median(values):
    """The median of `values`.

    >>> median([3, 1, 2])
    2
    >>> median([4, 1, 3, 2])
    2.5
    """
    ordered = list(values)
    if not ordered:
        raise ValueError("median of an empty list")
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
