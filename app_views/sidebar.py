"""The sidebar: the sizing's inputs, each a view of the one scenario mapping in ``st.session_state["doc"]``.

Every widget writes through a callback (``set_value`` / ``choose``), which runs before the script, so a
change of one input can update the others (a new GPU's price, the new unit's figures) without touching
a widget after it is drawn. No formula here.
"""

from __future__ import annotations

import copy
from typing import Any

import streamlit as st

from app_views.state import (
    BLOCK_SIZES,
    CUSTOM,
    DTYPES,
    ENGINE_CHOICES,
    FIELDS,
    FRONT_END_CHOICES,
    KV_DTYPES,
    SPEC_KEYS,
    SPEC_METHODS,
    UNITS,
    Origin,
    catalog_value,
    changes,
    choose,
    default_value,
    departures,
    doc_from_link,
    is_custom,
    load_text,
    named_by_user,
    origin_phrase,
    overridden,
    pool_of_free,
    preset_documents,
    presets,
    relevant,
    reset_to_default,
    set_value,
    sizing_name,
    sources,
    speculation,
    stated,
    widget_values,
    with_sources,
)
from app_views.text import plain
from capacity.errors import ScenarioError
from capacity.inputs import catalog
from capacity.inputs.hf_config import model_from_text
from capacity.model.scenario import RESERVES

PRESETS = presets()
MAX_UPLOAD_BYTES = 1_000_000


@st.cache_resource
def _preset_docs() -> dict[str, dict[str, Any]]:
    return preset_documents()


def preset_doc(name: str) -> dict[str, Any]:
    return copy.deepcopy(_preset_docs()[name])


def doc() -> dict[str, Any]:
    return st.session_state["doc"]


def _messages() -> dict[str, list[str]]:
    return st.session_state.setdefault("messages", {})


def sync(whole: bool = True) -> None:
    """Put the mapping's values into the widgets (callbacks and the first run only, before widgets are drawn)."""
    values = widget_values(doc())
    for key, value in values.items():
        # Only what changed: a widget whose state is set is sent to the browser again and redrawn there.
        if key not in st.session_state or (whole and st.session_state[key] != value):
            st.session_state[key] = value


def _began(origin: Origin) -> None:
    """The sizing now in ``doc`` is where it starts (a preset, a link, a file): its values are ``origin``'s until the
    user sets them on screen (``typed``)."""
    st.session_state["base"] = copy.deepcopy(doc())
    st.session_state["origin"] = origin
    st.session_state["typed"] = set()


def start(params: dict[str, str]) -> None:
    """First run: the first preset, then a share link's sizing and view on top (each unusable value named)."""
    first = next(iter(PRESETS))
    st.session_state["preset"] = first
    st.session_state["user_set"] = set()
    messages = _messages()
    messages.clear()
    link = {k: v for k, v in params.items() if k != "view"}
    if link:
        new, problems = doc_from_link(link, preset_doc(first))
        st.session_state["doc"] = new
        st.session_state["user_set"] = set(overridden(new)) | ({"name"} if named_by_user(new) else set())
        messages["link"] = problems
        _mark_loaded("the share link")
        _began(("share link", ""))
    else:
        st.session_state["doc"] = preset_doc(first)
        _began(("preset", first))
    follow_name()
    st.session_state["view_from_link"] = params.get("view")
    sync()


# ---------------------------------------------------------------- callbacks


def follow_name() -> None:
    """A sizing nobody named is named after itself ("llama-3-70b on 4 x h100-sxm"), not after its preset."""
    if "name" not in st.session_state["user_set"] or not str(doc().get("name") or "").strip():
        st.session_state["user_set"].discard("name")
        doc()["name"] = sizing_name(doc())


def _mark_loaded(origin: str) -> None:
    """The preset box names where a loaded sizing came from (an extra entry), not the preset it replaced."""
    st.session_state["loaded_from"] = f"loaded from {origin}"
    st.session_state["preset"] = st.session_state["loaded_from"]


def on_preset() -> None:
    if st.session_state["preset"] not in PRESETS:  # the "loaded from ..." entry: the loaded sizing stays
        return
    st.session_state.pop("loaded_from", None)
    st.session_state["doc"] = preset_doc(st.session_state["preset"])
    st.session_state["user_set"] = set()
    _began(("preset", st.session_state["preset"]))
    _messages().clear()
    follow_name()
    sync()


