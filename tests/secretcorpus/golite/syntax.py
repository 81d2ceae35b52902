"""Go's lexer (with its semicolon rule) and a parser for the statements and expressions gitleaks' rule
files use; the AST is tuples, types are strings. See the package's docstring."""

from __future__ import annotations

import re
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


_PREC: dict[str, int] = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3}
_PREC.update({"+": 4, "-": 4, "|": 4, "^": 4, "*": 5, "/": 5, "%": 5, "<<": 5, ">>": 5, "&": 5, "&^": 5})


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

    def expr(self, min_prec: int = 1) -> Any:
        left = self.unary()
        while self.tok.kind == "op" and _PREC.get(self.tok.value, 0) >= min_prec:
            op = self.take().value
            right = self.expr(_PREC[op] + 1)
            left = ("binary", op, left, right)
        return left

    def unary(self) -> Any:
        if self.tok.kind == "op" and self.tok.value in ("-", "!", "&", "*", "^", "+"):
            op = self.take().value
            return ("unary", op, self.unary())
        return self.primary()

    def _starts_type(self) -> bool:
        return (self.at("[") and self.peek().value == "]") or self.at("map")

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
    name = str(node[1] if node[0] == "name" else node[2])
    return (node[0] == "select" and node[1][0] == "name") or name[:1].isupper()


def _type_name(node: Any) -> str:
    return node[1] if node[0] == "name" else f"{node[1][1]}.{node[2]}"
