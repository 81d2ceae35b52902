"""The assignment grammar (agentmesh/redact/assignments.py), syntax by syntax: the grammar alone finds
exactly the value, and the whole redactor masks it and keeps the key."""

from __future__ import annotations

import pytest

from agentmesh.redact import MASK, redact_text
from agentmesh.redact.assignments import findings, secret_key
from agentmesh.redact.placeholders import is_placeholder, sequential_filler

SECRET = "Zq8vT3mP2xW9kLr4"

# (syntax, text, key that must stay)
SYNTAXES: list[tuple[str, str, str]] = [
    # gitleaks' GenerateSampleSecrets templates
    ("ini quoted", f'fooToken="{SECRET}"', "fooToken"),
    ("ini quoted spaced", f'fooToken = "{SECRET}"', "fooToken"),
    ("ini unquoted", f"fooToken={SECRET}", "fooToken"),
    ("ini unquoted spaced", f"fooToken = {SECRET}", "fooToken"),
    ("json", f'{{\n    "foo_token": "{SECRET}"\n}}', "foo_token"),
    ("json escaped newline", f'{{"config.ini": "FOO_TOKEN={SECRET}\\nBACKUP_ENABLED=true"}}', "FOO_TOKEN"),
    ("xml element multiline", f"<fooToken>\n    {SECRET}\n</fooToken>", "<fooToken>"),
    ("xml element", f"<dbPassword>{SECRET}</dbPassword>", "<dbPassword>"),
    ("yaml unquoted", f"foo_token: {SECRET}", "foo_token"),
    ("yaml single quote", f"foo_token: '{SECRET}'", "foo_token"),
    ("yaml double quote", f'foo_token: "{SECRET}"', "foo_token"),
    ("C#", f'string fooToken = "{SECRET}";', "fooToken"),
    ("go var typed", f'var fooToken string = "{SECRET}"', "fooToken"),
    ("go short", f'fooToken := "{SECRET}"', "fooToken"),
    ("go backticks", f"fooToken := `{SECRET}`", "fooToken"),
    ("java", f'String fooToken = "{SECRET}";', "fooToken"),
    ("kotlin untyped", f'var fooToken = "{SECRET}"', "fooToken"),
    ("kotlin typed", f'val fooToken: String = "{SECRET}"', "fooToken"),
    ("php concat", f'$fooToken .= "{SECRET}"', "$fooToken"),
    ("php null coalesce", f'$fooToken ??= "{SECRET}"', "$fooToken"),
    ("php array", f"'db_password' => '{SECRET}',", "db_password"),
    ("python single quote", f"fooToken = '{SECRET}'", "fooToken"),
    ("python double quote", f'fooToken = "{SECRET}"', "fooToken"),
    ("python kwarg", f'connect(host="db", password="{SECRET}")', "password="),
    ("python subscript", f'os.environ["FOO_TOKEN"] = "{SECRET}"', "FOO_TOKEN"),
    ("setProperty", f'System.setProperty("FOO_TOKEN", "{SECRET}")', "FOO_TOKEN"),
    ("logstash", f'  "fooToken" => "{SECRET}"', "fooToken"),
    ("arrow", f"fooToken -> {SECRET}", "fooToken"),
    ("make recursive", f'FOO_TOKEN = "{SECRET}"', "FOO_TOKEN"),
    ("make simple", f'FOO_TOKEN := "{SECRET}"', "FOO_TOKEN"),
    ("make shell", f'FOO_TOKEN ::= "{SECRET}"', "FOO_TOKEN"),
    ("make evaluated shell", f'FOO_TOKEN :::= "{SECRET}"', "FOO_TOKEN"),
    ("make conditional", f'FOO_TOKEN ?= "{SECRET}"', "FOO_TOKEN"),
    ("make append", f'FOO_TOKEN += "{SECRET}"', "FOO_TOKEN"),
    # config files
    ("env", f"export API_KEY={SECRET}", "API_KEY"),
    ("dotenv", f"DB_PASSWORD={SECRET}\nDB_HOST=db", "DB_PASSWORD"),
    ("toml", f'[database]\npassword = "{SECRET}"', "password"),
    ("hcl", f'resource "x" "y" {{\n  client_secret = "{SECRET}"\n}}', "client_secret"),
    ("yaml block", f"private_key: |\n  {SECRET}\n", "private_key"),
    ("json in a string", f'"{{\\"pass\\": \\"{SECRET}\\"}}"', "pass"),
    ("json name/value", f'{{"name": "API_TOKEN", "value": "{SECRET}"}}', "API_TOKEN"),
    ("xml attributes", f'<add key="ApiKey" value="{SECRET}" />', 'key="ApiKey"'),
    ("connection string", f"Server=db;Database=orders;User Id=app;Password={SECRET};", "Password="),
    # protocols and command lines
    ("header", f"X-Api-Key: {SECRET}", "X-Api-Key"),
    ("authorization header", f"Authorization: Bearer {SECRET}", "Authorization: Bearer"),
    ("cookie header", f"Cookie: session=abc; auth={SECRET}", "Cookie:"),
    ("url query", f"https://api.example.com/v1/items?access_token={SECRET}&page=2", "access_token="),
    ("flag with =", f"deploy --api-token={SECRET} --region eu", "--api-token"),
    ("flag with space", f"mysqldump --password {SECRET} orders", "--password"),
    ("user:password flag", f"http --auth admin:{SECRET} https://example.com", "admin:"),
    ("sql identified by", f"CREATE USER app IDENTIFIED BY '{SECRET}';", "IDENTIFIED BY"),
    ("sql password", f"ALTER ROLE app WITH PASSWORD '{SECRET}';", "PASSWORD"),
]


