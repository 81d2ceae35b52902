"""Context rules, lone tokens, gitleaks' vetoes and masking (agentmesh/redact): what each does and
where it stops."""

from __future__ import annotations

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.redact import MASK, find_secrets, redact_error, redact_str, redact_text, redact_value
from agentmesh.redact.gitleaks_rules import default_rules, shannon_entropy
from agentmesh.redact.spans import Finding, mask, widen

TOKEN = "Xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg0a"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"postgres://app:{TOKEN}@db:5432/orders", TOKEN),
        (f"redis://:{TOKEN}@cache:6379/0", TOKEN),
        (f"retrying with Bearer {TOKEN}", TOKEN),
        (
            "Authorization: FlyV1 fm2_lJPECAAAAAAAAyZtxBD1hSZ7L5leXsj64ZbDlkm",
            "fm2_lJPECAAAAAAAAyZtxBD1hSZ7L5leXsj64ZbDlkm",
        ),
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF3xkP0BCADjy2ZS6vKb8rJ9Hn3q4w5e6r7t8y9u0i1o2p3\n",
            "lQOYBF3xkP0BCADjy2ZS6vKb8rJ9Hn3q4w5e6r7t8y9u0i1o2p3",
        ),
        (
            "token eyJhbGciOiJub25lIn0.eyJzdWIiOiJ0ZXN0LXVzZXIifQ. done",
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ0ZXN0LXVzZXIifQ.",
        ),
        ("key sk-proj-Rk3Vq8Xm2Lp7Tz4Wn9Ys1Hd6 rejected", "sk-proj-Rk3Vq8Xm2Lp7Tz4Wn9Ys1Hd6"),
        ("AKIAZ7QW3ER5TY8UI2OP k8Jd2LmQ/9xZ+vB4nR7tY1wE5sA3fG6hJ0cV2bN4", "k8Jd2LmQ/9xZ+vB4nR7tY1wE5sA3fG6hJ0cV2bN4"),
        ("glpat-Xk9vQ2mR7tLp4Wz8Ns3Y", "glpat-Xk9vQ2mR7tLp4Wz8Ns3Y"),
        ("curl -u deploy:Xk9vQ2mR7tLp https://example.com", "Xk9vQ2mR7tLp"),
    ],
)
def test_context_and_vendor_formats(text: str, secret: str) -> None:
    out, changed = redact_text(text)
    assert changed and secret not in out, out


@pytest.mark.parametrize(
    "text",
    [
        TOKEN,
        f"  {TOKEN}\n",
        "4c1f2ab38d7e9f60a5b4c3d2e1f0a9b8",  # 32 hex digits: an API key as often as an MD5 sum
        "cb7ae618-df0e-6d4e-2006-b1253c5c5880",
        "76124929858288161321291797160808",
    ],
)
def test_a_text_that_is_one_random_token_is_masked(text: str) -> None:
    out, changed = redact_text(text)
    assert changed and out.strip() == MASK


@pytest.mark.parametrize(
    "text",
    [
        "3f786850e387550fdab836ed7e6dc881de23001b",  # git rev-parse HEAD
        "9c3a8f0e2b1d4c5a6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5",  # docker run -d
        "sha256:450e2adb078d9dde54591a9aa6ccb35d89173426ca2c9cfea26c303ff2e8a20c",
        "trace_id=862afd05-2b28-42e0-bd82-657089968356",
        "/var/lib/agent/work/output.json",
        "1716212345",
        "payment-service-primary",
        "AKIAIOSFODNN7EXAMPLE",  # AWS's documentation key: gitleaks allowlists it, so does the lone-token rule
        "AIzaSyabcdefghijklmnopqrstuvwxyz1234567",  # a placeholder
        "-DKEYTAB_FILE=/tmp/app.keytab",  # a command line's flag: a named field
    ],
)
def test_ids_digests_and_placeholders_standing_alone_are_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    "text",
    [
        "1672546621574813",  # a client id of 16 random digits (2.9 bits per character)
        "9882352431515891",  # 2.7 bits: under the 3.0 a mixed alphabet needs, random for digits
        "3079988895338833",  # 2.25 bits: random digits reach it one time in a hundred
        "1e2eeb71:4e1cc713",  # hex8:hex8 (2.9 bits)
        "9c00a003:99190d77",
    ],
)
def test_a_lone_token_of_a_small_alphabet_has_its_own_entropy_floor(text: str) -> None:
    assert redact_text(text) == (MASK, True)