def on_field(key: str) -> None:
    messages = _messages()
    messages.pop(key, None)
    messages.pop("silent", None)
    try:
        set_value(doc(), key, st.session_state[key])
        st.session_state["user_set"].add(key)
        st.session_state["typed"].add(key)
    except (ScenarioError, ValueError, TypeError) as exc:
        messages[key] = [str(exc)]
    if key == "prompt_tokens":
        _fit_prefix()
    _one_load(key)
    follow_name()
    sync()


#: The two ways to give the load: an arrival rate (open loop) or concurrent users (closed loop). A scenario holds one.
_DAILY = ("daily_users", "requests_per_user_per_day", "peak_hour_pct")
_LOADS = {"arrival_rate": ("concurrency", "think_time_s", *_DAILY), "concurrency": ("arrival_rate", *_DAILY),
          **{key: ("arrival_rate", "concurrency", "think_time_s") for key in _DAILY}}


def _one_load(key: str) -> None:
    """Typing one load (requests/s or concurrent users) clears the other, so the sizing holds one."""
    if key not in _LOADS or not st.session_state.get(key):
        return
    for other in _LOADS[key]:
        if st.session_state.get(other):
            st.session_state[other] = FIELDS[other].default
            reset_to_default(doc(), other)


def _fit_prefix() -> None:
    """A shared prefix the user never set, longer than the prompt they just typed, goes back to none (it belonged
    to the preset's, link's or file's prompt), and the page says so; one the user set stays, and is flagged."""
    values = widget_values(doc())
    prefix, prompt = values["shared_prefix_tokens"], values["prompt_tokens"]
    if prefix > prompt and "shared_prefix_tokens" not in st.session_state["typed"]:
        said = f"shared prefix {prefix:,} tokens ({_from('shared_prefix_tokens')})"
        reset_to_default(doc(), "shared_prefix_tokens")
        _messages()["silent"] = [f"{said} is longer than the prompt ({prompt:,} tokens): reset to none"]


def on_choice(kind: str) -> None:
    st.session_state["typed"].add(kind)
    choose(doc(), kind, st.session_state[kind], keep=st.session_state["user_set"])
    if st.session_state[kind] == CUSTOM:
        st.session_state[MORE] = True  # a custom model's (GPU's) numbers are the user's to type: show them
    follow_name()
    sync()


def on_reset(key: str) -> None:
    field = FIELDS[key]
    section = doc().get(field.path[0])
    if isinstance(section, dict):
        section.pop(field.path[1], None)
    st.session_state["user_set"].discard(key)
    sync()


def on_config() -> None:
    messages = _messages()
    messages.pop("config_json", None)
    text = st.session_state.get("config_json", "")
    if not text.strip():
        return
    try:
        model = model_from_text(text, "imported config.json")
    except ScenarioError as exc:
        messages["config_json"] = [f"config.json: {p}" for p in exc.problems]
        return
    old = doc().get("model") or {}
    model.update({k: old[k] for k in ("weight_dtype", "kv_dtype") if k in old})
    doc()["model"] = model
    follow_name()
    sync()


def on_upload() -> None:
    messages = _messages()
    messages.pop("upload", None)
    upload = st.session_state.get("upload")
    if upload is None:
        return
    try:
        if upload.size > MAX_UPLOAD_BYTES:
            raise ScenarioError(f"{upload.name} is {upload.size:,} bytes; scenario files are limited to "
                                f"{MAX_UPLOAD_BYTES:,}")
        text = upload.getvalue().decode("utf-8")
        new = load_text(text, upload.name)
    except UnicodeDecodeError:
        messages["upload"] = [f"{upload.name} is not UTF-8 text; a scenario is a YAML file"]
        return
    except ScenarioError as exc:
        messages["upload"] = [f"Could not load {upload.name}: {p}" for p in exc.problems]
        return
    load_doc(new, f"Loaded {upload.name}", origin=upload.name)


def load_doc(new: dict[str, Any], note: str = "", origin: str = "a file") -> None:
    """Make ``new`` the sizing (an uploaded file or a test); its overrides count as the user's."""
    st.session_state["doc"] = new
    _mark_loaded(origin)
    _began(("file", origin))
    st.session_state["user_set"] = set(overridden(new)) | ({"name"} if named_by_user(new) else set())
    follow_name()
    if note:
        _messages()["loaded"] = [note]
    sync()


# ---------------------------------------------------------------- values the user did not set (issue 27)


