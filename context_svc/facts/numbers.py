"""Numbers, amounts, dates and times written in words, and the normal form of every fact (§4).

Facts stay verbatim in every text context_svc writes; the normal form (`normalize`) is what two
spellings of one value share, so a retention check or a comparison of values does not depend on
the spelling: "三千元", "3000元" and "¥3,000" are all `3000 CNY`, "85折", "八五折" and "15% off" are
all `15% off`, "June first" and "6月1日" are both `06-01`. Chinese numerals are read by cn2an,
English number words by text2num (both pure offline libraries, pinned in pyproject.toml).
"""

from __future__ import annotations

import functools
import re
from typing import Final

import cn2an
import text_to_num

__all__ = ["EN_DAY", "MONTHS", "cn_value", "en_value", "normalize", "word_number_spans"]

# Word edges for ASCII words only: \b fails between an ASCII letter and a CJK one ("dollars改为").
_S, _E = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"

MONTHS: Final = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
    "December",
)  # fmt: skip
_MONTH_BY_NAME: Final = (
    {name.lower(): i + 1 for i, name in enumerate(MONTHS)}
    | {name[:3].lower(): i + 1 for i, name in enumerate(MONTHS)}
    | {"sept": 9}
)

_UNITS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_ORD_UNITS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_ORD_TEENS = ["tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth",
              "eighteenth", "nineteenth"]  # fmt: skip
# Day of month in words: "first" .. "thirty-first" (hyphen or space).
# Ordinals only: "one of June's pods" is no date, "the first of June" is.
_DAY_WORDS = sorted(
    {*_ORD_UNITS, *_ORD_TEENS, "twentieth", "thirtieth"}
    | {f"twenty{sep}{u}" for u in _ORD_UNITS for sep in "- "}
    | {f"thirty{sep}first" for sep in "- "},
    key=len,
    reverse=True,
)
EN_DAY: Final = r"(?:\d{1,2}(?:st|nd|rd|th)?|" + "|".join(w.replace(" ", r"\s") for w in _DAY_WORDS) + _E + ")"
"""A day of the month: digits with an optional ordinal suffix, or words ("first", "twenty-first")."""

_NUMBER_WORD = (
    r"(?i:" + _S + "(?:" + "|".join([*_UNITS, *_TEENS, "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
                                      "eighty", "ninety", "hundred", "thousand", "million", "billion"]) + ")" + _E + ")"
)  # fmt: skip
_HAS_NUMBER_WORD = re.compile(_NUMBER_WORD)
_TOKEN = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*|\d+(?:[.,]\d+)*|[^\sA-Za-z\d]")
# What may follow a number in words, and the kind it makes.
_AFTER_WORDS = re.compile(
    rf"\s?(?:(?P<cur>dollars?|bucks|euros?|pounds?|yuan|RMB|USD|CNY|EUR|GBP|JPY|HKD){_E}"
    rf"|(?P<pct>(?:percent|per\scent|%)(?P<off>\soff{_E})?)"
    rf"|(?P<time>(?:a\.m\.|p\.m\.|(?:am|pm|o'clock){_E})))",
    re.IGNORECASE,
)

_CURRENCY_CODES: Final = {
    "¥": "CNY", "￥": "CNY", "元": "CNY", "块": "CNY", "人民币": "CNY", "rmb": "CNY", "cny": "CNY", "yuan": "CNY",
    "$": "USD", "美元": "USD", "usd": "USD", "dollar": "USD", "dollars": "USD", "bucks": "USD", "us$": "USD",
    "€": "EUR", "欧元": "EUR", "eur": "EUR", "euro": "EUR", "euros": "EUR",
    "£": "GBP", "英镑": "GBP", "gbp": "GBP", "pound": "GBP", "pounds": "GBP",
    "日元": "JPY", "jpy": "JPY", "港币": "HKD", "hkd": "HKD", "hk$": "HKD",
}  # fmt: skip
_CURRENCY_RE = re.compile(
    "|".join(sorted((re.escape(c) for c in _CURRENCY_CODES), key=len, reverse=True)), re.IGNORECASE
)
_SCALE: Final = {"k": 1e3, "m": 1e6, "千": 1e3, "万": 1e4, "亿": 1e8, "千万": 1e7}
_CN_NUMBER = re.compile(r"[〇零一二两三四五六七八九十百千万亿点\d.]+")
_DIGITS = re.compile(r"\d[\d,]*(?:\.\d+)?")


