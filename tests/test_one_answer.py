"""One question, one answer: each report section's key figures equal the corresponding
command's `--json` and the API's result for the same inputs (the planner, with its scaling,
in test_plan_one_answer.py; MFU's one definition across profile, MfuMeter and trace in
test_one_mfu.py; the report's MFU section shows `ceiling profile`'s own result). Devices
are explicit (a catalog spec, a saved test profile, a trace's own device), so the answers
hold on any machine; the sections' measurements of this machine are left out, being no part
of the comparison."""

from __future__ import annotations

import json

import pytest

from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

SPEC, MODEL = "h100-sxm", "llama-3-8b"
TRACE = "tests/data/traces-real/mi250_minitoy_rocm6.json.gz"  # names its GPU, records shapes
# a CPU measured before, with the theoretical peak beside the measured rate
TEST_CPU = MeasuredDevice(
    name="Test CPU",
    kind="cpu",
    peak_flops_per_s={"fp32": 100e9},
    bandwidth_bytes_per_s=10e9,
    datasheet_peak_flops_per_s={"fp32": 200e9},
    memory_bytes=16 * 2**30,
)


@pytest.fixture
def cpu_profile(tmp_path, monkeypatch):
    """This machine's saved profile (the one rule's third case)."""
    path = save_profile(
        MachineProfile(1, "2026-01-01T00:00:00+00:00", "testhost", {}, [TEST_CPU]),
        tmp_path / "saved.json",
    )
    monkeypatch.setenv("CEILING_PROFILE", str(path))
    return path


def _section(cli, tmp_path, key: str, *args) -> dict:
    code, out, err = cli("report", "--only", key, *args, "-o", tmp_path / "r.html", "--json")
    assert code == 0, err
    section = next(s for s in json.loads(out)["sections"] if s["key"] == key)
    assert section["status"] == "ok", section["reason"]
    return section["key_figures"]


def _json(cli, *args) -> dict:
    """The command's --json, less the path of a figure it was not asked to draw."""
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record.pop("plot", None) is None
    return record


def test_decode_section_command_and_api_give_one_ceiling(cli, tmp_path, cpu_profile, monkeypatch):
    import ceiling
    from ceiling.report.sections import decode as section

    monkeypatch.setattr(section, "_measured", lambda *a: None)  # this machine's own decode
    figures = _section(cli, tmp_path, "decode", "--model", MODEL, "--spec", SPEC)
    batches = ",".join(map(str, section.BATCHES))
    command = _json(cli, "decode", MODEL, "--spec", SPEC, "--batch", batches)
    api = ceiling.decode(MODEL, spec=SPEC, batch=section.BATCHES).to_dict()
    assert api == command
    mine = figures["ceilings"][command["device"]]
    assert mine["tp"] == command["tp"] == 1
    assert mine["crossover_batch"] == command["crossover_batch"]
    assert mine["kv_bytes_per_token"] == command["kv_bytes_per_token"]
    # the section lists the batches that fit at the context; the command flags the others
    fitting = [r["tokens_per_s"] for r in command["rows"] if r.get("fits", True)]
    assert [r["tokens_per_s"] for r in mine["rows"]] == fitting
    assert mine["ceiling_tokens_per_s"] == command["rows"][0]["tokens_per_s"]
    assert figures["headline"]["ceiling_tokens_per_s"] == command["rows"][0]["tokens_per_s"]


def test_roofline_section_command_and_api_give_one_roof(cli, tmp_path, cpu_profile, monkeypatch):
    import ceiling
    from ceiling.report.sections import roofline as section

    monkeypatch.setattr(section, "_measure", lambda *a: {})  # timing the ops here
    figures = _section(cli, tmp_path, "roofline")
    ops = [f"--op={op}" for op in section.OPS_QUICK]
    command = _json(cli, "roofline", *ops, "--dtype", "fp32")
    api = ceiling.roofline(section.OPS_QUICK, dtype="fp32").to_dict()
    assert api == command
    assert command["source"] == "profile" and command["profile"] == str(cpu_profile)
    assert figures["dtype"] == command["dtype"] == "fp32"
    assert figures["peak_flops_per_s"] == command["peak_flops_per_s"] == 100e9
    assert figures["bandwidth_bytes_per_s"] == command["bandwidth_bytes_per_s"] == 10e9
    assert figures["ridge_flops_per_byte"] == command["ridge_flops_per_byte"]
    for row in command["ops"]:
        mine = figures["ops"][row["op"]]
        assert mine["intensity_flops_per_byte"] == row["intensity_flops_per_byte"]
        assert (mine["bound"], mine["predicted_s"]) == (row["bound"], row["predicted_s"])


@pytest.mark.slow
def test_trace_section_command_and_api_give_one_mfu(cli, tmp_path, cpu_profile):
    import ceiling

    figures = _section(cli, tmp_path, "trace", "--trace", TRACE)
    command = _json(cli, "trace", TRACE)
    api = ceiling.trace(TRACE).to_dict()
    assert api == command
    rank = command["ranks"][0]
    assert rank["mfu"] is not None and rank["mfu"] > 0
    assert figures["mfu"] == rank["mfu"]
    assert figures["step_s"] == rank["step_s"]
    assert figures["model_flops_per_step"] == rank["model_flops_per_step"]
    # MFU by the one definition: the model FLOPs at the datasheet peak over the step
    peak = command["device"]["peak_flops_per_s"]
    assert rank["mfu"] == pytest.approx(rank["model_flops_per_step"] / rank["step_s"] / peak)


def test_a_spec_with_a_profile_is_one_device_too_many_everywhere(cli, tmp_path, cpu_profile):
    for args in (
        ("report", "--only", "planner", "--spec", SPEC, "-o", tmp_path / "r.html"),
        ("trace", TRACE, "--spec", SPEC),
        ("decode", MODEL, "--spec", SPEC),
        ("roofline", "--op", "add:1024", "--spec", SPEC),
        ("plan", MODEL, "-n", "8", "--spec", SPEC),
        ("profile", "gpt:tiny", "--device", "meta", "--spec", SPEC),
    ):
        code, out, err = cli(*args, "--profile", cpu_profile)
        assert (code, out) == (2, ""), args
        assert err.startswith("error: give --spec or --profile, not both"), (args, err)


def test_python_refuses_a_spec_with_a_profile_alike(cpu_profile):
    import ceiling
    from ceiling.errors import InvalidInput

    both = {"spec": SPEC, "machine_profile": str(cpu_profile)}
    calls = {
        "plan": lambda: ceiling.plan(MODEL, 8, **both),
        "decode": lambda: ceiling.decode(MODEL, **both),
        "roofline": lambda: ceiling.roofline("add:1024", **both),
        "trace": lambda: ceiling.trace(TRACE, **both),
        "report": lambda: ceiling.report(**both),
        "MfuMeter": lambda: ceiling.MfuMeter(
            model_flops_per_step=1.0, peak_flops_per_s=None, **both
        ),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidInput, match=r"^give spec or machine_profile, not both"):
            call()
            pytest.fail(f"{name} took both")
