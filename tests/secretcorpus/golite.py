"""A small interpreter for the subset of Go that gitleaks' rule files use to build their samples.

gitleaks' rule tests (cmd/generate/config/rules/*.go, vendored in ./gitleaks) are Go functions that build
a `config.Rule`, then lists of true and false positives (string literals, `utils.GenerateSampleSecrets`
templates filled with `secrets.NewSecret(regex)`, `fmt.Sprintf`, loops over maps), and hand them to
`utils.Validate`. The gitleaks module needs Go 1.24 and its module proxy; neither is here (Debian's Go is
1.19). So this module runs those same files: a lexer with Go's semicolon rule, a parser for the statements
and expressions the files use, and an evaluator whose built-ins are the Go library calls they make. The
template table of `GenerateSampleSecrets` and the alphabets of `utils.AlphaNumeric` & co. are read from the
vendored utils/*.go, not copied. Whatever is outside the subset raises `GoError` naming the construct, so
a refreshed rule set that needs more fails loudly instead of silently losing samples.

Map iteration is in sorted key order (Go's is random), so a seeded run is reproducible.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


class GoError(Exception):
    """Something outside the supported subset, or a runtime error in the interpreted code."""


# ----------------------------------------------------------------------------- lexer

_KEYWORDS = {
    "break", "case", "chan", "const", "continue", "default", "defer", "else", "fallthrough", "for", "func",
    "go", "goto", "if", "import", "interface", "map", "package", "range", "return", "select", "struct",
    "switch", "type", "var",
}  # fmt: skip
_OPERATORS = sorted(
    [
        "...", "<<=", ">>=", "&^=", ":=", "==", "!=", "<=", ">=", "&&", "||", "++", "--", "+=", "-=", "*=", "/=",
        "<<", ">>", "&^", "<-", "+", "-", "*", "/", "%", "&", "|", "^", "<", ">", "=", "!", "(", ")", "[", "]",
        "{", "}", ",", ";", ".", ":", "~",
    ],
    key=len,
    reverse=True,
)  # fmt: skip


@dataclass(frozen=True)
class Tok:
    kind: str  # ident, keyword, string, char, number, op, eof
    value: str
    line: int


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"'}


def _unquote(body: str, line: int) -> str:
    """The value of an interpreted string literal's body (Go escapes)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == "x":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif e == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif e == "U":
            out.append(chr(int(body[i + 2 : i + 10], 16)))
            i += 10
        elif e in "01234567":
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            raise GoError(f"line {line}: unknown escape \\{e}")
    return "".join(out)


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i, line, n = 0, 1, len(src)

    def needs_semicolon() -> bool:
        if not toks:
            return False
        last = toks[-1]
        if last.kind in ("ident", "string", "char", "number"):
            return True
        if last.kind == "keyword":
            return last.value in ("break", "continue", "fallthrough", "return")
        return last.kind == "op" and last.value in (")", "]", "}", "++", "--")

    while i < n:
        c = src[i]
        if c == "\n":
            if needs_semicolon():
                toks.append(Tok("op", ";", line))
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif src.startswith("//", i):
            end = src.find("\n", i)
            i = n if end < 0 else end
        elif src.startswith("/*", i):
            end = src.index("*/", i + 2)
            newlines = src.count("\n", i, end)
            if newlines and needs_semicolon():
                toks.append(Tok("op", ";", line))
            line += newlines
            i = end + 2
        elif c == "`":
            end = src.index("`", i + 1)
            # Carriage returns are discarded from raw string literals.
            toks.append(Tok("string", src[i + 1 : end].replace("\r", ""), line))
            line += src.count("\n", i, end)
            i = end + 1
        elif c == '"':
            j = i + 1
            while src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("string", _unquote(src[i + 1 : j], line), line))
            i = j + 1
        elif c == "'":
            j = i + 1
            while src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("char", _unquote(src[i + 1 : j], line), line))
            i = j + 1
        elif c.isdigit():
            m = re.compile(r"0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?").match(src, i)
            assert m is not None
            toks.append(Tok("number", m.group(0).replace("_", ""), line))
            i = m.end()
        elif c.isalpha() or c == "_":
            m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(src, i)
            assert m is not None
            word = m.group(0)
            toks.append(Tok("keyword" if word in _KEYWORDS else "ident", word, line))
            i = m.end()
        else:
            for op in _OPERATORS:
                if src.startswith(op, i):
                    toks.append(Tok("op", op, line))
                    i += len(op)
                    break
            else:
                raise GoError(f"line {line}: unexpected character {c!r}")
    if needs_semicolon():
        toks.append(Tok("op", ";", line))
    toks.append(Tok("eof", "", line))
    return toks