class _Token:
    """A word for text2num's find_numbers (its Token protocol)."""

    __slots__ = ("word",)

    def __init__(self, word: str) -> None:
        self.word = word

    def text(self) -> str:
        return self.word

    def nt_separated(self, previous: _Token) -> bool:
        return False

    def not_a_number_part(self) -> bool:
        return False


def word_number_spans(text: str) -> list[tuple[str, int, int]]:
    """(kind, start, end) of the English numbers in words in `text` ("three thousand dollars" is an
    amount, "fifteen percent" a percent, "fifteen percent off" a discount, "five pm" a time, "forty
    two" a number); "one" and "two" alone (no unit after them) and ordinals are not numbers here."""
    if not _HAS_NUMBER_WORD.search(text):
        return []
    matches = list(_TOKEN.finditer(text))
    out: list[tuple[str, int, int]] = []
    for occurrence in text_to_num.find_numbers([_Token(m.group()) for m in matches], "en", 0):
        if occurrence.is_ordinal:
            continue
        words = matches[occurrence.start : occurrence.end]
        if not any(_HAS_NUMBER_WORD.search(m.group()) for m in words):
            continue  # digits alone: the regular expressions of facts.py find those
        start, end = words[0].start(), words[-1].end()
        kind = "number"
        after = _AFTER_WORDS.match(text, end)
        if after is None and len(words) == 1 and occurrence.value < 3:
            continue  # "one of them", "two options": prose, unless "two pm", "one dollar"
        if after is not None:
            kind = "amount" if after["cur"] else "discount" if after["off"] else "percent" if after["pct"] else "time"
            end = after.end()
        out.append((kind, start, end))
    return out


@functools.lru_cache(maxsize=4096)
def en_value(words: str) -> float | None:
    """The value of an English number in words ("three thousand two hundred", "twenty-first")."""
    tokens = [_Token(m.group()) for m in _TOKEN.finditer(words)]
    found = text_to_num.find_numbers(tokens, "en", 0)
    return float(found[0].value) if len(found) == 1 else None


@functools.lru_cache(maxsize=4096)
def cn_value(text: str) -> float | None:
    """The value of a Chinese (or mixed) numeral: 三千 3000, 两千五百 2500, 1.2万 12000, 八五 85."""
    try:
        return float(cn2an.cn2an(text.replace(",", ""), "smart"))
    except (ValueError, KeyError, IndexError):
        return None


def _number(text: str) -> float | None:
    """A number written in digits, Chinese numerals or English words."""
    text = text.strip()
    if _DIGITS.fullmatch(text):
        return float(text.replace(",", ""))
    if re.search(r"[A-Za-z]", text):
        return en_value(text)
    return cn_value(text)


