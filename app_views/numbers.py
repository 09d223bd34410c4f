"""All numbers view: every result with its value, unit and what it means."""

from __future__ import annotations

from typing import Any

import pandas as pd

from app_views.context import Context
from capacity.model.analysis import RESULTS
from capacity.render.formatting import SECTIONS, format_value
from capacity.render.glossary import in_words, value_in_words


def table(ctx: Context) -> pd.DataFrame:
    r = ctx.results
    placed = [key for keys in SECTIONS.values() for key in keys]
    sections = [*SECTIONS.items(), ("Serving options", [k for k in RESULTS if k not in placed])]
    return pd.DataFrame([{"section": sec, "quantity": key,
                          "value": value_in_words(format_value(key, r[key], ctx.binary)),
                          "meaning": in_words(RESULTS[key][1])} for sec, keys in sections for key in keys])


def render(st: Any, ctx: Context) -> None:
    st.dataframe(table(ctx), hide_index=True, width="stretch", height=640,
                 column_config={"meaning": st.column_config.TextColumn("meaning", width="large")})
