"""Our context rules: secrets found by where they stand rather than by a vendor's format.

- credentials in URLs (`scheme://user:password@host`, also with an empty user or a raw `/` in the password);
- a secret named in prose (`my secret key 8fKq...`, `the API key is ...`) whose value reads as random;
- an authorization scheme and its credential anywhere (`Bearer <token>`, `Basic <base64>`, `Token <t>`);
- PEM and PGP private key blocks, whole (also cut off before their END line);
- JWTs, signed or not (`alg: none` tokens end with a dot);
- AWS secret access keys: 40 characters of mixed-case base64 near an access key id or a label;
- a text that is a single high-entropy token and nothing else (a tool that prints one credential), unless
  it starts with a vendor's prefix: then gitleaks' rule for that vendor decides. The token may hold a
  password's punctuation (`!#$&*@|`, inside it, not beside a path, a `:`, a `$VARIABLE` or `user@`) and
  be as short as 10 characters when it holds digits, has few vowels and is no words (of one case: not
  hex, and with five consonants in a row, or letter pairs words seldom hold: `randomness`); 16 or more
  letters of one case count when they read as random the same way; 40 or 64 hex digits (a commit, a
  container, a SHA-256) do not, 40 or 64 digits do; `name=value` is a field unless the name is random
  letters; a token with `%XX` escapes is judged URL-decoded.
All patterns are RE2 (linear time on hostile text).
"""

from __future__ import annotations

import math
import urllib.parse

import re2

from agentmesh.redact.gitleaks_rules import default_rules, shannon_entropy
from agentmesh.redact.placeholders import is_placeholder
from agentmesh.redact.randomness import reads_random
from agentmesh.redact.spans import Finding

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 32 << 20

# The password may hold a raw `/` (not valid in a URL's userinfo, but typed so): it is the password when an
# `@` follows before any space; `host:8443/path@x` (a port, then a path) is not one (`_url_password`).
_URL_CREDENTIALS = re2.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@'\"]*:(?P<secret>[^\s@'\"]+)@", _OPTIONS)
# A secret named in prose, with a space or `is` where code has an operator: `my secret key 8fKq...`,
# `the password is P@ss...`. The name stands alone (`csrf-token=` is an identifier, the assignment grammar's);
# the value must read as random (`_random_token`): prose goes on with words.
_NAMED_IN_PROSE = re2.compile(
    r"(?i)(?:^|[\s\"'`(])(?:pass(?:word|wd|phrase)|secret|token|(?:api|access|secret|private|signing|client)[ _-]?key)"
    r"(?:(?:[ \t]+(?:is|was|of|for|in|on)(?:[ \t]+\w+)?){0,2}[ \t]+|[ \t]*[:=][ \t]*)"
    r"[\"'`]?(?P<secret>[A-Za-z0-9_~+/=!#$&*@|%-]{10,512})",
    _OPTIONS,
)
# `=` only as base64 padding: `token_type=bearer expires_in=3600` holds no token.
_AUTH_SCHEME = re2.compile(
    r"(?i)\b(?:bearer|basic|token|bot|ssws|api-token|flyv1)[ \t]+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)"
    r"(?:[^A-Za-z0-9._~+/=-]|$)",
    _OPTIONS,
)
_PRIVATE_KEY = re2.compile(
    r"(?s)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----(?P<secret>[^-]*?[A-Za-z0-9+/=]{32}.*?)"
    r"(?:-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|\z)",
    _OPTIONS,
)
_JWT = re2.compile(
    r"\b(?P<secret>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{4,}\.(?:[A-Za-z0-9_-]{8,}(?:={0,2})|))(?:[^A-Za-z0-9_.=-]|$)",
    _OPTIONS,
)
# Vendor prefixes with loose lengths: gitleaks' rules pin each format's exact length and checksum marker,
# and a key of a newer or older generation (or cut short in a log line) must still be masked. The prefix
# must start a token: after `-`, `.` or `/` it is inside a word or a path (`.../2018-250-xoxo-indieweb.jpg`).
# A Slack token's first part is a team id of 8 to 14 digits (or a one-digit version: `xoxa-2-...`), in every
# generation gitleaks knows: `xoxp-1234-1234-...` is a stand-in.
_PREFIXED_KEY = re2.compile(
    r"(?:^|[^A-Za-z0-9_./-])(?P<secret>sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abposr]-(?:\d-[A-Za-z0-9]{10,}|\d{8,14}-[A-Za-z0-9-]{6,})|(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,})",
    _OPTIONS,
)
# Google's API keys have had one length since they began (`AIza` and 35 more): a key cut short in a log
# line is still one, a longer token that begins with `AIza` is something else (gitleaks' own near miss).
_GOOGLE_KEY = re2.compile(
    r"(?:^|[^A-Za-z0-9_./-])(?P<secret>AIza[0-9A-Za-z_-]{30,35})(?:[^0-9A-Za-z_-]|$)",
    _OPTIONS,
)
_AWS_SECRET = re2.compile(r"(?:^|[^A-Za-z0-9/+=])(?P<secret>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)", _OPTIONS)
_AWS_KEY_ID = re2.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}\b", _OPTIONS)
_AWS_SECRET_LABEL = re2.compile(r"(?i)(?:aws.{0,24}?secret|secret.?access.?key)[^\n]{0,24}$", _OPTIONS)
_AWS_WINDOW = 160

