"""Content kinds and a pre-token count for pricing tool outputs before a tokenizer has seen them.

A BPE or SentencePiece tokenizer does not cut bytes evenly: a digit is often a token of its own
(Gemma splits every number into digits), a common word with its leading space is one token, a
run of punctuation or of blanks is one or two, a rare character is up to one per byte. So Gemma 3
gives 0.9 to 3.5 tokens per 4 bytes of ordinary shell output (medians, man page to hex dump), and
one learnt ratio on bytes/4 cannot fit them all. `raw_units` counts the places where a tokenizer
must start a new token: Gemma 3 gives 1.01 to 1.16 tokens a unit on the same outputs. `text_kind`
names the few contents that still differ, so a ratio learnt on one is not applied to another.
"""

from __future__ import annotations

import string

LOWER, UPPER, DIGIT, PUNCT, SPACE, NEWLINE, TAB, OTHER = (1 << i for i in range(8))


def _flag(byte: int) -> int:
    char = chr(byte)
    if byte >= 0xC0:
        return OTHER  # first byte of a non-ASCII character
    if byte >= 0x80:
        return 0  # continuation byte: its character is counted at its first byte
    for chars, flag in (
        (string.ascii_lowercase, LOWER),
        (string.ascii_uppercase, UPPER),
        (string.digits, DIGIT),
        (string.punctuation, PUNCT),
        (" ", SPACE),
        ("\n\r", NEWLINE),
        ("\t", TAB),
    ):
        if char in chars:
            return flag
    return OTHER  # control characters: a token each


FLAGS = bytes(_flag(b) for b in range(256))
"""One class bit per byte, so one big-integer operation tests every character at once."""
CHUNK = 1 << 15
"""Bytes per big-integer pass; the masks below are built once for this length."""


def _mask(bits: int) -> int:
    return int.from_bytes(bytes([bits]) * CHUNK, "little")


RUNS, LOWERS, EACH, SPACES = (
    _mask(UPPER | PUNCT | NEWLINE | TAB),
    _mask(LOWER),
    _mask(DIGIT | OTHER),
    _mask(SPACE),
)
LONG_RUNS = (
    bytes([LOWER]) * 16,
    bytes([UPPER]) * 16,
    bytes([PUNCT]) * 16,
    bytes([SPACE]) * 31,
    bytes([NEWLINE]) * 31,
    bytes([TAB]) * 31,
)
"""A vocabulary's longest pieces: ~16 repeated letters or punctuation, ~31 blanks (Gemma 3)."""


def raw_units(text: str) -> int:
    """Pre-tokens: every digit and every non-ASCII or control character; every run of
    punctuation, newlines or tabs; every word piece (a lowercase run, or an uppercase letter
    after a non-uppercase one, so camelCase is two); every run of two or more spaces (a single
    space joins the word after it); plus one more per 16 (31 for blanks) of a long run.
    Each counts one: what a tokenizer merges or splits beyond that is left to the learnt ratio
    (fitted weights gained under a point of error, and would fit one tokenizer only)."""
    data = text.encode(errors="surrogatepass")
    units = 0
    for start in range(0, len(data), CHUNK):
        flags = data[start : start + CHUNK].translate(FLAGS)
        now = int.from_bytes(flags, "little")
        before = now << 8  # each byte now lines up with the flags of the character before it
        starts = (
            (now & ~before & RUNS)
            | (now & ~(before | before >> 1) & LOWERS)  # lowercase after neither case
            | (now & EACH)
            | (now & before & ~(before << 8) & SPACES)  # the second space of a run
        )
        units += starts.bit_count() + sum(flags.count(run) for run in LONG_RUNS)
    return units


SAMPLE = 4096
"""Characters the classifier reads: the head of an output says what it is."""


def text_kind(text: str) -> str:
    """`opaque`, `numbers`, `markup` or `text`: the contents whose tokens per pre-token differ
    most (listings, code, logs and prose split alike once counted in pre-tokens, so one kind
    does for them all, and learns from more samples). Judged on the head of the output."""
    if text.startswith("exit code "):  # the harness's first line of a shell result
        text = text[text.find("\n") + 1 :]
    head = text[:SAMPLE]
    flags = head.encode(errors="surrogatepass").translate(FLAGS)
    n = len(flags) or 1

    def share(flag: int) -> float:
        return flags.count(bytes([flag])) / n

    blankless = n > 200 and share(SPACE) + share(TAB) < 0.02 and share(NEWLINE) < 0.005
    if share(OTHER) > 0.1 or blankless:
        # Binary, a non-Latin script (a rare character is a token per byte, a common one a
        # token per word), or long lines without blanks (base64, hex, minified): the pre-token
        # count is least sure here, so these must not teach the other kinds.
        return "opaque"
    if share(DIGIT) > 0.3:
        return "numbers"  # tables of numbers, hex dumps: a token per digit
    if head.count("<") > 0.01 * n or (head.count('"') > 0.04 * n and ("{" in head or "[" in head)):
        return "markup"  # HTML, XML, JSON: quotes and brackets merge into fewer tokens
    return "text"
