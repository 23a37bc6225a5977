"""Salted synthetic text: filler words and needles, portable and fast.

Input: a salt and a stable name (e.g. `main#1:3/0.2`). Output: words, deterministic across
processes and platforms (SHAKE-256 of `salt NUL name`, never Python's `hash` or the global RNG).

Each byte of the hash stream picks one of 256 common English words, so text is realised with one
C-level `itemgetter` over the bytes instead of a per-word `random.choice` loop. Every word is a
single, space-prefixed token in common BPE vocabularies and one token in the simulator, so the
number of words tracks the number of tokens closely.
"""

from __future__ import annotations

import hashlib
from operator import itemgetter

WORDS: tuple[str, ...] = tuple(
    """
    the of and to in is was for on that with as by at from his her it an are were which this be
    or has had not but have all their one its new after who they been also two more first when
    other into than may some time only over most years can would there many these about out such
    where between made during under world used both each three while city school through those
    then later became state known part since them including early high year well any same group
    long four team second being five game season left area national south north west east gold
    system like work family following several could until found based called music public because
    life show held around small large house century million number water river church government
    company began film place near book war home name against final line local back series without
    end main major given days take another side army town often named land record old due within
    open among great good best form along total version common light stone field power hill
    bell rope drum pearl wheel lamp coin seed winter summer morning evening bridge
    window mountain island forest valley coast harbor village station library museum theater
    castle temple tower street road path yard farm orchard meadow lake pond stream canyon
    desert plain ridge cliff shore beach wave tide storm cloud rain snow wind thunder sunrise
    sunset shadow silver copper iron amber ivory marble velvet cotton linen wool leather timber
    brick glass ink chalk clay sand salt honey bread butter apple pepper ginger lemon olive
    """.split()
)[:256]
assert len(WORDS) == 256, len(WORDS)

NEEDLE_WORDS = ("plover", "zirconium", "octopus", "thimble", "wombat", "kestrel")


def stream(salt: str, name: str, n: int) -> bytes:
    """`n` pseudo-random bytes for `(salt, name)`."""
    return hashlib.shake_256(f"{salt}\0{name}".encode()).digest(n)


def pick(indices: bytes) -> tuple[str, ...]:
    """The word of each byte. One `itemgetter` call indexes them all in C: about twice as fast
    as `map(WORDS.__getitem__, ...)`, which goes through a method-wrapper call per word."""
    if len(indices) < 2:  # itemgetter of a single index returns the item, not a tuple
        return tuple(WORDS[i] for i in indices)
    return itemgetter(*indices)(WORDS)


def words(salt: str, name: str, n: int) -> list[str]:
    """`n` filler words for `(salt, name)`; a longer request extends a shorter one's prefix."""
    return list(pick(stream(salt, name, n)))


def filler(salt: str, name: str, n: int) -> str:
    """`n` filler words joined by spaces."""
    return " ".join(pick(stream(salt, name, n)))


def needle_code(salt: str, name: str) -> str:
    """The secret code of the needle planted in filler `name`, e.g. `kestrel-4821`."""
    b = hashlib.sha256(f"{salt}\0needle\0{name}".encode()).digest()
    return f"{NEEDLE_WORDS[b[0] % len(NEEDLE_WORDS)]}-{1000 + int.from_bytes(b[1:3], 'big') % 9000}"


def needle_sentence(code: str) -> str:
    return f"[the secret code is {code}]"
