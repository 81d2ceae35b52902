"""Generates tests/unit/tool/redaction_corpus.json: secrets in many formats, and near-misses.

Seeded, so the committed file is reproducible: `.venv/bin/python -m tests.unit.tool.make_redaction_corpus`.
Every secret is random (no real credential), embedded in text shaped like an upstream's answer (error
bodies, config dumps, logs, headers). A secret entry lists the exact substrings that must not survive
redaction; a near-miss must come out of the redactor unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from collections.abc import Callable
from pathlib import Path

SEED = 21
PER_FORMAT = 20
OUT = Path(__file__).with_name("redaction_corpus.json")

UPPER_DIGITS = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _mixed(rng: random.Random, alphabet: str, n: int) -> str:
    """Random, with at least one upper, one lower and one digit (as real keys have)."""
    while True:
        s = _pick(rng, alphabet, n)
        if any(c.isupper() for c in s) and any(c.islower() for c in s) and any(c.isdigit() for c in s):
            return s


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


WRAP = (
    "{s}",
    'error: {s}\n{{"detail": "not found"}}',
    "<html><body><h1>404</h1><pre>{s}</pre></body></html>",
    '{{"error": {{"message": "upstream failed", "debug": "{s}"}}}}',
    "2026-11-30T10:00:00Z ERROR request failed; {s}; retrying",
    'Traceback (most recent call last):\n  File "app.py", line 3\nRuntimeError: {s}',
)


def _wrap(rng: random.Random, text: str) -> str:
    return rng.choice(WRAP).format(s=text)


# --- secrets: each maker returns (text, secrets that must not survive) -----------------------------

Maker = Callable[[random.Random], tuple[str, list[str]]]


def aws_access_key_id(rng: random.Random) -> tuple[str, list[str]]:
    key = rng.choice(("AKIA", "ASIA")) + _pick(rng, UPPER_DIGITS, 16)
    return rng.choice((f"AccessKeyId: {key}", f"using credentials {key} for s3", f"key={key}")), [key]


def aws_secret_access_key(rng: random.Random) -> tuple[str, list[str]]:
    key_id = "AKIA" + _pick(rng, UPPER_DIGITS, 16)
    secret = _mixed(rng, B64, 40)
    text = rng.choice(
        (
            f"{key_id} {secret}",
            f"credentials {key_id}:{secret} rejected",
            f"aws_secret_access_key = {secret}",
            f"AWS_SECRET_ACCESS_KEY={secret}",
            f'"SecretAccessKey": "{secret}"',
            f"aws secret: {secret}",
            f"id {key_id}\nsecret {secret}\n",
        )
    )
    return text, [secret]


def jwt(rng: random.Random) -> tuple[str, list[str]]:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": str(rng.randrange(10**6)), "exp": rng.randrange(10**9, 2 * 10**9)}).encode())
    sig = _pick(rng, URLSAFE, 43)
    token = f"{header}.{payload}.{sig}"
    return rng.choice((f"jwt {token} expired", f"id_token={token}", f'{{"jwt": "{token}"}}')), [token, sig]


def pem_private_key(rng: random.Random) -> tuple[str, list[str]]:
    kind = rng.choice(("RSA ", "EC ", "OPENSSH ", ""))
    lines = [_pick(rng, B64, 64) for _ in range(rng.randrange(3, 8))]
    body = "\n".join(lines)
    pem = f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"
    return f"loaded key:\n{pem}\n", lines


def dsn_password(rng: random.Random) -> tuple[str, list[str]]:
    scheme = rng.choice(("postgres", "postgresql", "mysql", "redis", "mongodb+srv", "amqp"))
    password = _mixed(rng, ALNUM + "!$*", rng.randrange(10, 24))
    user = rng.choice(("app", "admin", "svc_orders", "root"))
    host = rng.choice(("db.internal", "10.0.3.7:5432", "cache-1.prod:6379", "cluster0.example.net"))
    return f"could not connect to {scheme}://{user}:{password}@{host}/main", [password]


def openai_key(rng: random.Random) -> tuple[str, list[str]]:
    key = rng.choice(("sk-", "sk-proj-")) + _mixed(rng, ALNUM, 48)
    return rng.choice((f"Incorrect API key provided: {key}", f"OPENAI_API_KEY={key}", f"key {key}")), [key]


def anthropic_key(rng: random.Random) -> tuple[str, list[str]]:
    key = "sk-ant-api03-" + _mixed(rng, URLSAFE, 80)
    return rng.choice((f"x-api-key: {key}", f"invalid key {key}")), [key]


def github_token(rng: random.Random) -> tuple[str, list[str]]:
    if rng.random() < 0.3:
        key = "github_pat_" + _mixed(rng, ALNUM + "_", 70)
    else:
        key = rng.choice(("ghp_", "gho_", "ghs_", "ghu_")) + _mixed(rng, ALNUM, 36)
    return rng.choice((f"token {key} has been revoked", f"GITHUB_TOKEN={key}", f"push with {key} failed")), [key]


def slack_token(rng: random.Random) -> tuple[str, list[str]]:
    if rng.random() < 0.25:
        path = f"T{_pick(rng, UPPER_DIGITS, 8)}/B{_pick(rng, UPPER_DIGITS, 8)}/{_mixed(rng, ALNUM, 24)}"
        url = f"https://hooks.slack.com/services/{path}"
        return f"posting to {url} failed", [path.rsplit("/", 1)[-1]]
    team, user = rng.randrange(10**11, 10**12), rng.randrange(10**11, 10**12)
    key = f"xox{rng.choice('bpa')}-{team}-{user}-{_mixed(rng, ALNUM, 24)}"
    return rng.choice((f"slack said invalid_auth for {key}", f"SLACK_BOT_TOKEN={key}")), [key]


def bearer_header(rng: random.Random) -> tuple[str, list[str]]:
    token = _mixed(rng, URLSAFE + ".~", rng.randrange(24, 64))
    head = rng.choice(("Authorization: Bearer", "authorization: bearer", "Bearer", "Authorization: Token"))
    return f"request headers: {head} {token}\nstatus 401", [token]


def basic_auth_url(rng: random.Random) -> tuple[str, list[str]]:
    password = _mixed(rng, ALNUM + "-._~", rng.randrange(10, 20))
    host = rng.choice(("registry.example.com", "ftp.example.org", "internal-api:8443"))
    scheme = rng.choice(("https", "http", "ftp"))
    return f"GET {scheme}://deploy:{password}@{host}/v2/ -> 403", [password]


def basic_auth_header(rng: random.Random) -> tuple[str, list[str]]:
    password = _mixed(rng, ALNUM, 16)
    cred = base64.b64encode(f"user{rng.randrange(100)}:{password}".encode()).decode()
    return f"Authorization: Basic {cred}", [cred]


def gcp_api_key(rng: random.Random) -> tuple[str, list[str]]:
    key = "AIza" + _mixed(rng, URLSAFE, 35)
    return rng.choice((f"API key not valid: {key}", f"https://maps.example.com/api?key={key}")), [key]


def gcp_service_account(rng: random.Random) -> tuple[str, list[str]]:
    key_id = _pick(rng, HEX, 40)
    doc = f'{{"type": "service_account", "private_key_id": "{key_id}", "client_email": "x@p.iam.example.com"}}'
    return doc, [key_id]


def azure_storage_key(rng: random.Random) -> tuple[str, list[str]]:
    key = _mixed(rng, B64, 86) + "=="
    account = f"acct{rng.randrange(1000)}"
    conn = f"DefaultEndpointsProtocol=https;AccountName={account};AccountKey={key};EndpointSuffix=core.windows.net"
    return conn, [key]


def azure_client_secret(rng: random.Random) -> tuple[str, list[str]]:
    secret = _mixed(rng, ALNUM + "~._-", 40)
    return rng.choice((f"AZURE_CLIENT_SECRET={secret}", f'"client_secret": "{secret}"')), [secret]


def stripe_key(rng: random.Random) -> tuple[str, list[str]]:
    key = rng.choice(("sk_live_", "rk_live_")) + _mixed(rng, ALNUM, rng.choice((24, 32, 99)))
    return rng.choice((f"No such customer; key {key}", f"stripe.api_key = '{key}'")), [key]


def sendgrid_key(rng: random.Random) -> tuple[str, list[str]]:
    key = f"SG.{_mixed(rng, URLSAFE, 22)}.{_mixed(rng, URLSAFE, 43)}"
    return f"sendgrid rejected {key}", [key]


def gitlab_token(rng: random.Random) -> tuple[str, list[str]]:
    key = "glpat-" + _mixed(rng, ALNUM, 20)
    return f"401 Unauthorized with PRIVATE-TOKEN {key}", [key]


def password_assignment(rng: random.Random) -> tuple[str, list[str]]:
    value = _mixed(rng, ALNUM + "!@#%^*", rng.randrange(8, 20))
    key = rng.choice(("password", "PASSWORD", "db_password", "passwd", "DB_PWD", "adminPassword"))
    sep = rng.choice(("=", ": ", " = ", "="))
    return f"config: {key}{sep}{value} host=db", [value]


def token_assignment(rng: random.Random) -> tuple[str, list[str]]:
    value = _mixed(rng, URLSAFE, rng.randrange(16, 40))
    key = rng.choice(("token", "access_token", "refresh_token", "api_key", "apiKey", "secret", "client_secret"))
    return rng.choice((f"{key}={value}&page=2", f'"{key}": "{value}"', f"{key}: {value}")), [value]


SECRET_MAKERS: dict[str, Maker] = {
    "aws_access_key_id": aws_access_key_id,
    "aws_secret_access_key": aws_secret_access_key,
    "jwt": jwt,
    "pem_private_key": pem_private_key,
    "dsn_password": dsn_password,
    "openai_sk": openai_key,
    "anthropic_sk_ant": anthropic_key,
    "github_token": github_token,
    "slack_token": slack_token,
    "bearer_header": bearer_header,
    "basic_auth_url": basic_auth_url,
    "basic_auth_header": basic_auth_header,
    "gcp_api_key": gcp_api_key,
    "gcp_service_account": gcp_service_account,
    "azure_storage_key": azure_storage_key,
    "azure_client_secret": azure_client_secret,
    "stripe_key": stripe_key,
    "sendgrid_key": sendgrid_key,
    "gitlab_token": gitlab_token,
    "password_assignment": password_assignment,
    "token_assignment": token_assignment,
}


# --- near-misses: text that must come out unchanged ------------------------------------------------


def pwd_path(rng: random.Random) -> str:
    path = rng.choice(("/tmp", "/home/app", "/var/lib/agent/work", "/srv/data-01", "~/src"))
    return rng.choice((f"PWD={path}", f"OLDPWD={path} PWD={path}", f"env: PWD={path} SHELL=/bin/bash"))


def passwd_message(rng: random.Random) -> str:
    return rng.choice(
        (
            "passwd: No such file or directory",
            "passwd: password updated successfully",
            "cat: /etc/passwd: No such file or directory",
            "passwd: Authentication token manipulation error",
            "password: required field is missing",
        )
    )


def uuid_text(rng: random.Random) -> str:
    u = uuid.UUID(int=rng.getrandbits(128), version=4)
    return rng.choice((f"request id {u}", f'{{"id": "{u}", "status": "ok"}}', f"trace_id={u}"))


def sha256_digest(rng: random.Random) -> str:
    d = hashlib.sha256(rng.randbytes(32)).hexdigest()
    return rng.choice((f"sha256:{d}", f"digest {d}", f'{{"sha256": "{d}"}}', f"image@sha256:{d}"))


def base64_image(rng: random.Random) -> str:
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(rng.randrange(60, 400))).decode()
    return rng.choice((f"data:image/png;base64,{data}", f'{{"thumbnail": "{data}"}}'))


def git_sha(rng: random.Random) -> str:
    sha = _pick(rng, HEX, 40)
    return rng.choice((f"commit {sha}", f"HEAD is now at {sha[:7]} fix build", f"deployed {sha} to prod"))


def hex_id(rng: random.Random) -> str:
    alphabet = "0123456789ABCDEF" if rng.random() < 0.2 else HEX
    h = _pick(rng, alphabet, rng.choice((24, 32, 40, 64)))
    return rng.choice((f"object {h} not found", f'{{"_id": "{h}"}}', f"span_id={h}"))


def normal_url(rng: random.Random) -> str:
    host = rng.choice(("api.example.com", "docs.python.org", "localhost:8080", "10.0.0.5:9000"))
    path = rng.choice(("/v1/orders/42", "/3/library/re.html", "/health", "/search"))
    query = rng.choice(("", "?q=token+limits&page=2", "?user=alice", "#section-2"))
    return f"see https://{host}{path}{query} for details"


def token_counts(rng: random.Random) -> str:
    n = rng.randrange(1, 200000)
    return rng.choice(
        (
            f"max_tokens={n}",
            f'{{"prompt_tokens": {n}, "completion_tokens": {n // 3}}}',
            f"tokens: {n}",
            f"token_type=bearer expires_in={n}",
            f"the bearer of this token count is {n}",
        )
    )


def prose(rng: random.Random) -> str:
    return rng.choice(
        (
            "Reset your password from the account page.",
            "The secret to good latency is batching.",
            "Basic usage: run the tool with --help.",
            "Token limits apply per minute; see the docs.",
            "No credentials were found in the environment.",
            "Please enter a password of at least 12 characters.",
        )
    )


def aws_like_near(rng: random.Random) -> str:
    # A 40-character git SHA or hex id next to an ordinary word, with no AWS key id or label near.
    return f"release {_pick(rng, HEX, 40)} built from {_pick(rng, HEX, 40)}"


def asia_words(rng: random.Random) -> str:
    return rng.choice(("ASIA Pacific region latency", "AKIA is not a key on its own", "basic plan", "eyJ is a prefix"))


NEAR_MAKERS: dict[str, Callable[[random.Random], str]] = {
    "pwd_path": pwd_path,
    "passwd_message": passwd_message,
    "uuid": uuid_text,
    "sha256_digest": sha256_digest,
    "base64_image": base64_image,
    "git_sha": git_sha,
    "hex_id": hex_id,
    "normal_url": normal_url,
    "token_counts": token_counts,
    "prose": prose,
    "hex_pairs": aws_like_near,
    "keyword_words": asia_words,
}


def build(seed: int = SEED) -> dict[str, object]:
    rng = random.Random(seed)
    secrets = []
    for fmt, maker in SECRET_MAKERS.items():
        for _ in range(PER_FORMAT):
            text, must_hide = maker(rng)
            secrets.append({"format": fmt, "text": _wrap(rng, text), "secrets": must_hide})
    near = []
    for fmt, near_maker in NEAR_MAKERS.items():
        for _ in range(30):
            near.append({"format": fmt, "text": near_maker(rng)})
    return {
        "seed": seed,
        "generator": "tests/unit/tool/make_redaction_corpus.py",
        "secrets": secrets,
        "near_misses": near,
    }


def main() -> None:
    OUT.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