@pytest.mark.parametrize(("syntax", "text", "key"), SYNTAXES, ids=[s[0] for s in SYNTAXES])
def test_each_syntax(syntax: str, text: str, key: str) -> None:
    spans = [text[f.start : f.end] for f in findings(text)]
    assert any(SECRET in value for value in spans), (syntax, spans)
    out, changed = redact_text(text)
    assert changed and SECRET not in out and MASK in out, out
    assert key in out, out


@pytest.mark.parametrize(
    "text",
    [
        "passwd: No such file or directory",
        "PWD=/tmp OLDPWD=/home/app",
        "token_type=bearer expires_in=3600",
        "max_tokens: 4096",
        'password = os.environ["DB_PASSWORD"]',
        "token = getToken()",
        "api_key: ${API_KEY}",
        'password: "{{ .Values.password }}"',
        "secret: <your-secret-here>",
        "password: ********",
        "client_secret=xxxxxxxxxxxxxxxxxxxx",
        "secretKey: api-key",
        "db-password: ENC[AES256_GCM,data:abc,iv:xyz]",
        "public_key = 9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit",
        "password_policy: min-length-12",
        'Authorization: Bearer <Openverse API token>"',
        "curl -u <user:password> https://example.com",
        'author = "james.fake@ymail.com"',
        'name="authenticity_token" value="7SWa-Fo1_hsC6oovfBsJFLGPUl2EhkSWPbJhWANwgaJWBDl1vxd9VNqXTNAefsJqzIRYaZEfY"',
        "DB_PASSWORD=`cat /run/secrets/db_password`",  # a shell's command substitution
        "SUMO_ACCESS_KEY=AbCeFG123",  # typed along the keyboard
        'api_token: "xoxp-1234567890"',
        "X-Mongo-AuthSource: admin",
        "keyVaultToStoreSecrets: orders-vault",
    ],
)
def test_not_secrets(text: str) -> None:
    assert findings(text) == [], text


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("xToken", True),
        ("MY_API_KEY", True),
        ("db.password", True),
        ("clientSecret", True),
        ("authorization", True),
        ("private_key_id", True),
        ("token_type", False),
        ("max_tokens", False),
        ("password_policy", False),
        ("secret_name", False),
        ("api_key_id", False),
        ("public_key", False),
        ("csrf_token", False),
        ("author", False),
        ("keyboard", False),
        ("authSource", False),
        ("token_issuer", False),
        ("keyVaultToStoreSecrets", False),
        ("pathForToken", False),
        ("tokenForGithub", True),
        ("passwordForDb", True),
    ],
)
def test_secret_key_names(key: str, secret: bool) -> None:
    assert secret_key(key) is secret


# --- stand-ins (placeholders.py): values the grammar and the lone-token rule skip


