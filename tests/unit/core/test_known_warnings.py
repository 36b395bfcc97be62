"""Known third-party warnings are ignored by category and module only: the same words from elsewhere, another
category from the same module, and errors all still come through; Feast's import-time filters do not win."""

from __future__ import annotations

import warnings

from mlops_core import filter_known_warnings

FEAST_NOTICE = ("Batch feature views are experimental features in alpha development. Some functionality may still "
                "be unstable so functionality can change in the future.")


def _shown(message: str, category: type[Warning], module: str) -> bool:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # what a fresh process shows; the test asks only what ours remove
        filter_known_warnings()
        warnings.warn_explicit(message, category, f"/venv/site-packages/{module.replace('.', '/')}.py", 108,
                               module=module, registry={})
    return bool(seen)


def test_known_notice_from_its_module_is_ignored() -> None:
    assert not _shown(FEAST_NOTICE, RuntimeWarning, "feast.batch_feature_view")


def test_same_words_from_our_code_still_show() -> None:
    assert _shown(FEAST_NOTICE, RuntimeWarning, "mlops_features.store")


def test_other_warnings_of_that_module_still_show() -> None:
    assert _shown("Batch source is missing a timestamp field", RuntimeWarning, "feast.batch_feature_view")
    assert _shown(FEAST_NOTICE, UserWarning, "feast.batch_feature_view")


def test_filters_win_over_feasts_import_time_once_filter() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        filter_known_warnings()
        warnings.simplefilter("once", RuntimeWarning)  # what `import feast.batch_feature_view` does
        filter_known_warnings()  # what mlops_features.open_store does after importing Feast
        warnings.warn_explicit(FEAST_NOTICE, RuntimeWarning, "/venv/site-packages/feast/batch_feature_view.py", 108,
                               module="feast.batch_feature_view", registry={})
        count = len(warnings.filters)
        filter_known_warnings()
        assert len(warnings.filters) == count, "calling it again adds no duplicates"
    assert not seen
