"""Every option of every subcommand is read by a typed, bounded reader (issue 32): NaN, infinity, huge numbers,
digits of other scripts and empty lists are refused by the parser with exit 2 and one line naming the option.

The options are found from the parsers themselves, so an option added tomorrow is covered the day it is added:
one without a typed reader (``capacity.cli.options``) or choices fails ``test_every_option_has_a_typed_reader``
until it gets one (or joins ``FREE_TEXT`` with the test that covers it).
"""

from __future__ import annotations

import argparse

import pytest

from capacity.cli import COMMANDS, _parser, main
from capacity.cli import options as opt

#: Values a user may type by mistake or on purpose, per kind of reader: each must be refused.
HOSTILE: dict[str, list[str]] = {
    "number": ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999", "", " ", "٣", "١٢", "²", "1_000", "0x10",
               "9" * 5000, "1e", "--", "\x00", "1,5"],
    "whole": ["nan", "inf", "1e999", "", "٣", "²", "9" * 5000, "1.5", "-1", "0x10", "1_000", "\x00"],
    "whole-list": ["", ",", "1,,2", "nan", "inf", "٣", "²", "1.5", "-1", "9" * 5000, ",".join(["1"] * 5000), "0"],
    "number-list": ["", ",", "1,,2", "nan", "inf", "1e999", "٣", "-1", ",".join(["nan"] * 24), ",".join(["inf"] * 24),
                    ",".join(["٣"] * 24), ",".join(["-1"] * 24), ",".join(["1"] * 200_000)],
    "names": ["", ",", "a,,b", "\x1b[2J", "a b", "../../etc/passwd", "x" * 500, ",".join(["h100"] * 5000)],
    "choice-list": ["", ",", "nope", "a,,b"],
    "path": ["", "a\x00b", "x" * 5000],
    "name": ["", "a b", "\x1b[2J", "x" * 500, "../x"],
    "quantity": ["0 s", "0", "-1 s", "nan s", "inf s", "1e999 s", "٣ s", "2 parsecs", "", "x" * 500, "1e9 s"],
    "duration": ["nan", "inf", "1e999", "-1", "", "٣ s", "nan s", "1e999 s", "2 parsecs", "x" * 500, "1e8"],
    "quantity-text": ["", "nan", "0 GB/s", "-2 GB/s", "inf GB/s", "1e999 GB/s", "٣ GB/s", "2 s", "x" * 500],
    "triple": ["", "1:2", "nan:60:2", "0:nan:2", "0:60:nan", "0:60:inf", "٣:60:2", "0:60:1e999", "1:2:3:4",
               "x" * 500],
    "address": ["http://x:1", "::::", "", "tcp://", "tcp://x:0", "tcp://x:65536", "tcp://x:٣", "x" * 500,
                "tcp://a b:1", "file:///etc/passwd", "tcp://x:" + "9" * 5000],
}
#: Options read as free text on purpose, with the test that covers their hostile values.
FREE_TEXT = {
    ("sweep", "--vary"): "tests/cli/test_hostile.py::test_sweep_refuses_grids_before_allocating_them",
    ("simulate", "--set"): "tests/cli/test_hostile.py::test_simulate_set_values_are_bounded",
}


