def count_to(n):
    """The numbers from 1 to n."""
    return list(range(1, n))
