"""The evaluator of golite's AST and the Go library built-ins the rule files call."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.secretcorpus.golite.syntax import File, FuncDecl, GoError, Parser

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
    def eval(self, e: Any, env: Env) -> Any:
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

    def go_Replace(self, s: str) -> str:
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

    def go_EncodeToString(self, data: bytes) -> str:
        out = (base64.urlsafe_b64encode if self.urlsafe else base64.b64encode)(data).decode()
        return out if self.padded else out.rstrip("=")


BASE64 = {
    "StdEncoding": _Encoding(False, True),
    "RawStdEncoding": _Encoding(False, False),
    "URLEncoding": _Encoding(True, True),
    "RawURLEncoding": _Encoding(True, False),
}
