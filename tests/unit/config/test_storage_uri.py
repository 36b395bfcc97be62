"""The storage URI of a version is a folder: KServe's storage initializer lists objects by raw prefix, so
``.../v1`` also matches ``.../v10/``; a template without the trailing slash is refused at load."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mlops_config import DeliveryConfig


def test_the_default_template_gives_a_prefix_no_other_version_shares() -> None:
    template = DeliveryConfig().storage_uri_template
    v1, v10 = (template.format(model="fraud", version=v) for v in (1, 10))
    assert v1 == "s3://mlops-artifacts/models/fraud/v1/"
    # an object of v10 under the listing prefix of v1 is what made rollbacks to v1..v9 pull two models
    assert not f"{v10}model.safetensors".startswith(v1)


@pytest.mark.parametrize("bad", ["s3://b/models/{model}/v{version}", "s3://b/{model}/{version}/x"])
def test_a_template_that_is_not_a_version_folder_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match=r"end in '\{version\}/'"):
        DeliveryConfig(storage_uri_template=bad)
