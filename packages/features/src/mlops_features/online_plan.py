"""What Feast's ``get_online_features`` reads for a FeatureService, resolved once from the registry, and its
on-demand views computed as Feast computes them.

:class:`ServicePlan` is Feast's own request resolution (``feast.utils._get_online_request_context``: the stored
views with the features read from each — the service's plus the inputs of its on-demand views —, the join keys
and their value types, the request fields), taken once at load, so a reader built from it reads exactly what
Feast reads and never touches the registry inside a request. :func:`compute_on_demand` runs an on-demand view's
own transformation on a reader's columns with the input Feast hands it (``OnlineResponse.to_arrow()`` of the
join keys, the request fields and the stored features, for ``mode="pandas"``; ``to_dict()`` for ``"python"``)
and converts its output as Feast does, so both readers give the same on-demand values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class TableRead:
    """One stored view as Feast reads it for the service."""

    view: Any
    """The registered feature view (its projection as the service uses it)."""
    features: tuple[str, ...]
    """Features read, in Feast's order: the service's and those its on-demand views take as input."""
    types: tuple[Any, ...]
    """Each feature's Feast ``ValueType`` (what ``OnlineResponse.to_dict`` converts with)."""


@dataclass(frozen=True)
class OnDemandRead:
    """One on-demand view of the service: what it returns and which columns Feast hides from its transformation."""

    view: Any
    features: tuple[str, ...]
    """Its features the service asks for (Feast's ``odfv_feature_refs``)."""
    hidden: frozenset[str]
    """Columns Feast drops from its input (features of views it does not declare as sources)."""
    types: Mapping[str, Any] = field(default_factory=dict)
    """Declared ``ValueType`` per output feature (Feast converts the output to it)."""


@dataclass(frozen=True)
class ServicePlan:
    """Feast's resolution of one FeatureService's online read (``ServicePlan.of(store, service)``)."""

    tables: tuple[TableRead, ...]
    on_demand: tuple[OnDemandRead, ...]
    join_keys: frozenset[str]
    """Row columns Feast takes as join keys."""
    entity_types: Mapping[str, Any]
    """``ValueType`` per join-key column (what Feast converts a row's value to)."""
    join_key_of: Mapping[str, str]
    """Entity name → join key (Feast's ``entity_name_to_join_key_map``)."""
    request_fields: frozenset[str]
    entityless: bool
    ts_field_of: Mapping[str, str] = field(default_factory=dict)
    """View name → the ``_ts:<view>`` column Feast's response carries for it (its online, versioned name)."""

    @classmethod
    def of(cls, store: Any, service: Any) -> ServicePlan:
        from feast import utils as feast_utils
        from feast.infra.online_stores.helpers import compute_versioned_name

        (feature_refs, odfvs, join_key_of, entity_types, join_keys, grouped_refs, _, request_fields,
         entityless) = feast_utils._get_online_request_context(store.registry, store.project, service, False)
        versioning = bool(getattr(store.config.registry, "enable_online_feature_view_versioning", False))
        tables = []
        for view, requested in grouped_refs:
            by_name = {f.name: f.dtype.to_value_type() for f in view.features}
            names = tuple(requested)
            tables.append(TableRead(view, names, tuple(by_name[n] for n in names)))
        on_demand = tuple(_on_demand_reads(feature_refs, odfvs))
        ts_field_of = {t.view.name: f"_ts:{compute_versioned_name(t.view, versioning)}" for t in tables}
        return cls(tuple(tables), on_demand, frozenset(join_keys), dict(entity_types), dict(join_key_of),
                   frozenset(request_fields), bool(entityless), ts_field_of)

    def input_columns(self, columns: Mapping[str, list[Any]], rows: Sequence[Mapping[str, Any]]
                      ) -> dict[str, list[Any]]:
        """The ``to_dict()`` Feast's on-demand step starts from: join keys and request fields (in the rows' key
        order), then per view its features and a ``_ts:<view>`` column of nulls (Feast lists it among the features
        and never fills it); features come from ``columns``, a reader's (already expired) values."""
        n = len(rows)
        out: dict[str, list[Any]] = {}
        first = rows[0] if rows else {}
        for key in first:  # Feast takes a column that is both as request data
            if key in self.join_keys and key not in self.request_fields:
                values = [r[key] for r in rows]
                string = self.entity_types.get(key) == _string_type() and all(type(v) is str for v in values)
                out[key] = values if string else _feast_values(values, self.entity_types.get(key))
        for key in first:
            if key in self.request_fields:
                out[key] = _as_feast_request_values([r[key] for r in rows])
        for table in self.tables:
            for name in table.features:
                out[name] = columns[name]
            out[self.ts_field_of[table.view.name]] = [None] * n
        return out


