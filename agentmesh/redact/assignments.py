"""One grammar for "a secret-named key is given a value", in the syntaxes config files, code, logs and
command lines use, so that a secret of a format no rule knows is still masked by its name.

    key      an identifier holding a secret word: password, passwd, pwd, pass, passphrase, secret, token,
             credential(s), creds, auth, authorization, cookie, or api/access/private/secret/signing/
             encryption/master/session/client/app/account/license + key (camelCase, snake_case, kebab,
             dotted, `$php`, `@attr`, quoted, `["indexed"]` keys alike)
    operator =  :=  ::=  :::=  ?=  ??=  .=  +=  =>  ->  :  ,  (after a quoted key: `setProperty("K", "v")`),
             typed declarations (`var k string =`, `val k: String =`), HTTP header colons
    value    "double" (with escapes), 'single', `backticks`, \\"escaped\\" (JSON in a string), or bare up to a
             space, quote, `,;&|<>(){}[]\\` (so `A=1\\nB=2` and query strings end right); an auth scheme
             (`Bearer`, `Basic`, `Token`, ...) before it is kept

plus the forms that do not fit `key op value`: XML elements (`<dbPassword>v</dbPassword>`, also across
lines) and name/value attribute pairs (`<add key="ApiKey" value="v"/>`), JSON name/value objects
(`{"name": "API_TOKEN", "value": "v"}`), YAML block scalars (`token: |` then the value indented), command
line flags (`--password v`, `--password=v`), `user:password` after `-u`/`--user`/`--auth`, SQL's
`IDENTIFIED BY 'v'` and `PASSWORD 'v'`, and Cookie headers (the whole value).

A key is secret-named by its words (`xToken` -> x, token), unless its last word says it holds metadata
(`token_type`, `password_policy`, `secret_name`, `api_key_id`, `max_tokens`, `tokenizer` ...) or it names
something public (`public_key`, `csrf_token`). A value is masked unless it is visibly not a secret: empty,
a variable or template reference (`$X`, `${X}`, `{{ x }}`, `%X%`, `<placeholder>`), a mask (`***`, `xxx`,
`[REDACTED]`), a literal (`null`, `true`, `none`), a word like `changeme`, code (`getToken()`,
`os.environ`), or prose (`passwd: No such file or directory`). All patterns are RE2 (linear time).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import re2

from agentmesh.redact.placeholders import is_placeholder
from agentmesh.redact.spans import Finding

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 32 << 20

# A secret word somewhere in an identifier; the key's words are checked in Python (`secret_key`).
_WORD = (
    r"pass(?:word|wd|phrase)?|pwd|secret|token|credentials?|creds|auth(?:orization)?|cookie"
    r"|(?:api|access|private|priv|secret|signing|encryption|master|session|client|app|account|license)[_.-]?key"
)
_KEY_BODY = rf"[\w.$@-]*(?:{_WORD})[\w.-]*"
_TYPE = r"[A-Za-z_][\w.<>\[\]*?]*"
_OPERATOR = (
    rf"[ \t]*(?:\?\?=|:{{1,3}}=|\?=|\.=|\+=|=>|->|=|:[ \t]*{_TYPE}[ \t]*=|[ \t]{_TYPE}[ \t]*=|:|,)"
    r"[ \t]*"
)
_SCHEME = r"(?:(?:bearer|basic|token|digest|bot|oauth|ssws|apikey|api-token|flyv1)[ \t]+)?"
_VALUE = (
    r'(?:"(?P<dq>(?:[^"\\\n]|\\.)*)"'
    r"|'(?P<sq>[^'\n]*)'"
    r"|`(?P<bq>[^`]*)`"
    r'|\\"(?P<eq>(?:[^"\\\n]|\\[^"\n])*)\\"'
    r"|(?P<bare>[^\s\"'`,;&|<>(){}\[\]\\]+))"
)
_ASSIGNMENT = re2.compile(
    rf"(?i)(?P<open>\\?[\"'`]?)(?P<key>{_KEY_BODY})(?P<close>\\?[\"'`]?\]?)(?P<op>{_OPERATOR}){_SCHEME}{_VALUE}",
    _OPTIONS,
)
_XML_ELEMENT = re2.compile(
    rf"(?i)<(?P<key>[\w:.-]*(?:{_WORD})[\w:.-]*)(?:[ \t][^<>]*)?>[ \t\r\n]*(?P<bare>[^<>\s][^<>\n]*?)[ \t\r\n]*</",
    _OPTIONS,
)
_XML_PAIR = re2.compile(
    rf"(?i)\b(?:name|key)[ \t]*=[ \t]*\"(?P<key>[^\"<>]*(?:{_WORD})[^\"<>]*)\""
    r"[ \t\r\n]+value[ \t]*=[ \t]*\"(?P<dq>[^\"]*)\"",
    _OPTIONS,
)
_JSON_PAIR = re2.compile(
    rf"(?i)\"name\"[ \t]*:[ \t]*\"(?P<key>[^\"]*(?:{_WORD})[^\"]*)\""
    r"[ \t\r\n]*,[ \t\r\n]*\"value\"[ \t]*:[ \t]*\"(?P<dq>(?:[^\"\\\n]|\\.)*)\"",
    _OPTIONS,
)
_YAML_BLOCK = re2.compile(
    rf"(?i)(?P<key>{_KEY_BODY})[\"']?[ \t]*:[ \t]*[|>][-+]?[ \t]*\r?\n[ \t]+(?P<bare>[^\s][^\r\n]*)",
    _OPTIONS,
)
_FLAG = re2.compile(
    rf"(?i)(?:^|[ \t])--?(?P<key>[\w.-]*(?:{_WORD})[\w.-]*)[ \t]+"
    r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"'-][^\s\"']*))",
    _OPTIONS,
)
_USER_PASSWORD = re2.compile(
    r"(?:^|[ \t])(?:-u|--user|--auth|--basic-auth|--proxy-user)(?:=|[ \t]+)[\"']?[^\s:\"']*:(?P<bare>[^\s\"']+)",
    _OPTIONS,
)
_SQL = re2.compile(
    r"(?i)\b(?:identified[ \t]+by|password)[ \t]+(?:'(?P<sq>[^'\n]+)'|\"(?P<dq>[^\"\n]+)\")",
    _OPTIONS,
)
_COOKIE = re2.compile(r"(?im)^[ \t\"'-]*(?:set-)?cookie[\"']?[ \t]*:[ \t]*(?P<bare>[^\r\n]+)", _OPTIONS)

_PREFILTER = re2.compile(rf"(?i){_WORD}", _OPTIONS)

# --- keys

_SECRET_WORDS = frozenset(
    {"password", "passwd", "pwd", "pass", "passphrase", "secret", "secrets", "token", "credential", "credentials"}
    | {"creds", "auth", "authorization", "cookie", "apikey", "privatekey", "secretkey", "accesskey"}
)
_KEY_QUALIFIERS = frozenset(
    {"api", "access", "private", "priv", "secret", "signing", "encryption", "master", "session", "client", "app"}
    | {"account", "license"}
)
# A key whose last word is one of these holds something about the secret, not the secret.
_METADATA_WORDS = frozenset(
    {"name", "names", "id", "ids", "type", "types", "length", "len", "size", "count", "counts", "url", "uri", "urls"}
    | {"endpoint", "file", "files", "path", "paths", "policy", "policies", "variable", "var", "env", "field", "param"}
    | {"prefix", "suffix", "format", "expires", "expiry", "expiration", "ttl", "timeout", "version", "hint", "label"}
    | {"placeholder", "enabled", "required", "min", "max", "limit", "limits", "budget", "used", "total", "tokens"}
    | {"header", "location", "provider", "method", "mode", "store", "manager", "ref", "reference", "arn", "hash"}
    | {"changed", "reset", "strength", "valid", "validity", "rules", "regex", "pattern", "kind", "class", "dir"}
    | {"tokenizer", "tokenize", "tokenized", "index", "idx", "alias", "at", "age", "set", "created", "updated"}
    # Where a credential is checked or comes from (MongoDB's `authSource`, `auth_host`, `token_issuer`).
    | {"source", "host", "hostname", "server", "domain", "realm", "mechanism", "issuer", "audience", "callback"}
    | {"redirect", "username", "email"}
)
# A key that names a thing by what it is for (`keyVaultToStoreSecrets`, `pathForToken`): its head is the
# words before the preposition; `tokenForGithub` still holds a token.
_PREPOSITIONS = frozenset({"to", "for", "of", "from", "with", "in", "into", "on", "by"})
_NOT_SECRET_WORDS = frozenset(
    {
        "public",
        "pub",
        "csrf",
        "xsrf",
        "authenticity",
        "author",
        "authors",
        "authority",
        "max",
        "input",
        "output",
        "prompt",
    }
    | {"completion", "total", "num", "no", "is", "has", "use", "show", "forgot", "reset", "confirm", "keyboard"}
)
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def key_words(key: str) -> list[str]:
    """`xToken` -> [x, token]; `MY_API_KEY` -> [my, api, key]; `db.password` -> [db, password]."""
    return [w.lower() for w in _CAMEL.findall(key)]


def secret_key(key: str) -> bool:
    """Whether a key names a secret (by its words; see the module's docstring)."""
    words = key_words(key)
    cut = next((i for i, w in enumerate(words) if w in _PREPOSITIONS), len(words))
    words = words[:cut] if cut > 0 else words
    if words[-3:] == ["private", "key", "id"]:
        return True  # a service account's key id is as sensitive as its name suggests
    if not words or words[-1] in _METADATA_WORDS or _NOT_SECRET_WORDS.intersection(words):
        return False
    if _SECRET_WORDS.intersection(words):
        return True
    return any(w == "key" and i > 0 and words[i - 1] in _KEY_QUALIFIERS for i, w in enumerate(words))


# --- values

_CODE_REFERENCE = re2.compile(r"^(?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*$", _OPTIONS)
# Letters and separators only: a name (`api-key`, `PASSWORD`, `dbPassword`), not a secret; gitleaks'
# generic rule allows the same (`^[a-zA-Z_.-]+$`).
_NAME_LIKE = re2.compile(r"^[A-Za-z]+(?:[-_.][A-Za-z]+)*$", _OPTIONS)
_SCHEMES = frozenset({"bearer", "basic", "token", "digest", "bot", "oauth", "ssws", "apikey", "api-token", "flyv1"})
_MIN_LENGTH = 4


def plausible_value(value: str, quoted: bool, text: str, end: int) -> bool:
    """Whether a value could be a secret (see the module's docstring)."""
    v = value.strip()
    if len(v) < _MIN_LENGTH or is_placeholder(v) or _NAME_LIKE.search(v) is not None or v.startswith("<"):
        return False  # (`<` starts markup: `<xsd:element ...`)
    if not quoted:
        if end < len(text) and text[end] in "([":
            return False  # getToken() / password(...) / ENC[AES256_GCM,...]
        if _CODE_REFERENCE.search(v) is not None and not any(c.isdigit() for c in v):
            return False  # os.environ / self.password / config.secret
        if v.startswith(("/", "~/", "./", "../")):
            return False  # PWD=/tmp: a path
    return True


# --- matching

_AFTER_QUOTE = frozenset(" \t\r\n,;:)]}>/\\&+|")


def _closed(text: str, after: int) -> bool:
    """Whether a quoted value's closing quote ends it: a delimiter, or the end of the text, follows."""
    return after >= len(text) or text[after] in _AFTER_QUOTE


_VALUE_GROUPS = (("dq", True), ("sq", True), ("bq", True), ("eq", True), ("bare", False))


def _value_span(pattern: Any, m: Any) -> tuple[int, int, bool] | None:
    """The value's span (RE2's match takes group numbers only) and whether it was quoted."""
    for name, quoted in _VALUE_GROUPS:
        index = pattern.groupindex.get(name)
        if index is not None:
            start, end = m.span(index)
            if start >= 0:
                return start, end, quoted
    return None


def _candidates(text: str) -> Iterator[tuple[str, Any, Any, str]]:
    for pattern, name in (
        (_ASSIGNMENT, "assignment"),
        (_XML_ELEMENT, "xml-element"),
        (_XML_PAIR, "name-value"),
        (_JSON_PAIR, "name-value"),
        (_YAML_BLOCK, "yaml-block"),
        (_FLAG, "flag"),
    ):
        for m in pattern.finditer(text):
            yield name, pattern, m, m.group("key")


def findings(text: str) -> list[Finding]:
    """The values of secret-named keys in `text`."""
    out: list[Finding] = []
    if _PREFILTER.search(text) is not None:
        for name, pattern, m, key in _candidates(text):
            if not secret_key(key.strip("$@\"'`\\[]")):
                continue
            span = _value_span(pattern, m)
            if span is None:
                continue
            start, end, quoted = span
            if text[start - 1 : start] == "`" and any(c.isspace() for c in text[start:end]):
                continue  # password=`cat /run/secrets/db`: a shell's command substitution
            if name == "flag" and not quoted and ":" in text[start:end]:
                start += text.index(":", start, end) + 1 - start  # --auth user:password: the password
            if name == "assignment":
                op = m.group("op").strip()
                if op == "," and not (m.group("close") and quoted):
                    continue  # `f("KEY", "value")` only: a bare `token, x` is a list, not an assignment
                if not quoted and text[start:end].lower() in _SCHEMES and text[end : end + 1] in (" ", "\t"):
                    continue  # `Authorization: Bearer <token>`: the scheme, then no value the grammar reads
            closing = 2 if text[end : end + 2] == '\\"' else 1  # \"escaped\" quotes close with two
            if quoted and not _closed(text, end + closing):
                continue  # `"<xsd:element name="Agency...`: the quote closed inside a longer string
            if plausible_value(text[start:end], quoted, text, end):
                out.append(Finding(start, end, f"assignment:{name}"))
    for pattern, name in ((_SQL, "sql"), (_COOKIE, "cookie")):
        for m in pattern.finditer(text):
            span = _value_span(pattern, m)
            if span is not None and plausible_value(text[span[0] : span[1]], True, text, span[1]):
                out.append(Finding(span[0], span[1], f"assignment:{name}"))
    for m in _USER_PASSWORD.finditer(text):
        start, end = m.span(1)
        if plausible_value(text[start:end], False, text, end):
            out.append(Finding(start, end, "assignment:user-password"))
    return out
