"""A port of github.com/lucasjones/reggen (MIT), which gitleaks' `secrets.NewSecret(regex)` calls as
`reggen.NewGenerator(regex).Generate(1)` to make the random secrets of its rule tests.

The same walk over the parsed regex with the same choices: a character class picks uniformly among its
characters (a negated class or one reaching U+10FFFF among reggen's printable characters), `.` among those
printable characters without CR/LF, `*` repeats 0 or 1 times, `+` once, `?` 0 or 1 times, `{n,m}` repeats
n + rand(0..min(m, 1) - n) times (so `{17,}` and `{27,300}` give exactly the minimum, as in Go), an
alternation picks a branch uniformly, anchors and word boundaries produce nothing. Case-insensitive classes
gain their case folds, Go's included (`k` -> K, U+212A; `s` -> U+017F). The random source is Python's
`random.Random` (a seeded run is reproducible; the Go original seeds from the clock).

The parser reads Go's RE2 syntax as far as gitleaks' sample regexes need it (literals, escapes, classes
with ranges, POSIX classes and Perl escapes, groups of every kind, flags, alternation, quantifiers); Go's
parser also factors common prefixes out of alternations, which changes only how often each branch is taken.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PRINTABLE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \t\n\r"
PRINTABLE_NO_NL = PRINTABLE[:-2]
MAX_RUNE = 0x10FFFF

_PERL = {
    "d": [(0x30, 0x39)],
    "s": [(0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
}
_POSIX = {
    "alnum": [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)],
    "alpha": [(0x41, 0x5A), (0x61, 0x7A)],
    "ascii": [(0x00, 0x7F)],
    "blank": [(0x09, 0x09), (0x20, 0x20)],
    "cntrl": [(0x00, 0x1F), (0x7F, 0x7F)],
    "digit": [(0x30, 0x39)],
    "graph": [(0x21, 0x7E)],
    "lower": [(0x61, 0x7A)],
    "print": [(0x20, 0x7E)],
    "punct": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)],
    "space": [(0x09, 0x0D), (0x20, 0x20)],
    "upper": [(0x41, 0x5A)],
    "word": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "xdigit": [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
}
# Go's simple case folding beyond ASCII for the letters it links to another rune.
_EXTRA_FOLDS = {"k": [0x212A], "K": [0x212A], "s": [0x17F], "S": [0x17F]}


@dataclass
class Node:
    op: str  # literal, class, any, empty, concat, alternate, repeat
    text: str = ""
    ranges: tuple[tuple[int, int], ...] = ()
    subs: tuple[Node, ...] = ()
    min: int = 0
    max: int = -1
    dot_nl: bool = False


def _normalise(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    ranges = sorted(ranges)
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _negate(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_RUNE:
        out.append((nxt, MAX_RUNE))
    return tuple(out)


def _fold(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = list(ranges)
    for lo, hi in ranges:
        for code in range(lo, min(hi, 0x7F) + 1):
            c = chr(code)
            for other in {c.lower(), c.upper()} - {c}:
                out.append((ord(other), ord(other)))
            out += [(x, x) for x in _EXTRA_FOLDS.get(c, [])]
    return out


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.s = pattern
        self.i = 0

    def error(self, msg: str) -> ValueError:
        return ValueError(f"{msg} at {self.i} in {self.s!r}")

    def parse(self) -> Node:
        node = self.alternation(fold=False, dot_nl=False)
        if self.i != len(self.s):
            raise self.error("unexpected )")
        return node

    def alternation(self, fold: bool, dot_nl: bool) -> Node:
        branches = [self.concat(fold, dot_nl)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            branches.append(self.concat(*self._flags_now))
        return branches[0] if len(branches) == 1 else Node("alternate", subs=tuple(branches))

    _flags_now: tuple[bool, bool] = (False, False)

    def concat(self, fold: bool, dot_nl: bool) -> Node:
        items: list[Node] = []
        self._flags_now = (fold, dot_nl)
        while self.i < len(self.s) and self.s[self.i] not in "|)":
            c = self.s[self.i]
            if c == "(" and self.s.startswith("(?", self.i) and not self.s.startswith("(?P<", self.i):
                # Flags: (?i) for the rest of this group, or (?i:...) a group of its own.
                j = self.i + 2
                while j < len(self.s) and self.s[j] not in ":)":
                    j += 1
                flags = self.s[self.i + 2 : j]
                on, _, off = flags.partition("-")
                new_fold = (fold or "i" in on) and "i" not in off
                new_dot = (dot_nl or "s" in on) and "s" not in off
                if self.s[j] == ")":
                    self.i = j + 1
                    fold, dot_nl = new_fold, new_dot
                    self._flags_now = (fold, dot_nl)
                    continue
                self.i = j + 1
                atom = self.alternation(new_fold, new_dot)
                self._expect(")")
                self._flags_now = (fold, dot_nl)
            elif c == "(":
                self.i += 1
                if self.s.startswith("?P<", self.i):
                    self.i = self.s.index(">", self.i) + 1
                atom = self.alternation(fold, dot_nl)
                self._expect(")")
                self._flags_now = (fold, dot_nl)
            else:
                atom = self.atom(fold, dot_nl)
            items.append(self.quantified(atom))
        return items[0] if len(items) == 1 else Node("concat", subs=tuple(items))

    def _expect(self, c: str) -> None:
        if self.i >= len(self.s) or self.s[self.i] != c:
            raise self.error(f"expected {c}")
        self.i += 1

    def quantified(self, atom: Node) -> Node:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "*":
                lo, hi = 0, -1
                kind = "star"
                self.i += 1
            elif c == "+":
                lo, hi = 1, -1
                kind = "plus"
                self.i += 1
            elif c == "?":
                lo, hi = 0, 1
                kind = "quest"
                self.i += 1
            elif c == "{" and self._counted():
                end = self.s.index("}", self.i)
                body = self.s[self.i + 1 : end]
                self.i = end + 1
                if "," in body:
                    a, b = body.split(",", 1)
                    lo, hi = int(a), (int(b) if b else -1)
                else:
                    lo = hi = int(body)
                kind = "repeat"
            else:
                return atom
            if self.i < len(self.s) and self.s[self.i] == "?":  # lazy: same generation
                self.i += 1
            atom = Node(kind, subs=(atom,), min=lo, max=hi)
        return atom

    def _counted(self) -> bool:
        end = self.s.find("}", self.i)
        if end < 0:
            return False
        body = self.s[self.i + 1 : end]
        a, _, b = body.partition(",")
        return a.isdigit() and (b == "" or b.isdigit())

    def atom(self, fold: bool, dot_nl: bool) -> Node:
        c = self.s[self.i]
        if c == "[":
            return self.char_class(fold)
        if c == ".":
            self.i += 1
            return Node("any", dot_nl=dot_nl)
        if c in "^$":
            self.i += 1
            return Node("empty")
        if c == "\\":
            e = self.s[self.i + 1]
            if e in "bBAz":
                self.i += 2
                return Node("empty")
            if e.lower() in _PERL:
                self.i += 2
                ranges = _normalise(_PERL[e.lower()])
                return Node("class", ranges=_negate(ranges) if e.isupper() else ranges)
            code = self._escape()
            return self._literal(code, fold)
        self.i += 1
        return self._literal(ord(c), fold)

    def _literal(self, code: int, fold: bool) -> Node:
        # A case-folded literal generates the rune as written (reggen prints re.Rune).
        return Node("literal", text=chr(code))

    def _escape(self) -> int:
        e = self.s[self.i + 1]
        simple = {"n": 10, "r": 13, "t": 9, "f": 12, "v": 11, "a": 7}
        if e == "x":
            if self.s[self.i + 2] == "{":
                end = self.s.index("}", self.i)
                code = int(self.s[self.i + 3 : end], 16)
                self.i = end + 1
                return code
            code = int(self.s[self.i + 2 : self.i + 4], 16)
            self.i += 4
            return code
        self.i += 2
        if e in simple:
            return simple[e]
        if e.isalnum():
            raise self.error(f"unsupported escape \\{e}")
        return ord(e)

    def char_class(self, fold: bool) -> Node:
        self.i += 1
        negate = self.s[self.i] == "^"
        if negate:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while first or self.s[self.i] != "]":
            first = False
            if self.s.startswith("[:", self.i):
                end = self.s.index(":]", self.i)
                name = self.s[self.i + 2 : end]
                neg = name.startswith("^")
                cls = _normalise(_POSIX[name.lstrip("^")])
                ranges += list(_negate(cls) if neg else cls)
                self.i = end + 2
                continue
            if self.s[self.i] == "\\" and self.s[self.i + 1].lower() in _PERL:
                e = self.s[self.i + 1]
                cls = _normalise(_PERL[e.lower()])
                ranges += list(_negate(cls) if e.isupper() else cls)
                self.i += 2
                continue
            lo = self._class_char()
            hi = lo
            if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                self.i += 1
                hi = self._class_char()
            ranges.append((lo, hi))
        self.i += 1
        if fold:
            ranges = _fold(ranges)
        result = _normalise(ranges)
        return Node("class", ranges=_negate(result) if negate else result)

    def _class_char(self) -> int:
        if self.s[self.i] == "\\":
            return self._escape()
        c = self.s[self.i]
        self.i += 1
        return ord(c)


class Generator:
    def __init__(self, pattern: str, rng: random.Random) -> None:
        self.root = _Parser(pattern).parse()
        self.rng = rng

    def generate(self, limit: int = 1) -> str:
        return self._gen(self.root, limit)

    def _gen(self, n: Node, limit: int) -> str:
        rng = self.rng
        if n.op == "literal":
            return n.text
        if n.op == "empty":
            return ""
        if n.op == "any":
            chars = PRINTABLE if n.dot_nl else PRINTABLE_NO_NL
            return chars[rng.randrange(len(chars))]
        if n.op == "class":
            if any(hi == MAX_RUNE for _lo, hi in n.ranges):
                possible = [c for c in PRINTABLE if any(lo <= ord(c) <= hi for lo, hi in n.ranges)]
                if possible:
                    return possible[rng.randrange(len(possible))]
            total = sum(hi - lo + 1 for lo, hi in n.ranges)
            r = rng.randrange(total)
            for lo, hi in n.ranges:
                if r < hi - lo + 1:
                    return chr(lo + r)
                r -= hi - lo + 1
            raise AssertionError("unreachable")
        if n.op == "concat":
            return "".join(self._gen(s, limit) for s in n.subs)
        if n.op == "alternate":
            return self._gen(n.subs[rng.randrange(len(n.subs))], limit)
        if n.op == "star":
            count = rng.randrange(limit + 1)
        elif n.op == "plus":
            count = rng.randrange(limit) + 1
        elif n.op == "quest":
            count = rng.randrange(2)
        elif n.op == "repeat":
            top = min(n.max, limit)
            count = n.min + (rng.randrange(top - n.min + 1) if top > n.min else 0)
        else:
            raise AssertionError(n.op)
        return "".join(self._gen(n.subs[0], limit) for _ in range(count))


def new_secret(pattern: str, rng: random.Random) -> str:
    """gitleaks' secrets.NewSecret: one string the regex matches."""
    return Generator(pattern, rng).generate(1)
