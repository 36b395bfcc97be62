"""Sample card transactions with a hidden but learnable fraud process, and drift modes for monitoring.

The label comes from a logistic process over facts a model can see through the features: the amount
relative to the user's usual amount, bursts of transactions within the last hour, risky merchants,
night time, a device or country the user does not usually use. Most fraud arrives in short bursts
("episodes") on a compromised card. The intercept is solved so the positive rate is ``fraud_rate``.

Drift modes (all relative to ``none`` with the same seed):

- ``covariate``: amounts ramp up over the period (x1 → x2.5) and bursts are twice as frequent.
- ``category``: the category mix shifts towards electronics, gaming, digital goods and travel.
- ``prior``: the base rate of fraud triples.
- ``concept``: the inputs keep their distribution but the label follows other facts (card-present
  groceries and fuel at daytime), so a model trained on ``none`` loses its edge.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlops_core import atomic_path
from mlops_features.errors import DataError
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # the reference model's: the rows generated here

logger = logging.getLogger(__name__)

FRAUD_SCHEMA = raw_schema(FRAUD_CONTRACT)
"""The raw schema of the batches the generator writes: the reference fraud model's (``configs/models/fraud.yaml``),
whose contract :data:`mlops_model.DEFAULT_CONTRACT` equals. The generator makes fraud's transactions only."""

# The generated values: within fraud's contract's expectations.allowed_values (tests/unit/features/test_sample.py)
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

DRIFT_MODES = ("none", "covariate", "prior", "concept", "category")
_DRIFT_CODE = {"none": "N", "covariate": "C", "prior": "P", "concept": "K", "category": "X"}
_US_PER_HOUR = 3_600_000_000
_US_PER_DAY = 24 * _US_PER_HOUR
_CATEGORY_AMOUNT = np.array([0.6, 0.9, 0.8, 1.3, 0.9, 3.0, 2.5, 0.7, 0.5, 4.0])
_DRIFT_CATEGORIES = np.array([CATEGORIES.index(c) for c in ("electronics", "gaming", "digital_goods", "travel")])
_HOUR_WEIGHTS = np.array(
    [1, 0.6, 0.4, 0.3, 0.3, 0.5, 1.2, 2.5, 3.5, 4, 4.5, 5, 5.5, 5, 4.5, 4.5, 5, 5.5, 6, 6, 5, 4, 3, 2]
)