# ----------------------------------------------------------------------------- parser
# The AST is tuples: (kind, ...). Types are kept as strings ("[]string", "map[string][]string", "config.Rule").


@dataclass
class FuncDecl:
    name: str
    params: list[str]
    variadic: bool
    body: list[Any]


@dataclass
class File:
    package: str
    imports: dict[str, str]  # local name -> import path
    funcs: dict[str, FuncDecl] = field(default_factory=dict)
    vars: list[tuple[str, Any]] = field(default_factory=list)


class Parser:
    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.pos = 0
        self.no_composite = 0  # >0 inside if/for/switch headers (Go's composite-literal ambiguity)

    # -- helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.pos]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.pos + k, len(self.toks) - 1)]

    def at(self, value: str) -> bool:
        return self.tok.kind in ("op", "keyword") and self.tok.value == value

    def take(self, value: str | None = None, kind: str | None = None) -> Tok:
        t = self.tok
        if (value is not None and (t.value != value or t.kind not in ("op", "keyword"))) or (
            kind is not None and t.kind != kind
        ):
            raise GoError(f"line {t.line}: expected {value or kind}, found {t.kind} {t.value!r}")
        self.pos += 1
        return t

    def skip_semis(self) -> None:
        while self.at(";"):
            self.pos += 1

    # -- file
    def parse_file(self) -> File:
        self.skip_semis()
        self.take("package")
        f = File(self.take(kind="ident").value, {})
        self.skip_semis()
        while self.at("import"):
            self.take("import")
            specs = []
            if self.at("("):
                self.take("(")
                self.skip_semis()
                while not self.at(")"):
                    specs.append(self._import_spec())
                    self.skip_semis()
                self.take(")")
            else:
                specs.append(self._import_spec())
            for alias, path in specs:
                f.imports[alias] = path
            self.skip_semis()
        while self.tok.kind != "eof":
            if self.at("func"):
                decl = self._func_decl()
                f.funcs[decl.name] = decl
            elif self.at("var") or self.at("const"):
                self.pos += 1
                groups = []
                if self.at("("):
                    self.take("(")
                    self.skip_semis()
                    while not self.at(")"):
                        groups.append(self._var_spec())
                        self.skip_semis()
                    self.take(")")
                else:
                    groups.append(self._var_spec())
                for names, _type, values in groups:
                    for name, value in zip(names, values, strict=True):
                        f.vars.append((name, value))
            else:
                raise GoError(f"line {self.tok.line}: unsupported top-level {self.tok.value!r}")
            self.skip_semis()
        return f

    def _import_spec(self) -> tuple[str, str]:
        alias = self.take(kind="ident").value if self.tok.kind == "ident" else None
        path = self.take(kind="string").value
        return alias or path.rsplit("/", 1)[-1], path

    def _var_spec(self) -> tuple[list[str], str | None, list[Any]]:
        names = [self.take(kind="ident").value]
        while self.at(","):
            self.take(",")
            names.append(self.take(kind="ident").value)
        type_ = None if self.at("=") else self.parse_type()
        values: list[Any] = []
        if self.at("="):
            self.take("=")
            values = self.expr_list()
        else:
            values = [("zero", type_)] * len(names)
        return names, type_, values

    def _func_decl(self) -> FuncDecl:
        self.take("func")
        name = self.take(kind="ident").value
        params, variadic = self._params()
        # Results: a type, or a parenthesised list.
        if self.at("("):
            self._params()
        elif not self.at("{"):
            self.parse_type()
        return FuncDecl(name, params, variadic, self.block())

    def _params(self) -> tuple[list[str], bool]:
        self.take("(")
        names: list[str] = []
        variadic = False
        while not self.at(")"):
            group = [self.take(kind="ident").value]
            while self.at(","):
                self.take(",")
                group.append(self.take(kind="ident").value)
            if self.at("..."):
                self.take("...")
                variadic = True
            if not (self.at(")") and len(group) == 1 and not names):
                self.parse_type()
            names += group
            if self.at(","):
                self.take(",")
        self.take(")")
        return names, variadic

    def parse_type(self) -> str:
        if self.at("*"):
            self.take("*")
            return "*" + self.parse_type()
        if self.at("["):
            self.take("[")
            self.take("]")
            return "[]" + self.parse_type()
        if self.at("map"):
            self.take("map")
            self.take("[")
            key = self.parse_type()
            self.take("]")
            return f"map[{key}]{self.parse_type()}"
        name = self.take(kind="ident").value
        if self.at(".") and self.peek().kind == "ident":
            self.take(".")
            name += "." + self.take(kind="ident").value
        return name

    # -- statements
    def block(self) -> list[Any]:
        self.take("{")
        saved, self.no_composite = self.no_composite, 0
        stmts = []
        self.skip_semis()
        while not self.at("}"):
            stmts.append(self.statement())
            self.skip_semis()
        self.take("}")
        self.no_composite = saved
        return stmts

    def statement(self) -> Any:
        t = self.tok
        if t.kind == "keyword":
            if t.value == "return":
                self.take("return")
                return ("return", [] if self.at(";") or self.at("}") else self.expr_list())
            if t.value in ("continue", "break"):
                self.pos += 1
                return (t.value,)
            if t.value in ("var", "const"):
                self.pos += 1
                if not self.at("("):
                    names, _type, values = self._var_spec()
                    return ("define", names, values)
                self.take("(")
                self.skip_semis()
                specs = []
                while not self.at(")"):
                    names, _type, values = self._var_spec()
                    specs.append(("define", names, values))
                    self.skip_semis()
                self.take(")")
                return ("block", specs)
            if t.value == "if":
                return self._if()
            if t.value == "for":
                return self._for()
            raise GoError(f"line {t.line}: unsupported statement {t.value!r}")
        return self.simple_statement()

    def simple_statement(self) -> Any:
        lhs = self.expr_list()
        if self.at(":="):
            self.take(":=")
            if self.at("range"):
                self.take("range")
                return ("range", [n[1] for n in lhs], self.expr())
            return ("define", [n[1] for n in lhs], self.expr_list())
        if self.at("="):
            self.take("=")
            if self.at("range"):
                self.take("range")
                return ("range", [n[1] for n in lhs], self.expr())
            return ("assign", lhs, self.expr_list())
        for op in ("+=", "-="):
            if self.at(op):
                self.take(op)
                return ("assign", lhs, [("binary", op[0], lhs[0], self.expr())])
        for op in ("++", "--"):
            if self.at(op):
                self.take(op)
                return ("assign", lhs, [("binary", op[0], lhs[0], ("lit", 1))])
        if len(lhs) != 1:
            raise GoError(f"line {self.tok.line}: expression list as a statement")
        return ("expr", lhs[0])

    def _if(self) -> Any:
        self.take("if")
        self.no_composite += 1
        init = None
        stmt = self.simple_statement()
        if self.at(";"):
            self.take(";")
            init = stmt
            cond = self.expr()
        else:
            if stmt[0] != "expr":
                raise GoError(f"line {self.tok.line}: if without a condition")
            cond = stmt[1]
        self.no_composite -= 1
        then = self.block()
        other: list[Any] = []
        if self.at("else"):
            self.take("else")
            other = [self._if()] if self.at("if") else self.block()
        return ("if", init, cond, then, other)

    def _for(self) -> Any:
        self.take("for")
        if self.at("{"):
            return ("for", None, None, None, self.block())
        self.no_composite += 1
        if self.at("range"):  # for range x
            self.take("range")
            header: Any = ("range", [], self.expr())
        else:
            first = None if self.at(";") else self.simple_statement()
            if first is not None and first[0] == "range":
                header = first
            elif self.at(";"):
                self.take(";")
                cond = None if self.at(";") else self.expr()
                self.take(";")
                post = None if self.at("{") else self.simple_statement()
                self.no_composite -= 1
                return ("for", first, cond, post, self.block())
            else:
                assert first is not None and first[0] == "expr"
                self.no_composite -= 1
                return ("for", None, first[1], None, self.block())
        self.no_composite -= 1
        return ("forrange", header[1], header[2], self.block())

    # -- expressions
    def expr_list(self) -> list[Any]:
        out = [self.expr()]
        while self.at(","):
            self.take(",")
            out.append(self.expr())
        return out

    _PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "+": 4, "-": 4, "|": 4, "^": 4}
    _PREC.update({"*": 5, "/": 5, "%": 5, "<<": 5, ">>": 5, "&": 5, "&^": 5})

    def expr(self, min_prec: int = 1) -> Any:
        left = self.unary()
        while self.tok.kind == "op" and self._PREC.get(self.tok.value, 0) >= min_prec:
            op = self.take().value
            right = self.expr(self._PREC[op] + 1)
            left = ("binary", op, left, right)
        return left

    def unary(self) -> Any:
        if self.tok.kind == "op" and self.tok.value in ("-", "!", "&", "*", "^", "+"):
            op = self.take().value
            return ("unary", op, self.unary())
        return self.primary()

    def _starts_type(self) -> bool:
        return self.at("[") and self.peek().value == "]" or self.at("map")

    def primary(self) -> Any:
        t = self.tok
        node: Any
        if t.kind == "string":
            self.pos += 1
            node = ("lit", t.value)
        elif t.kind == "char":
            self.pos += 1
            node = ("lit", ord(t.value))
        elif t.kind == "number":
            self.pos += 1
            node = ("lit", float(t.value) if "." in t.value or "e" in t.value.lower() else int(t.value, 0))
        elif self._starts_type():
            type_ = self.parse_type()
            if self.at("("):  # conversion: []byte(x)
                self.take("(")
                arg = self.expr()
                self.take(")")
                node = ("convert", type_, arg)
            elif self.at("{"):
                node = ("composite", type_, self.composite_body())
            else:  # a type as an argument: make([]string, 0, n)
                node = ("lit", type_)
        elif self.at("("):
            self.take("(")
            saved, self.no_composite = self.no_composite, 0
            node = self.expr()
            self.no_composite = saved
            self.take(")")
        elif self.at("func"):
            raise GoError(f"line {t.line}: function literals are not supported")
        elif t.kind == "ident":
            self.pos += 1
            node = ("name", t.value)
        else:
            raise GoError(f"line {t.line}: unexpected {t.kind} {t.value!r}")
        while True:
            if self.at("."):
                self.take(".")
                node = ("select", node, self.take(kind="ident").value)
            elif self.at("("):
                self.take("(")
                saved, self.no_composite = self.no_composite, 0
                args: list[Any] = []
                spread = False
                self.skip_semis()
                while not self.at(")"):
                    args.append(self.expr())
                    if self.at("..."):
                        self.take("...")
                        spread = True
                    if self.at(","):
                        self.take(",")
                    self.skip_semis()
                self.take(")")
                self.no_composite = saved
                node = ("call", node, args, spread)
            elif self.at("["):
                self.take("[")
                lo = None if self.at(":") else self.expr()
                if self.at(":"):
                    self.take(":")
                    hi = None if self.at("]") else self.expr()
                    self.take("]")
                    node = ("slice", node, lo, hi)
                else:
                    self.take("]")
                    node = ("index", node, lo)
            elif self.at("{") and not self.no_composite and node[0] in ("name", "select") and _is_type_name(node):
                node = ("composite", _type_name(node), self.composite_body())
            else:
                return node

    def composite_body(self) -> list[tuple[Any, Any]]:
        """Elements of a composite literal: (key or None, value); a bare `{...}` value is ("elided", ...)."""
        self.take("{")
        saved, self.no_composite = self.no_composite, 0
        elems: list[tuple[Any, Any]] = []
        self.skip_semis()
        while not self.at("}"):
            value = ("elided", self.composite_body()) if self.at("{") else self.expr()
            key = None
            if self.at(":"):
                self.take(":")
                key = value
                value = ("elided", self.composite_body()) if self.at("{") else self.expr()
            elems.append((key, value))
            if self.at(","):
                self.take(",")
            self.skip_semis()
        self.take("}")
        self.no_composite = saved
        return elems