def scenario_doc() -> dict[str, Any]:
    """The mapping the page evaluates and the reports describe: the sizing with each value's true source."""
    state = st.session_state
    return with_sources(doc(), state["base"], state["origin"], state["typed"])


def _from(key: str) -> str:
    """Where a value the user did not set came from: "from the preset 'chat'" ("not set by you" if unknown)."""
    state = st.session_state
    found = sources(doc(), state["base"], state["origin"], state["typed"])
    paths = [FIELDS[key].dotted] if key != "reserve_mem" else [f"serving.{k}" for k in RESERVES]
    return f"from {origin_phrase(state['origin'])}" if any(p in found for p in paths) else "not set by you"


def silent() -> list[str]:
    """The hidden inputs whose value differs from its default or catalog value and that the user did not set on
    screen: a preset's, a link's or a file's values, which change the answer unseen unless the page names them."""
    typed = st.session_state["typed"]
    return [key for key in departures(doc(), ON_DEMAND) if key not in typed]


def _said(key: str, value: Any, unit: str) -> str:
    """One input as the hidden-inputs caption words it ("shared prefix 1,200 tokens")."""
    if not value and key in UNSET:
        return UNSET[key]
    if key == "spec_method":
        return f"speculative decoding: {SPEC_WORDS.get(value, value)}"
    if key == "front_end":
        return f"front end: {FRONT_END_WORDS.get(value, value)}"
    return SUMMARY[key].format(value, unit=unit)


def on_default(key: str) -> None:
    reset_to_default(doc(), key)
    st.session_state["typed"].add(key)
    st.session_state["user_set"].discard(key)
    _messages().pop("silent", None)
    sync()


def on_reveal() -> None:
    st.session_state[MORE] = True


def notice(where: Any) -> None:
    """Above the views: each value the user did not set that differs from its default, with its unit and where
    it came from, a button back to each default and one to show them. A warning once the sizing has moved away
    from where it started (the preset's values now apply to a sizing the preset did not describe), else a note."""
    for text in _messages().get("silent", []):
        where.warning(plain(text))
    keys = silent()
    if not keys:
        return
    d = doc()
    unit = d.get("units", "GB") if d.get("units") in UNITS else "GB"
    values = widget_values(d)
    listed = "; ".join(f"{_said(key, values[key], unit)} ({_from(key)})" for key in keys)
    if st.session_state.get(MORE):
        text = f"Not set by you, away from their defaults: {listed}. This sizing uses them; reset each below."
    else:
        text = (f"Not shown in the sidebar and not set by you: {listed}. This sizing uses them; reset each to its "
                f"default, or show all inputs to see them.")
    moved = changes(d, st.session_state["base"])
    (where.warning if moved else where.info)(plain(text), icon="⚠️" if moved else "ℹ️")
    row = where.container(horizontal=True, gap="small")
    for key in keys:
        row.button(f"Reset to {_said(key, default_value(d, key), unit)}", key=f"silent_reset_{key}",
                   on_click=on_default, args=(key,))
    if not st.session_state.get(MORE):
        row.button("Show all inputs", key="silent_reveal", on_click=on_reveal)


# ---------------------------------------------------------------- drawing


def _within(key: str, lo: float, hi: float) -> None:
    """Keep a widget's value inside its range before it is drawn (a value from a link or a file outside it is
    flagged by the library's checks; the widget itself would raise)."""
    value = st.session_state.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not lo <= value <= hi:
        st.session_state[key] = type(value)(min(max(value, lo), hi)) if value == value else type(value)(lo)


def _number(where: Any, key: str, **kw: Any) -> None:
    f = FIELDS[key]
    label = kw.pop("label", f.label)
    kind = int if f.kind == "int" else float
    _within(key, kind(f.lo), kind(f.hi))
    where.number_input(label, kind(f.lo), kind(f.hi), key=key, on_change=on_field, args=(key,), **kw)


def _slider(where: Any, key: str, lo: float, **kw: Any) -> None:
    f = FIELDS[key]
    _within(key, lo, f.hi)
    where.slider(kw.pop("label", f.label), lo, f.hi, key=key, step=0.01, on_change=on_field, args=(key,), **kw)