@pytest.mark.parametrize(
    "text",
    [
        "2026120517140700123",  # a compact timestamp: digits, but not random ones
        "20261205-171407-000",
        "4111111111111111",  # filler
        "1212121212121212",
        "1111222233334444",
        "1000000000012345",  # padded: 1.8 bits
        "1234567890123456",  # a run of the digits: a stand-in
    ],
)
def test_dates_filler_and_runs_of_digits_standing_alone_are_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


def test_a_vendor_prefix_is_also_the_head_of_a_longer_keyword() -> None:
    rules = default_rules()
    # sentry-org-token's keyword is `sntrys_eyjpyxqio` (the format's fixed start); `sntrys_` is the mark.
    look_alike = "sntrys_o911smUGfhE1QfdYfsZSyM8zcSCFw3CutOckbJ2F6D4mEr4RLEzxt5VwwPHzQGZd"
    assert rules.vendor_prefix(look_alike) and rules.vendor_prefix("pscale_tkn_x")
    assert redact_text(look_alike) == (look_alike, False)
    # Heads that are words or too short begin other tokens: still judged as lone tokens.
    assert not rules.vendor_prefix("github_Xk9vQ2mR7tLp4Wz8Ns3Yd6") and not rules.vendor_prefix("api_Xk9vQ2mR7t")
    assert redact_text("github_Xk9vQ2mR7tLp4Wz8Ns3Yd6") == (MASK, True)


@pytest.mark.parametrize(
    ("text", "changed"),
    [
        ("key=AIzaSyB3xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg&q=1", True),  # exact, where gitleaks' end anchor fails
        ("key=AIzaSyB3xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1J&q=1", True),  # cut short
        ("id AIzaTesb6Tscfcni8vIpWZqNCXFDFslJtVSvFDqXk9vQ2m done", False),  # longer: not Google's format
    ],
)
def test_the_google_key_prefix_takes_googles_length(text: str, changed: bool) -> None:
    assert redact_text(text)[1] is changed


@pytest.mark.parametrize(
    ("text", "changed"),
    [
        ("auth failed for xoxb-4711802254263-Xk9vQ2", True),  # a team id, then the rest cut short
        ("auth failed for xoxa-2-Xk9vQ2mR7tLp4Wz8", True),  # a versioned token
        ("auth failed for xoxp-1234-1234-1234-4ddbc191d40ee098cbaae6f3523ada2d", False),  # 4 digits: a stand-in
        ("see xoxb-deprecated-scopes-list for why", False),  # a page name, not a token
    ],
)
def test_the_loose_slack_prefix_wants_a_team_id(text: str, changed: bool) -> None:
    assert redact_text(text)[1] is changed


def test_lone_tokens_in_structured_values_and_error_metadata_are_ids() -> None:
    value, changed = redact_value({"order_id": TOKEN, "items": [TOKEN], "api_key": "k"})
    assert value == {"order_id": TOKEN, "items": [TOKEN], "api_key": MASK} and changed
    err = AgentmeshError(ErrorCode.FAILED_PRECONDITION, TOKEN, metadata={"approval_id": TOKEN})
    clean = redact_error(err)
    assert clean.metadata == {"approval_id": TOKEN} and clean.message == MASK