def _is_type_name(node: Any) -> bool:
    """`config.Rule{` or `Rule{` (a capitalised or known type), not `x {` of a statement."""
    name = node[1] if node[0] == "name" else node[2]
    return node[0] == "select" and node[1][0] == "name" or name[:1].isupper()


def _type_name(node: Any) -> str:
    return node[1] if node[0] == "name" else f"{node[1][1]}.{node[2]}"


# ----------------------------------------------------------------------------- evaluator


class _Return(Exception):
    def __init__(self, values: list[Any]) -> None:
        self.values = values


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


@dataclass
class Struct:
    """A struct value (config.Rule, config.Allowlist, ...): its type name and fields."""

    type: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Opaque:
    """A value the samples never look into (a compiled regexp of a rule, a regex built by utils)."""

    what: str
    args: tuple[Any, ...] = ()


@dataclass
class Package:
    name: str
    funcs: dict[str, Callable[..., Any] | FuncDecl] = field(default_factory=dict)
    vars: dict[str, Any] = field(default_factory=dict)
    files: list[File] = field(default_factory=list)

    def member(self, name: str) -> Any:
        if name in self.vars:
            return self.vars[name]
        if name in self.funcs:
            return ("func", self, self.funcs[name])
        raise GoError(f"{self.name}.{name} is not defined")