@pytest.mark.parametrize(
    ("value", "filler"),
    [
        ("k9" + "1" * 8 + "Zq", True),  # a run of 8 making a quarter or more
        ("aaaaaaaa" + "k9Xq2Lm7Rt4Wz8Ns3Yd6Hf1J", True),  # 8 of 32: exactly a quarter
        ("aaaaaaaa" + "k9Xq2Lm7Rt4Wz8Ns3Yd6Hf1Jc", False),  # 8 of 33: less
        ("aaaaaaaZ9Kq2", False),  # a run of 7 at the start
        ("Zaaaaaaa9Kq2", False),  # a run of 7 after another character
        ("k9Zaaaaaaaaa", True),  # a run of 9
    ],
)
def test_a_filler_run_is_eight_in_a_row_making_a_quarter(value: str, filler: bool) -> None:
    assert is_placeholder(value, sequences=False) is filler


@pytest.mark.parametrize(
    ("value", "sequential"),
    [
        ("abcdefgh", True),  # 8 characters, every step consecutive
        ("abcdefgXkQz", True),  # 6 steps of 10: exactly 60 %
        ("abcdefXkQz", False),  # 5 steps of 9
        ("AbCdEfGh", True),  # case does not matter
        ("abcdefg", False),  # 7 characters: too short to tell
        ("k9", False),
        ("k9Xq2Lm7Rt4W", False),
    ],
)
def test_sequential_filler(value: str, sequential: bool) -> None:
    assert sequential_filler(value) is sequential


@pytest.mark.parametrize(
    ("value", "placeholder"),
    [
        ("zzzz", True),  # one character repeated
        ("k9k9k9", False),  # two characters: not filler
        ("'null'", True),  # quoted
        ('"changeit"', True),
        ("`none`", True),
        ("<password>", True),
        ("[none]", True),
        ("(undefined)", True),
        ("Xnone", False),  # an `X` is no quote or bracket
        ("k9X[REDACTED]q2", True),  # holds the mask
        (f"{MASK}", True),
        ("k9Xq2Lm7Rt4W", False),
    ],
)
def test_is_placeholder(value: str, placeholder: bool) -> None:
    assert is_placeholder(value) is placeholder


# --- which form found a value, and the value rules at their edges


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("<dbPassword>Zq8vT3mP2xW9kLr4</dbPassword>", "assignment:xml-element"),
        ('<add key="ApiKey" value="Zq8vT3mP2xW9kLr4"/>', "assignment:name-value"),
        ('{"name": "API_TOKEN", "value": "Zq8vT3mP2xW9kLr4"}', "assignment:name-value"),
        ("token: |\n  Zq8vT3mP2xW9kLr4\n", "assignment:yaml-block"),
        ("run --password Zq8vT3mP2xW9kLr4", "assignment:flag"),
        ("password=Zq8vT3mP2xW9kLr4", "assignment:assignment"),
    ],
)
def test_each_form_names_itself_in_its_findings(text: str, rule: str) -> None:
    assert rule in {f.rule for f in findings(text)}


@pytest.mark.parametrize(
    "text",
    [
        "password = '<x><y>k9Xq2m'",  # markup
        "secret=decrypt2(blob)",  # a call
        "token=vault2[path]",  # an index
        "password=self._db_pass",  # a reference to code
        "password=./secrets2/db",  # a path
        "password=../k9/x",
        "password=~/k9/x",
        "password=/run/k9",
    ],
)
def test_values_that_are_markup_code_or_paths_are_kept(text: str) -> None:
    assert findings(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "password=k9X2",  # four characters: long enough
        "password=kQzvXr!pLm",  # no digits, no code reference
        "password='decrypt2(blob)'",  # quoted: a value, not a call
        "password='./secrets2/db'",
        "password=self._db_pass2",  # a digit: not a reference to code
    ],
)
def test_values_at_the_edges_of_the_value_rules_are_masked(text: str) -> None:
    assert findings(text) != []


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("byPassword", True),  # a leading preposition cuts nothing
        ("gcp_private_key_id", True),  # a service account's key id, with a prefix
        ("account_number", False),  # a qualifier alone names no key
        ("key_client", False),  # `key` first, a qualifier last
    ],
)
def test_more_secret_key_names(key: str, secret: bool) -> None:
    assert secret_key(key) is secret