_PREFILTER = re2.compile(
    r"(?i)://[^\s/@]*:[^\s@]*@|pass|secret|key\b|bearer|basic|token|\bbot\b|ssws|PRIVATE KEY|eyJ|[A-Za-z0-9/+]{40}"
    r"|sk-|gh[pousr]_|github_pat_|xox[abposr]-|AIza|_live_|_test_",
    _OPTIONS,
)

# A lone token: what a whole text is when a tool printed one credential. Passwords and keys hold
# punctuation (`P@ssw0rd$1`, `sk_...#P7r5&@*x`, `app_id|secret`, `...zLx!t`), not only base64's; quotes,
# brackets, `,` and `;` are markup or lists, `?` a query; `%XX` is URL encoding (judged decoded).
_LONE_TOKEN = re2.compile(r"^[ \t\r\n\"'`]*(?P<secret>[A-Za-z0-9_~+/.=:!#$&*@|%-]{10,512})[ \t\r\n\"'`]*$", _OPTIONS)
# `trace_id=<uuid>`, `sha256:<digest>`, `iv:<base64>`, `refreshInterval:`, a command line's
# `-Dkeytab=/tmp/app.keytab`: a named field, not one token. (Judging the value alone instead, as
# `session=<random>` would want, masked look-alike near misses `name=value` on the held-out half; so did
# taking a second `=` in the value, or a name without a vowel, for a sign that `=` is in the token's
# alphabet: each caught a bare secret of that shape and masked as many near misses.)
_FIELD_PREFIX = re2.compile(
    r"^(?:-{0,2}(?P<name>[A-Za-z](?:[A-Za-z_.-]*[A-Za-z])?)|sha\d*|md5|blake2[bs]?|crc32)[=:]", _OPTIONS
)
# A name ends with a letter; one of random letters before the `=` is no field's either: a token whose
# alphabet has `=` in it (`cjbfbdlfhx=hv695c...`, `dnkey-=kqly...`). Judged on 5 letter pairs or more:
# short names of protocols and tools read as random (`mysql`, `smtp`, `jwks`).
_MIN_NAME_PAIRS = 5
# URL encoding (`%2F`): the token is judged decoded; a `%` without two hex digits is a template or a rate.
_PERCENT = re2.compile(r"%[0-9A-Fa-f]{2}", _OPTIONS)
# The punctuation passwords hold (`!#$&*@|`) is one only inside a token without `/` or `:`: at an end,
# or beside a path, it is a shebang, a fragment, a package spec (`x@npm:2.0.0`) or a cut query (`...&`);
# `$NAME` is a variable, `name@host` an address.
_PUNCTUATION = frozenset("!#$&*@|")
_VARIABLE = re2.compile(r"\$\{?[A-Z_][A-Z0-9_]{2,}", _OPTIONS)
_USER_AT = re2.compile(r"^[A-Za-z0-9._+-]{3,}@", _OPTIONS)
# Git object ids, container ids, SHA-256 digests: what `git rev-parse`, `docker run -d` or `sha256sum`
# print alone all the time. (32 hex digits stand alone as often as API keys as MD5 sums: masked.)
_HEX_DIGEST = re2.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64}|[0-9A-F]{40}|[0-9A-F]{64})$", _OPTIONS)
_LONG_NUMBER = re2.compile(r"^[0-9]{16,}$", _OPTIONS)
# (`0x4c756146`: a hex literal, a number.)
_PATH_OR_WORDS = re2.compile(
    r"^(?:[./~]|[A-Za-z]+://|[a-z]+(?:[._:-][a-z]+)*$|\d{1,15}$|\d+(?:[.:-]\d+)+$|0[xX][0-9A-Fa-f]+$)", _OPTIONS
)
# Under 16 characters a token is judged harder: no `.` or `:` (versions, times, hosts), letters, digits
# and both cases, and few vowels (words and product names have about 40 %, random letters 19 %).
_MIN_LONG = 16
_SHORT_TOKEN = re2.compile(r"^[A-Za-z0-9_~+/=!#$&*@|-]{10,15}$", _OPTIONS)
_MAX_SHORT_VOWELS = 0.4
_CAMEL_WORDS = re2.compile(r"^[a-z]?(?:[A-Z]?[a-z]{2,})+[0-9]{0,4}$", _OPTIONS)  # HelloWorld2024