def _fmt(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def _amount(text: str) -> str:
    currency = _CURRENCY_RE.search(text)
    code = _CURRENCY_CODES[currency.group().lower()] if currency else ""
    body = _CURRENCY_RE.sub(" ", text).strip()
    scale = 1.0
    for suffix in ("千万", "万", "亿", "千", "k", "K", "m", "M"):
        if body.endswith(suffix) and (len(suffix) > 1 or not body[-2:-1].isalpha()):
            body, scale = body[: -len(suffix)].strip(), _SCALE[suffix.lower()]
            break
    value = _number(body)
    return f"{_fmt(value * scale)} {code}".strip() if value is not None else text


def _discount(text: str) -> str:
    """85折 / 八五折 / 8.5折 pay 85 %: 15 % off; 8折 pays 80 %: 20 % off; "15% off" is 15 % off."""
    if text.endswith("折"):
        digits = text.rstrip("折").lstrip("打")
        value = _number(digits)
        if value is None:
            return text
        pay = value * 10 if value < 10 else value
        return f"{_fmt(100 - pay)}% off"
    number = re.match(r"(.+?)\s?(?:%|percent|per\scent)", text, re.IGNORECASE)
    value = _number(number.group(1)) if number else None
    return f"{_fmt(value)}% off" if value is not None else text


def _percent(text: str) -> str:
    body = re.sub(r"(?i)百分之|percent|per\scent|[%％]", "", text).strip()
    value = _number(body)
    return f"{_fmt(value)}%" if value is not None else text


_CN_DATE = re.compile(r"(?:(?P<y>[\d〇零一二三四五六七八九]{2,4})年)?(?P<m>[\d〇零一二三四五六七八九十]{1,3})月"
                      r"(?:(?P<d>[\d〇零一二三四五六七八九十]{1,3})[日号])?")  # fmt: skip
_NUM_DATE = re.compile(r"(?P<y>\d{4})[-/](?P<m>\d{1,2})[-/](?P<d>\d{1,2})")


def _year(text: str) -> int | None:
    if text.isdigit():
        year = int(text)
    else:  # 二〇二五: digit by digit
        digits = [cn_value(c) for c in text]
        if any(d is None for d in digits):
            return None
        year = int("".join(str(int(d or 0)) for d in digits))
    return year + 2000 if year < 100 else year


def _date(text: str) -> str:
    year: int | None = None
    month = day = None
    if (m := _NUM_DATE.match(text)) is not None:
        year, month, day = int(m["y"]), int(m["m"]), int(m["d"])
    elif (m := _CN_DATE.fullmatch(text)) is not None:
        year = _year(m["y"]) if m["y"] else None
        month_value = _number(m["m"])
        day_value = _number(m["d"]) if m["d"] else None
        month = int(month_value) if month_value is not None else None
        day = int(day_value) if day_value is not None else None
    else:
        words = re.findall(r"[A-Za-z]+", text)
        month = next((_MONTH_BY_NAME[w.lower()] for w in words if w.lower() in _MONTH_BY_NAME), None)
        years = re.findall(_S + r"\d{4}" + _E, text)
        year = int(years[0]) if years else None
        rest = re.sub(_S + r"\d{4}" + _E, " ", text)
        rest = re.sub(r"(?i)" + _S + "(?:" + "|".join([*_MONTH_BY_NAME, "the", "of"]) + ")" + _E + r"\.?|,", " ", rest)
        digits = re.search(r"\d{1,2}", rest)
        day_value = float(digits.group()) if digits else en_value(rest.strip()) if rest.strip() else None
        day = int(day_value) if day_value is not None else None
    if month is None:
        return text
    body = f"{month:02d}" + (f"-{day:02d}" if day is not None else "")
    return f"{year:04d}-{body}" if year is not None else body


_CN_TIME = re.compile(r"(?P<p>凌晨|早上|上午|中午|下午|晚上)?(?P<h>[\d零一二两三四五六七八九十]{1,3})点"
                      r"(?:(?P<half>半)|(?P<min>[\d零一二三四五六七八九十]{1,3})分?)?")  # fmt: skip


def _time(text: str) -> str:
    lowered = text.lower()
    if lowered in ("noon", "midday"):
        return "12:00"
    if lowered == "midnight":
        return "00:00"
    hour: float | None
    minute: float | None = 0
    if (m := _CN_TIME.fullmatch(text)) is not None:
        hour = _number(m["h"])
        minute = 30 if m["half"] else (_number(m["min"]) if m["min"] else 0)
        pm = m["p"] in ("下午", "晚上") or (m["p"] == "中午" and hour is not None and hour < 3)
    else:
        clock = re.match(r"(\d{1,2}):(\d{2})", text)
        if clock:
            hour, minute = float(clock.group(1)), float(clock.group(2))
        else:
            words = re.sub(r"(?i)a\.m\.|p\.m\.|" + _S + "(?:am|pm)" + _E + "|o'clock", " ", text).strip()
            hour = _number(words)
        pm = bool(re.search(r"(?i)p\.?m\.?", text))
    if hour is None or minute is None:
        return text
    hour_24 = int(hour) % 12 + 12 if pm else int(hour)
    return f"{hour_24:02d}:{int(minute):02d}"


def _datetime(text: str) -> str:
    # 2025-06-01 is a date; 2025-06-01T10:00:00Z keeps its time as written.
    return _date(text[:10]) + text[10:] if _NUM_DATE.match(text) else text


_NORMALIZERS = {"amount": _amount, "discount": _discount, "percent": _percent, "date": _date,
                "datetime": _datetime, "time": _time}  # fmt: skip


@functools.lru_cache(maxsize=65536)
def normalize(kind: str, text: str) -> str:
    """The normal form of a fact of `kind` (see the module docstring); ids and names are themselves."""
    if kind == "number":
        value = _number(text)
        return _fmt(value) if value is not None else text
    normalizer = _NORMALIZERS.get(kind)
    if normalizer is None:
        return text
    try:
        return normalizer(text)
    except (ValueError, OverflowError):  # a malformed value normalises to its own text
        return text