def _mark(where: Any, key: str, shown: str, source: str = "the catalog's is", label: str = "") -> None:
    """An overridden catalog value: say so, show the catalog's (or computed) value, offer the way back.

    ``label`` names the input when it is not drawn above the mark (the inputs shown on demand are hidden)."""
    if key in overridden(doc()):
        where.caption(f"✎ {plain(label) + ': ' if label else ''}your value; {source} {plain(shown)}")
        where.button("Use the engine's default" if FIELDS[key].follows == "engine" else "Use the catalog value",
                     key=f"reset_{key}", on_click=on_reset, args=(key,), width="stretch")


def _show_messages(where: Any, *keys: str) -> None:
    messages = _messages()
    for key in keys:
        for text in messages.get(key, []):
            where.error(plain(text))


#: The sidebar's toggle that draws every input (its state is the page's, not the sizing's: never saved or linked).
MORE = "more_inputs"
#: Inputs drawn only when the toggle is on (or, for a custom model or GPU's numbers, ...): rarely changed after the
#: model and GPU are chosen. Their values stay in the one mapping (``doc``) while they are not drawn, so nothing is
#: lost; one caption lists them. Fewer widgets per rerun: the browser redraws every drawn element on each rerun.
ON_DEMAND = ("layers", "kv_heads", "head_dim", "params_b", "weights_mem", "memory_mem", "bandwidth_tbs", "tflops",
             "pipeline_parallel", "replicas", "price_per_hour", "energy_price_kwh", "pue", "board_power_w",
             "bandwidth_efficiency", "flops_efficiency", "memory_utilization", "kv_free_fraction", "block_size",
             "max_model_len", "step_overhead_ms", "request_latency_ms", "clustering", "max_num_seqs", "reserve_mem",
             "spec_method", *SPEC_KEYS, "shared_prefix_tokens", "headroom_pct", "peak_factor", "front_end")


def _catalog_shown(d: dict[str, Any], key: str, unit: str) -> tuple[str, str]:
    """(the catalog's value as text, the phrase naming where it comes from) for a catalog-derived input."""
    value = catalog_value(d, key)
    if key == "weights_mem":
        return f"{value:,.2f} {unit}", "parameters x weight dtype give"
    if key == "price_per_hour":
        return f"${value:,.2f}", "the catalog's is"
    if key == "max_model_len":
        return f"{value:,} tokens (the context window)", "the catalog's is"
    if key == "board_power_w":
        return (f"{value:,.0f} W" if value else "unknown"), "the catalog's is"
    if FIELDS[key].follows == "engine":
        if key == "memory_utilization" and pool_of_free(d):  # TensorRT-LLM: its rule is a share of free memory
            return f"{value:.2f} of the memory the weights leave free", "the engine's default is"
        if FIELDS[key].kind == "ms":
            return f"{value:,.4g} ms", "the engine's default is"
        return f"{value:.3g}" if key == "clustering" else f"{value:.2f}", "the engine's default is"
    return f"{value:.2f}", "the catalog's is"


#: How the caption of hidden inputs words each value ({} is the value; {unit} the byte unit shown).
SUMMARY = {"layers": "{:,} layers", "kv_heads": "{:,} KV heads", "head_dim": "head dim {:,}",
           "params_b": "{:,.4g}B parameters", "weights_mem": "weights {:,.2f} {unit}",
           "memory_mem": "GPU memory {:,.2f} {unit}", "bandwidth_tbs": "{:,.4g} TB/s peak",
           "tflops": "{:,.4g} TFLOP/s peak", "pipeline_parallel": "pipeline stages {:,}", "replicas": "replicas {:,}",
           "price_per_hour": "${:,.2f} per GPU-hour", "bandwidth_efficiency": "bandwidth efficiency {:.2f}",
           "flops_efficiency": "FLOP/s efficiency {:.2f}", "memory_utilization": "memory utilisation {:.2f}",
           "kv_free_fraction": "KV pool {:.2f} of the memory left free",
           "block_size": "blocks of {:,} tokens", "max_model_len": "max model length {:,} tokens",
           "step_overhead_ms": "step overhead {:,.4g} ms", "request_latency_ms": "request latency {:,.4g} ms",
           "clustering": "users in step {:.3g}", "max_num_seqs": "max running {:,}",
           "reserve_mem": "engine reserve {:,.2f} {unit} per GPU", "shared_prefix_tokens": "shared prefix {:,} tokens",
           "headroom_pct": "headroom {:g}%", "peak_factor": "peak factor {:g}",
           "energy_price_kwh": "electricity ${:,.3f} per kWh", "pue": "PUE {:.2f}",
           "board_power_w": "board power {:,.0f} W", "spec_draft_tokens": "{:,} drafted tokens per step",
           "spec_acceptance_rate": "acceptance rate {:.3f} per token",
           "spec_acceptance_length": "{:.3f} tokens per verification",
           "spec_draft_params_b": "drafter {:,.4g}B parameters"}
