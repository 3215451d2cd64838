"""Pipeline sends are costed by the link each hop really crosses (ranks: t, then d, then p)."""

import json

import numpy as np
import pytest

from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.collectives import p2p_s
from ceiling.model.plan.communication import pipeline_sends_s


def _cluster(inter_bw: float):
    return make_cluster(
        get_spec("h100-sxm"),
        64,
        8,
        intra_node_bandwidth_bytes_per_s=400e9,
        inter_node_bandwidth_bytes_per_s=inter_bw,
    )


def test_hops_inside_and_across_nodes():
    c = _cluster(1e9)
    nbytes, m = 1e6, 8
    intra, inter = p2p_s(nbytes, *c.link(False)), p2p_s(nbytes, *c.link(True))
    # t·d = 4 ranks per stage on 8-device nodes: stages 0-1 | 2-3, so 1 of 3 hops crosses.
    sends, spans = pipeline_sends_s(c, nbytes, 2.0, 2.0, 4.0, 1.0, m)
    assert spans
    assert sends == pytest.approx(2 * (m * inter + 2 * intra + inter))
    # t·d = 8 fills a node: every hop crosses.
    sends, _ = pipeline_sends_s(c, nbytes, 4.0, 2.0, 4.0, 1.0, m)
    assert sends == pytest.approx(2 * (m + 3) * inter)
    # One node holds the whole pipeline (t·d·p = 8): every hop stays inside.
    sends, spans = pipeline_sends_s(c, nbytes, 1.0, 2.0, 4.0, 1.0, m)
    assert not spans and sends == pytest.approx(2 * (m + 3) * intra)
    # Interleaved chunks wrap from the last device to the first, across nodes here.
    _, spans = pipeline_sends_s(c, nbytes, 1.0, 1.0, 16.0, np.float64(2.0), m)
    assert spans


def test_a_slow_inter_node_link_no_longer_favours_a_long_thin_pipeline(cli):
    code, out, err = cli(
        "plan", "llama-3-70b", "--spec", "h100-sxm", "--gpus", "256", "--inter-bw", "1B/s",
        "-k", "3", "--json",
    )  # fmt: skip
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert (plans[0]["d"], plans[0]["t"], plans[0]["p"]) != (1, 4, 64)
    # Any layout on 32 nodes must cross them, and at 1 B/s that costs far more than 33 s.
    assert plans[0]["step_time_s"] > 1e6
