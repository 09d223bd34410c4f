"""Fuzz of the app's own entry points (issue 18): config.json pastes and share-link parameters.

Each generated case must end in the library's values or in ScenarioError lines (the inline messages), never in
another exception (a traceback in the app), and within a time bound. The library paths are run for hundreds of
seeded cases; a sample goes through the real app (AppTest), which must show no exception and keep its headline.
Before issue 18, 70 of 400 malformed pastes and any out-of-range link value gave a traceback.
"""

import copy
import json
import random
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from app_views.state import _FIELDS, doc_from_link
from capacity import Scenario, ScenarioError
from capacity.inputs.hf_config import model_from_text
from tests.app.test_app import headline_figures

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
CONFIGS = sorted((ROOT / "tests" / "data" / "configs").glob("*.json"))
#: Values a careless or hostile paste puts in place of a config.json field.
VALUES = [None, True, False, 0, -1, 1, 2, 3.5, -2.5, 1e308, 10**12, 10**29, "", "abc", "12", "1e3", [], [1, 2], {},
          {"a": 1}, [None], ["full_attention"] * 3, 0.0, 7, 100_000, "\u202e", "![x](http://example.invalid/x.png)"]
#: Text a link parameter may carry instead of a number or a name.
TEXTS = ["", "abc", "-1", "0", "1e309", "nan", "inf", "-inf", "5", "1e30", "9" * 400, "0.5", "100000000", "\n",
         "1,5", "80 GB", "3 ms", "![x](http://example.invalid/x.png)", "<script>", "\ud800", "custom", "h100-sxm",
         '{"a": 1}', "[]", "1" * 50]
EXTRA = ['{"simulation": {"requests": 1e400}}', '{"serving": {"x": NaN}}', '{"a": 1, "a": 2}', "[" * 5000 + "]" * 5000,
         '{"simulation": {"replicas": 1000000}}', '{"workload": {"prompt_tokens": "many"}}', "not json",
         '{"slo": {"tpot": "-5 ms"}}', '{"model": {"config": "/etc/passwd"}}', '{"simulation": {"trace": "/dev/zero"}}']


def mutated_configs(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    bases = [json.loads(p.read_text()) for p in CONFIGS]
    out = []
    for _ in range(count):
        config = copy.deepcopy(rng.choice(bases))
        target = config["text_config"] if isinstance(config.get("text_config"), dict) and rng.random() < 0.5 \
            else config
        for _ in range(rng.randint(1, 4)):
            if not target:
                break
            key = rng.choice(list(target))
            if rng.random() < 0.2:
                del target[key]
            else:
                target[key] = rng.choice(VALUES)
        text = json.dumps(config)
        if rng.random() < 0.1:  # truncated paste
            text = text[: rng.randint(0, len(text))]
        out.append(text)
    return out


def evaluate_paste(text: str) -> None:
    model = model_from_text(text, "imported config.json")
    Scenario.from_dict({"model": {**model, "weight_dtype": "bf16"}, "gpu": "h100-sxm",
                        "workload": {"prompt_tokens": 500, "output_tokens": 200},
                        "serving": {"max_model_len": 4096}}).evaluate()


def test_400_malformed_config_pastes_give_values_or_scenario_errors():
    slow = []
    for text in mutated_configs(18, 400):
        start = time.perf_counter()
        try:
            evaluate_paste(text)
        except ScenarioError as exc:
            assert exc.problems and all("\n" not in p for p in exc.problems)
        took = time.perf_counter() - start
        if took > 1.0:
            slow.append((took, text[:200]))
    assert not slow, slow


def random_link(rng: random.Random) -> dict[str, str]:
    params = {}
    for field in rng.sample(_FIELDS, rng.randint(1, 6)):
        params[field.key] = rng.choice(TEXTS)
    if rng.random() < 0.3:
        params["extra"] = rng.choice(EXTRA)
    if rng.random() < 0.2:
        params["view"] = rng.choice(["Memory", "Nope", ""])
    return params


def test_300_random_links_give_a_sizing_and_messages_never_an_exception():
    from app_views.state import normalise, presets

    base = normalise(__import__("yaml").safe_load(next(iter(presets().values())).read_text()))
    rng = random.Random(18)
    for _ in range(300):
        params = random_link(rng)
        doc, problems = doc_from_link(params, base)
        assert all(isinstance(p, str) for p in problems)
        try:
            Scenario.from_dict(doc).evaluate()
        except ScenarioError as exc:
            assert exc.problems


def test_the_app_survives_sampled_pastes_and_links():
    rng = random.Random(7)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.sidebar.selectbox(key="model").select("custom").run()
    # the landing model is custom already (no change): its numbers and the paste box show with all inputs
    at.sidebar.toggle(key="more_inputs").set_value(True).run()
    for text in mutated_configs(7, 12):
        at.sidebar.text_area(key="config_json").input(text).run()
        assert not at.exception, (text[:300], [e.message for e in at.exception])
    for _ in range(12):
        # a real URL carries UTF-8: a lone surrogate cannot arrive (the library part above takes it)
        params = {k: v.replace("\ud800", "?") for k, v in random_link(rng).items()}
        link = AppTest.from_file(APP, default_timeout=120)
        link.query_params.update(params)
        link.run()
        assert not link.exception, (params, [e.message for e in link.exception])
        page = " ".join(e.value for e in [*link.error, *link.warning])
        assert "Traceback" not in page and "site-packages" not in page


#: Links that crashed the app in the re-audit of issue 18 (each was a traceback page).
CRASHED = [
    {"name": "abc"},  # a link "written by the app" but holding no GPU: efficiency 0.0 under the slider's 0.01
    {"name": "x", "extra": '{"model": 3}'},  # a section that is not a mapping
    {"extra": '{"workload": {"prompt_tokens": "many"}}'},  # the context window derived from text
    {"extra": '{"workload": 5}'},
    {"extra": '{"simulation": {"requests": 1e400}}', "view": "Simulator"},  # int(inf) in the controls
    {"extra": '{"simulation": {"requests": 1000000, "rate": "x"}}', "view": "Simulator"},  # over the control's max
    {"reserve_mem": "nan"},  # "nan GiB" read back in the reserve sum
    {"extra": '{"serving": {"activation_memory": "lots"}}'},
]


def test_links_that_crashed_the_app_give_inline_messages():
    for params in CRASHED:
        at = AppTest.from_file(APP, default_timeout=120)
        at.query_params.update(params)
        at.run()
        assert not at.exception, (params, [e.message for e in at.exception])
        shown = " ".join(e.value for e in [*at.error, *at.warning])
        assert shown or headline_figures(at), params  # either the sizing or a message naming what is wrong