def test_what_a_gitleaks_rule_rejects_the_generic_detectors_do_not_mask() -> None:
    # gitleaks' gcp-api-key allowlists Google's own public keys; the lone-token rule and the loose
    # `AIza` prefix would mask it.
    text = "AIzaSyAnLA7NfeLquW1tJFpx_eQCxoX-oo6YyIs"
    found, vetoes = default_rules().scan(text)
    assert found == [] and vetoes
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    "text",
    [
        # detect-secrets' AWS pattern has no word boundary: "ASIA" + 16 capitals inside a longer word.
        "WELCOMETOASIAPACIFICREGIONALOFFICE",
        "GATTACAAKIAGGCTTAGCCTAGGATTACAGATT",
        # The loose Slack prefix inside a path or a hyphenated word is not a token's start.
        "https://example.org/media/2019-04-xoxo-festival-poster-1.jpg",
        "see docs/xoxb-migration-guide-v2.md",
    ],
)
def test_vendor_prefixes_inside_words_and_paths_are_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("creds AKIAZ7QW3ER5TY8UI2OP loaded", "AKIAZ7QW3ER5TY8UI2OP"),
        ('aws_key_id="ASIAZ5JLC4PEMNEH949Y"', "ASIAZ5JLC4PEMNEH949Y"),
        ("slack said invalid_auth for xoxp-470093111543-682613679567-VOlFlGNtl2O", "xoxp-470093111543"),
        ("token=xoxb-4711802254263-Xk9vQ2mR7tLp", "xoxb-4711802254263-Xk9vQ2mR7tLp"),
    ],
)
def test_vendor_prefixes_starting_a_token_are_masked(text: str, secret: str) -> None:
    out, changed = redact_text(text)
    assert changed and secret not in out, out


def test_a_lone_token_with_a_vendor_prefix_is_judged_by_that_vendor_rule() -> None:
    rules = default_rules()
    digest = "5e0c1b7d94a2f8366a1d0c3e9b72f45a8d16e0b3c97f2a4158e6d0b9c3a7f21e"  # sentry's user token: 64 hex
    # The exact format: gitleaks' sentry-user-token finds it, so it is masked.
    assert redact_text(f"sntryu_{digest}") == (MASK, True)
    # One digit too many: the vendor's rule rejects it, and the lone-token rule defers to the vendor.
    assert rules.vendor_prefix(f"sntryu_{digest}0")
    assert redact_text(f"sntryu_{digest}0") == (f"sntryu_{digest}0", False)
    # A semi-generic rule's keyword (`NRAK-` needs "newrelic ... =" before it) says nothing about a lone
    # token, nor does a two-character keyword (`sk`, `ey`): the lone-token rule still applies.
    assert not rules.vendor_prefix("NRAK-wt1dsr96vk2utk99jqcgzu598hv")
    assert redact_text("NRAK-wt1dsr96vk2utk99jqcgzu598hv") == (MASK, True)
    assert not rules.vendor_prefix("skXk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg0a")
    assert redact_text(TOKEN) == (MASK, True)


def test_the_generic_rule_still_masks_what_the_grammar_takes_for_a_placeholder() -> None:
    # The grammar skips a value with a digit run (`12345678`) as a stand-in; gitleaks' generic rule is the
    # safety net for a real password that has one, and its finding is not filtered.
    text = "SERVICE_TOKEN=Xk9vQ2mR12345678Lp4Wz8Ns"
    assert [f.rule for f in default_rules().findings(text)] == ["gitleaks:generic-api-key"]
    assert redact_text(text) == (f"SERVICE_TOKEN={MASK}", True)


def test_the_generic_rule_leaves_a_value_typed_along_the_keyboard() -> None:
    # Mostly consecutive characters: a stand-in, whatever the key; a vendor rule's own shape still counts.
    text = '"token1": "xoxp-1234567890"'
    assert [f.rule for f in default_rules().findings(text)] == ["gitleaks:generic-api-key"]
    assert redact_text(text) == (text, False)
    assert redact_text("snyk_token: 12345678-ABCD-ABCD-ABCD-1234567890AB")[1]


def test_widening_masks_a_token_past_a_fixed_length_rule() -> None:
    text = "key glpat-Xk9vQ2mR7tLp4Wz8Ns3YdEXTRA-tail, next"
    start = text.index("glpat-")
    assert widen(text, start, start + 26) == (start, text.index(","))
    out, changed = mask(text, [Finding(start, start + 26, "test")])
    assert out == f"key {MASK}, next" and changed


