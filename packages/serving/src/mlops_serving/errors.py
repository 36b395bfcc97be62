"""Serving errors. Each carries the HTTP status it maps to; :mod:`mlops_serving.server` maps them in one place."""

from __future__ import annotations

from mlops_core import PlatformError


class ServingError(PlatformError):
    """Root of the serving errors; ``http_status`` is the response code a request gets for it."""

    http_status: int = 500


class BadRequestError(ServingError):
    """The request body does not fit the request schema (shape, field, dtype, value)."""

    http_status = 400


class PayloadTooLargeError(ServingError):
    """The body is larger than ``serving.max_payload_bytes``."""

    http_status = 413


class RequestTimeoutError(ServingError):
    """The body did not arrive within the request's deadline: 408, and the connection closes."""

    http_status = 408


class UnsupportedMediaTypeError(ServingError):
    """The ``Content-Type`` is not one the predict/infer endpoints read."""

    http_status = 415


class TooManyInstancesError(ServingError):
    """More instances in one request than ``serving.tabular.max_instances``."""

    http_status = 422


class FeatureStoreUnavailableError(ServingError):
    """The online store is unreachable and ``serving.tabular.redis_outage`` is ``unavailable``: 503 + Retry-After."""

    http_status = 503

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class InternalError(ServingError):
    """An unexpected failure inside a request; answered with a clean 500 and no traceback."""

    http_status = 500


class ModelLoadError(ServingError):
    """A model version could not be resolved, downloaded or loaded; the server stays up, not ready."""

    http_status = 503


class PredictorUnavailableError(ServingError):
    """The transformer cannot reach its predictor, or the predictor refused an encoded batch."""

    http_status = 503


class PredictionLogError(ServingError):
    """The prediction-log store cannot be opened, written or read, or a read asks for something it lacks."""

    http_status = 500