def _aws_secret_like(token: str) -> bool:
    """Mixed case like a real key: a git SHA or a hex id (one case, hex only) is not one."""
    return (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() or c in "/+" for c in token)
    )


def _aws_secrets(text: str) -> list[Finding]:
    out: list[Finding] = []
    ids: list[tuple[int, int]] | None = None
    for m in _AWS_SECRET.finditer(text):
        start, end = m.span(1)
        if not _aws_secret_like(text[start:end]):
            continue
        if ids is None:
            ids = [k.span() for k in _AWS_KEY_ID.finditer(text)]
        near_id = any(s - _AWS_WINDOW <= end and start <= e + _AWS_WINDOW for s, e in ids)
        if near_id or _AWS_SECRET_LABEL.search(text[max(0, start - 64) : start]) is not None:
            out.append(Finding(start, end, "context:aws-secret-key"))
    return out


def _up_to_space(text: str, start: int, end: int) -> str:
    """The match with the rest of its word (`xoxp-1-2-3-####`: the filler decides)."""
    while end < len(text) and not text[end].isspace() and text[end] not in "\"'`,;":
        end += 1
    return text[start:end]


def _letters_and_digits(token: str) -> bool:
    return any(c.isalpha() for c in token) and any(c.isdigit() for c in token)


def _random_token(token: str) -> bool:
    """Whether one token looks random: not a digest, path, word, number, placeholder or a vendor's
    look-alike, with enough character classes and entropy for its alphabet (and, under 16 characters,
    the stricter `_SHORT_TOKEN` tests)."""
    random_letters = len(token) >= _MIN_LONG and _LETTERS_ONLY.search(token) is not None and _unpronounceable(token)
    if (
        _digest(token)
        or _name_of_parts(token)
        or (_PATH_OR_WORDS.search(token) and not random_letters)
        # A text that is one token of letters and digits typed as runs (`12345678-ABCD-ABCD-ABCD-1234567890AB`)
        # is masked all the same: gitleaks' own tests take such values for keys, and masking a stand-in hides
        # nothing a reader needs. (A run of the digits or the alphabet alone is filler; and beside a key's
        # name, where near misses are typed so, runs still mark stand-ins.)
        or is_placeholder(token, sequences=not _letters_and_digits(token))
        # A vendor's prefix: gitleaks' rule for that format has run on this text; what it did not find
        # is a look-alike (a wrong length, a missing checksum), as its own tests' near misses are.
        or default_rules().vendor_prefix(token)
    ):
        return False
    lower, upper = any(c.islower() for c in token), any(c.isupper() for c in token)
    digit = any(c.isdigit() for c in token)
    if len(token) < _MIN_LONG:
        letters = [c for c in token if c.isalpha()]
        vowels = sum(c in "aeiouAEIOU" for c in letters)
        if not digit or _SHORT_TOKEN.search(token) is None:
            return False
        # One case: no hex (a short git SHA) and no pronounceable words (`server01prod`, `node18lts`).
        if not (lower and upper) and (
            set(token) <= _HEX or not (_unpronounceable(token) or _scattered_digits(token) or _random_short(token))
        ):
            return False
        if vowels >= _MAX_SHORT_VOWELS * len(letters) or _CAMEL_WORDS.search(token) is not None:
            return False
    classes = lower + upper + digit
    if classes < 2 and _LONG_NUMBER.search(token) is None and not random_letters:
        return False
    return shannon_entropy(token) >= _entropy_floor(token)


# Random letters: about one in five is a vowel and consonants come in long runs; words and names of one
# case (`getsnapshotdrafts`, `kubernetes`) have two in five and runs of at most three or four (`y`
# counts as neither: `matchboxtwentytwo`).
_MAX_RANDOM_VOWELS = 0.3
_CONSONANT_RUN = re2.compile(r"(?i)[b-df-hj-np-tv-xz]{5}", _OPTIONS)