def test_every_occurrence_of_a_found_secret_is_masked() -> None:
    text = f'password="{TOKEN}" ... echoed back: {TOKEN}'
    out, changed = redact_text(text)
    assert changed and TOKEN not in out and out.count(MASK) == 2


def test_entropy_is_gitleaks_definition() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)
    # Divided by the length in bytes, as gitleaks does: non-ASCII runes lower it.
    assert shannon_entropy("é") < 1.0


def test_every_detector_reports_spans_inside_the_text() -> None:
    text = f'API_KEY="{TOKEN}"\nhttps://u:{TOKEN}@h/ Bearer {TOKEN}\nAKIAZ7QW3ER5TY8UI2OP'
    for f in find_secrets(text):
        assert 0 <= f.start < f.end <= len(text) and f.rule


def test_hostile_inputs_stay_linear() -> None:
    for text in ("password=" * 20000, '"token": "' * 20000, "eyJ" * 50000, "<password>" * 20000, "a" * 200000):
        out, _ = redact_text(text)
        assert isinstance(out, str)


# Issue 40, fourth pass: a lone token may hold a password's punctuation, and may be short.


@pytest.mark.parametrize(
    "text",
    [
        "Zq7#Wm2&Xk9@Lp4*Rt",  # punctuation inside a random token
        "sk_ubb4yN3mzqGR2x8#P7r5&@*xC$utE",
        "911602140448729|AY-lRJZq9BoDLobvAiP25L7RcMg",  # app id | app secret
        "Tm3!Kx8$Vq2Rw",
        "Sk94HG7f6KB",  # 11 characters: both cases, digits, few vowels
        "YnJvd3Nlcjo=",
        "pwpt1awiqnltknd",  # short, one case: no hex, few vowels, consonants in a row
        "vyfflmtrolpaqeim",  # letters of one case that read as random
        "k9qx7lm2wtr",  # short, one case: digits scattered in three places
        "k9Qx7Lm2%2BWz4Rt8Vb%3D",  # URL-encoded
    ],
)
def test_a_lone_token_with_punctuation_or_short_is_masked(text: str) -> None:
    assert redact_text(text) == (MASK, True)


@pytest.mark.parametrize(
    "text",
    [
        "#!/registries/5/portainer.demo~2Fportainerregistrytesting~2Falpine",  # a shebang and a path
        "$GItHUB_API_URL/$GIT_COMMIT",  # variables
        "$DEPLOY_TOKEN_Xk9vQ2mR",
        "@HWI-ST565_0092:4:1101:7621:5770#ACTTGA/1",  # punctuation at an end, `:` and `/`
        "vjoePbUBJ7&",  # a cut query string
        "strict-uri-encode@npm:2.0.0",  # a package spec
        "USK@u2vn3Lh6Kte2-TgBSNKorbsKkuAt34ckoLmgx0ndXO0",  # name@...: an address
        "john.doe42@example.com",
        "iv:2qF98ZkchgfWF4tZo8fok6zY0ZLNRV3wFpl8n2iyC7I=",  # a named field (SOPS metadata)
        "refreshInterval:",
        "HelloWorld2024",  # short: words and a year
        "iPhone15Pro",  # short: vowels of words
        "Python3.11",  # short: a version
        "a1b2c3d4e5f6",  # short: one case only
        "ORD-48213-XK",
        "%2Fxk9vQ2mR7tLp4Wz8Ns",  # URL-decoded: a path
        "TestSource%Password%",  # `%` without hex digits: a template
        "hello%20world%21",
        "7f3a9c2e1b4d",  # short, one case: hex (a short git SHA)
        "server01prod",  # short, one case: words
        "getsnapshotdrafts",  # letters of one case: words
        "matchboxtwentytwo",
        "chatglm3-6b-32k",  # a model's name: digits in three places, but in parts
        "claude-3-5-sonnet-20241022",  # words and numbers
        "text-embedding-3-large",
        "mistral-7b-instruct-v0.2",
        "x86_64-linux-gnu",
        "ip-10-0-1-23.ec2.internal",
        "release-2026-12-05",
    ],
)
def test_a_lone_token_with_odd_punctuation_or_short_words_is_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    "text",
    [
        "my aws secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY ok",
        "export creds: AKIA2OGYBAH6STMMNXNN then 4hT8+qLm2Rz9vXw/1nBc7JkP0sYd3Fg6Ue5Ha2Qo",
        "aws_secret 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.",
    ],
)
def test_a_raw_aws_secret_key_in_free_text_is_masked(text: str) -> None:
    """Issue 39 (red team, low): a 40-character AWS secret access key in prose, with no assignment."""
    masked = redact_str(text)
    assert "4hT8+qLm2Rz9vXw" not in masked and "wJalrXUtnFEMI" not in masked, masked


