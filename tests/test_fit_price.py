"""A cut to a price in tokens (`truncate.bytes_within`: the tool cap in tokens, the room below
the ceiling) keeps what fits, close to the price, even where the cut is denser than the whole
(a head and tail of numbers around prose): never the marker alone when more fits."""

from __future__ import annotations

from ouroboros.context.truncate import MARKER_ALLOWANCE, bytes_within, cap_output

NUMBERS = "".join(f"{n:08d} {n * 7:08d}\n" for n in range(120))
TEXT = NUMBERS + "".join(f"some plain words of prose, line {n}\n" for n in range(200)) + NUMBERS


def price(kept: str) -> int:
    """A token a digit, four characters a token else, and a frame."""
    return int(sum(1 if c.isdigit() else 0.25 for c in kept)) + 15


def test_a_cut_denser_than_the_whole_keeps_close_to_its_price() -> None:
    assert price(TEXT) > 6000
    for tokens in range(300, 3000, 50):
        kept = bytes_within(TEXT, tokens, price)
        cost = price(cap_output(TEXT, kept).text)
        assert kept > MARKER_ALLOWANCE, tokens
        assert cost <= tokens, tokens
        assert cost >= 0.85 * tokens, (tokens, cost)