# A name made of words and numbers (`claude-3-5-sonnet-20241022`, `text-embedding-3-large`,
# `x86_64-linux-gnu`, `web-7d4b9c8f5-x2kqp`): each part is a number, at most four characters, a word
# (one case or capitalised, pronounceable) with a number before or after it, or beside a word a
# Kubernetes suffix.
_PART_SPLIT = re2.compile(r"[-_.]+", _OPTIONS)
_WORD_PART = re2.compile(r"^[0-9]{0,4}(?P<word>[A-Z]?[a-z]+|[A-Z]+)[0-9]{0,8}$", _OPTIONS)
_SHORT_PART = 4
# The suffixes Kubernetes adds to a name (`web-7d4b9c8f5-x2kqp`: a pod template's hash, a pod's id) are
# drawn from its alphabet without vowels, 0, 1 and 3: beside a word, such a part is a name's.
_KUBERNETES_HASH = re2.compile(r"^[bcdfghjklmnpqrstvwxz2456789]{5,10}$", _OPTIONS)


def _name_of_parts(token: str) -> bool:
    parts = [p for p in _PART_SPLIT.split(token) if p]
    if len(parts) < 2 or reads_random(token, min_pairs=_SHORT_PAIRS, below=_SHORT_RANDOM_BELOW):
        return False  # random letters in short parts: `dffx-ktqn-ck1z-6x82`, a licence key's groups
    words = hashes = 0
    for part in parts:
        if part.isdigit() or len(part) <= _SHORT_PART:
            words += part.isalpha()  # `web`, `api`, `db`
            continue
        m = _WORD_PART.search(part)
        if m is not None and not _unpronounceable(m.group("word")):
            words += 1
        elif _KUBERNETES_HASH.search(part) is not None:
            hashes += 1
        else:
            return False
    return words > 0 or hashes == 0


# Letters of one case, with a token's separators between them (`kqzvbnwtrx-pqlmhgsd`).
_LETTERS_ONLY = re2.compile(r"^[A-Za-z]+(?:[-_.][A-Za-z]+)*$", _OPTIONS)
# A short token of one case reads random when its letters (digits taken out) do, on fewer pairs and a
# lower bar than a long one: on 50,000 short identifiers of one case with digits from installed
# packages' code and docs (`utf8mb4`, `sha256sum`, `x86intrcc`), 48 more read random (`cmpxchg486`,
# `AVX512VBMI`); of random tokens of 10-14 characters, 81 % instead of 57 % are found.
_SHORT_PAIRS = 6
_SHORT_RANDOM_BELOW = -2.0


def _random_short(token: str) -> bool:
    letters = "".join(c for c in token if c.isalpha())
    return token.isalnum() and reads_random(letters, min_pairs=_SHORT_PAIRS, below=_SHORT_RANDOM_BELOW)


_DIGIT_GROUP = re2.compile(r"[0-9]+", _OPTIONS)
_MIN_DIGIT_GROUPS = 3


def _scattered_digits(token: str) -> bool:
    """Digits in three places or more, among few vowels: `k7qx2mw9prt` (names put their digits in one
    or two places: `server01prod`, `nginx1deploymnt`)."""
    letters = [c for c in token if c.isalpha()]
    vowels = sum(c in "aeiouAEIOU" for c in letters)
    if not token.isalnum():
        return False  # `chatglm3-6b-32k`, `qwen2-7b-int4`: a name's parts, not one random run
    groups = len(_DIGIT_GROUP.findall(token))
    return groups >= _MIN_DIGIT_GROUPS and vowels < _MAX_RANDOM_VOWELS * len(letters)


def _unpronounceable(token: str) -> bool:
    """Whether a token's letters read as random: few vowels and five consonants in a row, or letter
    pairs that English words seldom hold (`randomness`: random letters hold many vowels by chance)."""
    letters = [c for c in token if c.isalpha()]
    vowels = sum(c in "aeiouAEIOU" for c in letters)
    few_vowels = vowels < _MAX_RANDOM_VOWELS * len(letters) and _CONSONANT_RUN.search(token) is not None
    return few_vowels or reads_random(token)


def _odd_punctuation(token: str) -> bool:
    """Whether the token's password punctuation says it is something else (see `_PUNCTUATION`)."""
    if not _PUNCTUATION.intersection(token):
        return False
    return (
        token[0] in _PUNCTUATION
        or token[-1] in _PUNCTUATION
        or "/" in token
        or ":" in token
        or _VARIABLE.search(token) is not None
        or _USER_AT.search(token) is not None
    )