# Issue 40, seventh pass: short tokens' entropy floor.


@pytest.mark.parametrize(
    "text",
    [
        "8xemm4qla48",  # 11 characters, 2.91 bits: under 3.0, above log2(11) - 0.6
        "nvv5ieh2n21",
    ],
)
def test_a_short_random_token_is_masked(text: str) -> None:
    assert redact_text(text) == (MASK, True)


@pytest.mark.parametrize(
    "text",
    [
        "0x4c756146",  # a hex literal: a number
        "0xCAFEBABF",
        "my_db_v2_prod",  # short parts are words
        "x9_!k2m4q7",  # a password's punctuation beside `_`: not the short alphabet
        "kkkbj3j4wj",  # 10 characters, 2.37 bits: under the short floor (2.72)
    ],
)
def test_short_tokens_that_are_numbers_names_or_low_entropy_are_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    "text",
    [
        "q=k7f2-zr9wx_m4tq=p8vne3hj6cd0ly",  # a second `=`: masked near misses as often as secrets
        "vbt=p4x9-wq2mzk8rj7hd3nf6cy0tg",  # a name without a vowel
        "session=p4x9wq2mzk8rj7hd3nf6",  # a word names the field
        "sha256=450e2adb078d9dde54591a9aa6ccb35d89173426ca2c9cfea26c303ff2e8a20c",
    ],
)
def test_a_named_field_standing_alone_is_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("my secret key 8fKq2LzW9xPm4TnR7vB3", "8fKq2LzW9xPm4TnR7vB3"),
        ("secret key: 8fKq2LzW9xPm4TnR7vB3 (rotate it)", "8fKq2LzW9xPm4TnR7vB3"),
        ("Your API key is 8fKq2LzW9xPm4TnR7vB3.", "8fKq2LzW9xPm4TnR7vB3"),
        ("the password for prod is 'Xk39dLq0#2mZpW8'", "Xk39dLq0#2mZpW8"),
        # A raw `/` in a URL's password (not valid in userinfo, but typed so): the whole password goes.
        ("postgres://bob:pa/ss9Xw3kq@db.example.com:5432/x", "pa/ss9Xw3kq"),
        (f"https://deploy:{TOKEN[:10]}/{TOKEN[10:]}@git.example.com/repo.git", TOKEN[:10]),
    ],
)
def test_a_secret_named_in_prose_or_holding_a_slash_in_a_url_is_masked_whole(text: str, secret: str) -> None:
    masked, changed = redact_text(text)
    assert changed
    assert secret not in masked and secret[-8:] not in masked


@pytest.mark.parametrize(
    "text",
    [
        "the secret of success is perseverance and hard work",
        "password reset token sent to bob@example.com",
        "the token was revoked yesterday by the admin",
        "csrf-token=Mj2qykJO5rELyHgezQ69nzUX0i3OH67V7",
        "api key 12345678-ABCD-ABCD-ABCD-1234567890AB",  # runs typed beside a key's name: a stand-in
        "see https://example.com:443/users/bob@example.org",  # a port and a path, not a password
        "jdbc:mysql://localhost:3306/db?user=a@b",
    ],
)
def test_prose_about_secrets_and_urls_with_a_port_and_a_path_are_kept(text: str) -> None:
    assert redact_text(text) == (text, False)
