"""The raw transaction schema: columns, types and allowed values shared by the generator and the gate."""

from __future__ import annotations

import pyarrow as pa

from mlops_model import LABEL

CURRENCY_BY_COUNTRY = {
    "US": "USD",
    "GB": "GBP",
    "DE": "EUR",
    "FR": "EUR",
    "NL": "EUR",
    "ES": "EUR",
    "BR": "BRL",
    "IN": "INR",
    "NG": "NGN",
    "SG": "SGD",
}
COUNTRIES = tuple(CURRENCY_BY_COUNTRY)
CURRENCIES = tuple(sorted(set(CURRENCY_BY_COUNTRY.values())))
CATEGORIES = (
    "grocery",
    "restaurants",
    "fuel",
    "fashion",
    "health",
    "travel",
    "electronics",
    "gaming",
    "digital_goods",
    "jewelry",
)
DEVICES = ("ios", "android", "web_desktop", "web_mobile", "pos_terminal")
CHANNELS = ("card_present", "contactless", "online")

ALLOWED_VALUES: dict[str, tuple[str, ...]] = {
    "currency": CURRENCIES,
    "category": CATEGORIES,
    "country": COUNTRIES,
    "device": DEVICES,
    "channel": CHANNELS,
}
"""Allowed values of each categorical column; anything else is quarantined."""

TIMESTAMP = pa.timestamp("us", tz="UTC")

RAW_SCHEMA = pa.schema(
    [
        ("transaction_id", pa.string()),
        ("user_id", pa.string()),
        ("merchant_id", pa.string()),
        ("event_timestamp", TIMESTAMP),
        ("created", TIMESTAMP),
        ("amount", pa.float64()),
        ("currency", pa.string()),
        ("category", pa.string()),
        ("country", pa.string()),
        ("device", pa.string()),
        ("channel", pa.string()),
        ("is_fraud", pa.int8()),
    ]
)
"""Exact Arrow schema of a raw batch. ``created`` is when the row reached the platform."""

NOT_NULL = ("transaction_id", "user_id", "merchant_id", "event_timestamp", "created", "amount", *ALLOWED_VALUES, LABEL)
"""Columns that must never be null (all of them)."""