def generate_transactions(
    out_dir: str | Path,
    *,
    rows: int = 60_000,
    days: int = 3,
    seed: int = 42,
    drift: str = "none",
    start_date: str | date = "2026-11-01",
    users: int = 2_000,
    merchants: int = 300,
    fraud_rate: float = 0.03,
) -> list[Path]:
    """Write ``days`` parquet batches (one per UTC day) of raw transactions; same arguments → same bytes.

    Args:
        out_dir: Folder to write ``transactions_<YYYY-MM-DD>.parquet`` into (created if missing).
        rows: Total rows across all days.
        days: Number of days, one batch each.
        seed: Seed of the one random generator used.
        drift: One of ``none``, ``covariate``, ``prior``, ``concept``, ``category``.
        start_date: First UTC day, ISO ``YYYY-MM-DD``.
        users: Distinct users.
        merchants: Distinct merchants.
        fraud_rate: Target share of positives (``prior`` drift triples it).

    Returns:
        The written batch files, in day order.
    """
    start = _check_args(rows, days, drift, start_date, users, merchants, fraud_rate)
    df = build_transactions(
        rows=rows, days=days, seed=seed, drift=drift, start=start, users=users, merchants=merchants,
        fraud_rate=fraud_rate,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    day_index = ((df["event_timestamp"] - pd.Timestamp(start)) // pd.Timedelta(days=1)).to_numpy()
    paths = []
    for d in range(days):
        part = df[day_index == d].reset_index(drop=True)
        path = out / f"transactions_{(start + timedelta(days=d)).date().isoformat()}.parquet"
        table = pa.Table.from_pandas(part, schema=FRAUD_SCHEMA, preserve_index=False).replace_schema_metadata(None)
        with atomic_path(path) as tmp:  # readers glob the folder: a torn batch must never carry the final name
            pq.write_table(table, tmp, compression="zstd")
        paths.append(path)
    logger.info("wrote %d rows in %d batches to %s (drift=%s, positives=%.4f)", len(df), days, out, drift,
                df["is_fraud"].mean())
    return paths


def build_transactions(
    *, rows: int, days: int, seed: int, drift: str, start: datetime, users: int, merchants: int, fraud_rate: float
) -> pd.DataFrame:
    """The generator's body: one DataFrame with :data:`FRAUD_SCHEMA`'s columns, sorted by event time."""
    rng = np.random.default_rng(seed)
    span_us = days * _US_PER_DAY
    # Users: home country, usual device, usual amount, activity.
    home = rng.choice(len(COUNTRIES), size=users, p=_normalise([6, 3, 2, 2, 1, 1, 1, 1, 0.5, 0.5]))
    usual_device = rng.choice(len(DEVICES), size=users, p=_normalise([3, 3, 1.5, 1.5, 2]))
    usual_amount = np.exp(rng.normal(3.4, 0.6, size=users))
    activity = rng.gamma(2.0, 1.0, size=users)
    favourites = rng.integers(0, merchants, size=(users, 5))
    # Merchants: category, risk flag.
    m_category = rng.choice(len(CATEGORIES), size=merchants, p=_normalise([5, 4, 3, 3, 2, 1.5, 1.5, 1, 1, 0.5]))
    m_risky = rng.random(merchants) < 0.06
    risky_ids = np.flatnonzero(m_risky) if m_risky.any() else np.arange(merchants)

    burst_share = 0.05 * (2.0 if drift == "covariate" else 1.0)
    episodes = max(1, round(rows * burst_share / 4.0))
    lengths = np.minimum(2 + rng.poisson(2.0, size=episodes), 8)
    lengths = _fit_lengths(lengths, rows)
    n_burst = int(lengths.sum())
    n_norm = rows - n_burst

    # Normal activity.
    u_n = rng.choice(users, size=n_norm, p=activity / activity.sum())
    t_n = _diurnal_times(rng, n_norm, days)
    fav = favourites[u_n, rng.integers(0, 5, size=n_norm)]
    m_n = np.where(rng.random(n_norm) < 0.8, fav, rng.integers(0, merchants, size=n_norm))
    if drift == "category":
        by_cat = [np.flatnonzero(np.isin(m_category, [c])) for c in _DRIFT_CATEGORIES]
        pool = np.concatenate([p for p in by_cat if p.size]) if any(p.size for p in by_cat) else np.arange(merchants)
        m_n = np.where(rng.random(n_norm) < 0.5, rng.choice(pool, size=n_norm), m_n)
    amt_n = usual_amount[u_n] * np.exp(rng.normal(0.0, 0.45, size=n_norm)) * _CATEGORY_AMOUNT[m_category[m_n]]
    dev_n = np.where(rng.random(n_norm) < 0.93, usual_device[u_n], rng.integers(0, len(DEVICES), size=n_norm))
    ctry_n = np.where(rng.random(n_norm) < 0.96, home[u_n], rng.integers(0, len(COUNTRIES), size=n_norm))

    # Bursts on compromised cards: close in time, large, risky merchants, new device or country, at night.
    ep_user = rng.integers(0, users, size=episodes)
    ep_start = rng.integers(0, span_us - _US_PER_HOUR, size=episodes)
    night = rng.random(episodes) < 0.5
    ep_start = np.where(night, (ep_start // _US_PER_DAY) * _US_PER_DAY + rng.integers(0, 5 * _US_PER_HOUR, episodes),
                        ep_start)
    ep_device = np.where(rng.random(episodes) < 0.7, rng.integers(0, len(DEVICES), size=episodes),
                         usual_device[ep_user])
    ep_country = np.where(rng.random(episodes) < 0.5, rng.integers(0, len(COUNTRIES), size=episodes), home[ep_user])
    ep = np.repeat(np.arange(episodes), lengths)
    u_b = ep_user[ep]
    t_b = ep_start[ep] + rng.integers(0, 50 * 60 * 1_000_000, size=n_burst)
    m_b = np.where(rng.random(n_burst) < 0.6, rng.choice(risky_ids, size=n_burst), rng.integers(0, merchants, n_burst))
    amt_b = usual_amount[u_b] * np.exp(rng.normal(1.0, 0.6, size=n_burst)) * _CATEGORY_AMOUNT[m_category[m_b]]
    dev_b, ctry_b = ep_device[ep], ep_country[ep]

    user = np.concatenate([u_n, u_b])
    t_us = np.concatenate([t_n, t_b])
    merchant = np.concatenate([m_n, m_b])
    amount = np.concatenate([amt_n, amt_b])
    device = np.concatenate([dev_n, dev_b])
    country = np.concatenate([ctry_n, ctry_b])
    order = np.lexsort((user, t_us))
    user, t_us, merchant, amount, device, country = (a[order] for a in (user, t_us, merchant, amount, device, country))
    if drift == "covariate":
        amount = amount * (1.0 + 1.5 * t_us / span_us)
    amount = np.round(np.maximum(amount, 0.5), 2)
    category = m_category[merchant]
    in_person = rng.random(rows) < 0.5
    channel = np.where(DEVICES.index("pos_terminal") == device, np.where(in_person, 0, 1), 2)

    # The hidden label process.
    burst = _count_last_hour(user, t_us)
    hour = (t_us % _US_PER_DAY) // _US_PER_HOUR
    facts = {
        "ratio": np.log(amount / usual_amount[user]),
        "burst": np.minimum(burst - 1, 5),
        "risky": m_risky[merchant].astype(float),
        "night": (hour < 5).astype(float),
        "new_device": (device != usual_device[user]).astype(float),
        "foreign": (country != home[user]).astype(float),
    }
    if drift == "concept":
        logit = (2.2 * (channel == 0) + 1.8 * np.isin(category, [CATEGORIES.index("grocery"), CATEGORIES.index("fuel")])
                 + 1.2 * ((hour >= 9) & (hour < 17)) - 0.8 * facts["ratio"])
    else:
        logit = (1.6 * facts["ratio"] + 0.9 * facts["burst"] + 2.0 * facts["risky"] + 0.9 * facts["night"]
                 + 1.3 * facts["new_device"] + 1.1 * facts["foreign"])
    rate = min(fraud_rate * 3.0, 0.5) if drift == "prior" else fraud_rate
    prob = _sigmoid(logit + _solve_intercept(logit, rate))
    is_fraud = (rng.random(rows) < prob).astype(np.int8)

    created_us = t_us + rng.exponential(2_000_000, size=rows).astype(np.int64)
    base = pd.Timestamp(start)
    return pd.DataFrame(
        {
            "transaction_id": [f"T{seed}{_DRIFT_CODE[drift]}-{i:09d}" for i in range(rows)],
            "user_id": [f"U{u:06d}" for u in user],
            "merchant_id": [f"M{m:05d}" for m in merchant],
            "event_timestamp": base + pd.to_timedelta(t_us, unit="us"),
            "created": base + pd.to_timedelta(created_us, unit="us"),
            "amount": amount.astype(np.float64),
            "currency": [CURRENCY_BY_COUNTRY[COUNTRIES[c]] for c in country],
            "category": [CATEGORIES[c] for c in category],
            "country": [COUNTRIES[c] for c in country],
            "device": [DEVICES[d] for d in device],
            "channel": [CHANNELS[c] for c in channel],
            "is_fraud": is_fraud,
        }
    )


def _check_args(
    rows: int, days: int, drift: str, start_date: str | date, users: int, merchants: int, fraud_rate: float
) -> datetime:
    for name, value in (("rows", rows), ("days", days), ("users", users), ("merchants", merchants)):
        if not isinstance(value, int) or value < 1:
            raise DataError(f"{name}={value!r} is invalid: expected a whole number ≥ 1")
    if rows < days * 10:
        raise DataError(f"rows={rows!r} is too few for days={days!r}: expected at least 10 rows per day")
    if drift not in DRIFT_MODES:
        raise DataError(f"drift={drift!r} is unknown: expected one of {list(DRIFT_MODES)}")
    if not 0.0 < fraud_rate < 0.5:
        raise DataError(f"fraud_rate={fraud_rate!r} is invalid: expected a share between 0 and 0.5")
    try:
        day = start_date if isinstance(start_date, date) else date.fromisoformat(str(start_date))
    except ValueError:
        raise DataError(f"start_date={start_date!r} is invalid: expected an ISO date like 2026-11-01") from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _normalise(weights: list[float]) -> np.ndarray:
    w = np.asarray(weights, dtype=float)
    return w / w.sum()


def _fit_lengths(lengths: np.ndarray, rows: int) -> np.ndarray:
    """Trim the bursts so at least half the rows stay normal activity (matters only for tiny ``rows``)."""
    budget = rows // 2
    cum = np.cumsum(lengths)
    keep = lengths[cum <= budget]
    return keep if keep.size else np.array([min(2, budget)], dtype=lengths.dtype)


def _diurnal_times(rng: np.random.Generator, n: int, days: int) -> np.ndarray:
    """Microsecond offsets from the start: uniform day, hour by a day/night profile, uniform within the hour."""
    day = rng.integers(0, days, size=n)
    hour = rng.choice(24, size=n, p=_HOUR_WEIGHTS / _HOUR_WEIGHTS.sum())
    return day * _US_PER_DAY + hour * _US_PER_HOUR + rng.integers(0, _US_PER_HOUR, size=n)


def _count_last_hour(user: np.ndarray, t_us: np.ndarray) -> np.ndarray:
    """Per row: the user's transactions in ``[t - 1h, t]`` in arrival order, this one included."""
    order = np.lexsort((t_us, user))
    key = user[order].astype(np.int64) * (1 << 50) + t_us[order]
    pos = np.arange(len(key))
    first = np.searchsorted(key, key - _US_PER_HOUR, side="left")
    out = np.empty(len(key), dtype=np.int64)
    out[order] = pos - first + 1
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _solve_intercept(logit: np.ndarray, rate: float) -> float:
    """Bisection for the intercept b with mean(sigmoid(logit + b)) == rate."""
    lo, hi = -40.0, 40.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if _sigmoid(logit + mid).mean() < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