class Env:
    def __init__(self, package: Package, imports: dict[str, str], parent: Env | None = None) -> None:
        self.package, self.imports, self.parent = package, imports, parent
        self.values: dict[str, Any] = {}

    def child(self) -> Env:
        return Env(self.package, self.imports, self)

    def lookup(self, name: str) -> tuple[Env | None, Any]:
        env: Env | None = self
        while env is not None:
            if name in env.values:
                return env, env.values[name]
            env = env.parent
        return None, None

    def set(self, name: str, value: Any) -> None:
        env, _ = self.lookup(name)
        if env is None:
            raise GoError(f"assignment to undeclared {name}")
        env.values[name] = value


def _zero(type_: str | None) -> Any:
    if type_ is None:
        return None
    if type_ == "string":
        return ""
    if type_ in ("int", "int64", "float64"):
        return 0
    if type_ == "bool":
        return False
    if type_.startswith("map["):
        return {}
    if type_.startswith("[]"):
        return []
    return None


class Interpreter:
    """Runs Go functions of the loaded packages. `natives` maps an import path to its built-in functions."""

    def __init__(self, natives: dict[str, dict[str, Any]]) -> None:
        self.natives = natives
        self.packages: dict[str, Package] = {}

    def load(self, import_path: str, sources: list[str]) -> Package:
        files = []
        for number, src in enumerate(sources):
            try:
                files.append(Parser(src).parse_file())
            except GoError as exc:
                raise GoError(f"{import_path} source #{number} ({src[:0]}): {exc}") from None
        pkg = Package(files[0].package if files else import_path.rsplit("/", 1)[-1])
        pkg.files = files
        for f in files:
            pkg.funcs.update(f.funcs)
        self.packages[import_path] = pkg
        # Package-level variables, in order (a file's initialisers only use earlier ones here).
        for f in files:
            env = Env(pkg, f.imports)
            for name, value in f.vars:
                pkg.vars[name] = self.eval(value, env)
        return pkg

    def call_function(self, pkg: Package, name: str, *args: Any) -> Any:
        fn = pkg.funcs[name]
        if isinstance(fn, FuncDecl):
            return self._invoke(pkg, fn, list(args))
        return fn(*args)

    def _imports_of(self, pkg: Package, decl: FuncDecl) -> dict[str, str]:
        for f in pkg.files:
            if f.funcs.get(decl.name) is decl:
                return f.imports
        return {}

    def _invoke(self, pkg: Package, decl: FuncDecl, args: list[Any]) -> Any:
        env = Env(pkg, self._imports_of(pkg, decl))
        if decl.variadic:
            fixed = len(decl.params) - 1
            args = [*args[:fixed], list(args[fixed:])]
        for name, value in zip(decl.params, args, strict=True):
            env.values[name] = value
        try:
            self.run(decl.body, env)
        except _Return as r:
            return r.values[0] if len(r.values) == 1 else tuple(r.values)
        return None

    # -- statements
    def run(self, stmts: list[Any], env: Env) -> None:
        for s in stmts:
            self.exec(s, env)

    def exec(self, s: Any, env: Env) -> None:
        kind = s[0]
        if kind == "expr":
            self.eval(s[1], env)
        elif kind == "define":
            values = self._values(s[2], env, len(s[1]))
            for name, value in zip(s[1], values, strict=True):
                if name != "_":
                    env.values[name] = value
        elif kind == "assign":
            values = self._values(s[2], env, len(s[1]))
            for target, value in zip(s[1], values, strict=True):
                self._store(target, value, env)
        elif kind == "return":
            raise _Return([self.eval(e, env) for e in s[1]])
        elif kind == "continue":
            raise _Continue
        elif kind == "break":
            raise _Break
        elif kind == "if":
            inner = env.child()
            if s[1] is not None:
                self.exec(s[1], inner)
            self.run(s[3] if self.eval(s[2], inner) else s[4], inner.child())
        elif kind == "for":
            _, init, cond, post, body = s
            inner = env.child()
            if init is not None:
                self.exec(init, inner)
            for _guard in range(1_000_000):
                if cond is not None and not self.eval(cond, inner):
                    return
                try:
                    self.run(body, inner.child())
                except _Continue:
                    pass
                except _Break:
                    return
                if post is not None:
                    self.exec(post, inner)
            raise GoError("a loop ran a million times")
        elif kind == "forrange":
            _, names, source, body = s
            for key, value in _range(self.eval(source, env)):
                inner = env.child()
                for name, v in zip(names, (key, value), strict=False):
                    if name != "_":
                        inner.values[name] = v
                try:
                    self.run(body, inner)
                except _Continue:
                    continue
                except _Break:
                    break
        elif kind == "block":
            self.run(s[1], env)
        elif kind == "range":
            raise GoError("range outside a for")
        else:
            raise GoError(f"unsupported statement {kind}")

    def _values(self, exprs: list[Any], env: Env, count: int) -> list[Any]:
        values = [self.eval(e, env) for e in exprs]
        if len(values) == 1 and count > 1:
            multi = values[0]
            if not isinstance(multi, tuple) or len(multi) != count:
                raise GoError(f"expected {count} values, got {multi!r}")
            return list(multi)
        return values

    def _store(self, target: Any, value: Any, env: Env) -> None:
        if target[0] == "name":
            if target[1] != "_":
                env.set(target[1], value)
        elif target[0] == "select":
            obj = self.eval(target[1], env)
            if not isinstance(obj, Struct):
                raise GoError(f"field assignment on {obj!r}")
            obj.fields[target[2]] = value
        elif target[0] == "index":
            self.eval(target[1], env)[self.eval(target[2], env)] = value
        else:
            raise GoError(f"cannot assign to {target[0]}")

    # -- expressions
    def eval(self, e: Any, env: Env) -> Any:  # noqa: PLR0911
        kind = e[0]
        if kind == "lit":
            return e[1]
        if kind == "zero":
            return _zero(e[1])
        if kind == "name":
            return self._name(e[1], env)
        if kind == "binary":
            return self._binary(e[1], e[2], e[3], env)
        if kind == "unary":
            v = self.eval(e[2], env)
            if e[1] == "-":
                return -v
            if e[1] == "!":
                return not v
            return v  # & and * : values are references already
        if kind == "composite":
            return self._composite(e[1], e[2], env)
        if kind == "convert":
            v = self.eval(e[2], env)
            if e[1] == "[]byte":
                return v.encode() if isinstance(v, str) else bytes(v)
            raise GoError(f"unsupported conversion to {e[1]}")
        if kind == "select":
            return self._select(e, env)
        if kind == "call":
            return self._call(e, env)
        if kind == "index":
            return self.eval(e[1], env)[self.eval(e[2], env)]
        if kind == "slice":
            v = self.eval(e[1], env)
            lo = 0 if e[2] is None else self.eval(e[2], env)
            hi = len(v) if e[3] is None else self.eval(e[3], env)
            return v[lo:hi]
        raise GoError(f"unsupported expression {kind}")

    def _name(self, name: str, env: Env) -> Any:
        found, value = env.lookup(name)
        if found is not None:
            return value
        if name in ("true", "false"):
            return name == "true"
        if name == "nil":
            return None
        if name in env.package.vars or name in env.package.funcs:
            return env.package.member(name)
        if name in env.imports:
            return ("import", env.imports[name])
        if name in _BUILTINS:
            return ("builtin", name)
        raise GoError(f"undefined: {name}")

    def _select(self, e: Any, env: Env) -> Any:
        base = self.eval(e[1], env)
        name = e[2]
        if isinstance(base, tuple) and base and base[0] == "import":
            path = base[1]
            if path in self.packages:
                return self.packages[path].member(name)
            natives = self.natives.get(path)
            if natives is None or name not in natives:
                raise GoError(f"{path}.{name} has no built-in")
            member = natives[name]
            return ("native", member) if callable(member) else member
        if isinstance(base, Struct):
            if name in base.fields:
                return base.fields[name]
            return ("method", base, name)
        return ("method", base, name)

    def _call(self, e: Any, env: Env) -> Any:
        fn = self.eval(e[1], env)
        args = [self.eval(a, env) for a in e[2]]
        if e[3]:  # f(a, b...)
            args = [*args[:-1], *args[-1]]
        if isinstance(fn, tuple):
            if fn[0] == "func":
                _, pkg, decl = fn
                return self._invoke(pkg, decl, args) if isinstance(decl, FuncDecl) else decl(*args)
            if fn[0] == "native":
                return fn[1](*args)
            if fn[0] == "builtin":
                return _BUILTINS[fn[1]](*args)
            if fn[0] == "method":
                return self._method(fn[1], fn[2], args)
        raise GoError(f"cannot call {fn!r}")

    def _method(self, obj: Any, name: str, args: list[Any]) -> Any:
        method = getattr(obj, "go_" + name, None)
        if method is not None:
            return method(*args)
        if isinstance(obj, Struct):
            hook = self.natives.get("methods", {}).get(f"{obj.type}.{name}")
            if hook is not None:
                return hook(obj, *args)
        raise GoError(f"unsupported method {type(obj).__name__}.{name}")

    def _binary(self, op: str, left: Any, right: Any, env: Env) -> Any:
        if op == "&&":
            return bool(self.eval(left, env)) and bool(self.eval(right, env))
        if op == "||":
            return bool(self.eval(left, env)) or bool(self.eval(right, env))
        a, b = self.eval(left, env), self.eval(right, env)
        ops: dict[str, Callable[[Any, Any], Any]] = {
            "+": lambda x, y: x + y,
            "-": lambda x, y: x - y,
            "*": lambda x, y: x * y,
            "/": lambda x, y: x // y if isinstance(x, int) and isinstance(y, int) else x / y,
            "%": lambda x, y: x % y,
            "==": lambda x, y: x == y,
            "!=": lambda x, y: x != y,
            "<": lambda x, y: x < y,
            "<=": lambda x, y: x <= y,
            ">": lambda x, y: x > y,
            ">=": lambda x, y: x >= y,
        }
        if op not in ops:
            raise GoError(f"unsupported operator {op}")
        return ops[op](a, b)

    def _composite(self, type_: str, elems: list[tuple[Any, Any]], env: Env) -> Any:
        type_ = type_.lstrip("*")
        if type_.startswith("[]"):
            elem_type = type_[2:]
            return [self._element(elem_type, v, env) for _k, v in elems]
        if type_.startswith("map["):
            value_type = _map_value_type(type_)
            return {self.eval(k, env): self._element(value_type, v, env) for k, v in elems}
        fields: dict[str, Any] = {}
        for k, v in elems:
            if k is None or k[0] != "name":
                raise GoError(f"positional fields in a {type_} literal")
            fields[k[1]] = self.eval(v, env) if v[0] != "elided" else self._composite("?", v[1], env)
        return Struct(type_, fields)

    def _element(self, elem_type: str, value: Any, env: Env) -> Any:
        if value[0] == "elided":
            return self._composite(elem_type, value[1], env)
        return self.eval(value, env)