#: How the caption words an input whose 0 (or "none") means it is not set.
UNSET = {"max_num_seqs": "max running: no cap", "energy_price_kwh": "electricity price not set",
         "board_power_w": "board power unknown"}
#: The engines and front ends in words (``serving.engine``, ``serving.front_end``).
ENGINE_WORDS = {"vllm": "vLLM", "tensorrt-llm": "TensorRT-LLM", "sglang": "SGLang",
                "ideal": "ideal (the essays' convention: no engine's defaults)"}
FRONT_END_WORDS = {"engine": "the engine's own server", "dynamo": "NVIDIA Dynamo front end",
                   "none": "in process (no server)"}
#: The speculative-decoding methods in words (``serving.speculative.method``; ``capacity.inputs.speculative``).
SPEC_WORDS = {"none": "none", "draft": "a draft model", "eagle": "EAGLE head", "mtp": "MTP heads (the model's own)",
              "ngram": "n-gram lookup (no drafter)"}


def hidden_summary(d: dict[str, Any], unit: str) -> str:
    """The inputs not drawn, with their values and units, as one line (✎ marks a value that overrides the catalog)."""
    values = widget_values(d)
    mine = set(overridden(d))
    custom = {"model": is_custom(d, "model"), "gpu": is_custom(d, "gpu")}
    parts = []
    for key in ON_DEMAND:
        field = FIELDS[key]
        if (field.only and not custom[field.only]) or not relevant(d, key):
            continue
        parts.append(f"{'✎ ' if key in mine else ''}{_said(key, values[key], unit)}")
    return "; ".join(parts)


def _on_demand(sb: Any, d: dict[str, Any], unit: str, section: str, mine: set[str]) -> None:
    """With the toggle off: the section's overridden catalog values (``mine``), each marked with its way back."""
    for key in ON_DEMAND:
        if key in mine and FIELDS[key].path[0] == section:
            _mark(sb, key, *_catalog_shown(d, key, unit), label=FIELDS[key].label)


def _row(where: Any) -> Any:
    """A row the inputs drawn into it share equally: one element, where ``columns(n)`` sends n + 1."""
    return where.container(horizontal=True, wrap=False, gap="small", vertical_alignment="bottom")


def _power(sb: Any, d: dict[str, Any], unit: str) -> None:
    """The electricity price and PUE (the site's: they stay with another GPU) and the board power (the GPU's
    catalog value unless typed): the energy and its cost beside the GPU cost (Cost view; issue 29)."""
    c1 = c2 = _row(sb)
    _number(c1, "energy_price_kwh", label="electricity ($/kWh)", format="%.3f", step=0.01,
            help="price of a kWh at the site; the energy cost is shown beside the GPU cost (Cost view); 0 = not set")
    _number(c2, "pue", label="PUE (facility / GPU)", format="%.2f", step=0.05,
            help="power usage effectiveness: the facility's power over the GPUs' power (1 = the GPUs alone; "
                 "data centers report about 1.1 to 1.6)")
    _number(sb, "board_power_w", label="board power (W per GPU)", format="%.0f", step=50.0,
            help="each GPU's power at full load, from the catalog's datasheet unless you type your own (0 = "
                 "unknown: no energy figures); every GPU is counted at it all month, an upper bound on the energy")
    _mark(sb, "board_power_w", *_catalog_shown(d, "board_power_w", unit))


