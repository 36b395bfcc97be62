"""Request-time features: computed when a transaction is scored, from the request and the user's stored values.

An :class:`OnDemandFeatureView` runs one function in both places: at serving, Feast calls it on the online
lookup (the request's ``amount`` next to the user's online ``user_amount_mean_7d`` / ``user_amount_std_7d``);
at training, on the point-in-time join (the labelled transaction's ``amount`` next to the same two values as
known just before it). Nothing is stored: the value exists only at the request.

``fraud_rt_v1`` serves it next to every feature of ``fraud_v1``; ``fraud_v1`` itself is unchanged.
"""

import pandas as pd  # the udf's signature: Feast checks that a pandas udf takes and returns a DataFrame
from definitions import merchant_risk, user_transactions
from feast import FeatureService, Field, OnDemandFeatureView, RequestSource
from feast.transformation.pandas_transformation import PandasTransformation
from feast.types import Float64
from windows import registered

transaction_request = RequestSource(
    name="transaction_request",
    schema=[Field(name="amount", dtype=Float64)],
    description="Fields of the transaction being scored (the serving request; the labelled row at training).",
)


def amount_zscore_udf(inputs: pd.DataFrame) -> pd.DataFrame:
    """``(amount - user_amount_mean_7d) / user_amount_std_7d``: the request's amount against the user's stored 7-day
    statistics; 0 where the user is unknown (no stored values) or the stored deviation is 0 (fewer than 2 amounts).
    """
    import numpy as np
    import pandas as pd

    amount = pd.to_numeric(inputs["amount"], errors="coerce").to_numpy(dtype=np.float64)
    mean = pd.to_numeric(inputs["user_amount_mean_7d"], errors="coerce").to_numpy(dtype=np.float64)
    std = pd.to_numeric(inputs["user_amount_std_7d"], errors="coerce").to_numpy(dtype=np.float64)
    known = np.isfinite(amount) & np.isfinite(mean) & np.isfinite(std) & (std > 1e-9)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(known, (amount - mean) / np.where(known, std, 1.0), 0.0)
    return pd.DataFrame({"amount_zscore_user_7d": z}, index=inputs.index)


AMOUNT_ZSCORE, AMOUNT_ZSCORE_SOURCE = registered(amount_zscore_udf)

user_amount_request = OnDemandFeatureView(
    name="user_amount_request",
    sources=[user_transactions[["user_amount_mean_7d", "user_amount_std_7d"]], transaction_request],
    # Feast 0.67 compares an on-demand view's declared Fields whole (tags included) with those it infers from the
    # udf, so a feature's default is the view tag "default:<feature>" here rather than a tag of its Field.
    schema=[Field(name="amount_zscore_user_7d", dtype=Float64)],
    feature_transformation=PandasTransformation(udf=AMOUNT_ZSCORE, udf_string=AMOUNT_ZSCORE_SOURCE),  # type: ignore[arg-type]
    mode="pandas",
    description="Per request: the transaction's amount as a z-score against the user's stored 7-day statistics.",
    tags={"team": "fraud", "default:amount_zscore_user_7d": "0.0"},
)

fraud_rt_v1 = FeatureService(
    name="fraud_rt_v1",
    features=[user_transactions, merchant_risk, user_amount_request],
    description="Fraud model inputs with a request-time feature: fraud_v1's features and amount_zscore_user_7d.",
    tags={"owner": "fraud"},
)
