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

from tests.secretcorpus.golite.interpreter import (
    BASE64,
    Env,
    Interpreter,
    Opaque,
    Package,
    Replacer,
    Struct,
    go_sprintf,
)
from tests.secretcorpus.golite.syntax import File, FuncDecl, GoError, Parser, tokenize

__all__ = [
    "BASE64",
    "Env",
    "File",
    "FuncDecl",
    "GoError",
    "Interpreter",
    "Opaque",
    "Package",
    "Parser",
    "Replacer",
    "Struct",
    "go_sprintf",
    "tokenize",
]