def _engine(sb: Any, d: dict[str, Any], everything: bool) -> None:
    """The serving engine (``serving.engine``), and with every input drawn the front end before it
    (``serving.front_end``). An engine fills every serving setting the sizing leaves out with its own default (memory
    rule, batch cap, tokens per pass, step overhead, request latency); the answer lists each one it applied."""
    values = widget_values(d)
    engine, front = values["engine"], values["front_end"]
    # A name the library does not know (from a file or a link) is shown as written; the library's message names it.
    options = ENGINE_CHOICES if engine in ENGINE_CHOICES else [*ENGINE_CHOICES, engine]
    sb.selectbox("serving engine", options, key="engine", format_func=lambda e: ENGINE_WORDS.get(e, e),
                 on_change=on_field, args=("engine",),
                 help="the engine's defaults fill every serving setting you leave out (memory rule, batch cap, "
                      "tokens per pass, step overhead, request latency); the answer lists each one. Not chosen: "
                      f"{ENGINE_WORDS[FIELDS['engine'].default]}'s, stated as an assumption")
    if not everything:
        return
    options = FRONT_END_CHOICES if front in FRONT_END_CHOICES else [*FRONT_END_CHOICES, front]
    sb.selectbox("front end", options, key="front_end", format_func=lambda f: FRONT_END_WORDS.get(f, f),
                 on_change=on_field, args=("front_end",),
                 help="what serves the requests in front of the engine; it sets the request latency added to every "
                      "TTFT: the engine's own server, NVIDIA Dynamo's front end (the latency measured behind it on "
                      "every GPU), or none in process")


def _memory_share(sb: Any, d: dict[str, Any], unit: str) -> None:
    """The KV pool's share of memory by the engine's rule: of all memory (vLLM's gpu_memory_utilization, SGLang's
    mem_fraction_static) or of the memory the weights leave free (TensorRT-LLM's free_gpu_memory_fraction). It shows
    the engine's default until the user moves it, marked then with the way back."""
    key = "kv_free_fraction" if relevant(d, "kv_free_fraction") else "memory_utilization"
    help_text = ("TensorRT-LLM's free_gpu_memory_fraction: the KV pool is this share of the memory the weights and "
                 "runtime buffers leave free" if key == "kv_free_fraction" else
                 "the share of GPU memory the engine may use (weights, reserves and the KV pool): vLLM's "
                 "gpu_memory_utilization, SGLang's mem_fraction_static")
    _slider(sb, key, 0.01, help=help_text)
    _mark(sb, key, *_catalog_shown(d, key, unit))


def _speculative(sb: Any, d: dict[str, Any]) -> None:
    """Speculative decoding (``serving.speculative``): a method, then its drafted tokens, the acceptance (a rate per
    drafted token or tokens per verification; either one, the other shows what it implies) and a draft model's
    size. Its effect on TPOT, goodput and cost is in every figure (Cost view: with and without)."""
    method = speculation(d)
    # A method the library does not know (from a file or a link) is shown as written; the library's message names it.
    options = SPEC_METHODS if method in SPEC_METHODS else [*SPEC_METHODS, method]
    sb.selectbox("speculative decoding", options, key="spec_method", format_func=lambda m: SPEC_WORDS.get(m, m),
                 on_change=on_field, args=("spec_method",),
                 help="a drafter proposes tokens that the model verifies in one pass: fewer passes per token at small "
                      "batches, more work per pass at large ones")
    if method == "none":
        return
    c1 = c2 = _row(sb)
    _number(c1, "spec_draft_tokens", label="drafted tokens per step",
            help="tokens the drafter proposes before each verification (the chain's depth, γ)")
    if method == "draft":
        _number(c2, "spec_draft_params_b", label="drafter parameters (billions)", format="%.3f",
                help="the draft model's size: its weights share the GPU with the model's (2 bytes per parameter)")
    c1 = c2 = _row(sb)
    _number(c1, "spec_acceptance_rate", label="acceptance rate (per token)", format="%.3f", step=0.05,
            help="chance the model accepts each drafted token; measure it on your traffic")
    _number(c2, "spec_acceptance_length", label="or tokens per verification", format="%.3f", step=0.1,
            help="the mean tokens one verification yields, bonus token included (vLLM's and SGLang's logged "
                 "acceptance length): 1 to drafted tokens + 1")
    values = widget_values(d)
    rate, length = values["spec_acceptance_rate"], values["spec_acceptance_length"]
    given = "rate" if stated(d, "spec_acceptance_rate") else "tokens per verification"
    sb.caption(plain(f"Acceptance {rate:.3f} per drafted token = {length:.3f} tokens per verification; the sizing "
                     f"takes the {given} you gave, the other is what it implies."))