def _field(token: str) -> bool:
    """Whether the token is `name=value` or `name:value` (see `_FIELD_PREFIX`)."""
    m = _FIELD_PREFIX.search(token)
    if m is None:
        return False
    name = m.group("name")
    return name is None or not reads_random(name, min_pairs=_MIN_NAME_PAIRS)


def _digest(token: str) -> bool:
    """A hex digest (`_HEX_DIGEST`); 40 or 64 digits alone are a number, no SHA's print (one in 10**8)."""
    return _HEX_DIGEST.search(token) is not None and not token.isdigit()


def _url_password(secret: str) -> bool:
    """Whether what stands between `user:` and `@` is a password, not `port/path` (`host:8443/a@b`)."""
    head, slash, _ = secret.partition("/")
    return not (slash and (head.isdigit() or not head))


def lone_token(text: str) -> list[Finding]:
    """The whole text, when it is one random-looking token (not a UUID, digest, path, number or word)."""
    if len(text) > 600:
        return []
    m = _LONE_TOKEN.search(text)
    if m is None:
        return []
    start, end = m.span(1)
    token = text[start:end]
    if "%" in token:
        if _PERCENT.search(token) is None:
            return []  # `%APPDATA%`, `50%`, `TestSource%Password%`
        token = urllib.parse.unquote(token)
        if any(c.isspace() for c in token):
            return []  # `hello%20world`: words
    if _field(token) or _odd_punctuation(token) or not _random_token(token):
        return []
    return [Finding(start, end, "context:lone-token")]


# The entropy a random token of a small alphabet reaches is lower: 16 random digits have 2.9 bits per
# character on average (below 2.5 one time in twenty, below 2.2 one in 300), 16 hex digits 3.4. The
# floor follows the alphabet so that a client id of 16 digits or `hex8:hex8` counts; filler and
# sequences stay out (`is_placeholder`, and 2.2 bits is still more than `1111222233334444`,
# `1000000000012345` or `4111111111111111` carry; compact timestamps have their own test).
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF:-")


# A compact timestamp (`20261205171407123`, `20261205-171407`): digits that are not random.
_COMPACT_DATE = re2.compile(r"^(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])", _OPTIONS)


def _entropy_floor(token: str) -> float:
    return min(_alphabet_floor(token), math.log2(len(token)) - _SHORT_ENTROPY_MARGIN)


# A token of n characters holds at most log2(n) bits a character; a random one of 10-15 characters from
# [a-z0-9] sits 0.4-0.6 under that bound (one in twenty of 10 characters below 2.72, of 12 below 2.92),
# so a short token's floor is the bound less 0.6 where that is under its alphabet's floor (3.0 would
# turn away a third of random 10-character tokens; filler and words were ruled out before).
_SHORT_ENTROPY_MARGIN = 0.6


def _alphabet_floor(token: str) -> float:
    chars = set(token)
    if chars <= _HEX and _COMPACT_DATE.search(token) is not None:
        return 3.0
    if chars <= _DIGITS:
        return 2.2
    if chars <= _HEX:
        return 2.7
    return 3.0


def findings(text: str, *, whole_text: bool = True) -> list[Finding]:
    out = lone_token(text) if whole_text else []
    if _PREFILTER.search(text) is None:
        return out
    for pattern, name in (
        (_URL_CREDENTIALS, "url-credentials"),
        (_AUTH_SCHEME, "auth-scheme"),
        (_PRIVATE_KEY, "private-key"),
        (_JWT, "jwt"),
        (_PREFIXED_KEY, "vendor-prefix"),
        (_GOOGLE_KEY, "vendor-prefix"),
    ):
        for m in pattern.finditer(text):
            start, end = m.span(1)
            if name == "url-credentials" and not _url_password(text[start:end]):
                continue
            if end > start and not (name == "vendor-prefix" and is_placeholder(_up_to_space(text, start, end))):
                out.append(Finding(start, end, f"context:{name}"))
    for m in _NAMED_IN_PROSE.finditer(text):
        start, end = m.span(1)
        token = text[start:end].rstrip(".!#$&*@|%-")
        if _random_token(token) and not _field(token) and not is_placeholder(token):
            out.append(Finding(start, start + len(token), "context:named-in-prose"))
    out += _aws_secrets(text)
    return out
