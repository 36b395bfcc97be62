"""The sample generator: reproducible bytes, the schema, a learnable label, and each drift mode's effect."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from scipy import stats
from scipy.optimize import minimize

from mlops_features import DataError, generate_transactions, training_set
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import EncoderSpec

ARGS = {"rows": 20_000, "days": 2, "users": 800, "merchants": 120}


def _read(paths: list[Path]) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


@pytest.fixture(scope="module")
def modes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    root = tmp_path_factory.mktemp("modes")
    return {m: _read(generate_transactions(root / m, seed=3, drift=m, **ARGS))
            for m in ("none", "covariate", "prior", "concept", "category")}


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    a = generate_transactions(tmp_path / "a", seed=11, **ARGS)
    b = generate_transactions(tmp_path / "b", seed=11, **ARGS)
    c = generate_transactions(tmp_path / "c", seed=12, **ARGS)
    digest = [[hashlib.sha256(p.read_bytes()).hexdigest() for p in ps] for ps in (a, b, c)]
    assert digest[0] == digest[1]
    assert digest[0] != digest[2]
    assert [p.name for p in a] == ["transactions_2026-11-01.parquet", "transactions_2026-11-02.parquet"]


def test_batches_have_the_raw_schema_one_day_each_and_all_rows(modes: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    paths = generate_transactions(tmp_path, seed=5, rows=3_000, days=3, start_date="2026-03-01")
    total = 0
    for day, p in enumerate(paths, start=1):
        table = pq.read_table(p)
        assert table.schema.remove_metadata() == raw_schema(FRAUD_CONTRACT)
        ts = table.column("event_timestamp").to_pandas()
        assert (ts.dt.strftime("%Y-%m-%d") == f"2026-03-0{day}").all()
        total += table.num_rows
    assert total == 3_000
    df = modes["none"]
    assert df["transaction_id"].is_unique
    assert (df["created"] >= df["event_timestamp"]).all()
    assert df["amount"].gt(0).all()
    for column, allowed in FRAUD_CONTRACT.expectations.allowed_values.items():
        assert set(df[column]) <= set(allowed), column


def test_positive_rate_is_between_2_and_4_percent(modes: dict[str, pd.DataFrame]) -> None:
    assert 0.02 <= modes["none"]["is_fraud"].mean() <= 0.04


def test_prior_drift_triples_the_base_rate_on_the_same_inputs(modes: dict[str, pd.DataFrame]) -> None:
    none, prior = modes["none"], modes["prior"]
    assert prior["is_fraud"].mean() == pytest.approx(3 * none["is_fraud"].mean(), rel=0.15)
    pd.testing.assert_series_equal(none["amount"], prior["amount"])


def test_concept_drift_keeps_inputs_but_changes_what_predicts_the_label(modes: dict[str, pd.DataFrame]) -> None:
    none, concept = modes["none"], modes["concept"]
    pd.testing.assert_frame_equal(none.drop(columns=["is_fraud", "transaction_id"]),
                                  concept.drop(columns=["is_fraud", "transaction_id"]))
    night = none["event_timestamp"].dt.hour < 5
    # Before: night carries fraud; after: daytime card-present does.
    assert none.loc[night, "is_fraud"].mean() > 3 * none.loc[~night, "is_fraud"].mean()
    assert concept.loc[night, "is_fraud"].mean() < concept.loc[~night, "is_fraud"].mean()
    card_present = concept["channel"] == "card_present"
    assert concept.loc[card_present, "is_fraud"].mean() > 2 * concept.loc[~card_present, "is_fraud"].mean()


def test_covariate_drift_shifts_amounts_significantly(modes: dict[str, pd.DataFrame]) -> None:
    none, cov = modes["none"]["amount"], modes["covariate"]["amount"]
    assert cov.median() > 1.5 * none.median()
    assert stats.ks_2samp(none, cov).pvalue < 1e-6


def test_category_drift_changes_the_category_mix(modes: dict[str, pd.DataFrame]) -> None:
    none, cat = modes["none"]["category"], modes["category"]["category"]
    table = pd.crosstab(pd.concat([none, cat]), np.repeat([0, 1], [len(none), len(cat)]))
    assert stats.chi2_contingency(table).pvalue < 1e-6
    shifted = ["electronics", "gaming", "digital_goods", "travel"]
    assert cat.isin(shifted).mean() > 2 * none.isin(shifted).mean()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rows": 0}, "rows=0"),
        ({"days": -1}, "days=-1"),
        ({"drift": "seasonal"}, "drift='seasonal'"),
        ({"fraud_rate": 0.9}, "fraud_rate=0.9"),
        ({"start_date": "yesterday"}, "start_date='yesterday'"),
        ({"rows": 5, "days": 3}, "too few"),
    ],
)
def test_bad_arguments_name_the_value(tmp_path: Path, kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(DataError, match=needle.replace("(", r"\(")):
        generate_transactions(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_label_is_learnable_from_the_feature_service(prepared: tuple) -> None:
    """Logistic regression (scipy) on the encoded training set, split by time, beats the trivial F1 by far."""
    root, data, features = prepared
    df = training_set(features, data, root, contract=FRAUD_CONTRACT)
    cut = int(len(df) * 0.7)
    encoder = EncoderSpec.fit(df.iloc[:cut], contract=FRAUD_CONTRACT)
    x = np.hstack([encoder.encode_frame(df).astype(np.float64), np.ones((len(df), 1))])
    y = df["is_fraud"].to_numpy(dtype=np.float64)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = x[:cut] @ w
        p = 1 / (1 + np.exp(-z))
        nll = np.sum(np.logaddexp(0, z) - y[:cut] * z) + 0.5 * w @ w
        return nll, x[:cut].T @ (p - y[:cut]) + w

    w = minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B").x
    score, truth = x[cut:] @ w, y[cut:].astype(bool)
    cuts = np.quantile(score, [0.9, 0.95, 0.97, 0.98, 0.99])
    f1 = max(2 * (truth & (score > t)).sum() / (truth.sum() + (score > t).sum()) for t in cuts)
    trivial = 2 * truth.mean() / (1 + truth.mean())  # predict everything positive
    print(f"F1 {f1:.3f} vs trivial {trivial:.3f}")
    assert f1 > 5 * trivial, (f1, trivial)