def draw(problems: dict[str, list[str]] | None = None) -> None:
    """Draw the inputs (every one with the "all inputs" toggle on, the often changed ones otherwise), each
    section followed by the sizing's problems that belong to it (``problems``: section -> messages)."""
    problems = problems or {}

    def section_problems(section: str) -> None:
        for text in problems.get(section, []):
            sb.error(plain(text))

    sb = st.sidebar
    sync(whole=False)  # widgets Streamlit forgot while not drawn get the mapping's values
    d = doc()
    unit = d.get("units", "GB") if d.get("units") in UNITS else "GB"
    mine = set(overridden(d))
    sb.title("Sizing inputs")
    loaded = st.session_state.get("loaded_from")
    sb.selectbox("Start from a preset", [*PRESETS, *([loaded] if loaded else [])], key="preset", on_change=on_preset,
                 help="A starting point: every value below is yours to change. A loaded file or share link shows "
                      "as where it came from.")
    moved = changes(d, st.session_state["base"])
    if moved:
        sb.info(plain(f"Modified from {origin_phrase(st.session_state['origin'])}: {', '.join(moved)}"))
    sb.text_input("Scenario name", key="name", max_chars=120, on_change=on_field, args=("name",),
                  help="Names the saved file, the reports and the link.")
    sb.radio("Byte units", UNITS, key="units", horizontal=True, on_change=on_field, args=("units",),
             help="How memory is shown: GB = 10^9 bytes, GiB = 2^30 bytes. The sizing does not change.")
    _show_messages(sb, "link", "upload", "loaded_error")
    for text in _messages().get("loaded", []):
        sb.success(plain(text))
    everything = sb.toggle("Show all inputs", key=MORE,
                           help="Engine, efficiencies, price, parallelism, fleet planning and a custom model's or "
                                "GPU's numbers. Hidden, they keep their values (listed below the inputs) and are "
                                "saved and linked as before.")

    sb.subheader("Model")
    sb.selectbox("Model", [*catalog.models(), CUSTOM], key="model", on_change=on_choice, args=("model",))
    if everything and is_custom(d, "model"):
        c1 = c2 = c3 = _row(sb)
        _number(c1, "layers")
        _number(c2, "kv_heads")
        _number(c3, "head_dim")
        _number(sb, "params_b", format="%.3f")
        sb.text_area("or paste a Hugging Face config.json (max 200 kB)", key="config_json", height=80,
                     on_change=on_config, help="layers, heads, KV heads, head_dim, MLA, sliding windows and MoE "
                                               "are read from it; parameters are counted from its shapes")
    _show_messages(sb, "config_json")
    c1 = c2 = _row(sb)
    c1.selectbox("weight dtype", DTYPES, key="weight_dtype", on_change=on_field, args=("weight_dtype",))
    c2.selectbox("KV dtype", KV_DTYPES, key="kv_dtype", on_change=on_field, args=("kv_dtype",))
    if everything:
        _number(sb, "weights_mem", label=f"weights ({unit})", format="%.2f",
                help="follows parameters x weight dtype unless you type your own")
        _mark(sb, "weights_mem", *_catalog_shown(d, "weights_mem", unit))
    else:
        _on_demand(sb, d, unit, "model", mine)
    section_problems("model")

    sb.subheader("GPU")
    sb.selectbox("GPU", [*catalog.gpus(), CUSTOM], key="gpu", on_change=on_choice, args=("gpu",))
    _number(sb, "gpu_count", label="tensor parallel", help="GPUs per replica that split each layer")
    if everything:
        if is_custom(d, "gpu"):
            _number(sb, "memory_mem", label=f"GPU memory ({unit})", format="%.2f")
            c1 = c2 = _row(sb)
            _number(c1, "bandwidth_tbs", format="%.3f")
            _number(c2, "tflops", format="%.1f")
        c1 = c2 = _row(sb)
        _number(c1, "pipeline_parallel", label="pipeline")
        _number(c2, "replicas")
        _number(sb, "price_per_hour", format="%.2f",
                help="an assumption; follows the catalog unless you type your own")
        _mark(sb, "price_per_hour", *_catalog_shown(d, "price_per_hour", unit))
        _power(sb, d, unit)
        c1 = c2 = _row(sb)
        _slider(c1, "bandwidth_efficiency", 0.01)
        _slider(c2, "flops_efficiency", 0.01)
        _mark(sb, "bandwidth_efficiency", *_catalog_shown(d, "bandwidth_efficiency", unit))
        _mark(sb, "flops_efficiency", *_catalog_shown(d, "flops_efficiency", unit))
    else:
        _on_demand(sb, d, unit, "gpu", mine)
    section_problems("gpu")

    sb.subheader("Serving engine")
    _engine(sb, d, everything)
    if everything:
        _memory_share(sb, d, unit)
        c1 = c2 = _row(sb)
        c1.selectbox("block size (tokens)", BLOCK_SIZES, key="block_size", on_change=on_field,
                     args=("block_size",))
        _number(c2, "max_model_len", label="max model length")
        _mark(sb, "max_model_len", *_catalog_shown(d, "max_model_len", unit))
        c1 = c2 = _row(sb)
        _number(c1, "step_overhead_ms", label="step overhead (ms)", format="%.3f",
                help="fixed time of each forward pass (scheduling, kernel launches); the engine's fitted default "
                     "until you type your own")
        _number(c2, "max_num_seqs", label="max running (0 = no cap)")
        _mark(sb, "step_overhead_ms", *_catalog_shown(d, "step_overhead_ms", unit))
        _number(sb, "request_latency_ms", label="request latency (ms)", format="%.1f",
                help="a request's time outside the engine's passes (front end, tokenisation, streaming the first "
                     "token), added to every TTFT; the engine's fitted default behind the front end chosen until you "
                     "type your own")
        _mark(sb, "request_latency_ms", *_catalog_shown(d, "request_latency_ms", unit))
        _number(sb, "reserve_mem", label=f"engine reserve per GPU ({unit})", format="%.2f",
                help="memory the engine holds outside the KV pool: activations, CUDA graphs (vLLM logs it at "
                     "start-up)")
        _speculative(sb, d)
    else:
        _on_demand(sb, d, unit, "serving", mine)
    section_problems("serving")

    sb.subheader("Workload")
    c1 = c2 = _row(sb)
    _number(c1, "prompt_tokens")
    _number(c2, "output_tokens")
    if everything:
        c1 = c2 = _row(sb)
        _number(c1, "shared_prefix_tokens")
        _number(c2, "arrival_rate", label="load (requests/s)", format="%.2f",
                help="the traffic to size for; 0 = not set")
        c1 = c2 = _row(sb)
        _number(c1, "concurrency", label="or concurrent users", help="users in flight, each waiting for its answer "
                "(a closed loop, as vllm bench --max-concurrency); replaces the requests/s; 0 = not set")
        _number(c2, "think_time_s", label="think time (s)", format="%.1f",
                help="each user's pause between an answer and the next request (with concurrent users)")
        if relevant(d, "clustering"):
            _slider(sb, "clustering", 0.0, label="users in step (share of the others)",
                    help="with concurrent users and no think time, the share of the other users whose requests reach "
                         "the engine in the same step as a user's (fixed-length benchmarks fall into step; 0: their "
                         "phases spread); the engine's fitted default for the model's class until moved")
            _mark(sb, "clustering", *_catalog_shown(d, "clustering", unit))
        c1, c2, c3 = sb.columns(3)
        help_daily = ("or the load as daily users: users x requests a day x the peak hour's share / 3,600 s is the "
                      "arrival rate sized for (replaces the requests/s and concurrent users)")
        _number(c1, "daily_users", label="or daily users", format="%.0f", help=help_daily)
        _number(c2, "requests_per_user_per_day", label="requests / user / day", format="%.1f", help=help_daily)
        _number(c3, "peak_hour_pct", label="in peak hour (%)", format="%.1f", help=help_daily)
        c1 = c2 = _row(sb)
        _number(c1, "headroom_pct", step=5.0, help="spare capacity every fleet is sized with (headline, Cost and "
                                                    "Fleet; saved as fleet.headroom)")
        _number(c2, "peak_factor", step=1.0, help="design load over the entered load (saved as fleet.peak_factor)")
    else:
        c1 = c2 = _row(sb)
        _number(c1, "arrival_rate", label="load (requests/s)", format="%.2f",
                help="the traffic to size for; 0 = not set")
        _number(c2, "concurrency", label="or concurrent users", help="users in flight, each waiting for its answer "
                "(a closed loop); replaces the requests/s; 0 = not set")
    section_problems("workload")

    sb.subheader("Promises")
    c1 = c2 = _row(sb)
    _number(c1, "tpot_ms", label="TPOT (ms, 0 = none)")
    _number(c2, "ttft_ms", label="TTFT (ms, 0 = none)")
    section_problems("slo")
    if not everything:
        sb.caption(plain("Not shown (turn on \"Show all inputs\" to change them): " + hidden_summary(d, unit)))
    for key in FIELDS:
        _show_messages(sb, key)