def _on_demand_reads(feature_refs: list[str], odfvs: list[Any]) -> list[OnDemandRead]:
    """Per requested on-demand view, its requested features and the columns Feast hides from it
    (``feast.utils._augment_response_with_on_demand_transforms``)."""
    from feast.utils import _parse_feature_ref

    by_name = {((o.projection.name_alias if o.projection else None) or o.name): o for o in odfvs}
    wanted: dict[str, list[str]] = {}
    for ref in feature_refs:
        view_name, _, feature = _parse_feature_ref(ref)
        if view_name in by_name:
            wanted.setdefault(view_name, []).append(feature)
    reads = []
    for view_name, features in wanted.items():
        odfv = by_name[view_name]
        declared = {p.name for p in odfv.source_feature_view_projections.values()}
        hidden: set[str] = set()
        for ref in feature_refs:
            ref_view, _, ref_feature = _parse_feature_ref(ref)
            if ref_view in by_name:
                continue
            if ref_view not in declared:
                hidden |= {ref_feature, f"{ref_view}__{ref_feature}"}
        for other in odfvs:
            for proj in other.source_feature_view_projections.values():
                if proj.name not in declared:
                    hidden |= {f.name for f in proj.features} | {f"{proj.name}__{f.name}" for f in proj.features}
        types = {f.name: f.dtype.to_value_type() for f in odfv.schema}
        reads.append(OnDemandRead(odfv, tuple(features), frozenset(hidden), types))
    return reads


def unsupported_by_direct(plan: ServicePlan, service: Any, row_columns: Sequence[str]) -> str | None:
    """Why the direct reader cannot answer exactly as Feast for this service, or None when it can."""
    if plan.entityless:
        return "a feature view without entities (Feast's dummy entity)"
    if getattr(service, "precompute_online", False):
        return "the FeatureService has precompute_online (Feast reads its pre-computed vectors)"
    for table in plan.tables:
        if not hasattr(table.view, "entity_columns") or hasattr(table.view, "source_request_sources"):
            return f"{table.view.name!r} is an on-demand view written to the online store"
        for entity in table.view.entities:
            join_key = plan.join_key_of[entity]
            column = table.view.projection.join_key_map.get(join_key, join_key)
            if column not in row_columns:
                return f"view {table.view.name!r} is keyed by {column!r}, which lookup rows do not carry"
    for od in plan.on_demand:
        if od.view.write_to_online_store or od.view.aggregations:
            return f"on-demand view {od.view.name!r} is written to the online store or aggregates"
        if od.view.mode not in ("pandas", "python"):
            return f"on-demand view {od.view.name!r} has mode {od.view.mode!r}"
    return None


def compute_on_demand(plan: ServicePlan, od: OnDemandRead, columns: Mapping[str, list[Any]],
                      rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """``od``'s features for ``rows``, from ``columns`` (the stored features a reader returned, expired values
    already absent), computed by the view's own transformation on the input Feast gives it and converted back as
    Feast's response converts it."""
    from feast.online_response import _convert_uuids_for_arrow

    inputs = plan.input_columns(columns, rows)
    if od.view.mode == "python":
        produced = od.view.transform_dict({k: v for k, v in inputs.items() if k not in od.hidden})
        return {name: _feast_values(produced[name] if isinstance(produced[name], list) else [produced[name]],
                                    od.types.get(name))
                for name in produced if name in od.features}
    import pyarrow as pa

    table = pa.Table.from_pydict(_convert_uuids_for_arrow({k: v for k, v in inputs.items() if k not in od.hidden}))
    produced_table = od.view.transform_arrow(table, False)
    return {name: _arrow_as_feast(produced_table[name], od.types.get(name))
            for name in produced_table.column_names if name in od.features}


def _as_feast_request_values(values: list[Any]) -> list[Any]:
    """A request field's values as Feast's ``to_dict()`` gives them back: Feast converts the column to the type of
    its first value (``python_values_to_proto_values``, e.g. ``[5, 1.5]`` → ``[5, 1]``). A column of finite floats,
    in-range ints, strings or bools comes back unchanged, so only other columns go through Feast's conversion."""
    kind = type(values[0]) if values else None
    if kind in (float, int, str, bool) and all(type(v) is kind for v in values):
        if kind is float and all(math.isfinite(v) for v in values):
            return values
        if kind is int and all(_INT64[0] <= v <= _INT64[1] for v in values):
            return values
        if kind in (str, bool):
            return values
    from feast.value_type import ValueType

    return _feast_values(values, ValueType.UNKNOWN)


def _string_type() -> Any:
    from feast.value_type import ValueType

    return ValueType.STRING


def _feast_values(values: Any, value_type: Any) -> list[Any]:
    """Feast's round trip: Python values → ``ValueProto`` (``python_values_to_proto_values``) → ``to_dict()``."""
    from feast.type_map import feast_value_type_to_python_type, python_values_to_proto_values
    from feast.value_type import ValueType

    return [feast_value_type_to_python_type(p) for p in
            python_values_to_proto_values(values, value_type if value_type is not None else ValueType.UNKNOWN)]


def _arrow_as_feast(column: Any, value_type: Any) -> list[Any]:
    """An on-demand output column as Feast returns it (``to_numpy()`` → its declared type → ``to_dict()``); a
    column whose Arrow type is the declared one, without nulls or NaN, is ``to_pylist()`` (the same values)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from feast.value_type import ValueType

    same = {ValueType.DOUBLE: pa.float64(), ValueType.FLOAT: pa.float32(), ValueType.INT64: pa.int64(),
            ValueType.INT32: pa.int32(), ValueType.STRING: pa.string(), ValueType.BOOL: pa.bool_()}
    arrow_type = same.get(value_type)
    plain = arrow_type is not None and column.type == arrow_type and column.null_count == 0
    if plain and (not pa.types.is_floating(arrow_type) or not pc.any(pc.is_nan(column)).as_py()):
        return column.to_pylist()
    return _feast_values(column.to_numpy(), value_type)
