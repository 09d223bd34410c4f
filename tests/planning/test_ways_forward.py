"""A way forward instead of an error (issue 30): the evaluated changes that serve a sizing that cannot be served."""

from __future__ import annotations

import copy

from capacity import Scenario
from capacity.planning.ways_forward import needs_a_way, ways_forward

LLAMA_405B_ON_ONE_H100 = {"model": "llama-3.1-405b", "gpu": "h100-sxm",
                          "workload": {"prompt_tokens": 1000, "output_tokens": 200}}
LLAMA_70B_ON_ONE_L40S = {"model": "llama-3.1-70b", "gpu": "l40s", "workload": {"prompt_tokens": 1000,
                                                                               "output_tokens": 200}}


def _apply(mapping, changes):
    data = copy.deepcopy(mapping)
    for (part, key), value in changes:
        section = data[part] if isinstance(data[part], dict) else {"name": data[part]}
        data[part] = {**section, key: value}
    return data


def test_a_served_sizing_needs_no_way_forward():
    served = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "workload": {"prompt_tokens": 1000, "output_tokens": 200}}
    assert not needs_a_way(served) and ways_forward(served) == []


def test_every_way_offered_serves_the_sizing_and_they_come_fewest_gpus_first():
    for mapping in (LLAMA_405B_ON_ONE_H100, LLAMA_70B_ON_ONE_L40S):
        assert needs_a_way(mapping)
        ways = ways_forward(mapping)
        assert ways, mapping
        for way in ways:
            results = Scenario.from_dict(_apply(mapping, way.changes)).evaluate()
            assert results["batch_max"] == way.requests_fit >= 1
            assert results.scenario.gpu.gpus_per_replica == way.gpus_per_replica
        assert [w.gpus_per_replica for w in ways] == sorted(w.gpus_per_replica for w in ways)


def test_70b_on_l40s_by_hand():
    # 70.6e9 parameters: 141 GB in 16-bit, 70.6 GB in 8-bit; an L40S holds 48 GB x 0.9 = 43.2 GB usable.
    # One GPU serves only with more memory (a 192 GB MI300X: 172.8 GB usable > 141 GB); on L40S, TP2 in 16-bit is
    # 70.6 GB per GPU (no) and TP2 in fp8 35.3 GB per GPU (fits): the fewest L40S is 2.
    ways = ways_forward(LLAMA_70B_ON_ONE_L40S, limit=20)
    single = [w for w in ways if w.gpus_per_replica == 1]
    assert single and all(dict(w.changes).get(("gpu", "name")) not in (None, "l40s") for w in single)
    on_l40s = [w for w in ways if ("gpu", "name") not in dict(w.changes)]
    assert dict(on_l40s[0].changes) == {("gpu", "count"): 2, ("model", "weight_dtype"): "fp8"}


def test_405b_needs_eight_h100s_or_larger_gpus():
    # 405e9 x 2 B = 810 GB: 8 H100s hold 8 x 72 GB usable = 577 GB, so 16-bit needs more memory per GPU; 8-bit
    # (405 GB) fits on 8 H100s; four 256-288 GB GPUs hold the 16-bit weights too
    ways = ways_forward(LLAMA_405B_ON_ONE_H100, limit=10)
    labels = [w.label for w in ways]
    assert "tensor parallel 8 with 8-bit weights" in labels
    assert all(w.gpus_per_replica >= 4 for w in ways)