def _map_value_type(type_: str) -> str:
    depth = 0
    for i, c in enumerate(type_):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return type_[i + 1 :]
    raise GoError(f"bad map type {type_}")


def _range(value: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(value, dict):
        for key in sorted(value):
            yield key, value[key]
    elif isinstance(value, list | str | bytes):
        yield from enumerate(value)
    elif isinstance(value, int):
        yield from ((i, None) for i in range(value))
    else:
        raise GoError(f"cannot range over {type(value).__name__}")


def _append(target: list[Any] | None, *items: Any) -> list[Any]:
    return [*(target or []), *items]


def _make(type_: Any, *sizes: Any) -> Any:
    return [] if isinstance(type_, list) or str(type_).startswith("[]") else {}


_BUILTINS: dict[str, Callable[..., Any]] = {"append": _append, "len": len, "make": _make}


# ----------------------------------------------------------------------------- Go library built-ins


@dataclass(frozen=True)
class Replacer:
    """strings.NewReplacer: left-to-right, first matching old string wins at each position."""

    pairs: tuple[tuple[str, str], ...]

    def go_Replace(self, s: str) -> str:  # noqa: N802 (Go's method name)
        out: list[str] = []
        i = 0
        while i < len(s):
            for old, new in self.pairs:
                if old and s.startswith(old, i):
                    out.append(new)
                    i += len(old)
                    break
            else:
                out.append(s[i])
                i += 1
        return "".join(out)


def go_sprintf(fmt: str, *args: Any) -> str:
    """fmt.Sprintf for the verbs the rule files use (%s, %d, %v, %q, %%)."""
    it = iter(args)

    def verb(m: re.Match[str]) -> str:
        v = m.group(1)
        if v == "%":
            return "%"
        arg = next(it)
        if v == "q":
            return '"' + str(arg).replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(arg, bytes):
            return arg.decode()
        if isinstance(arg, bool):
            return "true" if arg else "false"
        return str(arg)

    return re.sub(r"%([sdvq%])", verb, fmt)


class _Encoding:
    def __init__(self, urlsafe: bool, padded: bool) -> None:
        self.urlsafe, self.padded = urlsafe, padded

    def go_EncodeToString(self, data: bytes) -> str:  # noqa: N802
        out = (base64.urlsafe_b64encode if self.urlsafe else base64.b64encode)(data).decode()
        return out if self.padded else out.rstrip("=")


BASE64 = {
    "StdEncoding": _Encoding(False, True),
    "RawStdEncoding": _Encoding(False, False),
    "URLEncoding": _Encoding(True, True),
    "RawURLEncoding": _Encoding(True, False),
}