def _options() -> list[tuple[str, argparse.Action]]:
    """(subcommand, action) for every option and positional of every subcommand that takes a value."""
    found = []
    for command in COMMANDS:
        parser = _parser(command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for action in sub.choices[command]._actions:
            if action.nargs == 0 or isinstance(action, argparse._HelpAction):
                continue
            found.append((command, action))
    return found


def _name(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else action.dest


OPTIONS = _options()


def test_every_option_has_a_typed_reader():
    untyped = [f"{command} {_name(action)}" for command, action in OPTIONS
               if action.choices is None and opt.kind_of(action) not in HOSTILE
               and (command, _name(action)) not in FREE_TEXT]
    assert not untyped, f"options without a typed reader (capacity.cli.options): {untyped}"
    assert len(OPTIONS) > 60  # the enumeration found the subcommands' options, not an empty parser


@pytest.mark.parametrize("command, action", [(c, a) for c, a in OPTIONS if opt.kind_of(a) in HOSTILE],
                         ids=lambda v: v if isinstance(v, str) else _name(v))
def test_every_typed_option_refuses_its_hostile_values(command, action):
    kind = opt.kind_of(action)
    accepted = []
    for value in HOSTILE[kind]:
        try:
            action.type(value)
        except argparse.ArgumentTypeError as exc:
            message = str(exc)
            assert message and "\n" not in message and len(message) < 300, (value, message)
            assert message.isprintable(), message
        else:
            accepted.append(value[:40])
    assert not accepted, f"{command} {_name(action)} accepted {accepted}"


@pytest.mark.parametrize("command, action", [(c, a) for c, a in OPTIONS
                                             if opt.kind_of(a) in ("number", "whole") and a.option_strings],
                         ids=lambda v: v if isinstance(v, str) else _name(v))
def test_nan_through_the_command_line_is_exit_2_and_one_line(command, action, tmp_path, capsys):
    """The parser's own path: exit 2 and one line naming the option, before any file is read."""
    argv = [command, str(tmp_path / "missing.yaml")]
    if command == "calibrate":
        argv.append(str(tmp_path / "missing.csv"))
    if command == "fleet" and _name(action) not in ("--target-rps", "--tokens-per-day"):
        argv += ["--target-rps", "1"]
    if command == "curve":
        argv += ["--kind", "daily"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, _name(action), "nan"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and err.startswith("capacity: error: argument ") and _name(action) in err, err
    assert "'nan'" in err


@pytest.mark.parametrize("kind, text, expected", [
    ("number", "0.25", 0.25), ("number", " 1e3 ", 1000.0), ("whole", "2.0", 2), ("whole-list", "1,2,2,1", [1, 2]),
    ("names", "h100-sxm,H100-SXM,h200", ["h100-sxm", "h200"]), ("address", "10.0.0.1:8786", "tcp://10.0.0.1:8786"),
    ("address", "tcp://[::1]:8786", "tcp://[::1]:8786"), ("quantity", "2 s", 2.0), ("quantity", "500 ms", 0.5),
])
def test_typed_readers_accept_what_users_mean(kind, text, expected):
    reader = {"number": opt.number(0, 1e6), "whole": opt.whole(1, 10), "whole-list": opt.whole_list(1, 10, 8),
              "names": opt.names(8), "address": opt.address, "quantity": opt.quantity("time", 0, 3600)}[kind]
    assert reader(text) == expected


def test_duplicate_gpu_names_run_once():
    """500 copies of one GPU name were 500 runs of the same layouts; now one."""
    assert opt.names(64)(",".join(["h100-sxm"] * 64)) == ["h100-sxm"]


def _extremes(action: argparse.Action) -> list[str]:
    """The smallest and largest values a number option accepts (just inside an open end)."""
    low, high, open_low, open_high = action.type.bounds
    lows = low * (1 + 1e-9) + 1e-300 if open_low else low
    highs = high * (1 - 1e-9) if open_high else high
    return [repr(float(lows)) if opt.kind_of(action) == "number" else str(lows),
            repr(float(highs)) if opt.kind_of(action) == "number" else str(highs)]


#: How each cheap command is run around an option at its extremes (search and report take seconds a run).
EXTREME_RUNS = {
    "curve": {"--points": ["--kind", "knee"], "--rate": ["--kind", "guidance"], "--ttft": ["--kind", "guidance"],
              "--peak-rps": ["--kind", "daily"], "--peak-factor": ["--kind", "daily", "--peak-rps", "50"],
              "--peak-hour": ["--kind", "daily", "--peak-rps", "50"],
              "--headroom": ["--kind", "daily", "--peak-rps", "50"]},
    "fleet": {"--target-rps": [], "--tokens-per-day": [], "--peak": ["--target-rps", "1e9"],
              "--headroom": ["--target-rps", "1e9"]},
}


@pytest.mark.parametrize("command, action", [(c, a) for c, a in OPTIONS if c in EXTREME_RUNS
                                             and _name(a) in EXTREME_RUNS[c]],
                         ids=lambda v: v if isinstance(v, str) else _name(v))
def test_no_successful_run_prints_nan_or_infinity_at_an_options_extremes(command, action, tmp_path):
    """Before: --headroom 1 printed infinite replicas, --rate past the ceiling 'mean wait inf ms'."""
    import re

    from tests.cli.test_hostile import base_text
    from tests.limits import run_forked

    path = tmp_path / "s.yaml"
    path.write_text(base_text())
    values = ["1 us", "3600 s"] if opt.kind_of(action) == "quantity" else _extremes(action)
    for value in values:
        for fmt in ("table", "json"):
            argv = [command, str(path), *EXTREME_RUNS[command][_name(action)], _name(action), value, "--format", fmt]
            outcome = run_forked(argv, wall_s=60)
            assert outcome.code in (0, 2), (argv, outcome.describe())
            if outcome.code == 0:
                assert not re.search(r"(?i)\b(nan|-?inf(inity)?)\b", outcome.stdout), (argv, outcome.stdout[:500])
            else:  # a refusal is one line saying why (no layout holds the load, say), not a crash
                assert outcome.stderr.startswith("capacity: error: "), (argv, outcome.describe())


def test_autoscale_policy_kinds_agree_with_the_simulator():
    from capacity.cli.autoscale_command import POLICY_KINDS
    from capacity.simulator import autoscale

    assert POLICY_KINDS == autoscale.POLICY_KINDS
